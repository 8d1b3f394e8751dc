//! Simulated queues in host memory, for tests, benchmarks and CPU stand-ins for GPU threads.
//!
//! [`SimSendQueue::post`] follows the IBGDA posting algorithm exactly (NVSHMEM
//! `ibgda_post_send` and DOCA `doca_gpu_dev_verbs_submit`; the sequence is in the mlx5 crate's
//! README): build the WQE in its ring slots with relaxed stores, then release-store the
//! big-endian PI into the doorbell record, then release-store the 8-byte doorbell word
//! `{pi << 8, qpn << 8}` to the (simulated) BlueFlame register.

use std::sync::Arc;

use sigmatrace_schemas::{discovery, mem_kind};

use crate::mem::{AlignedBuf, HostMemory, HostRegion};
use crate::queue::{CqDesc, QueueDesc, SendQueueDesc};
use sigmatrace_mlx5::cqe::TsFormat;
use sigmatrace_mlx5::wqe::Transport;
use sigmatrace_mlx5::{cqe, wqebbs_for_ds, WQEBB};

/// A send ring, its doorbell record and a doorbell register, all in host memory.
pub struct SimSendQueue {
    pub qpn: u32,
    pub wqebbs: u32,
    ring: Arc<AlignedBuf>,
    dbr: Arc<AlignedBuf>,
    bf: Arc<AlignedBuf>,
    pi: u16,
}

impl SimSendQueue {
    /// A ring of `wqebbs` WQEBBs (power of two).
    pub fn new(qpn: u32, wqebbs: u32) -> SimSendQueue {
        assert!(wqebbs.is_power_of_two());
        SimSendQueue {
            qpn,
            wqebbs,
            ring: AlignedBuf::new(wqebbs as usize * WQEBB),
            dbr: AlignedBuf::new(8),
            bf: AlignedBuf::new(8),
            pi: 0,
        }
    }

    /// The queue description a discovery hook would produce.
    pub fn desc(&self) -> SendQueueDesc {
        SendQueueDesc {
            qpn: self.qpn,
            transport: Transport::Rc,
            base: self.ring.addr(),
            wqebbs: self.wqebbs,
            dbrec: self.dbr.addr(),
            doorbell: self.bf.addr(),
            uar_page: 0,
            cqn: 0,
            memory: mem_kind::HOST,
            dbr_memory: mem_kind::HOST,
            discovery: discovery::DEVX,
        }
    }

    /// Memory covering the ring and the doorbell record.
    pub fn memory(&self) -> HostMemory {
        HostMemory::new(vec![
            HostRegion::of_buffer(&self.ring),
            HostRegion::of_buffer(&self.dbr),
        ])
    }

    /// The next WQE index (PI).
    pub fn pi(&self) -> u16 {
        self.pi
    }

    /// Writes a WQE (built with index [`Self::pi`]) into the ring, wrapping at the end,
    /// without publishing it.
    pub fn write_wqe(&mut self, wqe: &[u8]) -> u16 {
        let ds = wqe[7] & 0x3f;
        let nbb = wqebbs_for_ds(ds);
        let mut padded = vec![0u8; nbb as usize * WQEBB];
        padded[..wqe.len()].copy_from_slice(wqe);
        for k in 0..nbb as u32 {
            let slot = (self.pi as u32 + k) & (self.wqebbs - 1);
            let chunk = &padded[k as usize * WQEBB..(k as usize + 1) * WQEBB];
            self.ring.write(slot as usize * WQEBB, chunk);
        }
        self.pi = self.pi.wrapping_add(nbb);
        nbb
    }

    /// Publishes everything written so far: DBR (release), then the 8-byte doorbell.
    pub fn ring_doorbell(&self) {
        self.dbr.store_u32_release(4, (self.pi as u32).to_be());
        let mut db = [0u8; 8];
        db[..4].copy_from_slice(&((self.pi as u32) << 8).to_be_bytes());
        db[4..].copy_from_slice(&(self.qpn << 8).to_be_bytes());
        self.bf.store_u64_release(0, db);
    }

    /// Builds nothing: writes `wqe` and rings (one IBGDA post).
    pub fn post(&mut self, wqe: &[u8]) -> u16 {
        let n = self.write_wqe(wqe);
        self.ring_doorbell();
        n
    }

    /// The last doorbell word written (8 bytes as stored).
    pub fn doorbell_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        self.bf.read(0, &mut b);
        b
    }

    pub fn as_queue(&self) -> QueueDesc {
        QueueDesc::Send(self.desc())
    }
}

/// A CQ in host memory; [`SimCq::produce`] plays the hardware, [`SimCq::consume`] the program.
pub struct SimCq {
    pub cqn: u32,
    pub cqe_cnt: u32,
    ring: Arc<AlignedBuf>,
    dbr: Arc<AlignedBuf>,
    produced: u32,
    consumed: u32,
    ci_valid: bool,
}

impl SimCq {
    /// A CQ of `cqe_cnt` 64-byte entries, initialised to INVALID (owner 0).
    pub fn new(cqn: u32, cqe_cnt: u32, ci_valid: bool) -> SimCq {
        assert!(cqe_cnt.is_power_of_two());
        let ring = AlignedBuf::new(cqe_cnt as usize * 64);
        for i in 0..cqe_cnt as usize {
            let mut e = [0u8; 64];
            e[63] = cqe::INVALID_OP_OWN;
            ring.write(i * 64, &e);
        }
        SimCq {
            cqn,
            cqe_cnt,
            ring,
            dbr: AlignedBuf::new(8),
            produced: 0,
            consumed: 0,
            ci_valid,
        }
    }

    pub fn desc(&self) -> CqDesc {
        CqDesc {
            cqn: self.cqn,
            base: self.ring.addr(),
            cqe_cnt: self.cqe_cnt,
            cqe_size: 64,
            dbrec: self.dbr.addr(),
            doorbell: 0,
            uar_page: 0,
            memory: mem_kind::HOST,
            dbr_memory: mem_kind::HOST,
            ts_format: TsFormat::FreeRunning,
            ci_valid: self.ci_valid,
            discovery: discovery::DEVX,
        }
    }

    pub fn memory(&self) -> HostMemory {
        HostMemory::new(vec![
            HostRegion::of_buffer(&self.ring),
            HostRegion::of_buffer(&self.dbr),
        ])
    }

    /// Writes the next CQE (owner bit for its index; body first, `op_own` last).
    pub fn produce(&mut self, f: &cqe::Cqe) -> u32 {
        let n = self.produced;
        let e = cqe::encode(f, n, self.cqe_cnt);
        let off = (n & (self.cqe_cnt - 1)) as usize * 64;
        self.ring.write(off, &e[..56]);
        let mut last = [0u8; 8];
        last.copy_from_slice(&e[56..]);
        self.ring.store_u64_release(off + 56, last);
        self.produced = n.wrapping_add(1);
        n
    }

    /// Consumes `k` entries and updates the DBR consumer index (as libmlx5 does).
    pub fn consume(&mut self, k: u32) {
        self.consumed = self.consumed.wrapping_add(k);
        self.dbr
            .store_u32_release(0, (self.consumed & 0x00ff_ffff).to_be());
    }

    pub fn produced(&self) -> u32 {
        self.produced
    }
}

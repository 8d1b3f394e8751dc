//! The rank's QPs as the GPU kernels see them (`StQp` in `observe/gpu/ibgda.cuh`): softnic's
//! send rings, doorbell records, doorbells and CQ rings are host memory, registered for the
//! GPU ([`ring_ranges`] → `HostMap`); each QP's posting state and bookkeeping log live in
//! device memory and are read back after the kernel ([`GpuQps::read_back`]) into the same
//! `PostedWqe` bookkeeping the CPU-thread mode writes.

use std::collections::HashMap;

use super::driver::{DeviceBuf, Gpu, GpuError, HostMap};
use crate::cluster::Cluster;
use crate::mlx5::PostedWqe;

/// `StQp` (88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StQp {
    pub wqe: u64,
    pub dbrec: u64,
    pub bf: u64,
    pub cqe: u64,
    pub cq_dbrec: u64,
    pub st: u64,
    pub log: u64,
    pub nwqes: u32,
    pub qpn: u32,
    pub ncqes: u32,
    pub cqe_size: u32,
    pub log_cap: u32,
    pub signal_every: u32,
    pub lkey_unused: u32,
    pub pad: u32,
}

/// `StQpState` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StQpState {
    pub resv: u64,
    pub ready: u64,
    pub retired: u64,
    pub ci: u64,
    pub lock: u32,
    pub failed: u32,
    pub logged: u64,
}

/// `StLogEntry` (40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StLogEntry {
    pub index: u64,
    pub raddr: u64,
    pub compare_add: u64,
    pub bytes: u32,
    pub rkey: u32,
    pub opcode: u8,
    pub fm_ce_se: u8,
    pub ds: u8,
    pub pad: [u8; 5],
}

/// The host memory of every direct QP of the cluster the kernels touch: (address, bytes).
pub fn ring_ranges(c: &Cluster) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for l in c.links.iter().flatten() {
        if let Some(q) = l.poster.direct() {
            let (sq, cq) = q.rings();
            v.push((sq.buf as u64, sq.wqe_cnt as u64 * 64));
            v.push((sq.dbrec as u64, 8));
            v.push((sq.bf as u64, 8));
            v.push((cq.buf as u64, cq.cqe_cnt as u64 * cq.cqe_size as u64));
            v.push((cq.dbrec as u64, 8));
        }
    }
    v
}

/// Per-QP state after a kernel ran.
#[derive(Clone, Debug)]
pub struct QpOutcome {
    pub qpn: u32,
    pub state: StQpState,
    pub posted: Vec<PostedWqe>,
}

/// The `StQp` array (indexed by peer rank; a rank without a QP gets a zeroed entry).
pub struct GpuQps {
    pub qps: Vec<StQp>,
    pub array: DeviceBuf,
    states: Vec<Option<(u32, DeviceBuf, DeviceBuf)>>,
    log_cap: u32,
}

impl GpuQps {
    /// Builds the array for the cluster's direct QPs; ring addresses are translated through
    /// `map` (which must cover [`ring_ranges`]).
    pub fn build(g: &Gpu, map: &HostMap, c: &Cluster, log_cap: u32) -> Result<GpuQps, GpuError> {
        let mut qps = Vec::new();
        let mut states = Vec::new();
        for l in &c.links {
            let Some(q) = l.as_ref().and_then(|l| l.poster.direct()) else {
                qps.push(StQp::default());
                states.push(None);
                continue;
            };
            let (sq, cq) = q.rings();
            let st = g.alloc(std::mem::size_of::<StQpState>())?;
            let log = g.alloc(log_cap as usize * std::mem::size_of::<StLogEntry>())?;
            qps.push(StQp {
                wqe: map.dev(sq.buf as u64)?,
                dbrec: map.dev(sq.dbrec as u64)?,
                bf: map.dev(sq.bf as u64)?,
                cqe: map.dev(cq.buf as u64)?,
                cq_dbrec: map.dev(cq.dbrec as u64)?,
                st: st.ptr,
                log: log.ptr,
                nwqes: sq.wqe_cnt,
                qpn: sq.qpn,
                ncqes: cq.cqe_cnt,
                cqe_size: cq.cqe_size,
                log_cap,
                // The CPU poster's rule (mlx5::DirectQp): a CQE at least every depth/4.
                signal_every: (sq.wqe_cnt / 4).max(1),
                lkey_unused: 0,
                pad: 0,
            });
            states.push(Some((sq.qpn, st, log)));
        }
        let array = g.upload(&qps)?;
        Ok(GpuQps {
            qps,
            array,
            states,
            log_cap,
        })
    }

    /// Every QP's final state and recorded WQEs (index order), after the kernel finished.
    pub fn read_back(&self, g: &Gpu) -> Result<Vec<QpOutcome>, GpuError> {
        let mut out = Vec::new();
        for (qpn, st, log) in self.states.iter().flatten() {
            let mut s = [StQpState::default()];
            g.dtoh(st.ptr, &mut s)?;
            let n = s[0].resv.min(self.log_cap as u64) as usize;
            let mut entries = vec![StLogEntry::default(); n];
            g.dtoh(log.ptr, &mut entries)?;
            if s[0].resv > self.log_cap as u64 {
                return Err(GpuError::Kernel(format!(
                    "QP {qpn:#x}: {} WQEs posted, the log holds {}",
                    s[0].resv, self.log_cap
                )));
            }
            let posted = entries
                .iter()
                .map(|e| PostedWqe {
                    index: e.index,
                    wqe_index: e.index as u16,
                    opcode: e.opcode,
                    bytes: e.bytes,
                    raddr: e.raddr,
                    rkey: e.rkey,
                    compare_add: e.compare_add,
                    fm_ce_se: e.fm_ce_se,
                    ds: e.ds,
                })
                .collect();
            out.push(QpOutcome {
                qpn: *qpn,
                state: s[0],
                posted,
            });
        }
        Ok(out)
    }
}

/// Checks a finished kernel's QPs: no failure, every reservation published and logged.
pub fn check_outcomes(o: &[QpOutcome]) -> Result<HashMap<u32, Vec<PostedWqe>>, GpuError> {
    let mut m = HashMap::new();
    for q in o {
        let s = &q.state;
        if s.failed != 0 {
            return Err(GpuError::Kernel(format!(
                "QP {:#x}: kernel reported failure {:#x} ({})",
                q.qpn,
                s.failed,
                if s.failed >> 16 == 2 {
                    "timeout".to_string()
                } else {
                    format!(
                        "error CQE opcode {} syndrome {:#x}",
                        (s.failed >> 8) & 0xff,
                        s.failed & 0xff
                    )
                }
            )));
        }
        if s.ready != s.resv || s.logged != s.resv || q.posted.len() as u64 != s.resv {
            return Err(GpuError::Kernel(format!(
                "QP {:#x}: reserved {}, published {}, logged {}",
                q.qpn, s.resv, s.ready, s.logged
            )));
        }
        if q.posted
            .iter()
            .enumerate()
            .any(|(i, w)| w.index != i as u64)
        {
            return Err(GpuError::Kernel(format!(
                "QP {:#x}: log out of order",
                q.qpn
            )));
        }
        m.insert(q.qpn, q.posted.clone());
    }
    Ok(m)
}

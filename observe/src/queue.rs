//! Descriptions of discovered queues: where a send ring, its doorbell record and a CQ live.

use sigmatrace_schemas::{discovery, mem_kind, queue_kind, QueueDiscovered, RecordHeader};

use sigmatrace_mlx5::cqe::TsFormat;
use sigmatrace_mlx5::wqe::Transport;
use sigmatrace_mlx5::WQEBB;

/// A send ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendQueueDesc {
    pub qpn: u32,
    pub transport: Transport,
    /// Address of WQEBB 0.
    pub base: u64,
    /// Depth in WQEBBs (a power of two).
    pub wqebbs: u32,
    /// Address of the 8-byte QP doorbell record (the SQ word is at +4).
    pub dbrec: u64,
    /// Doorbell / BlueFlame register address (0 if unknown).
    pub doorbell: u64,
    /// UAR page id (devx), 0 if unknown.
    pub uar_page: u32,
    /// CQ the send ring completes to (0 if unknown).
    pub cqn: u32,
    /// Where the ring lives ([`mem_kind`]).
    pub memory: u8,
    /// Where the doorbell record lives ([`mem_kind`]).
    pub dbr_memory: u8,
    /// How it was found ([`discovery`]).
    pub discovery: u32,
}

/// A completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDesc {
    pub cqn: u32,
    pub base: u64,
    /// Number of entries (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// Address of the 8-byte CQ doorbell record.
    pub dbrec: u64,
    /// CQ UAR doorbell (0 if unknown).
    pub doorbell: u64,
    pub uar_page: u32,
    pub memory: u8,
    pub dbr_memory: u8,
    pub ts_format: TsFormat,
    /// Whether the consumer keeps the DBR consumer index up to date (false for overrun-ignore
    /// CQs, whose DBR is never read by hardware); used for lap detection.
    pub ci_valid: bool,
    pub discovery: u32,
}

/// A UAR (doorbell page) the program allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UarDesc {
    pub page_id: u32,
    pub reg_addr: u64,
    pub base_addr: u64,
    pub mmap_off: u64,
    /// GPU alias once registered with cuMemHostRegister(IOMEMORY) + device pointer, else 0.
    pub device_alias: u64,
}

/// Any discovered queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueDesc {
    Send(SendQueueDesc),
    Cq(CqDesc),
    Uar(UarDesc),
}

impl QueueDesc {
    /// The schemas record announcing this queue.
    pub fn to_record(&self, ts: u64) -> QueueDiscovered {
        // Kind and discovery (the header's aux, with the memory), then the record's fields.
        let (kind, found, r) = match self {
            QueueDesc::Send(s) => (
                queue_kind::SEND,
                s.discovery,
                (
                    s.base,
                    s.dbrec,
                    s.doorbell,
                    s.qpn,
                    s.wqebbs,
                    WQEBB as u32,
                    s.cqn,
                ),
            ),
            QueueDesc::Cq(c) => (
                queue_kind::CQ,
                c.discovery,
                (
                    c.base, c.dbrec, c.doorbell, c.cqn, c.cqe_cnt, c.cqe_size, c.cqn,
                ),
            ),
            QueueDesc::Uar(u) => (
                queue_kind::UAR,
                discovery::DEVX,
                (u.base_addr, 0, u.reg_addr, u.page_id, 0, 0, 0),
            ),
        };
        let aux = kind | (self.memory() as u32) << 8 | found << 16;
        let (base, dbrec, doorbell, number, depth, stride, cqn) = r;
        QueueDiscovered {
            hdr: RecordHeader::of::<QueueDiscovered>(aux),
            ts,
            base,
            dbrec,
            doorbell,
            number,
            depth,
            stride,
            cqn,
        }
    }

    /// Where the queue's memory lives.
    pub fn memory(&self) -> u8 {
        match self {
            QueueDesc::Send(s) => s.memory,
            QueueDesc::Cq(c) => c.memory,
            QueueDesc::Uar(_) => mem_kind::IO,
        }
    }

    /// Whether a host poller can watch it (ring and DBR readable by the CPU).
    pub fn host_watchable(&self) -> bool {
        let host = |m: u8| matches!(m, mem_kind::HOST | mem_kind::HOST_PINNED);
        match self {
            QueueDesc::Send(s) => host(s.memory) && host(s.dbr_memory),
            QueueDesc::Cq(c) => host(c.memory) && host(c.dbr_memory),
            QueueDesc::Uar(_) => false,
        }
    }

    /// Bytes of the ring (for region registration).
    pub fn ring_bytes(&self) -> u64 {
        match self {
            QueueDesc::Send(s) => s.wqebbs as u64 * WQEBB as u64,
            QueueDesc::Cq(c) => c.cqe_cnt as u64 * c.cqe_size as u64,
            QueueDesc::Uar(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uar_is_announced_as_io_memory_found_by_devx() {
        let u = UarDesc {
            page_id: 7,
            reg_addr: 0x1800,
            base_addr: 0x1000,
            mmap_off: 0,
            device_alias: 0,
        };
        let r = QueueDesc::Uar(u).to_record(9);
        let aux = queue_kind::UAR | (mem_kind::IO as u32) << 8 | discovery::DEVX << 16;
        assert_eq!(r.hdr, RecordHeader::of::<QueueDiscovered>(aux));
        let fields = (r.ts, r.base, r.dbrec, r.doorbell, r.number);
        assert_eq!(fields, (9, 0x1000, 0, 0x1800, 7));
        assert_eq!((r.depth, r.stride, r.cqn), (0, 0, 0));
    }
}

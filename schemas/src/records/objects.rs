//! Clocks, bookkeeping and the object lifecycle (devices, PDs, MRs, CQs, SRQs, QPs, AHs).

use super::*;

// ---------------------------------------------------------------------------------------------
// Clocks and bookkeeping

/// Why events were dropped (aux of [`Dropped`]).
pub mod drop_reason {
    pub const SIZE_CAP: u32 = 1;
    pub const WRITE_ERROR: u32 = 2;
    pub const INTERNAL_ERROR: u32 = 3;
    pub const OBSERVER_OVERRUN: u32 = 4;
}

timed_records! {
    /// Periodic clock snapshot. `ts` is the timestamp source (TSC or MONOTONIC_RAW, see the file
    /// header), the others are `clock_gettime` values in ns taken right after it.
    pub struct ClockSnapshot {
        pub monotonic: u64,
        pub monotonic_raw: u64,
        pub boottime: u64,
        pub realtime: u64,
        /// Timestamp source read again after the clock_gettime calls (bounds the sampling error).
        pub ts_after: u64,
    }

    /// Events that could not be recorded. aux = [`drop_reason`].
    pub struct Dropped {
        pub count: u64,
    }
}

// ---------------------------------------------------------------------------------------------
// Object lifecycle. Handles are the object's address in the traced process.

impl DeviceOpen {
    /// The device name as text.
    pub fn name_str(&self) -> &str {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(32);
        std::str::from_utf8(&self.name[..end]).unwrap_or("?")
    }
}

macro_rules! handle_records {
    ($($name:ident),*) => { timed_records! { $(
        #[doc = concat!("`", stringify!($name), "`: ", "destruction of the object `handle`; aux = return value (0 on success).")]
        pub struct $name {
            pub handle: u64,
        }
    )* } };
}

handle_records!(
    DeviceClose,
    PdDealloc,
    MrDereg,
    CqDestroy,
    SrqDestroy,
    AhDestroy
);

/// How a memory region was registered (bits 28..31 of [`MrReg`]'s aux).
pub mod mr_variant {
    pub const REG_MR: u32 = 0;
    pub const REG_MR_IOVA: u32 = 1;
    pub const REG_MR_IOVA2: u32 = 2;
    pub const REG_DMABUF_MR: u32 = 3;
    pub const MLX5DV_DMABUF: u32 = 4;
    pub const SHIFT: u32 = 28;
    pub const ACCESS_MASK: u32 = (1 << SHIFT) - 1;
}

/// How a CQ was created (aux of [`CqCreate`]).
pub mod cq_variant {
    pub const CREATE_CQ: u32 = 0;
    pub const CREATE_CQ_EX: u32 = 1;
    pub const MLX5DV_CREATE_CQ: u32 = 2;
    pub const DEVX: u32 = 3;
}

/// How a QP was created (bits 8..15 of [`QpCreate`]'s aux; bits 0..7 = `ibv_qp_type`).
pub mod qp_variant {
    pub const CREATE_QP: u32 = 0;
    pub const CREATE_QP_EX: u32 = 1;
    pub const MLX5DV_CREATE_QP: u32 = 2;
    pub const DEVX: u32 = 3;
}

/// Completion-channel activity (aux of [`CqEvent`]).
pub mod cq_event_kind {
    pub const REQ_NOTIFY: u32 = 1;
    pub const GET_EVENT: u32 = 2;
    pub const ACK_EVENTS: u32 = 3;
    pub const CREATE_CHANNEL: u32 = 4;
    pub const DESTROY_CHANNEL: u32 = 5;
}

timed_records! {
    /// A device context was opened. `name` is NUL-padded (truncated to 31 bytes).
    pub struct DeviceOpen {
        pub context: u64,
        pub guid: u64,
        pub name: [u8; 32],
    }

    /// Protection domain allocated.
    pub struct PdAlloc {
        pub pd: u64,
        pub context: u64,
    }

    /// Memory region registered. aux = access flags (bits 0..27) | variant << 28.
    pub struct MrReg {
        pub mr: u64,
        pub pd: u64,
        pub addr: u64,
        pub length: u64,
        pub iova: u64,
        pub lkey: u32,
        pub rkey: u32,
    }

    /// Completion queue created. aux = [`cq_variant`].
    pub struct CqCreate {
        pub cq: u64,
        pub context: u64,
        pub channel: u64,
        pub cqe: u32,
        pub comp_vector: u32,
        /// `wc_flags` requested for extended CQs.
        pub wc_flags: u64,
    }

    /// Shared receive queue created.
    pub struct SrqCreate {
        pub srq: u64,
        pub pd: u64,
        pub max_wr: u32,
        pub max_sge: u32,
        pub srq_limit: u32,
        pub srqn: u32,
    }

    /// Queue pair created. aux = qp_type | variant << 8.
    pub struct QpCreate {
        pub qp: u64,
        pub context: u64,
        pub srq: u64,
        pub qpn: u32,
        pub max_send_wr: u32,
        pub max_recv_wr: u32,
        pub max_send_sge: u16,
        pub max_recv_sge: u16,
        pub max_inline: u32,
        pub _pad: u32,
    }

    /// Queue pair destroyed.
    pub struct QpDestroy {
        pub qp: u64,
        pub qpn: u32,
        pub result: i32,
    }

    /// QP state transition with its connection data. aux = `ibv_qp_attr_mask`.
    /// Fields not covered by the mask are zero.
    pub struct QpModify {
        pub qpn: u32,
        /// `ibv_qp_state` requested.
        pub new_state: u8,
        /// `ibv_mtu` enum (1 = 256 … 5 = 4096).
        pub path_mtu: u8,
        pub port: u8,
        pub sl: u8,
        pub dest_qpn: u32,
        pub sq_psn: u32,
        pub rq_psn: u32,
        pub dlid: u16,
        pub is_global: u8,
        pub sgid_index: u8,
        pub qkey: u32,
        /// Return value of the modify call (0 on success).
        pub result: i32,
        pub dgid: [u8; 16],
    }

    /// Address handle created.
    pub struct AhCreate {
        pub ah: u64,
        pub pd: u64,
        pub dlid: u16,
        pub sl: u8,
        pub is_global: u8,
        pub port: u8,
        pub sgid_index: u8,
        pub _pad: u16,
        pub dgid: [u8; 16],
    }

    /// Completion-channel activity. aux = [`cq_event_kind`].
    pub struct CqEvent {
        pub cq: u64,
        /// REQ_NOTIFY: solicited_only; ACK_EVENTS: count; others: 0.
        pub arg: u32,
        pub result: i32,
    }

    /// Asynchronous event returned by `ibv_get_async_event`. aux = `ibv_event_type`.
    pub struct AsyncEvent {
        pub context: u64,
        /// The QP/CQ/SRQ handle, or the port number.
        pub element: u64,
    }
}

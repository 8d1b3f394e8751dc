//! GPU records and the compact encoding of hot records (format 2).

use super::*;

// ---------------------------------------------------------------------------------------------
// GPU

/// Which API launched a kernel (aux of [`KernelLaunch`]).
pub mod launch_api {
    pub const CU_LAUNCH_KERNEL: u32 = 1;
    pub const CU_LAUNCH_KERNEL_EX: u32 = 2;
    pub const CU_LAUNCH_COOPERATIVE_KERNEL: u32 = 3;
    /// `cuGraphLaunch`: the launch's `function` is the executable graph (`CUgraphExec`), its
    /// grid, block and shared memory 0; its execution spans the whole graph on the stream.
    pub const CU_GRAPH_LAUNCH: u32 = 4;
}

/// Clock domain of GPU times (aux of [`KernelExec`]).
pub mod gpu_clock {
    /// Same unit and origin as the log's timestamp source.
    pub const HOST_TS: u32 = 0;
    /// `%globaltimer` ns of the device.
    pub const GLOBALTIMER: u32 = 1;
}

/// GPU memory operations (aux of [`GpuMemory`]).
pub mod gpu_mem_op {
    pub const DEVICE_ALLOC: u32 = 1;
    pub const DEVICE_FREE: u32 = 2;
    pub const HOST_ALLOC: u32 = 3;
    pub const HOST_REGISTER: u32 = 4;
    pub const HOST_UNREGISTER: u32 = 5;
    pub const DEVICE_POINTER: u32 = 6;
}

timed_records! {
    /// A kernel launch seen on the host. The kernel's name is a [`StringDef`] with
    /// namespace [`string_ns::FUNCTION`] and key = `function`.
    pub struct KernelLaunch {
        pub correlation: u64,
        pub function: u64,
        pub stream: u64,
        pub grid: [u32; 3],
        pub block: [u16; 3],
        pub device: u16,
        pub shared_mem: u32,
    }

    /// When a launched kernel ran. aux = [`gpu_clock`].
    pub struct KernelExec {
        pub correlation: u64,
        pub start: u64,
        pub end: u64,
        pub device: u32,
        pub _pad: u32,
    }

    /// A GPU-clock/host-clock pair: `ts` and `ts_after` bracket the `%globaltimer` read.
    /// aux = device ordinal.
    pub struct GpuClockPair {
        pub ts_after: u64,
        pub gpu_ns: u64,
    }

    /// A CUDA memory call relevant to queue discovery. aux = [`gpu_mem_op`].
    pub struct GpuMemory {
        pub addr: u64,
        pub size: u64,
        /// Device alias of a host pointer (DEVICE_POINTER), else 0.
        pub alias: u64,
        pub flags: u32,
        pub result: i32,
    }
}

// ---------------------------------------------------------------------------------------------
// Compact encoding (format 2): a chunk's hot records in 24–32 bytes. The writer emits them
// (`crate::compact`), readers expand them back to the full kinds above; `TimeBase` and
// `SlotBind` set the context they are read in and are never handed to consumers.

/// What a slot stands for (the `role` of a [`SlotBind`]).
pub mod slot_role {
    /// [`super::PostSendCompact`]: `qpn`, `source`; `object` 0.
    pub const SEND: u8 = 1;
    /// [`super::PostRecvCompact`]: `qpn`, `source`, `object` = the SRQ handle (0 if none).
    pub const RECV: u8 = 2;
    /// [`super::CompletionCompact`], [`super::CompletionShort`]: `object` = the CQ handle,
    /// `qpn`.
    pub const COMPLETION: u8 = 3;
}

pod_records! {
    /// Sets the time base of the compact records that follow it in its chunk: their time is
    /// `base + dts`. A chunk starts with base 0. aux = 0.
    pub struct TimeBase {
        pub hdr: RecordHeader,
        pub base: u64,
    }

    /// Binds slot `aux` (0–255) of its chunk to per-queue constants, until the slot is bound
    /// again or the chunk ends.
    pub struct SlotBind {
        pub hdr: RecordHeader,
        /// CQ handle (completions), SRQ handle (SRQ receives), else 0.
        pub object: u64,
        pub qpn: u32,
        /// [`post_source`] of the posts (0 for completions).
        pub source: u8,
        /// [`slot_role`].
        pub role: u8,
        pub _pad: u16,
    }

    /// A [`PostSend`] in 32 bytes. `tslot` = dts (bits 0–23) | slot (bits 24–31). `addr_op` =
    /// remote_addr (bits 0–47) | opcode (48–55) | send_flags (56–60) | num_sge (61–63).
    /// Expands to a `PostSend` with `imm` and `compare_add` 0, `qpn` and `source` from the slot.
    pub struct PostSendCompact {
        pub kind: u16,
        pub len: u16,
        pub tslot: u32,
        pub wr_id: u64,
        pub addr_op: u64,
        pub rkey: u32,
        pub bytes: u32,
    }

    /// A [`PostRecv`] in 24 bytes (`tslot` as in [`PostSendCompact`]; `qpn`, `srq`, `source`
    /// from the slot).
    pub struct PostRecvCompact {
        pub kind: u16,
        pub len: u16,
        pub tslot: u32,
        pub wr_id: u64,
        pub bytes: u32,
        pub num_sge: u16,
        pub _pad: u16,
    }

    /// A [`WorkCompletion`] in 32 bytes (`tslot` as in [`PostSendCompact`]; `cq` and `qpn` from
    /// the slot). `src_qp_flags` = src_qp (bits 0–23) | wc_flags (bits 24–31). Expands with
    /// `hw_ts` and `vendor_err` 0.
    pub struct CompletionCompact {
        pub kind: u16,
        pub len: u16,
        pub tslot: u32,
        pub wr_id: u64,
        pub byte_len: u32,
        pub imm: u32,
        pub src_qp_flags: u32,
        pub slid: u16,
        pub status: u8,
        pub opcode: u8,
    }

    /// A successful [`WorkCompletion`] with nothing but its id, length and opcode, in 24
    /// bytes (format 2.1; `tslot` as in [`PostSendCompact`]; `cq` and `qpn` from the slot, a
    /// completion slot as for [`CompletionCompact`]). `opcode` is the `ibv_wc_opcode` (below
    /// 256). Expands with `status`, `wc_flags` (`aux`), `src_qp`, `slid`, `imm`, `hw_ts` and
    /// `vendor_err` 0 — written only when they are: the send-side completions of connected
    /// QPs (receive completions name their source QP and LID on mlx5 and softnic).
    pub struct CompletionShort {
        pub kind: u16,
        pub len: u16,
        pub tslot: u32,
        pub wr_id: u64,
        pub byte_len: u32,
        pub opcode: u32,
    }
}

//! Record definitions: the single source of truth for record kinds and their ids.
//!
//! Every record starts with a [`RecordHeader`] (8 bytes: kind, total length, a kind-specific
//! `aux` word). Hot records are fixed-size `#[repr(C)]` plain-old-data structs of at most 64
//! bytes (one cache line) whose size is a multiple of 8; metadata records are a
//! [`MetaHeader`] followed by a length-prefixed byte string padded to 8 bytes.
//!
//! Ids are stable and never reused. `schemas/FORMAT.md` carries the same table; a test checks
//! that they agree.

use bytemuck::{Pod, Zeroable};

/// First 8 bytes of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RecordHeader {
    /// Record kind id ([`RecordKind`]).
    pub kind: u16,
    /// Total record length in bytes, header included, a multiple of 8.
    pub len: u16,
    /// Kind-specific small field (flags, enum values); documented per kind.
    pub aux: u32,
}

impl RecordHeader {
    /// Header for a fixed-size record of type `R`, with the given aux word.
    pub const fn of<R: FixedRecord>(aux: u32) -> Self {
        RecordHeader {
            kind: R::KIND as u16,
            len: std::mem::size_of::<R>() as u16,
            aux,
        }
    }
}

/// A fixed-size hot record.
pub trait FixedRecord: Pod {
    /// The record's kind id.
    const KIND: RecordKind;
}

/// Maximum size of a hot record: one cache line.
pub const MAX_FIXED_RECORD: usize = 64;
/// Maximum payload of one metadata record (longer strings are truncated by the writer).
pub const MAX_META_PAYLOAD: usize = 8192;

macro_rules! record_kinds {
    ( fixed { $( $fid:literal => $fname:ident ),* $(,)? }
      meta { $( $mid:literal => $mname:ident ),* $(,)? }
      retired { $( $rid:literal => $rname:ident ),* $(,)? }
      next_free = $next:literal ) => {
        /// Record kind ids. Stable: never renumbered, never reused.
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RecordKind {
            $( $fname = $fid, )*
            $( $mname = $mid, )*
        }

        impl RecordKind {
            /// Every live kind, in id order within each class.
            pub const ALL: &'static [RecordKind] = &[ $( RecordKind::$fname, )* $( RecordKind::$mname, )* ];
            /// Retired kinds: (id, name). Their ids are never reused.
            pub const RETIRED: &'static [(u16, &'static str)] = &[ $( ($rid, stringify!($rname)), )* ];
            /// The next id to assign to a new kind.
            pub const NEXT_FREE_ID: u16 = $next;

            /// Kind from its id, if this reader knows it.
            pub fn from_id(id: u16) -> Option<RecordKind> {
                match id {
                    $( $fid => Some(RecordKind::$fname), )*
                    $( $mid => Some(RecordKind::$mname), )*
                    _ => None,
                }
            }

            /// The kind's name as written in FORMAT.md.
            pub fn name(self) -> &'static str {
                match self {
                    $( RecordKind::$fname => stringify!($fname), )*
                    $( RecordKind::$mname => stringify!($mname), )*
                }
            }

            /// Fixed size in bytes for hot records; `None` for metadata (variable length).
            pub fn fixed_size(self) -> Option<usize> {
                match self {
                    $( RecordKind::$fname => Some(std::mem::size_of::<$fname>()), )*
                    $( RecordKind::$mname => None, )*
                }
            }
        }

        $( impl FixedRecord for $fname { const KIND: RecordKind = RecordKind::$fname; } )*

        /// A decoded record borrowing from the log (zero-copy for fixed records).
        #[derive(Clone, Copy, Debug)]
        pub enum Record<'a> {
            $( $fname(&'a $fname), )*
            $( $mname(Meta<'a>), )*
            /// A kind this reader does not know (written by a newer minor version); skipped.
            Unknown { kind: u16, bytes: &'a [u8] },
        }

        impl<'a> Record<'a> {
            /// Decodes one record from its bytes (header included, 8-byte aligned).
            pub fn decode(bytes: &'a [u8]) -> Result<Record<'a>, DecodeError> {
                let hdr: RecordHeader = read_header(bytes)?;
                match RecordKind::from_id(hdr.kind) {
                    $( Some(RecordKind::$fname) => Ok(Record::$fname(cast_fixed::<$fname>(bytes)?)), )*
                    $( Some(RecordKind::$mname) => Ok(Record::$mname(Meta::decode(bytes)?)), )*
                    None => Ok(Record::Unknown { kind: hdr.kind, bytes }),
                }
            }
        }

        const _: () = { $( assert!(std::mem::size_of::<$fname>() <= MAX_FIXED_RECORD && std::mem::size_of::<$fname>() % 8 == 0); )* };
    };
}

/// Why a record's bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record shorter than its 8-byte header ({0} bytes)")]
    ShortHeader(usize),
    #[error("record kind {kind} needs {expected} bytes, found {found}")]
    WrongSize {
        kind: u16,
        expected: usize,
        found: usize,
    },
    #[error("record bytes are not 8-byte aligned")]
    Misaligned,
    #[error("metadata record declares {declared} payload bytes but only {available} are present")]
    MetaOverrun { declared: usize, available: usize },
}

fn read_header(bytes: &[u8]) -> Result<RecordHeader, DecodeError> {
    if bytes.len() < 8 {
        return Err(DecodeError::ShortHeader(bytes.len()));
    }
    Ok(bytemuck::pod_read_unaligned(&bytes[..8]))
}

fn cast_fixed<R: FixedRecord>(bytes: &[u8]) -> Result<&R, DecodeError> {
    let size = std::mem::size_of::<R>();
    if bytes.len() != size {
        return Err(DecodeError::WrongSize {
            kind: R::KIND as u16,
            expected: size,
            found: bytes.len(),
        });
    }
    bytemuck::try_from_bytes(bytes).map_err(|_| DecodeError::Misaligned)
}

/// Header of a metadata record; followed by `len` payload bytes, zero-padded to 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct MetaHeader {
    pub hdr: RecordHeader,
    pub ts: u64,
    /// What the payload names (an object handle, a function pointer, an id); kind-specific.
    pub key: u64,
    /// Payload length in bytes (before padding).
    pub len: u32,
    pub _pad: u32,
}

/// A decoded metadata record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta<'a> {
    pub kind: u16,
    /// Namespace / sub-kind (the header's aux word).
    pub aux: u32,
    pub ts: u64,
    pub key: u64,
    pub payload: &'a [u8],
}

impl<'a> Meta<'a> {
    fn decode(bytes: &'a [u8]) -> Result<Meta<'a>, DecodeError> {
        const H: usize = std::mem::size_of::<MetaHeader>();
        if bytes.len() < H {
            return Err(DecodeError::WrongSize {
                kind: read_header(bytes)?.kind,
                expected: H,
                found: bytes.len(),
            });
        }
        let mh: MetaHeader = bytemuck::pod_read_unaligned(&bytes[..H]);
        let declared = mh.len as usize;
        let available = bytes.len() - H;
        if declared > available {
            return Err(DecodeError::MetaOverrun {
                declared,
                available,
            });
        }
        Ok(Meta {
            kind: mh.hdr.kind,
            aux: mh.hdr.aux,
            ts: mh.ts,
            key: mh.key,
            payload: &bytes[H..H + declared],
        })
    }

    /// The payload as UTF-8 text (lossy).
    pub fn text(&self) -> std::borrow::Cow<'a, str> {
        String::from_utf8_lossy(self.payload)
    }
}

record_kinds! {
    fixed {
        1 => ClockSnapshot,
        4 => Dropped,
        10 => DeviceOpen,
        11 => DeviceClose,
        12 => PdAlloc,
        13 => PdDealloc,
        14 => MrReg,
        15 => MrDereg,
        16 => CqCreate,
        17 => CqDestroy,
        18 => SrqCreate,
        19 => SrqDestroy,
        20 => QpCreate,
        21 => QpDestroy,
        22 => QpModify,
        23 => AhCreate,
        24 => AhDestroy,
        25 => CqEvent,
        26 => AsyncEvent,
        30 => PostSend,
        31 => PostRecv,
        32 => PostError,
        33 => WorkCompletion,
        34 => EmptyPolls,
        40 => QueueDiscovered,
        41 => WqeObserved,
        42 => CqeObserved,
        43 => ObserveOverrun,
        50 => KernelLaunch,
        51 => KernelExec,
        52 => GpuClockPair,
        53 => GpuMemory,
        54 => TimeBase,
        55 => SlotBind,
        56 => PostSendCompact,
        57 => PostRecvCompact,
        58 => CompletionCompact,
    }
    meta {
        2 => Annotation,
        3 => StringDef,
        5 => ThreadName,
    }
    retired {}
    next_free = 59
}

// ---------------------------------------------------------------------------------------------
// Clocks and bookkeeping

/// Periodic clock snapshot. `ts` is the timestamp source (TSC or MONOTONIC_RAW, see the file
/// header), the others are `clock_gettime` values in ns taken right after it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ClockSnapshot {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub monotonic: u64,
    pub monotonic_raw: u64,
    pub boottime: u64,
    pub realtime: u64,
    /// Timestamp source read again after the clock_gettime calls (bounds the sampling error).
    pub ts_after: u64,
}

/// Why events were dropped (aux of [`Dropped`]).
pub mod drop_reason {
    pub const SIZE_CAP: u32 = 1;
    pub const WRITE_ERROR: u32 = 2;
    pub const INTERNAL_ERROR: u32 = 3;
    pub const OBSERVER_OVERRUN: u32 = 4;
}

/// Events that could not be recorded. aux = [`drop_reason`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Dropped {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub count: u64,
}

// ---------------------------------------------------------------------------------------------
// Object lifecycle. Handles are the object's address in the traced process.

/// A device context was opened. `name` is NUL-padded (truncated to 31 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DeviceOpen {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub context: u64,
    pub guid: u64,
    pub name: [u8; 32],
}

impl DeviceOpen {
    /// The device name as text.
    pub fn name_str(&self) -> &str {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(32);
        std::str::from_utf8(&self.name[..end]).unwrap_or("?")
    }
}

macro_rules! handle_records {
    ($($name:ident),*) => { $(
        #[doc = concat!("`", stringify!($name), "`: ", "destruction of the object `handle`; aux = return value (0 on success).")]
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
        pub struct $name {
            pub hdr: RecordHeader,
            pub ts: u64,
            pub handle: u64,
        }
    )* };
}
handle_records!(
    DeviceClose,
    PdDealloc,
    MrDereg,
    CqDestroy,
    SrqDestroy,
    AhDestroy
);

/// Protection domain allocated.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct PdAlloc {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub pd: u64,
    pub context: u64,
}

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

/// Memory region registered. aux = access flags (bits 0..27) | variant << 28.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct MrReg {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub mr: u64,
    pub pd: u64,
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub lkey: u32,
    pub rkey: u32,
}

/// How a CQ was created (aux of [`CqCreate`]).
pub mod cq_variant {
    pub const CREATE_CQ: u32 = 0;
    pub const CREATE_CQ_EX: u32 = 1;
    pub const MLX5DV_CREATE_CQ: u32 = 2;
    pub const DEVX: u32 = 3;
}

/// Completion queue created. aux = [`cq_variant`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CqCreate {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub cq: u64,
    pub context: u64,
    pub channel: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    /// `wc_flags` requested for extended CQs.
    pub wc_flags: u64,
}

/// Shared receive queue created.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SrqCreate {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub srq: u64,
    pub pd: u64,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub srqn: u32,
}

/// How a QP was created (bits 8..15 of [`QpCreate`]'s aux; bits 0..7 = `ibv_qp_type`).
pub mod qp_variant {
    pub const CREATE_QP: u32 = 0;
    pub const CREATE_QP_EX: u32 = 1;
    pub const MLX5DV_CREATE_QP: u32 = 2;
    pub const DEVX: u32 = 3;
}

/// Queue pair created. aux = qp_type | variant << 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct QpCreate {
    pub hdr: RecordHeader,
    pub ts: u64,
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
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct QpDestroy {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub qp: u64,
    pub qpn: u32,
    pub result: i32,
}

/// QP state transition with its connection data. aux = `ibv_qp_attr_mask`.
/// Fields not covered by the mask are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct QpModify {
    pub hdr: RecordHeader,
    pub ts: u64,
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
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct AhCreate {
    pub hdr: RecordHeader,
    pub ts: u64,
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

/// Completion-channel activity (aux of [`CqEvent`]).
pub mod cq_event_kind {
    pub const REQ_NOTIFY: u32 = 1;
    pub const GET_EVENT: u32 = 2;
    pub const ACK_EVENTS: u32 = 3;
    pub const CREATE_CHANNEL: u32 = 4;
    pub const DESTROY_CHANNEL: u32 = 5;
}

/// Completion-channel activity. aux = [`cq_event_kind`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CqEvent {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub cq: u64,
    /// REQ_NOTIFY: solicited_only; ACK_EVENTS: count; others: 0.
    pub arg: u32,
    pub result: i32,
}

/// Asynchronous event returned by `ibv_get_async_event`. aux = `ibv_event_type`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct AsyncEvent {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub context: u64,
    /// The QP/CQ/SRQ handle, or the port number.
    pub element: u64,
}

// ---------------------------------------------------------------------------------------------
// Data path

/// Which API posted a work request (byte `source` of [`PostSend`] / [`PostRecv`]).
pub mod post_source {
    pub const POST_SEND: u8 = 0;
    pub const WR_API: u8 = 1;
    pub const MLX5DV_WR: u8 = 2;
    pub const POST_RECV: u8 = 3;
    pub const POST_SRQ_RECV: u8 = 4;
    pub const WQ_RECV: u8 = 5;
}

/// One posted send-queue work request. aux = `ibv_send_flags`.
/// For UD QPs `remote_addr` holds the AH handle, `rkey` the remote QPN and `compare_add`'s low
/// 32 bits the remote qkey.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct PostSend {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub wr_id: u64,
    pub remote_addr: u64,
    /// Atomic compare (CAS) or add (FAA) operand.
    pub compare_add: u64,
    pub qpn: u32,
    /// Sum of SGE lengths (or inline data length).
    pub bytes: u32,
    pub rkey: u32,
    /// Immediate data (host order) or invalidate rkey.
    pub imm: u32,
    pub num_sge: u16,
    /// `ibv_wr_opcode`.
    pub opcode: u8,
    /// [`post_source`].
    pub source: u8,
    pub _pad: u32,
}

/// One posted receive work request (QP receive queue, SRQ or WQ). aux = 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct PostRecv {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub wr_id: u64,
    /// QPN for QP receive queues, 0 for SRQ receives.
    pub qpn: u32,
    pub bytes: u32,
    /// SRQ handle for SRQ receives, 0 otherwise.
    pub srq: u64,
    pub num_sge: u16,
    pub source: u8,
    pub _pad: [u8; 5],
}

/// A post call that failed. aux = the error number returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct PostError {
    pub hdr: RecordHeader,
    pub ts: u64,
    /// wr_id of `*bad_wr` (0 if none).
    pub bad_wr_id: u64,
    /// QP handle or SRQ handle.
    pub object: u64,
    pub qpn: u32,
    pub source: u8,
    pub _pad: [u8; 3],
}

/// One work completion returned to the program. aux = `wc_flags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct WorkCompletion {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub wr_id: u64,
    /// Hardware completion timestamp (device clock), 0 when absent.
    pub hw_ts: u64,
    pub cq: u64,
    pub qpn: u32,
    pub src_qp: u32,
    pub byte_len: u32,
    /// Immediate data (host order) when `IBV_WC_WITH_IMM`.
    pub imm: u32,
    /// `ibv_wc_status`.
    pub status: u8,
    /// `ibv_wc_opcode` (numeric, 128 and above are receive opcodes).
    pub opcode: u8,
    pub slid: u16,
    pub vendor_err: u32,
}

/// Polls that returned nothing, aggregated (never one record per empty poll).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct EmptyPolls {
    pub hdr: RecordHeader,
    /// Time of the last empty poll of the run.
    pub ts: u64,
    /// Time of the first empty poll of the run.
    pub first_ts: u64,
    pub cq: u64,
    pub count: u64,
}

// ---------------------------------------------------------------------------------------------
// Queue memory observation (mlx5 rings, GPU-initiated RDMA)

/// Queue kinds (bits 0..7 of [`QueueDiscovered`]'s aux).
pub mod queue_kind {
    pub const SEND: u32 = 1;
    pub const RECV: u32 = 2;
    pub const CQ: u32 = 3;
    pub const UAR: u32 = 4;
}

/// Where memory lives (bits 8..15 of [`QueueDiscovered`]'s aux, `memory` fields).
pub mod mem_kind {
    pub const HOST: u8 = 0;
    pub const GPU: u8 = 1;
    pub const HOST_PINNED: u8 = 2;
    pub const IO: u8 = 3;
    pub const UNKNOWN: u8 = 255;
}

/// How a queue was found (bits 16..23 of [`QueueDiscovered`]'s aux).
pub mod discovery {
    pub const INIT_OBJ: u32 = 1;
    pub const DEVX: u32 = 2;
    pub const MLX5DV_CREATE: u32 = 3;
}

/// A ring whose memory the tracer watches. aux = kind | memory << 8 | discovery << 16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct QueueDiscovered {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub base: u64,
    pub dbrec: u64,
    /// Doorbell / BlueFlame register or UAR address.
    pub doorbell: u64,
    /// QPN for send/receive rings, CQN for CQs.
    pub number: u32,
    /// Entries (WQEBBs or CQEs).
    pub depth: u32,
    pub stride: u32,
    /// The CQN a send ring completes to (0 if unknown).
    pub cqn: u32,
}

/// Who observed a WQE/CQE in queue memory.
pub mod observer {
    pub const HOST_POLLER: u8 = 0;
    pub const DEVICE_POLLER: u8 = 1;
}

/// A WQE seen in a send ring. aux = 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct WqeObserved {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub remote_addr: u64,
    pub compare_add: u64,
    pub qpn: u32,
    pub bytes: u32,
    pub rkey: u32,
    pub imm: u32,
    /// WQE index (producer counter, 16 bits).
    pub wqe_index: u16,
    /// mlx5 opcode.
    pub opcode: u8,
    /// Size in 16-byte units.
    pub ds: u8,
    pub fm_ce_se: u8,
    /// [`observer`].
    pub observer: u8,
    pub memory: u8,
    pub _pad: u8,
}

/// Bits of [`CqeObserved`]'s aux word.
pub mod cqe_flags {
    /// `hw_ts` is real-time nanoseconds (CQ in real-time timestamp mode), not device cycles.
    pub const HW_TS_NANOS: u32 = 1;
}

/// A CQE seen in a completion ring. aux = [`cqe_flags`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct CqeObserved {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub hw_ts: u64,
    pub cqn: u32,
    /// Free-running consumer index of the entry.
    pub index: u32,
    pub qpn: u32,
    pub byte_cnt: u32,
    pub wqe_counter: u16,
    /// CQE opcode (op_own >> 4).
    pub opcode: u8,
    pub syndrome: u8,
    pub vendor_syndrome: u8,
    pub observer: u8,
    pub _pad: u16,
}

/// Set in [`ObserveOverrun`]'s aux when `lost` is an estimate (e.g. whole 16-bit producer
/// index laps inferred from the post rate) rather than an exact count.
pub const OVERRUN_ESTIMATED: u32 = 1 << 8;

/// Entries overwritten before the observer saw them. aux = [`queue_kind`] | [`OVERRUN_ESTIMATED`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ObserveOverrun {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub lost: u64,
    pub number: u32,
    pub observer: u8,
    pub _pad: [u8; 3],
}

// ---------------------------------------------------------------------------------------------
// GPU

/// Which API launched a kernel (aux of [`KernelLaunch`]).
pub mod launch_api {
    pub const CU_LAUNCH_KERNEL: u32 = 1;
    pub const CU_LAUNCH_KERNEL_EX: u32 = 2;
    pub const CU_LAUNCH_COOPERATIVE_KERNEL: u32 = 3;
}

/// A kernel launch seen on the host. The kernel's name is a [`StringDef`] with
/// namespace [`string_ns::FUNCTION`] and key = `function`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct KernelLaunch {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub correlation: u64,
    pub function: u64,
    pub stream: u64,
    pub grid: [u32; 3],
    pub block: [u16; 3],
    pub device: u16,
    pub shared_mem: u32,
}

/// Clock domain of GPU times (aux of [`KernelExec`]).
pub mod gpu_clock {
    /// Same unit and origin as the log's timestamp source.
    pub const HOST_TS: u32 = 0;
    /// `%globaltimer` ns of the device.
    pub const GLOBALTIMER: u32 = 1;
}

/// When a launched kernel ran. aux = [`gpu_clock`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct KernelExec {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub correlation: u64,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub _pad: u32,
}

/// A GPU-clock/host-clock pair: `ts` and `ts_after` bracket the `%globaltimer` read.
/// aux = device ordinal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuClockPair {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub ts_after: u64,
    pub gpu_ns: u64,
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

/// A CUDA memory call relevant to queue discovery. aux = [`gpu_mem_op`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GpuMemory {
    pub hdr: RecordHeader,
    pub ts: u64,
    pub addr: u64,
    pub size: u64,
    /// Device alias of a host pointer (DEVICE_POINTER), else 0.
    pub alias: u64,
    pub flags: u32,
    pub result: i32,
}

// ---------------------------------------------------------------------------------------------
// Compact encoding (format 2): a chunk's hot records in 24–32 bytes. The writer emits them
// (`crate::compact`), readers expand them back to the full kinds above; `TimeBase` and
// `SlotBind` set the context they are read in and are never handed to consumers.

/// Sets the time base of the compact records that follow it in its chunk: their time is
/// `base + dts`. A chunk starts with base 0. aux = 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct TimeBase {
    pub hdr: RecordHeader,
    pub base: u64,
}

/// What a slot stands for (the `role` of a [`SlotBind`]).
pub mod slot_role {
    /// [`super::PostSendCompact`]: `qpn`, `source`; `object` 0.
    pub const SEND: u8 = 1;
    /// [`super::PostRecvCompact`]: `qpn`, `source`, `object` = the SRQ handle (0 if none).
    pub const RECV: u8 = 2;
    /// [`super::CompletionCompact`]: `object` = the CQ handle, `qpn`.
    pub const COMPLETION: u8 = 3;
}

/// Binds slot `aux` (0–255) of its chunk to per-queue constants, until the slot is bound
/// again or the chunk ends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
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
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
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
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
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
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
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

// ---------------------------------------------------------------------------------------------
// Metadata namespaces

/// Namespaces of [`StringDef`] records (their aux word).
pub mod string_ns {
    /// key = CUfunction handle, text = kernel name.
    pub const FUNCTION: u32 = 1;
    /// key = context handle, text = device name.
    pub const DEVICE: u32 = 2;
    /// key = CUmodule handle, text = module path or description.
    pub const MODULE: u32 = 3;
    /// key = 0, text = a `key=value` process attribute.
    pub const PROCESS_ATTR: u32 = 4;
}

/// Marker type for the metadata kind `Annotation` (free-form text; aux = severity/category).
#[derive(Clone, Copy, Debug)]
pub struct Annotation;
/// Marker type for the metadata kind `StringDef` (aux = [`string_ns`], key = what is named).
#[derive(Clone, Copy, Debug)]
pub struct StringDef;
/// Marker type for the metadata kind `ThreadName` (key = tid).
#[derive(Clone, Copy, Debug)]
pub struct ThreadName;

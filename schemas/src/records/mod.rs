//! Record definitions: the single source of truth for record kinds and their ids.
//!
//! Every record starts with a [`RecordHeader`] (8 bytes: kind, total length, a kind-specific
//! `aux` word). Hot records are fixed-size `#[repr(C)]` plain-old-data structs of at most 64
//! bytes (one cache line) whose size is a multiple of 8; metadata records are a
//! [`MetaHeader`] followed by a length-prefixed byte string padded to 8 bytes.
//!
//! Ids are stable and never reused. `schemas/FORMAT.md` carries the same table; a test checks
//! that they agree.

/// Declares `#[repr(C)]` plain-old-data structs (the layout the log stores and readers cast).
macro_rules! pod_records {
    ( $( $(#[$m:meta])* pub struct $name:ident { $($body:tt)* } )* ) => { $(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name { $($body)* }
    )* };
}

/// Declares hot records that start with the common `hdr: RecordHeader, ts: u64` (the event's
/// time in the log's timestamp source), followed by the listed fields.
macro_rules! timed_records {
    ( $( $(#[$m:meta])* pub struct $name:ident { $($body:tt)* } )* ) => {
        pod_records! { $(
            $(#[$m])*
            pub struct $name {
                pub hdr: RecordHeader,
                pub ts: u64,
                $($body)*
            }
        )* }
    };
}

mod datapath;
mod gpu;
mod objects;

pub use datapath::*;
pub use gpu::*;
pub use objects::*;

pod_records! {
    /// First 8 bytes of every record.
    pub struct RecordHeader {
        /// Record kind id ([`RecordKind`]).
        pub kind: u16,
        /// Total record length in bytes, header included, a multiple of 8.
        pub len: u16,
        /// Kind-specific small field (flags, enum values); documented per kind.
        pub aux: u32,
    }
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
pub trait FixedRecord: bytemuck::Pod {
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

pod_records! {
    /// Header of a metadata record; followed by `len` payload bytes, zero-padded to 8.
    pub struct MetaHeader {
        pub hdr: RecordHeader,
        pub ts: u64,
        /// What the payload names (an object handle, a function pointer, an id); kind-specific.
        pub key: u64,
        /// Payload length in bytes (before padding).
        pub len: u32,
        pub _pad: u32,
    }
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
        59 => CompletionShort,
    }
    meta {
        2 => Annotation,
        3 => StringDef,
        5 => ThreadName,
    }
    retired {}
    next_free = 60
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

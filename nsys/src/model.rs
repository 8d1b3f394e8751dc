//! Plain data read from an export. Times (`start`, `end`) are export times in ns, as stored
//! (session-relative unless normalized); map them with [`crate::ClockMapping`].

use serde::Serialize;

use crate::ids::GlobalId;

/// Declares the GPU activity records (kernel, memcpy, memset, sync): each starts with the
/// same fields, read from the same leading columns of its table (`crate::read`), then its own.
/// The stream's type is given per record (a sync may be on no stream).
macro_rules! gpu_activities {
    ( $( $(#[$m:meta])* pub struct $name:ident {
        $(#[$sm:meta])* stream_id: $stream:ty;
        $($body:tt)*
    } )* ) => { $(
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct $name {
            pub start: i64,
            pub end: i64,
            pub device_id: i64,
            pub context_id: Option<i64>,
            $(#[$sm])*
            pub stream_id: $stream,
            pub correlation_id: Option<i64>,
            pub global_pid: Option<GlobalId>,
            $($body)*
        }
    )* };
}

gpu_activities! {
    /// A CUDA kernel execution (`CUPTI_ACTIVITY_KIND_KERNEL`).
    pub struct Kernel {
        stream_id: i64;
        /// Display name: `shortName`, else the demangled, else the mangled name.
        pub name: String,
        pub demangled_name: Option<String>,
        pub mangled_name: Option<String>,
        pub grid: [i64; 3],
        pub block: [i64; 3],
        pub registers_per_thread: Option<i64>,
        pub static_shared_memory: Option<i64>,
        pub dynamic_shared_memory: Option<i64>,
        pub graph_id: Option<i64>,
    }

    /// A memcpy (`CUPTI_ACTIVITY_KIND_MEMCPY`).
    pub struct Memcpy {
        stream_id: i64;
        pub bytes: i64,
        /// `copyKind` (`ENUM_CUDA_MEMCPY_OPER`).
        pub copy_kind: i64,
        /// Short label of `copy_kind`: "HtoD", "DtoH", "DtoD", "PtoP", …
        pub kind: String,
        /// `srcKind` / `dstKind` labels (`ENUM_CUDA_MEM_KIND`): "Pageable", "Pinned", "Device", …
        pub src_kind: Option<String>,
        pub dst_kind: Option<String>,
        pub src_device_id: Option<i64>,
        pub dst_device_id: Option<i64>,
    }

    /// A memset (`CUPTI_ACTIVITY_KIND_MEMSET`).
    pub struct Memset {
        stream_id: i64;
        pub bytes: i64,
        pub value: Option<i64>,
        pub mem_kind: Option<String>,
    }

    /// A synchronization (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`).
    pub struct Sync {
        /// None when the sync is not on a stream (CUPTI writes 0xFFFFFFFF).
        stream_id: Option<i64>;
        /// `syncType` label: "Event sync", "Stream wait sync", "Stream sync", "Context sync", …
        pub kind: String,
    }
}

/// API family of an [`ApiCall`] (`ENUM_NSYS_EVENT_CLASS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiClass {
    Runtime,
    Driver,
    Other(i64),
}

impl ApiClass {
    pub fn from_event_class(v: Option<i64>) -> ApiClass {
        match v {
            Some(0) => ApiClass::Runtime,
            Some(1) => ApiClass::Driver,
            Some(n) => ApiClass::Other(n),
            None => ApiClass::Other(-1),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ApiClass::Runtime => "CUDA runtime",
            ApiClass::Driver => "CUDA driver",
            ApiClass::Other(_) => "CUDA API",
        }
    }
}

/// A CUDA runtime or driver API call (`CUPTI_ACTIVITY_KIND_RUNTIME`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiCall {
    pub start: i64,
    pub end: i64,
    pub class: ApiClass,
    pub global_tid: Option<GlobalId>,
    pub correlation_id: Option<i64>,
    /// Name without the version suffix (`cudaLaunchKernel`).
    pub name: String,
    /// Name as stored (`cudaLaunchKernel_v7000`).
    pub raw_name: String,
    pub return_value: Option<i64>,
}

/// Kind of an NVTX event (`ENUM_NSYS_EVENT_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NvtxKind {
    /// 34 NvtxMark, 65 NvtxtMark.
    Mark,
    /// 59 NvtxPushPopRange, 70 NvtxtPushPopRange.
    PushPopRange,
    /// 60 NvtxStartEndRange, 71 NvtxtStartEndRange.
    StartEndRange,
}

impl NvtxKind {
    /// The kind of an event type, None for non-event rows (domain/category definitions, …).
    pub fn from_event_type(t: i64) -> Option<NvtxKind> {
        match t {
            34 | 65 => Some(NvtxKind::Mark),
            59 | 70 => Some(NvtxKind::PushPopRange),
            60 | 71 => Some(NvtxKind::StartEndRange),
            _ => None,
        }
    }
}

/// An NVTX payload (`uint64Value`, `int64Value`, `doubleValue`, …, `jsonText`, `binaryData`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
pub enum NvtxPayload {
    U64(u64),
    I64(i64),
    F64(f64),
    U32(u32),
    I32(i32),
    F32(f64),
    Json(String),
    /// A binary payload: its length in bytes.
    Binary(usize),
}

/// An NVTX mark or range (`NVTX_EVENTS`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvtxEvent {
    pub kind: NvtxKind,
    pub event_type: i64,
    pub start: i64,
    /// None for marks and unterminated ranges.
    pub end: Option<i64>,
    pub text: Option<String>,
    /// Category id and its registered name (NvtxCategory rows), if any.
    pub category: Option<i64>,
    pub category_name: Option<String>,
    /// ARGB color.
    pub color: Option<u32>,
    pub global_tid: Option<GlobalId>,
    pub end_global_tid: Option<GlobalId>,
    pub domain_id: Option<i64>,
    /// Name of the domain (NvtxDomainCreate rows); None for the default domain.
    pub domain: Option<String>,
    pub range_id: Option<i64>,
    pub payload: Option<NvtxPayload>,
}

/// A named thread (`ThreadNames`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    pub global_tid: GlobalId,
    pub pid: u32,
    pub tid: u32,
    pub name: String,
}

/// A process that has events in the export (`PROCESSES`, filtered to the `globalPid`s used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    pub global_pid: GlobalId,
    pub pid: u32,
    /// Executable path as nsys recorded it; None when PROCESSES lacks the row.
    pub name: Option<String>,
}

/// A GPU (`TARGET_INFO_GPU`, joined with `TARGET_INFO_CUDA_DEVICE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// The id used as `deviceId` in the activity tables.
    pub id: i64,
    pub name: Option<String>,
    pub bus_location: Option<String>,
    pub uuid: Option<String>,
    pub sm_count: Option<i64>,
    pub compute_capability: Option<String>,
}

/// Identity of the profiled host and the tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostInfo {
    /// `TARGET_INFO_SYSTEM_ENV` Hostname, else META_DATA_CAPTURE DEVICE_DISPLAY_NAME.
    pub hostname: Option<String>,
    pub os: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub nv_driver_version: Option<String>,
    pub product_version: Option<String>,
    pub schema_version: Option<String>,
}

/// Strips a trailing `_v<digits>` version suffix: `cudaMalloc_v3020` → `cudaMalloc`.
pub fn strip_version_suffix(raw: &str) -> &str {
    if let Some(pos) = raw.rfind("_v") {
        let digits = &raw[pos + 2..];
        if pos > 0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return &raw[..pos];
        }
    }
    raw
}

/// Short label of a `copyKind` (`ENUM_CUDA_MEMCPY_OPER`), matching the enum's names.
pub fn memcpy_kind_label(kind: i64) -> String {
    let s = match kind {
        0 => "Unknown",
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        11 => "UVM HtoD",
        12 => "UVM DtoH",
        13 => "UVM DtoD",
        other => return format!("kind {other}"),
    };
    s.to_string()
}

/// Label of a memory kind (`ENUM_CUDA_MEM_KIND`).
pub fn mem_kind_label(kind: i64) -> String {
    let s = match kind {
        0 => "Pageable",
        1 => "Pinned",
        2 => "Device",
        3 => "Array",
        4 => "Managed",
        5 => "Device Static",
        6 => "Managed Static",
        7 => "Unknown",
        other => return format!("kind {other}"),
    };
    s.to_string()
}

/// Label of a synchronization type (`ENUM_CUPTI_SYNC_TYPE`).
pub fn sync_kind_label(kind: i64) -> String {
    let s = match kind {
        0 => "Unknown sync",
        1 => "Event sync",
        2 => "Stream wait sync",
        3 => "Stream sync",
        4 => "Context sync",
        other => return format!("Sync type {other}"),
    };
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_suffix_is_stripped_only_when_numeric() {
        assert_eq!(
            strip_version_suffix("cudaLaunchKernel_v7000"),
            "cudaLaunchKernel"
        );
        assert_eq!(strip_version_suffix("cuMemAlloc_v2"), "cuMemAlloc");
        assert_eq!(
            strip_version_suffix("cuModuleGetLoadingMode"),
            "cuModuleGetLoadingMode"
        );
        assert_eq!(strip_version_suffix("foo_v"), "foo_v");
        assert_eq!(strip_version_suffix("foo_vx1"), "foo_vx1");
        assert_eq!(strip_version_suffix("_v12"), "_v12");
        assert_eq!(strip_version_suffix("a_v1_v2"), "a_v1");
    }

    #[test]
    fn enum_labels() {
        assert_eq!(memcpy_kind_label(1), "HtoD");
        assert_eq!(memcpy_kind_label(2), "DtoH");
        assert_eq!(memcpy_kind_label(10), "PtoP");
        assert_eq!(memcpy_kind_label(99), "kind 99");
        assert_eq!(mem_kind_label(1), "Pinned");
        assert_eq!(sync_kind_label(1), "Event sync");
        assert_eq!(NvtxKind::from_event_type(34), Some(NvtxKind::Mark));
        assert_eq!(NvtxKind::from_event_type(75), None);
        assert_eq!(ApiClass::from_event_class(Some(1)), ApiClass::Driver);
    }
}

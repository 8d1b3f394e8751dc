//! Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`).
//!
//! [`NsysReport::open`] validates the file (SQLite header, completeness, nsys tables), probes the
//! schema (tables are created lazily and columns differ between export versions), resolves
//! `StringIds`, decodes `globalTid`/`globalPid` ([`GlobalId`]) and reads CUDA kernels, memcpys,
//! memsets, synchronizations, runtime/driver API calls and NVTX marks/ranges into plain structs.
//! [`TimeBase::mapping`] maps export times to CLOCK_REALTIME ns; [`NsysReport::summary`]
//! describes what the export holds. See `nsys/README.md` for the time-alignment accuracy.

mod error;
mod ids;
mod model;
mod read;
mod schema;
mod summary;
mod time;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

pub use error::{NsysError, EXPECTED};
pub use ids::GlobalId;
pub use model::*;
pub use schema::Schema;
pub use summary::{Summary, TableCount};
pub use time::{
    Anchor, ClockMapping, HostClock, HostClockSnapshot, TimeBase, TimeError,
    SYSTEM_CLOCK_TOLERANCE_NS,
};

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const SQLITE_HEADER_LEN: usize = 100;

/// Everything read from one export.
#[derive(Debug, Clone)]
pub struct NsysReport {
    pub path: PathBuf,
    pub host: HostInfo,
    pub time_base: TimeBase,
    pub kernels: Vec<Kernel>,
    pub memcpys: Vec<Memcpy>,
    pub memsets: Vec<Memset>,
    pub syncs: Vec<Sync>,
    pub api_calls: Vec<ApiCall>,
    pub nvtx: Vec<NvtxEvent>,
    /// Named threads of the processes that have events, by globalTid.
    pub threads: BTreeMap<GlobalId, ThreadInfo>,
    /// Processes that have events, by globalPid.
    pub processes: BTreeMap<GlobalId, ProcessInfo>,
    pub devices: Vec<DeviceInfo>,
    /// Row counts of every table except ENUM_* ones.
    pub table_rows: Vec<TableCount>,
    /// Oddities that did not stop the read (skipped tables, clamped events, …).
    pub warnings: Vec<String>,
}

impl NsysReport {
    /// Opens and reads an export. Errors name the file and say what was expected.
    pub fn open(path: impl AsRef<Path>) -> Result<NsysReport, NsysError> {
        let path = path.as_ref();
        check_sqlite_file(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| NsysError::from_sqlite(path, "the database", e))?;
        // Never run SQL stored in the file (views, triggers, defaults) with side effects.
        conn.pragma_update(None, "trusted_schema", false)
            .map_err(|e| NsysError::from_sqlite(path, "the database", e))?;
        let schema =
            Schema::probe(&conn).map_err(|e| NsysError::from_sqlite(path, "the schema", e))?;
        check_nsys_tables(path, &schema)?;
        read_report(&conn, path, &schema)
    }

    /// The mapping of this export's times to CLOCK_REALTIME ns (see [`TimeBase::mapping`]).
    pub fn clock_mapping(
        &self,
        manual_offset_ns: Option<i64>,
        host: Option<&HostClockSnapshot>,
    ) -> Result<ClockMapping, TimeError> {
        self.time_base.mapping(manual_offset_ns, host)
    }

    /// Earliest start and latest end over all events (export time), None when there are none.
    pub fn time_span(&self) -> Option<(i64, i64)> {
        let spans = self
            .kernels
            .iter()
            .map(|e| (e.start, e.end))
            .chain(self.memcpys.iter().map(|e| (e.start, e.end)))
            .chain(self.memsets.iter().map(|e| (e.start, e.end)))
            .chain(self.syncs.iter().map(|e| (e.start, e.end)))
            .chain(self.api_calls.iter().map(|e| (e.start, e.end)))
            .chain(
                self.nvtx
                    .iter()
                    .map(|e| (e.start, e.end.unwrap_or(e.start))),
            );
        spans.fold(None, |acc, (s, e)| match acc {
            None => Some((s, e)),
            Some((a, b)) => Some((a.min(s), b.max(e))),
        })
    }

    /// Name of a thread, if the export has one.
    pub fn thread_name(&self, gtid: GlobalId) -> Option<&str> {
        self.threads.get(&gtid).map(|t| t.name.as_str())
    }
}

/// Checks the SQLite header before SQLite sees the file: SQLite would treat an empty or
/// non-database file lazily (or create a database), and a truncated one fails late.
fn check_sqlite_file(path: &Path) -> Result<(), NsysError> {
    let io = |source| NsysError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(NsysError::NotSqlite {
            path: path.to_path_buf(),
            detail: "it is not a regular file".into(),
        });
    }
    let len = meta.len();
    let mut head = Vec::with_capacity(SQLITE_HEADER_LEN);
    file.by_ref()
        .take(SQLITE_HEADER_LEN as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    if head.is_empty() {
        return Err(NsysError::NotSqlite {
            path: path.to_path_buf(),
            detail: "the file is empty".into(),
        });
    }
    let magic_len = head.len().min(SQLITE_MAGIC.len());
    if head[..magic_len] != SQLITE_MAGIC[..magic_len] {
        return Err(NsysError::NotSqlite {
            path: path.to_path_buf(),
            detail: format!(
                "the file does not start with \"SQLite format 3\"; its first bytes are {}",
                hex_preview(&head)
            ),
        });
    }
    if head.len() < SQLITE_HEADER_LEN {
        return Err(NsysError::Truncated {
            path: path.to_path_buf(),
            detail: "the file ends inside the 100-byte SQLite header".into(),
            expected_bytes: SQLITE_HEADER_LEN as u64,
            actual_bytes: len,
        });
    }
    let raw_page = u16::from_be_bytes([head[16], head[17]]) as u64;
    let page_size = if raw_page == 1 { 65536 } else { raw_page };
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(NsysError::Corrupt {
            path: path.to_path_buf(),
            what: "the SQLite header".into(),
            detail: format!("invalid page size {raw_page}"),
        });
    }
    let change_counter = &head[24..28];
    let version_valid_for = &head[92..96];
    let pages = u32::from_be_bytes([head[28], head[29], head[30], head[31]]) as u64;
    // The in-header page count is valid only when "version-valid-for" matches the change counter.
    let expected = if pages > 0 && change_counter == version_valid_for {
        pages * page_size
    } else {
        page_size
    };
    if len < expected {
        return Err(NsysError::Truncated {
            path: path.to_path_buf(),
            detail: format!("the SQLite header announces {pages} pages of {page_size} B"),
            expected_bytes: expected,
            actual_bytes: len,
        });
    }
    Ok(())
}

fn hex_preview(bytes: &[u8]) -> String {
    let shown: Vec<String> = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
    shown.join(" ")
}

/// A database is taken for an nsys export when it has `StringIds` and one of the export
/// metadata / session tables every nsys export version writes.
fn check_nsys_tables(path: &Path, schema: &Schema) -> Result<(), NsysError> {
    const MARKERS: [&str; 3] = [
        "META_DATA_EXPORT",
        "EXPORT_META_DATA",
        "TARGET_INFO_SESSION_START_TIME",
    ];
    if schema.has_table("StringIds") && MARKERS.iter().any(|t| schema.has_table(t)) {
        return Ok(());
    }
    let mut found: Vec<&str> = schema.table_names().take(8).collect();
    if schema.table_count() > found.len() {
        found.push("…");
    }
    let found = if found.is_empty() {
        "it has no tables".to_string()
    } else {
        format!("its tables are {}", found.join(", "))
    };
    Err(NsysError::NotNsys {
        path: path.to_path_buf(),
        detail: format!(
            "it lacks StringIds and META_DATA_EXPORT/EXPORT_META_DATA/TARGET_INFO_SESSION_START_TIME ({found})"
        ),
    })
}

fn read_report(conn: &Connection, path: &Path, schema: &Schema) -> Result<NsysReport, NsysError> {
    let mut r = read::Reader::new(conn, path, schema);
    r.load_strings()?;
    let mut export_meta = r.key_values("META_DATA_EXPORT")?;
    if export_meta.is_empty() {
        export_meta = r.key_values("EXPORT_META_DATA")?;
    }
    let env = r.key_values("TARGET_INFO_SYSTEM_ENV")?;
    let capture = r.key_values("META_DATA_CAPTURE")?;
    let host = read::host_info(&env, &capture, &export_meta);
    let time_base = r.time_base(&export_meta)?;
    let kernels = r.kernels()?;
    let memcpys = r.memcpys()?;
    let memsets = r.memsets()?;
    let syncs = r.syncs()?;
    let api_calls = r.api_calls()?;
    let nvtx = r.nvtx()?;
    let all_threads = r.threads()?;
    let all_processes = r.processes()?;
    let mut devices = r.devices()?;

    // Processes and threads that have events.
    let mut gpids: BTreeSet<GlobalId> = BTreeSet::new();
    let gpid = |g: Option<GlobalId>| g.map(GlobalId::global_pid);
    gpids.extend(kernels.iter().filter_map(|e| gpid(e.global_pid)));
    gpids.extend(memcpys.iter().filter_map(|e| gpid(e.global_pid)));
    gpids.extend(memsets.iter().filter_map(|e| gpid(e.global_pid)));
    gpids.extend(syncs.iter().filter_map(|e| gpid(e.global_pid)));
    let gtids: BTreeSet<GlobalId> = api_calls
        .iter()
        .filter_map(|e| e.global_tid)
        .chain(nvtx.iter().filter_map(|e| e.global_tid))
        .collect();
    gpids.extend(gtids.iter().map(|t| t.global_pid()));
    let processes: BTreeMap<GlobalId, ProcessInfo> = gpids
        .iter()
        .map(|&g| {
            let info = all_processes.get(&g).cloned().unwrap_or(ProcessInfo {
                global_pid: g,
                pid: g.pid(),
                name: None,
            });
            (g, info)
        })
        .collect();
    let threads: BTreeMap<GlobalId, ThreadInfo> = all_threads
        .into_iter()
        .filter(|(g, _)| gpids.contains(&g.global_pid()))
        .collect();

    // Devices that have activity but no TARGET_INFO_GPU row.
    let used: BTreeSet<i64> = kernels
        .iter()
        .map(|e| e.device_id)
        .chain(memcpys.iter().map(|e| e.device_id))
        .chain(memsets.iter().map(|e| e.device_id))
        .chain(syncs.iter().map(|e| e.device_id))
        .collect();
    for id in used {
        if !devices.iter().any(|d| d.id == id) {
            devices.push(DeviceInfo {
                id,
                name: None,
                bus_location: None,
                uuid: None,
                sm_count: None,
                compute_capability: None,
            });
        }
    }

    let mut table_rows = Vec::new();
    let names: Vec<String> = schema
        .table_names()
        .filter(|t| !t.starts_with("ENUM_"))
        .map(str::to_string)
        .collect();
    for t in names {
        let rows = r.count(&t)?;
        table_rows.push(TableCount { table: t, rows });
    }

    Ok(NsysReport {
        path: path.to_path_buf(),
        host,
        time_base,
        kernels,
        memcpys,
        memsets,
        syncs,
        api_calls,
        nvtx,
        threads,
        processes,
        devices,
        table_rows,
        warnings: r.finish(),
    })
}

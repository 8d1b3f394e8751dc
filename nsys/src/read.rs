//! Reads the event and lookup tables into the plain structs of [`crate::model`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::{Connection, Row};

use crate::error::NsysError;
use crate::ids::GlobalId;
use crate::model::*;
use crate::schema::{blob_len, int, real, text, Col, Schema};
use crate::time::TimeBase;

pub(crate) const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub(crate) const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub(crate) const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub(crate) const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
pub(crate) const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
pub(crate) const NVTX: &str = "NVTX_EVENTS";

/// CUPTI's "no stream" marker in SYNCHRONIZATION.streamId.
const NO_STREAM: i64 = 0xFFFF_FFFF;

/// The columns every GPU activity table (kernel, memcpy, memset, sync) starts with.
const ACTIVITY: [Col; 7] = [
    Col::Req("start"),
    Col::Req("end"),
    Col::Opt("deviceId"),
    Col::Opt("contextId"),
    Col::Opt("streamId"),
    Col::Opt("correlationId"),
    Col::Opt("globalPid"),
];

/// The fields read from the [`ACTIVITY`] columns (the stream as stored).
struct Activity {
    start: i64,
    end: i64,
    device_id: i64,
    context_id: Option<i64>,
    stream_id: Option<i64>,
    correlation_id: Option<i64>,
    global_pid: Option<GlobalId>,
}

/// Builds a GPU activity record (see `model`'s `gpu_activities!`) from its [`Activity`], its
/// stream and its own fields.
macro_rules! activity {
    ($ty:ident, $a:expr, $stream:expr, { $($own:tt)* }) => {{
        let a: Activity = $a;
        $ty {
            start: a.start,
            end: a.end,
            device_id: a.device_id,
            context_id: a.context_id,
            stream_id: $stream,
            correlation_id: a.correlation_id,
            global_pid: a.global_pid,
            $($own)*
        }
    }};
}

/// Reading context: connection, probed schema, string table, warnings.
pub(crate) struct Reader<'a> {
    pub conn: &'a Connection,
    pub path: &'a Path,
    pub schema: &'a Schema,
    pub strings: HashMap<i64, String>,
    pub warnings: Vec<String>,
    /// Per table: events that end before they start (not imported), and the first's start.
    reversed: std::collections::BTreeMap<&'static str, (u64, i64)>,
}

impl<'a> Reader<'a> {
    pub fn new(conn: &'a Connection, path: &'a Path, schema: &'a Schema) -> Self {
        Reader {
            conn,
            path,
            schema,
            strings: HashMap::new(),
            warnings: Vec::new(),
            reversed: Default::default(),
        }
    }

    /// Runs `SELECT cols FROM table tail` and calls `f` per row. An absent table yields nothing;
    /// a table without a required column yields nothing and a warning.
    fn rows(
        &mut self,
        table: &str,
        cols: &[Col],
        tail: &str,
        mut f: impl FnMut(&mut Self, &Row<'_>),
    ) -> Result<(), NsysError> {
        let sql = match self.schema.select(table, cols, tail) {
            Ok(sql) => sql,
            Err(why) => {
                if self.schema.has_table(table) {
                    self.warnings.push(format!("{why}: skipped"));
                }
                return Ok(());
            }
        };
        let conn = self.conn;
        let path = self.path;
        let err = |e| NsysError::from_sqlite(path, table, e);
        let mut stmt = conn.prepare(&sql).map_err(err)?;
        let mut rows = stmt.query([]).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            f(self, row);
        }
        Ok(())
    }

    fn string(&self, id: Option<i64>) -> Option<String> {
        id.and_then(|id| self.strings.get(&id).cloned())
    }

    pub fn load_strings(&mut self) -> Result<(), NsysError> {
        self.rows(
            "StringIds",
            &[Col::Req("id"), Col::Req("value")],
            "",
            |r, row| {
                if let (Some(id), Some(v)) = (int(row, 0), text(row, 1)) {
                    r.strings.insert(id, v);
                }
            },
        )
    }

    /// `name → value` rows of a key/value table (later rows win).
    pub fn key_values(&mut self, table: &str) -> Result<Vec<(String, String)>, NsysError> {
        let mut out = Vec::new();
        self.rows(
            table,
            &[Col::Req("name"), Col::Req("value")],
            "",
            |_, row| {
                if let (Some(k), Some(v)) = (text(row, 0), text(row, 1)) {
                    out.push((k, v));
                }
            },
        )?;
        Ok(out)
    }

    pub fn time_base(&mut self, export_meta: &[(String, String)]) -> Result<TimeBase, NsysError> {
        let mut base = TimeBase::default();
        let mut first = true;
        self.rows(
            "TARGET_INFO_SESSION_START_TIME",
            &[Col::Req("utcEpochNs"), Col::Opt("systemClockNs")],
            "",
            |_, row| {
                if first {
                    base.utc_epoch_ns = int(row, 0);
                    base.system_clock_ns = int(row, 1);
                    first = false;
                }
            },
        )?;
        for (k, v) in export_meta {
            match k.as_str() {
                "EXPORT_PARAM_TIME_NORMALIZE" => {
                    base.normalized = matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1")
                }
                "EXPORT_PARAM_TIME_SHIFT" => match v.trim().parse::<i64>() {
                    Ok(shift) => base.time_shift_ns = shift,
                    Err(_) => self.warnings.push(format!(
                        "EXPORT_PARAM_TIME_SHIFT {v:?} is not an integer: ignored"
                    )),
                },
                _ => {}
            }
        }
        Ok(base)
    }

    /// The end of an event that starts at `start`: `end`, or `start` when the row has none.
    /// `None` when it ends before it starts: the row is not imported (its times are never
    /// changed) and is counted for [`Reader::finish`].
    fn end_of(&mut self, table: &'static str, start: i64, end: Option<i64>) -> Option<i64> {
        match end {
            Some(e) if e >= start => Some(e),
            Some(_) => {
                let n = self.reversed.entry(table).or_insert((0, start));
                n.0 += 1;
                None
            }
            None => Some(start),
        }
    }

    /// The warnings, with one line per table whose events ended before they started.
    pub fn finish(mut self) -> Vec<String> {
        for (table, (n, first)) in std::mem::take(&mut self.reversed) {
            self.warnings.push(format!(
                "{table}: {n} events end before they start (the first at {first}): not imported"
            ));
        }
        self.warnings
    }

    /// Runs `rows` over a GPU activity table ([`ACTIVITY`] columns, then `extra` from column 7
    /// on) in start order; `f` gets the common fields of each row that has a
    /// start (its end clamped to it).
    fn activities(
        &mut self,
        table: &'static str,
        extra: &[Col],
        mut f: impl FnMut(&mut Self, Activity, &Row<'_>),
    ) -> Result<(), NsysError> {
        let cols: Vec<Col> = ACTIVITY.iter().chain(extra).copied().collect();
        self.rows(table, &cols, "ORDER BY start", |r, row| {
            let Some(start) = int(row, 0) else { return };
            let Some(end) = r.end_of(table, start, int(row, 1)) else {
                return;
            };
            let common = Activity {
                start,
                end,
                device_id: int(row, 2).unwrap_or(0),
                context_id: int(row, 3),
                stream_id: int(row, 4),
                correlation_id: int(row, 5),
                global_pid: int(row, 6).map(GlobalId),
            };
            f(r, common, row)
        })
    }

    pub fn kernels(&mut self) -> Result<Vec<Kernel>, NsysError> {
        use Col::*;
        let extra = [
            Opt("shortName"),
            Opt("demangledName"),
            Opt("mangledName"),
            Opt("gridX"),
            Opt("gridY"),
            Opt("gridZ"),
            Opt("blockX"),
            Opt("blockY"),
            Opt("blockZ"),
            Opt("registersPerThread"),
            Opt("staticSharedMemory"),
            Opt("dynamicSharedMemory"),
            Opt("graphId"),
        ];
        let mut out = Vec::new();
        self.activities(KERNEL, &extra, |r, a, row| {
            let short = r.string(int(row, 7));
            let demangled_name = r.string(int(row, 8));
            let mangled_name = r.string(int(row, 9));
            let name = short
                .or_else(|| demangled_name.clone())
                .or_else(|| mangled_name.clone())
                .unwrap_or_else(|| "<unnamed kernel>".to_string());
            let dim = |i| int(row, i).unwrap_or(0);
            let stream_id = a.stream_id.unwrap_or(0);
            out.push(activity!(Kernel, a, stream_id, {
                name,
                demangled_name,
                mangled_name,
                grid: [dim(10), dim(11), dim(12)],
                block: [dim(13), dim(14), dim(15)],
                registers_per_thread: int(row, 16),
                static_shared_memory: int(row, 17),
                dynamic_shared_memory: int(row, 18),
                graph_id: int(row, 19),
            }));
        })?;
        Ok(out)
    }

    pub fn memcpys(&mut self) -> Result<Vec<Memcpy>, NsysError> {
        use Col::*;
        let extra = [
            Opt("bytes"),
            Opt("copyKind"),
            Opt("srcKind"),
            Opt("dstKind"),
            Opt("srcDeviceId"),
            Opt("dstDeviceId"),
        ];
        let mut out = Vec::new();
        self.activities(MEMCPY, &extra, |_, a, row| {
            let copy_kind = int(row, 8).unwrap_or(0);
            let stream_id = a.stream_id.unwrap_or(0);
            out.push(activity!(Memcpy, a, stream_id, {
                bytes: int(row, 7).unwrap_or(0),
                copy_kind,
                kind: memcpy_kind_label(copy_kind),
                src_kind: int(row, 9).map(mem_kind_label),
                dst_kind: int(row, 10).map(mem_kind_label),
                src_device_id: int(row, 11),
                dst_device_id: int(row, 12),
            }));
        })?;
        Ok(out)
    }

    pub fn memsets(&mut self) -> Result<Vec<Memset>, NsysError> {
        use Col::*;
        let extra = [Opt("bytes"), Opt("value"), Opt("memKind")];
        let mut out = Vec::new();
        self.activities(MEMSET, &extra, |_, a, row| {
            let stream_id = a.stream_id.unwrap_or(0);
            out.push(activity!(Memset, a, stream_id, {
                bytes: int(row, 7).unwrap_or(0),
                value: int(row, 8),
                mem_kind: int(row, 9).map(mem_kind_label),
            }));
        })?;
        Ok(out)
    }

    pub fn syncs(&mut self) -> Result<Vec<Sync>, NsysError> {
        use Col::*;
        let extra = [Opt("syncType"), Opt("deprecatedSyncType")];
        let mut out = Vec::new();
        self.activities(SYNC, &extra, |_, a, row| {
            let stream_id = a.stream_id.filter(|&s| s != NO_STREAM && s >= 0);
            let kind = int(row, 7).or(int(row, 8)).unwrap_or(0);
            out.push(activity!(Sync, a, stream_id, {
                kind: sync_kind_label(kind),
            }));
        })?;
        Ok(out)
    }

    pub fn api_calls(&mut self) -> Result<Vec<ApiCall>, NsysError> {
        use Col::*;
        let cols = [
            Req("start"),
            Req("end"),
            Opt("eventClass"),
            Opt("globalTid"),
            Opt("correlationId"),
            Opt("nameId"),
            Opt("returnValue"),
        ];
        let mut out = Vec::new();
        self.rows(RUNTIME, &cols, "ORDER BY start", |r, row| {
            let Some(start) = int(row, 0) else { return };
            let Some(end) = r.end_of(RUNTIME, start, int(row, 1)) else {
                return;
            };
            let raw_name = r
                .string(int(row, 5))
                .unwrap_or_else(|| "<unnamed API call>".to_string());
            out.push(ApiCall {
                start,
                end,
                class: ApiClass::from_event_class(int(row, 2)),
                global_tid: int(row, 3).map(GlobalId),
                correlation_id: int(row, 4),
                name: strip_version_suffix(&raw_name).to_string(),
                raw_name,
                return_value: int(row, 6),
            });
        })?;
        Ok(out)
    }

    pub fn nvtx(&mut self) -> Result<Vec<NvtxEvent>, NsysError> {
        use Col::*;
        let cols = [
            Req("start"),
            Opt("end"),
            Req("eventType"),
            Opt("rangeId"),
            Opt("category"),
            Opt("color"),
            Opt("text"),
            Opt("textId"),
            Opt("globalTid"),
            Opt("endGlobalTid"),
            Opt("domainId"),
            Opt("uint64Value"),
            Opt("int64Value"),
            Opt("doubleValue"),
            Opt("uint32Value"),
            Opt("int32Value"),
            Opt("floatValue"),
            Opt("jsonText"),
            Opt("jsonTextId"),
            Opt("binaryData"),
        ];
        let mut events = Vec::new();
        let mut domains: HashMap<i64, String> = HashMap::new();
        let mut categories: HashMap<(i64, i64), String> = HashMap::new();
        self.rows(NVTX, &cols, "ORDER BY start", |r, row| {
            let (Some(start), Some(event_type)) = (int(row, 0), int(row, 2)) else {
                return;
            };
            let text_value = text(row, 6).or_else(|| r.string(int(row, 7)));
            let domain_id = int(row, 10);
            match event_type {
                75 => {
                    if let (Some(d), Some(t)) = (domain_id, text_value) {
                        domains.insert(d, t);
                    }
                    return;
                }
                33 | 64 => {
                    if let (Some(c), Some(t)) = (int(row, 4), text_value) {
                        categories.insert((domain_id.unwrap_or(0), c), t);
                    }
                    return;
                }
                _ => {}
            }
            let Some(kind) = NvtxKind::from_event_type(event_type) else {
                return;
            };
            let end = match (kind, int(row, 1)) {
                (NvtxKind::Mark, _) | (_, None) => None,
                (_, Some(e)) => match r.end_of(NVTX, start, Some(e)) {
                    Some(e) => Some(e),
                    None => return,
                },
            };
            let payload = if let Some(v) = int(row, 11) {
                Some(NvtxPayload::U64(v as u64))
            } else if let Some(v) = int(row, 12) {
                Some(NvtxPayload::I64(v))
            } else if let Some(v) = real(row, 13) {
                Some(NvtxPayload::F64(v))
            } else if let Some(v) = int(row, 14) {
                Some(NvtxPayload::U32(v as u32))
            } else if let Some(v) = int(row, 15) {
                Some(NvtxPayload::I32(v as i32))
            } else if let Some(v) = real(row, 16) {
                Some(NvtxPayload::F32(v))
            } else if let Some(v) = text(row, 17).or_else(|| r.string(int(row, 18))) {
                Some(NvtxPayload::Json(v))
            } else {
                blob_len(row, 19).map(NvtxPayload::Binary)
            };
            events.push(NvtxEvent {
                kind,
                event_type,
                start,
                end,
                text: text_value,
                category: int(row, 4),
                category_name: None,
                color: int(row, 5).map(|c| c as u32),
                global_tid: int(row, 8).map(GlobalId),
                end_global_tid: int(row, 9).map(GlobalId),
                domain_id,
                domain: None,
                range_id: int(row, 3),
                payload,
            });
        })?;
        for e in &mut events {
            let d = e.domain_id.unwrap_or(0);
            e.domain = e.domain_id.and_then(|d| domains.get(&d).cloned());
            e.category_name = e.category.and_then(|c| categories.get(&(d, c)).cloned());
        }
        Ok(events)
    }

    /// Thread names by globalTid (the last row for a thread wins).
    pub fn threads(&mut self) -> Result<BTreeMap<GlobalId, ThreadInfo>, NsysError> {
        let mut out = BTreeMap::new();
        self.rows(
            "ThreadNames",
            &[Col::Req("globalTid"), Col::Req("nameId")],
            "ORDER BY rowid",
            |r, row| {
                let Some(gtid) = int(row, 0).map(GlobalId) else {
                    return;
                };
                let Some(name) = r.string(int(row, 1)) else {
                    return;
                };
                out.insert(
                    gtid,
                    ThreadInfo {
                        global_tid: gtid,
                        pid: gtid.pid(),
                        tid: gtid.tid(),
                        name,
                    },
                );
            },
        )?;
        Ok(out)
    }

    /// Every row of PROCESSES by globalPid.
    pub fn processes(&mut self) -> Result<BTreeMap<GlobalId, ProcessInfo>, NsysError> {
        let mut out = BTreeMap::new();
        self.rows(
            "PROCESSES",
            &[Col::Req("globalPid"), Col::Opt("pid"), Col::Opt("name")],
            "",
            |_, row| {
                let Some(gpid) = int(row, 0).map(GlobalId) else {
                    return;
                };
                let pid = int(row, 1)
                    .and_then(|p| u32::try_from(p).ok())
                    .unwrap_or(gpid.pid());
                out.insert(
                    gpid,
                    ProcessInfo {
                        global_pid: gpid,
                        pid,
                        name: text(row, 2),
                    },
                );
            },
        )?;
        Ok(out)
    }

    /// GPUs with the id the activity tables use (`deviceId` = CUDA device id).
    pub fn devices(&mut self) -> Result<Vec<DeviceInfo>, NsysError> {
        let mut gpu_to_cuda: HashMap<i64, i64> = HashMap::new();
        self.rows(
            "TARGET_INFO_CUDA_DEVICE",
            &[Col::Req("gpuId"), Col::Req("cudaId")],
            "",
            |_, row| {
                if let (Some(g), Some(c)) = (int(row, 0), int(row, 1)) {
                    gpu_to_cuda.entry(g).or_insert(c);
                }
            },
        )?;
        let mut out: Vec<DeviceInfo> = Vec::new();
        let cols = [
            Col::Req("id"),
            Col::Opt("name"),
            Col::Opt("busLocation"),
            Col::Opt("uuid"),
            Col::Opt("smCount"),
            Col::Opt("computeMajor"),
            Col::Opt("computeMinor"),
            Col::Opt("cuDevice"),
        ];
        self.rows("TARGET_INFO_GPU", &cols, "ORDER BY id", |_, row| {
            let Some(gpu_id) = int(row, 0) else { return };
            let id = gpu_to_cuda
                .get(&gpu_id)
                .copied()
                .or(int(row, 7))
                .unwrap_or(gpu_id);
            if out.iter().any(|d| d.id == id) {
                return;
            }
            let cc = match (int(row, 5), int(row, 6)) {
                (Some(a), Some(b)) => Some(format!("{a}.{b}")),
                _ => None,
            };
            out.push(DeviceInfo {
                id,
                name: text(row, 1),
                bus_location: text(row, 2),
                uuid: text(row, 3),
                sm_count: int(row, 4),
                compute_capability: cc,
            });
        })?;
        Ok(out)
    }

    /// Row count of a table.
    pub fn count(&mut self, table: &str) -> Result<u64, NsysError> {
        let sql = format!("SELECT count(*) FROM {}", crate::schema::quote_ident(table));
        let n: i64 = self
            .conn
            .query_row(&sql, [], |r| r.get(0))
            .map_err(|e| NsysError::from_sqlite(self.path, table, e))?;
        Ok(n.max(0) as u64)
    }
}

/// Host identity from TARGET_INFO_SYSTEM_ENV, META_DATA_CAPTURE and the export metadata.
pub(crate) fn host_info(
    env: &[(String, String)],
    capture: &[(String, String)],
    export: &[(String, String)],
) -> HostInfo {
    let find = |kv: &[(String, String)], key: &str| {
        kv.iter()
            .rev()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    HostInfo {
        hostname: find(env, "Hostname").or_else(|| find(capture, "DEVICE_DISPLAY_NAME")),
        os: find(env, "OsDescription"),
        cuda_driver_version: find(env, "CudaDriverVersion"),
        nv_driver_version: find(env, "NvDriverVersion"),
        product_version: find(export, "EXPORT_PRODUCT_VERSION"),
        schema_version: find(export, "EXPORT_SCHEMA_VERSION"),
    }
}

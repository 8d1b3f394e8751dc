//! What an export holds, as a plain-text table and as JSON (`sigmatrace-convert nsys-summary`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::model::{ApiClass, NvtxKind};
use crate::time::TimeBase;
use crate::NsysReport;

/// Row count of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableCount {
    pub table: String,
    pub rows: u64,
}

/// Event counts of what the importer reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EventCounts {
    pub kernels: usize,
    pub memcpys: usize,
    pub memsets: usize,
    pub syncs: usize,
    /// All rows of CUPTI_ACTIVITY_KIND_RUNTIME (runtime + driver + other classes).
    pub api_calls: usize,
    pub runtime_calls: usize,
    pub driver_calls: usize,
    pub nvtx_ranges: usize,
    pub nvtx_marks: usize,
}

/// A thread with events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadSummary {
    pub tid: u32,
    pub name: Option<String>,
    pub api_calls: usize,
    pub nvtx_events: usize,
}

/// A process with events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub global_pid: i64,
    pub name: Option<String>,
    pub threads: Vec<ThreadSummary>,
}

/// A device with its activity counts and streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceSummary {
    pub id: i64,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub compute_capability: Option<String>,
    pub kernels: usize,
    pub memcpys: usize,
    pub memsets: usize,
    pub streams: Vec<i64>,
}

/// What an export holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub file: String,
    pub product_version: Option<String>,
    pub schema_version: Option<String>,
    pub hostname: Option<String>,
    pub os: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub time_base: TimeBase,
    /// Earliest start / latest end of the imported events (export time, ns).
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub duration_ns: Option<i64>,
    pub events: EventCounts,
    pub processes: Vec<ProcessSummary>,
    pub devices: Vec<DeviceSummary>,
    pub tables: Vec<TableCount>,
    pub warnings: Vec<String>,
}

impl NsysReport {
    /// Summarizes the export.
    pub fn summary(&self) -> Summary {
        let events = EventCounts {
            kernels: self.kernels.len(),
            memcpys: self.memcpys.len(),
            memsets: self.memsets.len(),
            syncs: self.syncs.len(),
            api_calls: self.api_calls.len(),
            runtime_calls: self
                .api_calls
                .iter()
                .filter(|c| c.class == ApiClass::Runtime)
                .count(),
            driver_calls: self
                .api_calls
                .iter()
                .filter(|c| c.class == ApiClass::Driver)
                .count(),
            nvtx_ranges: self
                .nvtx
                .iter()
                .filter(|e| e.kind != NvtxKind::Mark)
                .count(),
            nvtx_marks: self
                .nvtx
                .iter()
                .filter(|e| e.kind == NvtxKind::Mark)
                .count(),
        };
        // Per-thread counts.
        let mut per_thread: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
        for c in &self.api_calls {
            if let Some(t) = c.global_tid {
                per_thread.entry(t.0).or_default().0 += 1;
            }
        }
        for e in &self.nvtx {
            if let Some(t) = e.global_tid {
                per_thread.entry(t.0).or_default().1 += 1;
            }
        }
        let processes = self
            .processes
            .values()
            .map(|p| ProcessSummary {
                pid: p.pid,
                global_pid: p.global_pid.0,
                name: p.name.clone(),
                threads: per_thread
                    .iter()
                    .filter(|(&t, _)| crate::GlobalId(t).global_pid() == p.global_pid)
                    .map(|(&t, &(api, nvtx))| ThreadSummary {
                        tid: crate::GlobalId(t).tid(),
                        name: self.thread_name(crate::GlobalId(t)).map(str::to_string),
                        api_calls: api,
                        nvtx_events: nvtx,
                    })
                    .collect(),
            })
            .collect();
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let mut streams: Vec<i64> = self
                    .kernels
                    .iter()
                    .filter(|k| k.device_id == d.id)
                    .map(|k| k.stream_id)
                    .chain(
                        self.memcpys
                            .iter()
                            .filter(|m| m.device_id == d.id)
                            .map(|m| m.stream_id),
                    )
                    .chain(
                        self.memsets
                            .iter()
                            .filter(|m| m.device_id == d.id)
                            .map(|m| m.stream_id),
                    )
                    .collect();
                streams.sort_unstable();
                streams.dedup();
                DeviceSummary {
                    id: d.id,
                    name: d.name.clone(),
                    uuid: d.uuid.clone(),
                    compute_capability: d.compute_capability.clone(),
                    kernels: self.kernels.iter().filter(|k| k.device_id == d.id).count(),
                    memcpys: self.memcpys.iter().filter(|k| k.device_id == d.id).count(),
                    memsets: self.memsets.iter().filter(|k| k.device_id == d.id).count(),
                    streams,
                }
            })
            .collect();
        let span = self.time_span();
        Summary {
            file: self.path.display().to_string(),
            product_version: self.host.product_version.clone(),
            schema_version: self.host.schema_version.clone(),
            hostname: self.host.hostname.clone(),
            os: self.host.os.clone(),
            cuda_driver_version: self.host.cuda_driver_version.clone(),
            time_base: self.time_base.clone(),
            first_ns: span.map(|s| s.0),
            last_ns: span.map(|s| s.1),
            duration_ns: span.map(|(a, b)| b.saturating_sub(a)),
            events,
            processes,
            devices,
            tables: self.table_rows.clone(),
            warnings: self.warnings.clone(),
        }
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_string(), |v| v.to_string())
}

impl Summary {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("Summary serializes to JSON")
    }

    /// A plain-text report with aligned columns.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let tb = &self.time_base;
        let _ = writeln!(s, "Nsight Systems export  {}", self.file);
        let rows: Vec<(&str, String)> = vec![
            ("product version", opt(&self.product_version)),
            ("schema version", opt(&self.schema_version)),
            ("hostname", opt(&self.hostname)),
            ("OS", opt(&self.os)),
            ("CUDA driver", opt(&self.cuda_driver_version)),
            ("session start (UTC ns)", opt(&tb.utc_epoch_ns)),
            ("system clock at start (ns)", opt(&tb.system_clock_ns)),
            ("times normalized to UTC", tb.normalized.to_string()),
            ("time shift (ns)", tb.time_shift_ns.to_string()),
            ("first event (ns)", opt(&self.first_ns)),
            ("last event (ns)", opt(&self.last_ns)),
            ("duration (ns)", opt(&self.duration_ns)),
        ];
        for (k, v) in rows {
            let _ = writeln!(s, "  {k:<28} {v}");
        }
        let e = &self.events;
        let _ = writeln!(s, "\nEvents");
        for (k, v) in [
            ("CUDA kernels", e.kernels),
            ("memcpys", e.memcpys),
            ("memsets", e.memsets),
            ("synchronizations", e.syncs),
            ("API calls (all)", e.api_calls),
            ("  CUDA runtime", e.runtime_calls),
            ("  CUDA driver", e.driver_calls),
            ("NVTX ranges", e.nvtx_ranges),
            ("NVTX marks", e.nvtx_marks),
        ] {
            let _ = writeln!(s, "  {k:<28} {v:>10}");
        }
        let _ = writeln!(s, "\nProcesses");
        let _ = writeln!(
            s,
            "  {:>8}  {:<28} {:>9} {:>9}",
            "pid/tid", "name", "API", "NVTX"
        );
        for p in &self.processes {
            let _ = writeln!(s, "  {:>8}  {}", p.pid, opt(&p.name));
            for t in &p.threads {
                let _ = writeln!(
                    s,
                    "  {:>8}  {:<28} {:>9} {:>9}",
                    t.tid,
                    opt(&t.name),
                    t.api_calls,
                    t.nvtx_events
                );
            }
        }
        let _ = writeln!(s, "\nDevices");
        let _ = writeln!(
            s,
            "  {:>3}  {:<30} {:>4} {:>8} {:>8} {:>8}  streams",
            "id", "name", "cc", "kernels", "memcpys", "memsets"
        );
        for d in &self.devices {
            let streams: Vec<String> = d.streams.iter().map(|x| x.to_string()).collect();
            let _ = writeln!(
                s,
                "  {:>3}  {:<30} {:>4} {:>8} {:>8} {:>8}  {}",
                d.id,
                opt(&d.name),
                opt(&d.compute_capability),
                d.kernels,
                d.memcpys,
                d.memsets,
                streams.join(",")
            );
        }
        let _ = writeln!(s, "\nTables (rows)");
        for t in &self.tables {
            let _ = writeln!(s, "  {:<44} {:>10}", t.table, t.rows);
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(s, "\nWarnings");
            for w in &self.warnings {
                let _ = writeln!(s, "  {w}");
            }
        }
        s
    }
}

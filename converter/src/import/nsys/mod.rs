//! Merges Nsight Systems SQLite exports (read by `sigmatrace-nsys`) into the timeline.
//!
//! Tracks: under each process (the SigmaTrace process track when hostname and pid match a log,
//! else a process track of its own), one "CUDA HW" group per GPU with one track per stream
//! (kernels, memcpys, memsets, stream syncs) and a "sync" track (device-wide syncs), one
//! "CUDA API" track per thread (runtime and driver calls) and one "NVTX" track per thread (ranges
//! as slices, marks and unterminated ranges as instants, payloads as args). API calls and the GPU
//! work they launched are joined by flows (nsys correlation ids). Overlapping slices of one
//! logical track go to lanes that share a sibling merge key.
//!
//! Time: export times → CLOCK_REALTIME with [`sigmatrace_nsys::TimeBase::mapping`] (plus the
//! manual `--nsys-offset`). When the export's host is one of the SigmaTrace hosts, the mapping
//! uses that host's clocks (`systemClockNs` matched against a log's start snapshot when
//! possible) and then the same per-host correction as the host's SigmaTrace events. The
//! applied mapping is written into the trace (an "Nsight Systems import" track description).

pub mod cli;
mod tracks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sigmatrace_nsys::{Anchor, ClockMapping, GlobalId, HostClockSnapshot, NsysReport};

use crate::align::topology::Topology;
use crate::align::Alignment;
use crate::error::ConvertError;
use crate::read::input::LogInput;
use sigmatrace_timeline::{TraceSink, TrackDef, TrackKind};
use tracks::{dims, emit_logical, nvtx_item, Arg, Item, Logical, TimeMap};

/// `--nsys FILE` (repeatable) and `--nsys-offset NS`.
#[derive(Clone, Debug, Default)]
pub struct NsysOptions {
    pub files: Vec<PathBuf>,
    /// Added to every mapped nsys time (ns); required for exports without a session start.
    pub offset_ns: Option<i64>,
}

/// What was merged from one export.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NsysMerged {
    pub file: String,
    pub hostname: Option<String>,
    pub mapping: ClockMapping,
    /// The SigmaTrace host whose clocks and correction were used.
    pub sigmatrace_host: Option<String>,
    /// Correction of that host at the session start (ns), as applied to its own events.
    pub host_correction_ns: Option<f64>,
    /// pids placed under SigmaTrace process tracks / under process tracks of their own.
    pub matched_pids: Vec<u32>,
    pub own_pids: Vec<u32>,
    pub kernels: usize,
    pub memcpys: usize,
    pub memsets: usize,
    pub syncs: usize,
    pub api_calls: usize,
    pub nvtx: usize,
    pub flows: usize,
    /// One line for logs and the trace metadata.
    pub description: String,
}

/// Opens every export and checks that its times can be placed (a session start, normalized
/// times or a manual offset); errors name the file.
pub fn load(opts: &NsysOptions) -> Result<Vec<NsysReport>, ConvertError> {
    let mut out = Vec::with_capacity(opts.files.len());
    for f in &opts.files {
        let r = NsysReport::open(f)?;
        r.clock_mapping(opts.offset_ns, None)
            .map_err(|e| ConvertError::Options(format!("{}: {e}", r.path.display())))?;
        out.push(r);
    }
    Ok(out)
}

/// The SigmaTrace side of a merge.
#[derive(Clone, Copy)]
pub struct SigmaContext<'a> {
    pub topo: &'a Topology,
    pub inputs: &'a [LogInput],
    pub alignment: &'a Alignment,
}

/// Sequence ids of nsys sequences: one per export, counting down below the converter's
/// metadata sequence (`u32::MAX - 1`).
pub fn sequence_id(report_index: usize) -> u32 {
    u32::MAX - 2 - report_index as u32
}

/// Flow ids of nsys correlations: "NS" in the top bits, the report index, the correlation id.
fn flow_id(report_index: usize, correlation: i64) -> u64 {
    (0x4E53u64 << 48) | ((report_index as u64 & 0xFF) << 40) | (correlation as u64 & 0xFF_FFFF_FFFF)
}

/// Same host name: exact, else case-insensitive on the short names (before the first dot).
fn same_host(a: &str, b: &str) -> bool {
    let short = |s: &str| s.split('.').next().unwrap_or(s).to_ascii_lowercase();
    a == b || (!a.is_empty() && short(a) == short(b))
}

/// Chooses the mapping of a report: the SigmaTrace host with the same name (if any), its clock
/// snapshot (from the log of the same pid if there is one) and its correction.
fn time_map(
    report: &NsysReport,
    offset: Option<i64>,
    ctx: Option<SigmaContext<'_>>,
) -> Result<(TimeMap, Option<usize>), ConvertError> {
    let host = ctx.and_then(|c| {
        let name = report.host.hostname.as_deref()?;
        c.topo.hosts.iter().position(|h| same_host(&h.name, name))
    });
    let (snapshot, correction) = match (ctx, host) {
        (Some(c), Some(h)) => {
            let pids: Vec<u32> = report.processes.values().map(|p| p.pid).collect();
            let procs = &c.topo.hosts[h].procs;
            let proc_ = procs
                .iter()
                .map(|&i| &c.topo.procs[i])
                .find(|p| pids.contains(&p.pid))
                .or_else(|| procs.first().map(|&i| &c.topo.procs[i]));
            let snap = proc_.and_then(|p| {
                let input = c.inputs.iter().find(|i| i.path == p.path)?;
                let s = input.file.header().start;
                let nz = |v: u64| (v != 0).then_some(v as i64);
                Some(HostClockSnapshot {
                    realtime_ns: (s.monotonic as i64)
                        .saturating_add(c.topo.hosts[h].realtime_offset),
                    monotonic_ns: nz(s.monotonic),
                    monotonic_raw_ns: nz(s.monotonic_raw),
                    boottime_ns: nz(s.boottime),
                })
            });
            let corr = c
                .alignment
                .hosts
                .get(h)
                .map(|a| (a.offset_ns, a.drift_ppm * 1e-6, c.alignment.t0));
            (snap, corr)
        }
        _ => (None, None),
    };
    let mapping = report
        .clock_mapping(offset, snapshot.as_ref())
        .map_err(|e| ConvertError::Options(format!("{}: {e}", report.path.display())))?;
    Ok((
        TimeMap {
            mapping,
            correction,
        },
        host,
    ))
}

/// Emits one report onto `sink`. `uuids` hands out track uuids (shared with the converter).
pub fn emit_report(
    sink: &mut dyn TraceSink,
    uuids: &AtomicU64,
    report_index: usize,
    report: &NsysReport,
    offset: Option<i64>,
    ctx: Option<SigmaContext<'_>>,
) -> Result<NsysMerged, ConvertError> {
    let (tm, host) = time_map(report, offset, ctx)?;
    let file = file_name(&report.path);
    let gpu_corr = gpu_correlations(report, &tm);
    let mut e = ReportEmitter {
        sink,
        uuids,
        report_index,
        report,
        tm,
        gpu_corr,
        process_track: BTreeMap::new(),
        gpu_groups: BTreeMap::new(),
        logical: BTreeMap::new(),
    };
    let (matched_pids, own_pids) = e.process_tracks(ctx, host, &file);
    e.kernels();
    e.memcpys();
    e.memsets();
    e.syncs();
    let flows = e.api_calls();
    e.nvtx();
    let tm = e.finish(&file);
    let sigmatrace_host = match (ctx, host) {
        (Some(c), Some(h)) => Some(c.topo.hosts[h].name.clone()),
        _ => None,
    };
    Ok(merged_summary(
        report,
        tm,
        sigmatrace_host,
        (matched_pids, own_pids),
        flows,
        &file,
    ))
}

/// Correlation id → sorted output start times of its GPU activities, for the correlations of
/// API calls on a known thread (only events that get a track take part).
fn gpu_correlations(report: &NsysReport, tm: &TimeMap) -> BTreeMap<i64, Vec<u64>> {
    let mut gpu_corr: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    let starts = report
        .kernels
        .iter()
        .map(|k| (k.correlation_id, k.global_pid, k.start))
        .chain(
            report
                .memcpys
                .iter()
                .map(|m| (m.correlation_id, m.global_pid, m.start)),
        )
        .chain(
            report
                .memsets
                .iter()
                .map(|m| (m.correlation_id, m.global_pid, m.start)),
        );
    for (c, g, s) in starts {
        if let (Some(c), Some(_)) = (c, g) {
            gpu_corr.entry(c).or_default().push(tm.out(s));
        }
    }
    let api_corr: std::collections::HashSet<i64> = report
        .api_calls
        .iter()
        .filter(|c| c.global_tid.is_some())
        .filter_map(|c| c.correlation_id)
        .collect();
    gpu_corr.retain(|c, v| {
        v.sort_unstable();
        api_corr.contains(c)
    });
    gpu_corr
}

/// One report's emission: process tracks, GPU groups and the logical tracks being collected.
struct ReportEmitter<'a> {
    sink: &'a mut dyn TraceSink,
    uuids: &'a AtomicU64,
    report_index: usize,
    report: &'a NsysReport,
    tm: TimeMap,
    gpu_corr: BTreeMap<i64, Vec<u64>>,
    process_track: BTreeMap<GlobalId, u64>,
    /// "CUDA HW GPU" group tracks per (process, device).
    gpu_groups: BTreeMap<(GlobalId, i64), u64>,
    logical: BTreeMap<String, Logical>,
}

impl ReportEmitter<'_> {
    /// A GPU item's flow: (id, terminates) — the last activity of a correlation ends the flow.
    fn gpu_flow(&self, corr: Option<i64>, start: i64) -> (Option<u64>, bool) {
        match corr.and_then(|c| self.gpu_corr.get(&c).map(|v| (c, v))) {
            Some((c, v)) => (
                Some(flow_id(self.report_index, c)),
                v.last() == Some(&self.tm.out(start)),
            ),
            None => (None, false),
        }
    }

    /// A track per process: the SigmaTrace process track when the host and pid match a log,
    /// else one of its own. Returns the matched and the own pids.
    fn process_tracks(
        &mut self,
        ctx: Option<SigmaContext<'_>>,
        host: Option<usize>,
        file: &str,
    ) -> (Vec<u32>, Vec<u32>) {
        let report = self.report;
        let host_label = report
            .host
            .hostname
            .clone()
            .unwrap_or_else(|| "unknown host".into());
        let (mut matched_pids, mut own_pids) = (Vec::new(), Vec::new());
        for (gpid, p) in &report.processes {
            let sigma = match (ctx, host) {
                (Some(c), Some(h)) => c.topo.procs.iter().find(|q| q.host == h && q.pid == p.pid),
                _ => None,
            };
            let uuid = match sigma {
                Some(q) => {
                    matched_pids.push(p.pid);
                    q.track
                }
                None => {
                    own_pids.push(p.pid);
                    let uuid = self.uuids.fetch_add(1, Ordering::Relaxed);
                    let exe = p.name.as_deref().unwrap_or("process");
                    let base = exe.rsplit('/').next().unwrap_or(exe);
                    self.sink.track(&TrackDef {
                        uuid,
                        parent: None,
                        name: format!("{base} pid {} (Nsight Systems)", p.pid),
                        description: Some(format!("from {}", report.path.display())),
                        order: None,
                        explicit_child_order: false,
                        kind: TrackKind::Process {
                            // Synthetic pid: real pids of different hosts collide.
                            pid: 200_000
                                + (self.report_index as i32) * 1000
                                + own_pids.len() as i32,
                            labels: vec![format!("host {host_label}"), format!("nsys {file}")],
                        },
                    });
                    uuid
                }
            };
            self.process_track.insert(*gpid, uuid);
        }
        (matched_pids, own_pids)
    }

    fn parent_of(&self, g: Option<GlobalId>) -> Option<u64> {
        g.and_then(|g| self.process_track.get(&g.global_pid()).copied())
    }

    /// The "CUDA HW GPU n" group of a process's device, created on first use.
    fn gpu_parent(&mut self, g: Option<GlobalId>, dev: i64) -> Option<u64> {
        let g = g?.global_pid();
        let proc_track = *self.process_track.get(&g)?;
        if let Some(&uuid) = self.gpu_groups.get(&(g, dev)) {
            return Some(uuid);
        }
        let name = self
            .report
            .devices
            .iter()
            .find(|d| d.id == dev)
            .and_then(|d| d.name.clone());
        let label = match name {
            Some(n) => format!("CUDA HW GPU {dev}: {n}"),
            None => format!("CUDA HW GPU {dev}"),
        };
        let uuid = self.uuids.fetch_add(1, Ordering::Relaxed);
        self.sink
            .track(&TrackDef::slices(uuid, Some(proc_track), label));
        self.gpu_groups.insert((g, dev), uuid);
        Some(uuid)
    }

    fn push(&mut self, key: String, parent: u64, name: String, item: Item) {
        self.logical
            .entry(key)
            .or_insert_with(|| Logical {
                parent,
                name,
                description: None,
                items: Vec::new(),
            })
            .items
            .push(item);
    }

    /// Key of the logical track of a GPU stream.
    fn stream_key(&self, g: Option<GlobalId>, dev: i64, stream: i64) -> String {
        format!(
            "nsys{} gpu{} {dev} stream {stream}",
            self.report_index,
            g.map_or(0, |g| g.0),
        )
    }

    /// Places a GPU activity on its stream track.
    fn push_stream(&mut self, parent: u64, g: Option<GlobalId>, dev: i64, stream: i64, item: Item) {
        let key = self.stream_key(g, dev, stream);
        self.push(key, parent, format!("Stream {stream}"), item);
    }

    fn kernels(&mut self) {
        for k in &self.report.kernels {
            let Some(parent) = self.gpu_parent(k.global_pid, k.device_id) else {
                continue;
            };
            let (flow, terminates) = self.gpu_flow(k.correlation_id, k.start);
            let mut args = vec![
                ("grid", Arg::S(dims(k.grid))),
                ("block", Arg::S(dims(k.block))),
                ("stream", Arg::I(k.stream_id)),
                ("device", Arg::I(k.device_id)),
            ];
            if let Some(c) = k.correlation_id {
                args.push(("correlation_id", Arg::I(c)));
            }
            if let Some(d) = &k.demangled_name {
                args.push(("demangled", Arg::S(d.clone())));
            }
            if let Some(r) = k.registers_per_thread {
                args.push(("registers_per_thread", Arg::I(r)));
            }
            if let (Some(s), Some(d)) = (k.static_shared_memory, k.dynamic_shared_memory) {
                args.push(("shared_memory_bytes", Arg::I(s.saturating_add(d))));
            }
            let item = Item {
                start: self.tm.out(k.start),
                end: Some(self.tm.out(k.end)),
                name: k.name.clone(),
                args,
                flow,
                terminates,
            };
            self.push_stream(parent, k.global_pid, k.device_id, k.stream_id, item);
        }
    }

    fn memcpys(&mut self) {
        for m in &self.report.memcpys {
            let Some(parent) = self.gpu_parent(m.global_pid, m.device_id) else {
                continue;
            };
            let (flow, terminates) = self.gpu_flow(m.correlation_id, m.start);
            let mut args = vec![
                ("bytes", Arg::I(m.bytes)),
                ("kind", Arg::S(m.kind.clone())),
                ("stream", Arg::I(m.stream_id)),
            ];
            if let (Some(s), Some(d)) = (&m.src_kind, &m.dst_kind) {
                args.push(("memory", Arg::S(format!("{s} → {d}"))));
            }
            let dur = m.end.saturating_sub(m.start);
            if dur > 0 {
                args.push((
                    "throughput_MBps",
                    Arg::S(format!("{:.1}", m.bytes as f64 * 1e3 / dur as f64)),
                ));
            }
            if let Some(c) = m.correlation_id {
                args.push(("correlation_id", Arg::I(c)));
            }
            let item = Item {
                start: self.tm.out(m.start),
                end: Some(self.tm.out(m.end)),
                name: format!("Memcpy {}", m.kind),
                args,
                flow,
                terminates,
            };
            self.push_stream(parent, m.global_pid, m.device_id, m.stream_id, item);
        }
    }

    fn memsets(&mut self) {
        for m in &self.report.memsets {
            let Some(parent) = self.gpu_parent(m.global_pid, m.device_id) else {
                continue;
            };
            let (flow, terminates) = self.gpu_flow(m.correlation_id, m.start);
            let mut args = vec![("bytes", Arg::I(m.bytes)), ("stream", Arg::I(m.stream_id))];
            if let Some(v) = m.value {
                args.push(("value", Arg::I(v)));
            }
            if let Some(k) = &m.mem_kind {
                args.push(("memory", Arg::S(k.clone())));
            }
            let item = Item {
                start: self.tm.out(m.start),
                end: Some(self.tm.out(m.end)),
                name: "Memset".into(),
                args,
                flow,
                terminates,
            };
            self.push_stream(parent, m.global_pid, m.device_id, m.stream_id, item);
        }
    }

    /// Stream syncs on their stream's track, device-wide ones on a "Synchronization" track.
    fn syncs(&mut self) {
        for s in &self.report.syncs {
            let Some(parent) = self.gpu_parent(s.global_pid, s.device_id) else {
                continue;
            };
            let (key, name) = match s.stream_id {
                Some(st) => (
                    self.stream_key(s.global_pid, s.device_id, st),
                    format!("Stream {st}"),
                ),
                None => (
                    format!(
                        "nsys{} gpu{} {} sync",
                        self.report_index,
                        s.global_pid.map_or(0, |g| g.0),
                        s.device_id
                    ),
                    "Synchronization".to_string(),
                ),
            };
            let mut args = Vec::new();
            if let Some(c) = s.correlation_id {
                args.push(("correlation_id", Arg::I(c)));
            }
            let item = Item {
                start: self.tm.out(s.start),
                end: Some(self.tm.out(s.end)),
                name: s.kind.clone(),
                args,
                flow: None,
                terminates: false,
            };
            self.push(key, parent, name, item);
        }
    }

    fn thread_label(&self, g: GlobalId) -> String {
        match self.report.thread_name(g) {
            Some(n) => format!("{n} tid {}", g.tid()),
            None => format!("tid {}", g.tid()),
        }
    }

    /// CUDA API calls per thread, each starting the flow to the GPU work it launched. Returns
    /// the number of flows.
    fn api_calls(&mut self) -> usize {
        let mut flows = 0;
        for c in &self.report.api_calls {
            let Some(parent) = self.parent_of(c.global_tid) else {
                continue;
            };
            let g = c.global_tid.unwrap_or(GlobalId(0));
            let flow = c
                .correlation_id
                .filter(|x| self.gpu_corr.contains_key(x))
                .map(|x| flow_id(self.report_index, x));
            flows += usize::from(flow.is_some());
            let mut args = vec![
                ("api", Arg::S(c.raw_name.clone())),
                ("class", Arg::S(c.class.label().into())),
            ];
            if let Some(r) = c.return_value {
                args.push(("return_value", Arg::I(r)));
            }
            if let Some(x) = c.correlation_id {
                args.push(("correlation_id", Arg::I(x)));
            }
            let item = Item {
                start: self.tm.out(c.start),
                end: Some(self.tm.out(c.end)),
                name: c.name.clone(),
                args,
                flow,
                terminates: false,
            };
            let name = format!("CUDA API {}", self.thread_label(g));
            self.push(
                format!("nsys{} api {}", self.report_index, g.0),
                parent,
                name,
                item,
            );
        }
        flows
    }

    fn nvtx(&mut self) {
        for e in &self.report.nvtx {
            let Some(parent) = self.parent_of(e.global_tid) else {
                continue;
            };
            let g = e.global_tid.unwrap_or(GlobalId(0));
            let name = format!("NVTX {}", self.thread_label(g));
            let item = nvtx_item(e, &self.tm);
            self.push(
                format!("nsys{} nvtx {}", self.report_index, g.0),
                parent,
                name,
                item,
            );
        }
    }

    /// Emits the collected logical tracks; returns the time map.
    fn finish(self, file: &str) -> TimeMap {
        for (key, mut l) in self.logical {
            l.description = Some(format!("Nsight Systems {file}"));
            emit_logical(self.sink, self.uuids, &key, l);
        }
        self.tm
    }
}

/// What was merged from one report, with the one-line description of its time mapping.
fn merged_summary(
    report: &NsysReport,
    tm: TimeMap,
    sigmatrace_host: Option<String>,
    (matched_pids, own_pids): (Vec<u32>, Vec<u32>),
    flows: usize,
    file: &str,
) -> NsysMerged {
    let correction = tm
        .correction
        .map(|_| tm.correction_at(tm.mapping.to_realtime(0)) as f64);
    let mut description = format!("{file}: {}", tm.mapping.describe());
    match (&sigmatrace_host, correction) {
        (Some(h), Some(c)) => {
            description.push_str(&format!("; SigmaTrace host {h}, host correction {c:.0} ns"))
        }
        _ => {
            description.push_str("; no SigmaTrace host of that name: REALTIME as recorded by nsys")
        }
    }
    if let Anchor::UtcEpoch = tm.mapping.anchor {
        if report.time_base.system_clock_ns.is_some() && sigmatrace_host.is_some() {
            description.push_str(" (systemClockNs matched no host clock within 10 ms)");
        }
    }
    NsysMerged {
        file: report.path.display().to_string(),
        hostname: report.host.hostname.clone(),
        mapping: tm.mapping,
        sigmatrace_host,
        host_correction_ns: correction,
        matched_pids,
        own_pids,
        kernels: report.kernels.len(),
        memcpys: report.memcpys.len(),
        memsets: report.memsets.len(),
        syncs: report.syncs.len(),
        api_calls: report.api_calls.len(),
        nvtx: report.nvtx.len(),
        flows,
        description,
    }
}

/// Emits every report, each on its own sequence, plus a top-level metadata track whose
/// description lists the applied mappings. `make_sink(seq)` creates a sink for a sequence id.
/// Returns the encoded bytes (in order) and what was merged.
pub fn emit_all(
    reports: &[NsysReport],
    offset: Option<i64>,
    ctx: Option<SigmaContext<'_>>,
    uuids: &AtomicU64,
    mut make_sink: impl FnMut(u32) -> Box<dyn TraceSink>,
) -> Result<(Vec<u8>, Vec<NsysMerged>), ConvertError> {
    let mut bytes = Vec::new();
    let mut merged = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let mut sink = make_sink(sequence_id(i));
        let m = emit_report(sink.as_mut(), uuids, i, r, offset, ctx)?;
        let mut meta = TrackDef::slices(
            uuids.fetch_add(1, Ordering::Relaxed),
            None,
            format!("Nsight Systems import: {}", file_name(&r.path)),
        );
        meta.description = Some(m.description.clone());
        sink.track(&meta);
        bytes.extend_from_slice(&sink.take());
        merged.push(m);
    }
    Ok((bytes, merged))
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_match_on_short_names() {
        assert!(same_host("node7", "node7"));
        assert!(same_host("node7.cluster.local", "NODE7"));
        assert!(!same_host("node7", "node8"));
        assert!(!same_host("", "x"));
    }

    #[test]
    fn flow_ids_are_distinct_per_report_and_correlation() {
        assert_ne!(flow_id(0, 133), flow_id(1, 133));
        assert_ne!(flow_id(0, 133), flow_id(0, 134));
        assert_eq!(flow_id(0, 133) >> 48, 0x4E53);
    }
}

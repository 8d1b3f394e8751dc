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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sigmatrace_nsys::{
    Anchor, ClockMapping, GlobalId, HostClockSnapshot, NsysReport, NvtxEvent, NvtxKind, NvtxPayload,
};

use crate::align::topology::Topology;
use crate::align::Alignment;
use crate::error::ConvertError;
use crate::read::input::LogInput;
use sigmatrace_timeline::{ArgKey, ArgValue, Extra, TraceSink, TrackDef, TrackKind};

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

/// Maps export times of one report to output times.
struct TimeMap {
    mapping: ClockMapping,
    /// (offset ns, rate, t0) of the matched SigmaTrace host.
    correction: Option<(f64, f64, i64)>,
}

impl TimeMap {
    /// Integer ns throughout: epoch-ns values do not fit an f64 mantissa; only the (small)
    /// correction is computed in floating point.
    fn out(&self, t: i64) -> u64 {
        let u = self.mapping.to_realtime(t);
        let v = u.saturating_add(self.correction_at(u));
        v.max(0) as u64
    }

    /// The host correction at realtime `u` (ns), 0 without a matched host.
    fn correction_at(&self, u: i64) -> i64 {
        match self.correction {
            Some((o, r, t0)) => (o + r * u.saturating_sub(t0) as f64).round() as i64,
            None => 0,
        }
    }
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

/// One slice or instant to place on a logical track.
struct Item {
    start: u64,
    /// None: an instant.
    end: Option<u64>,
    name: String,
    args: Vec<(&'static str, Arg)>,
    flow: Option<u64>,
    /// Whether the flow ends here (last GPU activity of a correlation).
    terminates: bool,
}

/// Owned argument values.
enum Arg {
    U(u64),
    I(i64),
    S(String),
}

/// A logical track: name, merge key, items; placed under `parent`.
struct Logical {
    parent: u64,
    name: String,
    description: Option<String>,
    items: Vec<Item>,
}

/// Emits one logical track: lanes (stack discipline: a lane takes an item that is disjoint
/// from or nested in its open slices), events in timestamp order per lane.
fn emit_logical(sink: &mut dyn TraceSink, uuids: &AtomicU64, key: &str, mut t: Logical) -> usize {
    t.items.sort_by(|a, b| {
        (a.start, std::cmp::Reverse(a.end.unwrap_or(a.start)))
            .cmp(&(b.start, std::cmp::Reverse(b.end.unwrap_or(b.start))))
    });
    let mut lanes: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut keys: HashMap<&'static str, ArgKey> = HashMap::new();
    let mut slices = 0;
    let new_lane = |sink: &mut dyn TraceSink, lanes: &mut Vec<(u64, Vec<u64>)>| {
        let uuid = uuids.fetch_add(1, Ordering::Relaxed);
        let mut def = TrackDef::slices(uuid, Some(t.parent), t.name.clone());
        def.description = t.description.clone();
        def.kind = TrackKind::Slices {
            merge_key: Some(key.to_string()),
        };
        sink.track(&def);
        lanes.push((uuid, Vec::new()));
        lanes.len() - 1
    };
    for item in &t.items {
        for (uuid, stack) in lanes.iter_mut() {
            while stack.last().is_some_and(|&e| e <= item.start) {
                let e = stack.pop().unwrap_or(item.start);
                sink.end(e, *uuid, &Extra::NONE);
            }
        }
        let end = item.end.unwrap_or(item.start);
        let lane = match lanes
            .iter()
            .position(|(_, s)| s.last().is_none_or(|&open_end| open_end >= end))
        {
            Some(l) => l,
            None => new_lane(sink, &mut lanes),
        };
        let uuid = lanes[lane].0;
        let name = sink.name(&item.name);
        let arg_pairs: Vec<(ArgKey, ArgValue<'_>)> = item
            .args
            .iter()
            .map(|(k, v)| {
                let key = *keys.entry(k).or_insert_with(|| sink.arg_key(k));
                let val = match v {
                    Arg::U(x) => ArgValue::U64(*x),
                    Arg::I(x) => ArgValue::I64(*x),
                    Arg::S(s) => ArgValue::Str(s),
                };
                (key, val)
            })
            .collect();
        let flow = item.flow.map(|f| [f]);
        let flows: &[u64] = match (&flow, item.terminates) {
            (Some(f), false) => f,
            _ => &[],
        };
        let terminating: &[u64] = match (&flow, item.terminates) {
            (Some(f), true) => f,
            _ => &[],
        };
        let extra = Extra {
            args: &arg_pairs,
            flows,
            terminating,
        };
        match item.end {
            Some(_) => {
                sink.begin(item.start, uuid, name, &extra);
                lanes[lane].1.push(end);
                slices += 1;
            }
            None => sink.instant(item.start, uuid, name, &extra),
        }
    }
    for (uuid, stack) in lanes.iter_mut() {
        while let Some(e) = stack.pop() {
            sink.end(e, *uuid, &Extra::NONE);
        }
    }
    slices
}

fn dims(d: [i64; 3]) -> String {
    format!("{}×{}×{}", d[0], d[1], d[2])
}

fn nvtx_item(e: &NvtxEvent, tm: &TimeMap) -> Item {
    let mut args: Vec<(&'static str, Arg)> = Vec::new();
    if let Some(c) = &e.category_name {
        args.push(("category", Arg::S(c.clone())));
    } else if let Some(c) = e.category {
        args.push(("category", Arg::I(c)));
    }
    if let Some(c) = e.color {
        args.push(("color", Arg::S(format!("ARGB {c:#010x}"))));
    }
    if let Some(d) = &e.domain {
        args.push(("domain", Arg::S(d.clone())));
    }
    if let Some(r) = e.range_id {
        args.push(("range_id", Arg::I(r)));
    }
    match &e.payload {
        Some(NvtxPayload::U64(v)) => args.push(("payload", Arg::U(*v))),
        Some(NvtxPayload::I64(v)) => args.push(("payload", Arg::I(*v))),
        Some(NvtxPayload::U32(v)) => args.push(("payload", Arg::U(u64::from(*v)))),
        Some(NvtxPayload::I32(v)) => args.push(("payload", Arg::I(i64::from(*v)))),
        Some(NvtxPayload::F64(v)) | Some(NvtxPayload::F32(v)) => {
            args.push(("payload", Arg::S(v.to_string())))
        }
        Some(NvtxPayload::Json(s)) => args.push(("payload", Arg::S(s.clone()))),
        Some(NvtxPayload::Binary(n)) => args.push(("payload_bytes", Arg::U(*n as u64))),
        None => {}
    }
    let ranged = e.kind != NvtxKind::Mark;
    if ranged && e.end.is_none() {
        args.push(("unterminated", Arg::S("range never ended".into())));
    }
    Item {
        start: tm.out(e.start),
        end: e.end.filter(|_| ranged).map(|x| tm.out(x)),
        name: e.text.clone().unwrap_or_else(|| "(unnamed NVTX)".into()),
        args,
        flow: None,
        terminates: false,
    }
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
    let file = report.path.file_name().map_or_else(
        || report.path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let hostname = report.host.hostname.clone();
    let host_label = hostname.clone().unwrap_or_else(|| "unknown host".into());

    // Correlations: API call → GPU activities, for flows.
    let mut gpu_corr: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    // Only events that get a track (a process) take part.
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
    // A GPU item's flow: (id, terminates) — the last activity of a correlation ends the flow.
    let gpu_flow = |corr: Option<i64>, start: i64| -> (Option<u64>, bool) {
        match corr.and_then(|c| gpu_corr.get(&c).map(|v| (c, v))) {
            Some((c, v)) => (
                Some(flow_id(report_index, c)),
                v.last() == Some(&tm.out(start)),
            ),
            None => (None, false),
        }
    };

    // Process tracks.
    let mut process_track: BTreeMap<GlobalId, u64> = BTreeMap::new();
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
                let uuid = uuids.fetch_add(1, Ordering::Relaxed);
                let exe = p.name.as_deref().unwrap_or("process");
                let base = exe.rsplit('/').next().unwrap_or(exe);
                sink.track(&TrackDef {
                    uuid,
                    parent: None,
                    name: format!("{base} pid {} (Nsight Systems)", p.pid),
                    description: Some(format!("from {}", report.path.display())),
                    order: None,
                    explicit_child_order: false,
                    kind: TrackKind::Process {
                        // Synthetic pid: real pids of different hosts collide.
                        pid: 200_000 + (report_index as i32) * 1000 + own_pids.len() as i32,
                        labels: vec![format!("host {host_label}"), format!("nsys {file}")],
                    },
                });
                uuid
            }
        };
        process_track.insert(*gpid, uuid);
    }
    let parent_of =
        |g: Option<GlobalId>| g.and_then(|g| process_track.get(&g.global_pid()).copied());

    let mut logical: BTreeMap<String, Logical> = BTreeMap::new();
    let group = |sink: &mut dyn TraceSink, parent: u64, name: String| -> u64 {
        let uuid = uuids.fetch_add(1, Ordering::Relaxed);
        sink.track(&TrackDef::slices(uuid, Some(parent), name));
        uuid
    };
    // GPU groups per (process, device).
    let mut gpu_groups: BTreeMap<(GlobalId, i64), u64> = BTreeMap::new();
    let mut gpu_parent = |sink: &mut dyn TraceSink, g: Option<GlobalId>, dev: i64| -> Option<u64> {
        let g = g?.global_pid();
        let proc_track = *process_track.get(&g)?;
        Some(*gpu_groups.entry((g, dev)).or_insert_with(|| {
            let name = report
                .devices
                .iter()
                .find(|d| d.id == dev)
                .and_then(|d| d.name.clone());
            let label = match name {
                Some(n) => format!("CUDA HW GPU {dev}: {n}"),
                None => format!("CUDA HW GPU {dev}"),
            };
            group(sink, proc_track, label)
        }))
    };
    let mut push = |key: String, parent: u64, name: String, item: Item| {
        logical
            .entry(key)
            .or_insert_with(|| Logical {
                parent,
                name,
                description: None,
                items: Vec::new(),
            })
            .items
            .push(item);
    };

    let mut flows = 0;
    for k in &report.kernels {
        let Some(parent) = gpu_parent(sink, k.global_pid, k.device_id) else {
            continue;
        };
        let (flow, terminates) = gpu_flow(k.correlation_id, k.start);
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
        let key = format!(
            "nsys{report_index} gpu{} {} stream {}",
            k.global_pid.map_or(0, |g| g.0),
            k.device_id,
            k.stream_id
        );
        push(
            key,
            parent,
            format!("Stream {}", k.stream_id),
            Item {
                start: tm.out(k.start),
                end: Some(tm.out(k.end)),
                name: k.name.clone(),
                args,
                flow,
                terminates,
            },
        );
    }
    for m in &report.memcpys {
        let Some(parent) = gpu_parent(sink, m.global_pid, m.device_id) else {
            continue;
        };
        let (flow, terminates) = gpu_flow(m.correlation_id, m.start);
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
        let key = format!(
            "nsys{report_index} gpu{} {} stream {}",
            m.global_pid.map_or(0, |g| g.0),
            m.device_id,
            m.stream_id
        );
        push(
            key,
            parent,
            format!("Stream {}", m.stream_id),
            Item {
                start: tm.out(m.start),
                end: Some(tm.out(m.end)),
                name: format!("Memcpy {}", m.kind),
                args,
                flow,
                terminates,
            },
        );
    }
    for m in &report.memsets {
        let Some(parent) = gpu_parent(sink, m.global_pid, m.device_id) else {
            continue;
        };
        let (flow, terminates) = gpu_flow(m.correlation_id, m.start);
        let mut args = vec![("bytes", Arg::I(m.bytes)), ("stream", Arg::I(m.stream_id))];
        if let Some(v) = m.value {
            args.push(("value", Arg::I(v)));
        }
        if let Some(k) = &m.mem_kind {
            args.push(("memory", Arg::S(k.clone())));
        }
        let key = format!(
            "nsys{report_index} gpu{} {} stream {}",
            m.global_pid.map_or(0, |g| g.0),
            m.device_id,
            m.stream_id
        );
        push(
            key,
            parent,
            format!("Stream {}", m.stream_id),
            Item {
                start: tm.out(m.start),
                end: Some(tm.out(m.end)),
                name: "Memset".into(),
                args,
                flow,
                terminates,
            },
        );
    }
    for s in &report.syncs {
        let Some(parent) = gpu_parent(sink, s.global_pid, s.device_id) else {
            continue;
        };
        let (key, name) = match s.stream_id {
            Some(st) => (
                format!(
                    "nsys{report_index} gpu{} {} stream {st}",
                    s.global_pid.map_or(0, |g| g.0),
                    s.device_id
                ),
                format!("Stream {st}"),
            ),
            None => (
                format!(
                    "nsys{report_index} gpu{} {} sync",
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
        push(
            key,
            parent,
            name,
            Item {
                start: tm.out(s.start),
                end: Some(tm.out(s.end)),
                name: s.kind.clone(),
                args,
                flow: None,
                terminates: false,
            },
        );
    }
    let thread_label = |g: GlobalId| match report.thread_name(g) {
        Some(n) => format!("{n} tid {}", g.tid()),
        None => format!("tid {}", g.tid()),
    };
    for c in &report.api_calls {
        let Some(parent) = parent_of(c.global_tid) else {
            continue;
        };
        let g = c.global_tid.unwrap_or(GlobalId(0));
        let flow = c
            .correlation_id
            .filter(|x| gpu_corr.contains_key(x))
            .map(|x| flow_id(report_index, x));
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
        push(
            format!("nsys{report_index} api {}", g.0),
            parent,
            format!("CUDA API {}", thread_label(g)),
            Item {
                start: tm.out(c.start),
                end: Some(tm.out(c.end)),
                name: c.name.clone(),
                args,
                flow,
                terminates: false,
            },
        );
    }
    for e in &report.nvtx {
        let Some(parent) = parent_of(e.global_tid) else {
            continue;
        };
        let g = e.global_tid.unwrap_or(GlobalId(0));
        push(
            format!("nsys{report_index} nvtx {}", g.0),
            parent,
            format!("NVTX {}", thread_label(g)),
            nvtx_item(e, &tm),
        );
    }
    for (key, mut l) in logical {
        l.description = Some(format!("Nsight Systems {file}"));
        emit_logical(sink, uuids, &key, l);
    }

    let correction = tm
        .correction
        .map(|_| tm.correction_at(tm.mapping.to_realtime(0)) as f64);
    let sigmatrace_host = match (ctx, host) {
        (Some(c), Some(h)) => Some(c.topo.hosts[h].name.clone()),
        _ => None,
    };
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
    Ok(NsysMerged {
        file: report.path.display().to_string(),
        hostname,
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
    })
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

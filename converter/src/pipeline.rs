//! The pipeline: tokenize (open, scan) → align → model → emit, and the output writer.
//!
//! Output is streamed: every process is modelled by a rayon worker into its own packet
//! sequence(s), which hands ~1 MiB blocks (zlib-compressed into `compressed_packets` unless
//! disabled) through a bounded channel to one writer thread and a `BufWriter`. Blocks of
//! different sequences may interleave freely; each sequence's blocks stay in order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use crate::align::topology::Topology;
use crate::align::{self, Alignment};
use crate::error::ConvertError;
use crate::model::emit::{self, Detail, Format};
use crate::model::order::{Block, BlockOrder};
use crate::model::{ModelOptions, ProcessModel, ProcessTotals};
use crate::progress::Progress;
use crate::read::input::LogInput;
use crate::read::scan;
use crate::report::{default_sections, ReportCtx, Section, SectionSet};
use sigmatrace_timeline::chrome;
use sigmatrace_timeline::perfetto::{self, PerfettoSeq};
use sigmatrace_timeline::NullSink;
use sigmatrace_timeline::TraceSink;

/// Options of [`convert`] and [`stats`].
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub format: Format,
    /// Worker threads (0 = all cores).
    pub jobs: usize,
    pub detail: Detail,
    /// Only events in [from, to) seconds after the trace start.
    pub window_s: Option<(f64, f64)>,
    /// Only these ranks (processes without a rank are kept only when this is `None`).
    pub ranks: Option<Vec<u32>>,
    /// Only processes on these hosts (host names).
    pub hosts: Option<Vec<String>>,
    /// zlib level for `compressed_packets` (0 = write plain packets).
    pub compress_level: u32,
    /// Refine host clocks with message causality (else REALTIME as recorded).
    pub causality_alignment: bool,
    /// Show a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
    /// Skip logs that cannot be read at all (with a warning) instead of failing.
    pub skip_unreadable: bool,
    /// Nsight Systems exports to merge (`--nsys`, `--nsys-offset`).
    pub nsys: crate::import::nsys::NsysOptions,
    /// Re-check every matched message pair on the final clocks (one more pass).
    pub verify_alignment: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            format: Format::Perfetto,
            jobs: 0,
            detail: Detail::Normal,
            window_s: None,
            ranks: None,
            hosts: None,
            compress_level: 1,
            causality_alignment: true,
            progress: false,
            skip_unreadable: false,
            nsys: Default::default(),
            verify_alignment: false,
        }
    }
}

/// What a conversion did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub inputs: usize,
    pub processes: usize,
    pub hosts: usize,
    pub input_bytes: u64,
    pub records: u64,
    pub wr_events: u64,
    pub output_bytes: u64,
    pub totals: ProcessTotals,
    pub alignment: Alignment,
    /// Non-fatal problems (damaged or truncated logs, unmatched QPs, ...).
    pub warnings: Vec<String>,
    /// Merged Nsight Systems exports.
    pub nsys: Vec<crate::import::nsys::NsysMerged>,
    pub elapsed_s: f64,
    /// Wall time of each pipeline phase (seconds).
    pub phases: Vec<(String, f64)>,
}

/// The stats report: sections plus the context they report in.
pub struct Report {
    pub summary: Summary,
    pub topology: Topology,
    pub sections: Vec<Box<dyn Section>>,
}

impl Report {
    /// Text tables.
    pub fn text(&self) -> String {
        let ctx = ReportCtx {
            topo: &self.topology,
            alignment: &self.summary.alignment,
            totals: &self.summary.totals,
        };
        let s = &self.summary;
        let mut out = format!(
            "{} processes on {} hosts, {} records ({} WR events), {} completed WRs ({} failed), {} receives, {} flows\n\n",
            s.processes, s.hosts, s.records, s.wr_events, s.totals.wr_completed, s.totals.wr_failed, s.totals.recv_completed, s.totals.flows_out
        );
        for sec in &self.sections {
            sec.text(&ctx, &mut out);
        }
        for w in &s.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }

    /// JSON document.
    pub fn json(&self) -> serde_json::Value {
        let ctx = ReportCtx {
            topo: &self.topology,
            alignment: &self.summary.alignment,
            totals: &self.summary.totals,
        };
        let mut m = serde_json::Map::new();
        m.insert(
            "summary".into(),
            serde_json::to_value(&self.summary).unwrap_or_default(),
        );
        for sec in &self.sections {
            m.insert(sec.key().into(), sec.json(&ctx));
        }
        serde_json::Value::Object(m)
    }

    /// A section by type (e.g. `report.section::<Traffic>()`).
    pub fn section<T: 'static>(&self) -> Option<&T> {
        self.sections
            .iter()
            .find_map(|s| s.as_any().downcast_ref::<T>())
    }
}

/// The logs, opened, scanned and aligned: what the model pass starts from.
pub(crate) struct Loaded {
    pub(crate) phases: Vec<(String, f64)>,
    pub(crate) inputs: Vec<LogInput>,
    pub(crate) topo: Topology,
    pub(crate) ud: crate::model::ud::UdStreams,
    pub(crate) alignment: Alignment,
    pub(crate) warnings: Vec<String>,
    pub(crate) input_bytes: u64,
    pub(crate) records: u64,
    pub(crate) wr_events: u64,
}

/// Opens the logs (in parallel), keeps those the rank and host filters select and warns about
/// salvaged damage and newer minor versions.
fn open_inputs(
    paths: &[PathBuf],
    opts: &ConvertOptions,
    warnings: &mut Vec<String>,
) -> Result<Vec<LogInput>, ConvertError> {
    let opened = crate::read::open::open_logs(paths, opts.skip_unreadable, |h| {
        let rank_ok = opts
            .ranks
            .as_ref()
            .is_none_or(|rs| h.rank.rank.is_some_and(|r| rs.contains(&r)));
        let host_ok = opts
            .hosts
            .as_ref()
            .is_none_or(|hs| hs.contains(&h.hostname));
        rank_ok && host_ok
    })?;
    warnings.extend(opened.warnings);
    if opened.inputs.is_empty() {
        return Err(ConvertError::NothingSelected(format!(
            "{} logs found",
            opened.files
        )));
    }
    let inputs = opened.inputs;
    Ok(inputs)
}

/// Warnings of the scan: damaged records, overwritten queue entries, dropped events.
fn scan_warnings(inputs: &[LogInput], scans: &[scan::Scan], warnings: &mut Vec<String>) {
    for (i, s) in inputs.iter().zip(scans) {
        for issue in &s.issues {
            warnings.push(format!(
                "{}: offset {}: {} (rest of the chunk skipped)",
                i.path.display(),
                issue.offset,
                issue.what
            ));
        }
        if s.overrun > 0 {
            warnings.push(format!(
                "{}: {} queue entries were overwritten before the observer saw them",
                i.path.display(),
                s.overrun
            ));
        }
        if let Some(lost) = s.loss_summary() {
            warnings.push(format!("{}: the tracer dropped {lost}", i.path.display()));
        }
    }
}

fn load(paths: &[PathBuf], opts: &ConvertOptions) -> Result<Loaded, ConvertError> {
    let clock = Instant::now();
    let mut warnings = Vec::new();
    let inputs = open_inputs(paths, opts, &mut warnings)?;
    let mut phases = vec![("open".to_string(), clock.elapsed().as_secs_f64())];
    let clock = Instant::now();
    let scans = scan::scan_all(&inputs);
    phases.push(("scan".to_string(), clock.elapsed().as_secs_f64()));
    load_scanned(inputs, scans, &[], warnings, phases, opts)
}

/// The rest of [`load`] once the logs are opened and scanned: topology, UD streams, alignment.
/// `recounted` as in [`Topology::build_with`] (the sharded conversion's hook).
pub(crate) fn load_scanned(
    inputs: Vec<LogInput>,
    scans: Vec<scan::Scan>,
    recounted: &[Option<Vec<crate::read::scan::QpCounts>>],
    mut warnings: Vec<String>,
    mut phases: Vec<(String, f64)>,
    opts: &ConvertOptions,
) -> Result<Loaded, ConvertError> {
    let mut clock = Instant::now();
    let mut lap = |name: &str, phases: &mut Vec<(String, f64)>| {
        phases.push((name.to_string(), clock.elapsed().as_secs_f64()));
        clock = Instant::now();
    };
    scan_warnings(&inputs, &scans, &mut warnings);
    let mut topo = Topology::build_with(&inputs, &scans, recounted);
    let first_conn = topo
        .procs
        .iter()
        .flat_map(|p| p.qps.iter().map(|q| q.conn))
        .max()
        .unwrap_or(0)
        + 1;
    let ud = crate::model::ud::build(&inputs, &topo, first_conn);
    topo.ud = ud.join_keys();
    warnings.extend(ud.warnings.iter().cloned());
    for &(p, q) in &topo.ambiguous_qps {
        warnings.push(format!(
            "{} QP {q:#x}: connection ambiguous (several QPs match); not paired",
            topo.procs[p].label()
        ));
    }
    lap("topology", &mut phases);
    let mut alignment = align::align(&inputs, &mut topo, opts.causality_alignment);
    lap("align", &mut phases);
    if opts.verify_alignment {
        alignment.verified = Some(align::verify(&inputs, &topo));
        lap("verify", &mut phases);
    }
    if alignment.inverted_after > 0 {
        warnings.push(format!(
            "clock alignment: {} of {} message pairs still have their receive before their send",
            alignment.inverted_after, alignment.pairs
        ));
    }
    if let Some(note) = &alignment.note {
        warnings.push(format!("clock alignment: {note}"));
    }
    Ok(Loaded {
        phases,
        input_bytes: inputs.iter().map(|i| i.bytes).sum(),
        records: scans.iter().map(|s| s.records).sum(),
        wr_events: scans.iter().map(|s| s.wr_events).sum(),
        inputs,
        topo,
        ud,
        alignment,
        warnings,
    })
}

/// The worker pool: `jobs` threads (0: all cores), never more than the cores (the command
/// line says so when it caps a request).
pub(crate) fn pool(jobs: usize) -> Result<rayon::ThreadPool, ConvertError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = if jobs == 0 { cores } else { jobs.min(cores) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| ConvertError::Options(format!("cannot start {jobs} worker threads: {e}")))
}

/// Converts logs (files or directories) into one trace at `output`.
pub fn convert(
    paths: &[PathBuf],
    output: &Path,
    opts: &ConvertOptions,
) -> Result<Summary, ConvertError> {
    pool(opts.jobs)?
        .install(|| run(paths, Some(output), opts))
        .map(|r| r.summary)
}

/// Computes the report without writing a trace.
pub fn stats(paths: &[PathBuf], opts: &ConvertOptions) -> Result<Report, ConvertError> {
    pool(opts.jobs)?.install(|| run(paths, None, opts))
}

/// Converts and also returns the report (one model pass for both).
pub fn convert_with_report(
    paths: &[PathBuf],
    output: &Path,
    opts: &ConvertOptions,
) -> Result<Report, ConvertError> {
    pool(opts.jobs)?.install(|| run(paths, Some(output), opts))
}

fn run(
    paths: &[PathBuf],
    output: Option<&Path>,
    opts: &ConvertOptions,
) -> Result<Report, ConvertError> {
    let started = Instant::now();
    let nsys_reports = crate::import::nsys::load(&opts.nsys)?;
    let Loaded {
        mut phases,
        inputs,
        topo,
        ud,
        alignment,
        mut warnings,
        input_bytes,
        records,
        wr_events,
    } = load(paths, opts)?;
    let model_started = Instant::now();
    let frame = Frame::new(opts, &inputs, &topo, &alignment);
    let progress = Progress::start(opts.progress && output.is_some(), records);
    let (tx, rx) = sync_channel::<Block>(2 * rayon::current_num_threads() + 2);
    let writer = output.map(|path| {
        spawn_writer(
            path.to_owned(),
            frame.header.clone(),
            rx,
            frame.json_tracks.is_some(),
            topo.procs.len(),
        )
    });
    let pass = frame.pass(&topo, &ud, &inputs, &progress, output.is_some(), opts);
    let template = default_sections();
    let results: Vec<ProcResult> = crate::model::order::map_in_order(&topo.procs, |p| {
        pass.process(p.index, &template, tx.clone())
    });
    let nsys = match output {
        Some(_) if !nsys_reports.is_empty() => {
            let ctx = crate::import::nsys::SigmaContext {
                topo: &topo,
                inputs: &inputs,
                alignment: &alignment,
            };
            pass.emit_nsys(&nsys_reports, opts.nsys.offset_ns, ctx, &tx)
        }
        _ => Ok(Vec::new()),
    };
    drop(tx);
    progress.finish();
    let output_bytes = match writer {
        Some(h) => h
            .join()
            .map_err(|_| ConvertError::Options("writer thread panicked".into()))??,
        None => 0,
    };
    phases.push(("model+emit".into(), model_started.elapsed().as_secs_f64()));
    let (totals, sections) = merge_results(results, template, &topo, &mut warnings);
    let summary = Summary {
        inputs: inputs.len(),
        processes: topo.procs.len(),
        hosts: topo.hosts.len(),
        input_bytes,
        records,
        wr_events,
        output_bytes,
        totals,
        alignment,
        warnings,
        nsys: nsys?,
        elapsed_s: started.elapsed().as_secs_f64(),
        phases,
    };
    Ok(Report {
        summary,
        topology: topo,
        sections,
    })
}

/// What the model pass and the writer share: the trace start, the model's options, the
/// Chrome JSON track table and the trace header (the same on every shard of a sharded
/// conversion, which writes the header once and the processes' blocks after it).
pub(crate) struct Frame {
    t_start: i64,
    mopts: ModelOptions,
    json_tracks: Option<chrome::JsonTracks>,
    /// The bytes before the first process's blocks.
    pub(crate) header: Vec<u8>,
    /// The bytes after the last block (Chrome JSON's closing).
    pub(crate) footer: &'static [u8],
}

impl Frame {
    pub(crate) fn new(
        opts: &ConvertOptions,
        inputs: &[LogInput],
        topo: &Topology,
        alignment: &Alignment,
    ) -> Frame {
        let (t_start, mopts) = model_options(opts, inputs, topo);
        let mut statics = emit::static_tracks(topo);
        label_alignment(&mut statics, topo, alignment);
        let other = serde_json::json!({"sigmatrace_alignment": alignment});
        match (opts.format == Format::ChromeJson).then(|| chrome::header(&statics, &other)) {
            Some((tracks, header)) => Frame {
                t_start,
                mopts,
                json_tracks: Some(tracks),
                header,
                footer: chrome::FOOTER,
            },
            None => Frame {
                t_start,
                header: perfetto_header(&statics, topo, alignment, t_start),
                mopts,
                json_tracks: None,
                footer: b"",
            },
        }
    }

    fn pass<'a>(
        &'a self,
        topo: &'a Topology,
        ud: &'a crate::model::ud::UdStreams,
        inputs: &'a [LogInput],
        progress: &'a Progress,
        output: bool,
        opts: &ConvertOptions,
    ) -> ModelPass<'a> {
        ModelPass {
            topo,
            ud,
            inputs,
            mopts: &self.mopts,
            progress,
            json_tracks: self.json_tracks.as_ref(),
            output,
            blocks: Blocks::of(opts),
            t_start: self.t_start as u64,
        }
    }
}

/// Models only the processes `subset` of `l` (a shard of a sharded conversion), sending their
/// blocks to `tx` exactly as [`convert`] would; returns their results in `subset`'s order.
pub(crate) fn model_subset(
    l: &Loaded,
    frame: &Frame,
    opts: &ConvertOptions,
    subset: &[usize],
    tx: std::sync::mpsc::SyncSender<Block>,
) -> Vec<ProcResult> {
    let progress = Progress::start(false, 0);
    let pass = frame.pass(&l.topo, &l.ud, &l.inputs, &progress, true, opts);
    let template = default_sections();
    crate::model::order::map_in_order(subset, |&i| pass.process(i, &template, tx.clone()))
}

/// The trace start (earliest event, output ns) and the model's options: the `--from/--to`
/// window in output ns and, with a window, the message ranges whose both ends fall inside it
/// (one extra join pass), so that flows are drawn only when both ends are.
fn model_options(
    opts: &ConvertOptions,
    inputs: &[LogInput],
    topo: &Topology,
) -> (i64, ModelOptions) {
    let t_start = topo
        .procs
        .iter()
        .map(|p| p.time(p.min_ts))
        .min()
        .unwrap_or(0)
        .max(0);
    let window = opts.window_s.map(|(a, b)| {
        (
            t_start.saturating_add((a * 1e9) as i64),
            t_start.saturating_add((b * 1e9) as i64),
        )
    });
    let flow_ranges = window.map(|(a, b)| {
        let mut m = std::collections::HashMap::new();
        align::join(inputs, topo, |pr| {
            if pr.x >= a && pr.x < b && pr.y >= a && pr.y < b {
                let e = m.entry(pr.sender).or_insert((pr.k, pr.k + 1));
                e.0 = e.0.min(pr.k);
                e.1 = e.1.max(pr.k + 1);
            }
        });
        m
    });
    let mopts = ModelOptions {
        detail: opts.detail,
        window,
        flow_ranges,
        block_bytes: 1 << 20,
    };
    (t_start, mopts)
}

/// The start of a Perfetto trace: the clock snapshot, then the metadata sequence with the
/// alignment track, the static tracks and the alignment instant.
fn perfetto_header(
    statics: &[sigmatrace_timeline::TrackDef],
    topo: &Topology,
    alignment: &Alignment,
    t_start: i64,
) -> Vec<u8> {
    let mut header = Vec::new();
    perfetto::frame_packet(
        &mut header,
        &perfetto::clock_snapshot_packet(t_start as u64),
    );
    let mut meta = PerfettoSeq::new(u32::MAX - 1, false, 0);
    let at = alignment_track(topo, alignment);
    meta.track(&at);
    for d in statics {
        meta.track(d);
    }
    alignment_instant(&mut meta, at.uuid, t_start as u64, alignment);
    header.extend_from_slice(&meta.take());
    header
}

/// The writer thread: `header`, every block from `rx` in process order
/// ([`crate::model::order`]: the same bytes whatever the number of workers), the Chrome JSON
/// footer. Returns the bytes written.
fn spawn_writer(
    path: PathBuf,
    header: Vec<u8>,
    rx: std::sync::mpsc::Receiver<Block>,
    json: bool,
    processes: usize,
) -> std::thread::JoinHandle<Result<u64, ConvertError>> {
    std::thread::spawn(move || -> Result<u64, ConvertError> {
        let werr = |source| ConvertError::Output {
            path: path.clone(),
            source,
        };
        // Regular files are written under a temporary name and renamed when complete, so a
        // failed conversion never leaves a truncated trace behind; devices and pipes are
        // written directly.
        let special = std::fs::metadata(&path).is_ok_and(|m| !m.is_file());
        let tmp = if special {
            path.clone()
        } else {
            let mut t = path.clone().into_os_string();
            t.push(".partial");
            PathBuf::from(t)
        };
        let write = || -> Result<u64, ConvertError> {
            let f = std::fs::File::create(&tmp).map_err(werr)?;
            // Blocks (~0.3 MiB) are larger than the buffer and go straight to the file.
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            let mut n = header.len() as u64;
            w.write_all(&header).map_err(werr)?;
            let mut spill = tmp.clone().into_os_string();
            spill.push(".spill");
            let mut order = BlockOrder::new(processes, Path::new(&spill));
            for msg in rx {
                n += order.push(msg, &mut w).map_err(werr)?;
            }
            if json {
                w.write_all(chrome::FOOTER).map_err(werr)?;
                n += chrome::FOOTER.len() as u64;
            }
            w.flush().map_err(werr)?;
            Ok(n)
        };
        let r = write();
        if !special {
            match &r {
                Ok(_) => std::fs::rename(&tmp, &path).map_err(werr)?,
                Err(_) => {
                    let _ = std::fs::remove_file(&tmp);
                }
            }
        }
        r
    })
}

/// How output blocks are compressed.
#[derive(Clone, Copy)]
struct Blocks {
    compress: bool,
    level: u32,
    /// The sinks compress while encoding (structured deflate).
    fast: bool,
}

impl Blocks {
    fn of(opts: &ConvertOptions) -> Blocks {
        let compress = opts.compress_level > 0 && opts.format == Format::Perfetto;
        let level = opts.compress_level.min(9);
        // Level 1: the sinks compress while encoding (structured deflate, `perfetto::fastz`),
        // except at full detail, whose per-WR args (ids, addresses) repeat at distances the
        // one-candidate matcher does not see: zlib compresses those smaller. Higher levels: zlib
        // over each finished block.
        let fast = compress && level == 1 && opts.detail != Detail::Full;
        Blocks {
            compress,
            level,
            fast,
        }
    }

    /// A finished block as it goes to the writer (zlib unless the sink compressed already).
    fn finish(&self, b: Vec<u8>) -> Vec<u8> {
        if self.compress && !self.fast {
            perfetto::compress_block(&b, self.level)
        } else {
            b
        }
    }
}

/// One process's model pass result: totals, its report sections, warnings.
pub(crate) type ProcResult = (ProcessTotals, Vec<Box<dyn Section>>, Vec<String>);

/// What every process's model pass shares.
struct ModelPass<'a> {
    topo: &'a Topology,
    ud: &'a crate::model::ud::UdStreams,
    inputs: &'a [LogInput],
    mopts: &'a ModelOptions,
    progress: &'a Progress,
    json_tracks: Option<&'a chrome::JsonTracks>,
    /// Whether a trace is written (else the sinks discard everything).
    output: bool,
    blocks: Blocks,
    t_start: u64,
}

impl ModelPass<'_> {
    /// The process's two sinks: its packet sequence (verbs WRs, observed WQEs, counters) and
    /// that of its GPU kernels (absolute timestamps: executions arrive after they end).
    fn sinks(&self, seq: u32, kernel_seq: u32) -> (Box<dyn TraceSink>, Box<dyn TraceSink>) {
        match (self.json_tracks, self.output) {
            (_, false) => (Box::new(NullSink::default()), Box::new(NullSink::default())),
            (Some(tracks), _) => (
                Box::new(chrome::ChromeSeq::new(tracks.clone())),
                Box::new(chrome::ChromeSeq::new(tracks.clone())),
            ),
            (None, _) if self.blocks.fast => (
                Box::new(PerfettoSeq::new(seq, true, self.t_start).compressed()),
                Box::new(PerfettoSeq::new(kernel_seq, false, 0).compressed()),
            ),
            (None, _) => (
                Box::new(PerfettoSeq::new(seq, true, self.t_start)),
                Box::new(PerfettoSeq::new(kernel_seq, false, 0)),
            ),
        }
    }

    /// Models process `index`, sending its blocks to `tx`.
    fn process(
        &self,
        index: usize,
        template: &[Box<dyn Section>],
        tx: std::sync::mpsc::SyncSender<Block>,
    ) -> ProcResult {
        let p = &self.topo.procs[index];
        let input = self
            .inputs
            .iter()
            .find(|i| i.path == p.path)
            .expect("input of process");
        let (mut sink, mut kernel_sink) = self.sinks(p.seq, p.gpu_seq);
        let mut obs = SectionSet(template.iter().map(|s| s.fresh(self.topo)).collect());
        // Track uuids from the process's own range: the same whatever the worker order.
        let uuids = AtomicU64::new(self.topo.dynamic_uuids(index));
        let mut model = ProcessModel::new(
            self.topo,
            self.ud,
            p.index,
            self.mopts,
            &uuids,
            sink.as_mut(),
        );
        model.progress = Some(self.progress.counter());
        let mut flush = |b: Vec<u8>| {
            if b.is_empty() || !self.output {
                return;
            }
            let _ = tx.send(Block::Data(index, self.blocks.finish(b)));
        };
        let issues = model.run(
            input,
            sink.as_mut(),
            kernel_sink.as_mut(),
            &mut obs,
            &mut flush,
        );
        let _ = tx.send(Block::Done(index));
        let warn = issues
            .into_iter()
            .map(|i| format!("{}: offset {}: {}", p.path.display(), i.offset, i.what))
            .collect();
        (model.totals, obs.0, warn)
    }

    /// Merges the Nsight Systems exports into the trace (their own sequences).
    fn emit_nsys(
        &self,
        reports: &[sigmatrace_nsys::NsysReport],
        offset: Option<i64>,
        ctx: crate::import::nsys::SigmaContext<'_>,
        tx: &std::sync::mpsc::SyncSender<Block>,
    ) -> Result<Vec<crate::import::nsys::NsysMerged>, ConvertError> {
        let after = self.topo.procs.len();
        let uuids = AtomicU64::new(self.topo.dynamic_uuids(after));
        let (bytes, merged) =
            crate::import::nsys::emit_all(reports, offset, Some(ctx), &uuids, |seq| {
                match self.json_tracks {
                    Some(tracks) => {
                        Box::new(chrome::ChromeSeq::new(tracks.clone())) as Box<dyn TraceSink>
                    }
                    None => Box::new(PerfettoSeq::new(seq, false, 0)),
                }
            })?;
        if !bytes.is_empty() {
            let _ = tx.send(Block::Data(
                after,
                if self.blocks.compress {
                    perfetto::compress_block(&bytes, self.blocks.level)
                } else {
                    bytes
                },
            ));
        }
        Ok(merged)
    }
}

/// Sums the processes' totals, merges their report sections (in process order) and adds
/// their warnings (each once).
pub(crate) fn merge_results(
    results: Vec<ProcResult>,
    mut sections: Vec<Box<dyn Section>>,
    topo: &Topology,
    warnings: &mut Vec<String>,
) -> (ProcessTotals, Vec<Box<dyn Section>>) {
    let mut totals = ProcessTotals::default();
    for s in sections.iter_mut() {
        *s = s.fresh(topo);
    }
    for (t, secs, w) in results {
        totals.wr_completed += t.wr_completed;
        totals.wr_failed += t.wr_failed;
        totals.recv_completed += t.recv_completed;
        totals.flows_out += t.flows_out;
        totals.flows_in += t.flows_in;
        totals.inferred += t.inferred;
        totals.orphan_completions += t.orphan_completions;
        totals.incomplete_wrs += t.incomplete_wrs;
        totals.slices += t.slices;
        totals.max_lanes = totals.max_lanes.max(t.max_lanes);
        for (dst, src) in sections.iter_mut().zip(secs) {
            dst.merge(src);
        }
        for x in w {
            if !warnings.contains(&x) {
                warnings.push(x);
            }
        }
    }
    (totals, sections)
}

/// One host's correction as text: "offset +12.3 µs, drift 0.10 ppm, ±0.4 µs".
fn host_alignment(h: &align::HostAlign) -> String {
    let unc = h
        .uncertainty_ns
        .map(|u| format!("±{:.3} µs", u / 1e3))
        .unwrap_or_else(|| "unbounded".into());
    format!(
        "offset {:+.3} µs, drift {:.3} ppm, {unc}",
        h.offset_ns / 1e3,
        h.drift_ppm
    )
}

/// Adds the host's clock correction to every process track's labels (shown next to the
/// process name in the UI).
fn label_alignment(statics: &mut [sigmatrace_timeline::TrackDef], topo: &Topology, a: &Alignment) {
    for d in statics.iter_mut() {
        if let sigmatrace_timeline::TrackKind::Process { labels, .. } = &mut d.kind {
            let Some(p) = topo.procs.iter().find(|p| p.track == d.uuid) else {
                continue;
            };
            if let Some(h) = a.hosts.get(p.host) {
                labels.push(format!("clock {}", host_alignment(h)));
            }
        }
    }
}

/// An instant at the trace start on the alignment track whose args list every host's offset,
/// drift and uncertainty (visible when the event is selected).
fn alignment_instant(seq: &mut PerfettoSeq, track: u64, t: u64, a: &Alignment) {
    use sigmatrace_timeline::{ArgValue, Extra};
    let name = seq.name("clock alignment");
    let texts: Vec<String> = a.hosts.iter().map(host_alignment).collect();
    let mut args = Vec::new();
    let key = seq.arg_key("method");
    args.push((key, ArgValue::Str(&a.method)));
    for (h, text) in a.hosts.iter().zip(&texts) {
        let key = seq.arg_key(&format!("host {}", h.host));
        args.push((key, ArgValue::Str(text)));
    }
    let key = seq.arg_key("message pairs");
    args.push((key, ArgValue::U64(a.pairs)));
    let key = seq.arg_key("receive before send, before alignment");
    args.push((key, ArgValue::U64(a.inverted_before)));
    let key = seq.arg_key("receive before send, after alignment");
    args.push((key, ArgValue::U64(a.inverted_after)));
    let key = seq.arg_key("dropped constraints");
    args.push((key, ArgValue::U64(a.dropped_constraints)));
    if let Some(note) = &a.note {
        let key = seq.arg_key("note");
        args.push((key, ArgValue::Str(note)));
    }
    seq.instant(
        t,
        track,
        name,
        &Extra {
            args: &args,
            ..Extra::NONE
        },
    );
}

/// A top-level track whose description carries the clock alignment (trace metadata).
fn alignment_track(topo: &Topology, a: &Alignment) -> sigmatrace_timeline::TrackDef {
    let mut desc = format!(
        "{}. Reference host: {}.",
        a.method,
        topo.hosts
            .get(a.reference_host)
            .map(|h| h.name.as_str())
            .unwrap_or("-")
    );
    for h in &a.hosts {
        let unc = h
            .uncertainty_ns
            .map(|u| format!("±{u:.0} ns"))
            .unwrap_or_else(|| "unbounded".into());
        desc.push_str(&format!(
            " {}: offset {:.0} ns, drift {:.3} ppm, uncertainty {unc}.",
            h.host, h.offset_ns, h.drift_ppm
        ));
    }
    let mut d =
        sigmatrace_timeline::TrackDef::slices(u64::MAX >> 1, None, "SigmaTrace clock alignment");
    d.description = Some(desc);
    d
}

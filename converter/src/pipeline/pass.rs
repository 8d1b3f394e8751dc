//! The model pass: what every process's pass shares ([`Frame`]: trace start, model options,
//! header), one process modelled into its sinks and blocks, and the merge of their results.

use std::sync::atomic::AtomicU64;

use crate::align;
use crate::align::topology::Topology;
use crate::align::Alignment;
use crate::error::ConvertError;
use crate::model::emit::{self, Format};
use crate::model::order::Block;
use crate::model::{ModelOptions, Output, ProcessModel, ProcessTotals};
use crate::pipeline::load::Loaded;
use crate::pipeline::metadata::label_alignment;
use crate::pipeline::metadata::perfetto_header;
use crate::pipeline::options::ConvertOptions;
use crate::pipeline::writer::Blocks;
use crate::progress::Progress;
use crate::read::input::LogInput;
use crate::report::{Section, SectionSet};
use sigmatrace_timeline::batch::Recorder;
use sigmatrace_timeline::chrome;
use sigmatrace_timeline::groups::PerfettoGroups;
use sigmatrace_timeline::perfetto::{self, PerfettoSeq};
use sigmatrace_timeline::NullSink;
use sigmatrace_timeline::TraceSink;

/// What the model pass and the writer share: the trace start, the model's options, the
/// Chrome JSON track table and the trace header (the same on every shard of a sharded
/// conversion, which writes the header once and the processes' blocks after it).
pub(crate) struct Frame {
    t_start: i64,
    mopts: ModelOptions,
    pub(super) json_tracks: Option<chrome::JsonTracks>,
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

    pub(super) fn pass<'a>(
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
            pool: emit::SeqPool::default(),
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
    // A shard reports totals and warnings only (`shard::stitch::encode_result`): no sections.
    let template = Vec::new();
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
                let e = m.entry(pr.conn as u64).or_insert((pr.k, pr.k + 1));
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

/// One process's model pass result: totals, its report sections, warnings.
pub(crate) type ProcResult = (ProcessTotals, Vec<Box<dyn Section>>, Vec<String>);

/// Where a process's events go: a sink that encodes them as they come (Chrome JSON, or
/// nothing when no trace is written), or a recorder and the group sequences that encode its
/// batches (Perfetto).
enum ProcSink {
    Direct(Box<dyn TraceSink>),
    Recorded(Box<(Recorder, PerfettoGroups)>),
}

/// What every process's model pass shares.
pub(super) struct ModelPass<'a> {
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
    /// The sequences of the processes done, for the next ones.
    pool: emit::SeqPool,
}

impl ModelPass<'_> {
    /// The process's two sinks: its events' (verbs WRs, observed WQEs, counters: Perfetto
    /// output records them and encodes them in batches, one packet sequence per group) and
    /// the packet sequence of its GPU kernels (absolute timestamps: executions arrive after
    /// they end).
    fn sinks(&self, p: &crate::align::topology::Process) -> (ProcSink, Box<dyn TraceSink>) {
        let kernel_seq = p.gpu_seq;
        match (self.json_tracks, self.output) {
            (_, false) => (
                ProcSink::Direct(Box::new(NullSink::default())),
                Box::new(NullSink::default()),
            ),
            (Some(tracks), _) => (
                ProcSink::Direct(Box::new(chrome::ChromeSeq::new(tracks.clone()))),
                Box::new(chrome::ChromeSeq::new(tracks.clone())),
            ),
            (None, _) => {
                let fast = self.blocks.fast;
                let groups = emit::process_groups(self.topo, p, self.t_start, fast, &self.pool);
                let kernel = PerfettoSeq::new(kernel_seq, false, 0);
                let recorder = self.pool.recorder(groups.groups());
                (
                    ProcSink::Recorded(Box::new((recorder, groups))),
                    Box::new(if fast { kernel.compressed() } else { kernel }),
                )
            }
        }
    }

    /// Models process `index`, sending its blocks to `tx`.
    pub(super) fn process(
        &self,
        index: usize,
        template: &[Box<dyn Section>],
        tx: std::sync::mpsc::SyncSender<Block>,
    ) -> ProcResult {
        let p = &self.topo.procs[index];
        let input = p.log_in(self.inputs).expect("input of process");
        let (mut sink, mut kernel_sink) = self.sinks(p);
        let mut obs = SectionSet(template.iter().map(|s| s.fresh(self.topo)).collect());
        // Track uuids from the process's own range: the same whatever the worker order.
        let uuids = AtomicU64::new(self.topo.dynamic_uuids(index));
        let mut out = match &mut sink {
            ProcSink::Direct(s) => Output::Direct(s.as_mut()),
            ProcSink::Recorded(r) => {
                let (rec, groups) = &mut **r;
                Output::Recorded(rec, groups)
            }
        };
        let mut model =
            ProcessModel::new(self.topo, self.ud, p.index, self.mopts, &uuids, out.sink());
        model.progress = Some(self.progress.counter());
        // Blocks go to the writer in bundles of at least `SEND_BYTES` (each message may wake
        // the writer's thread: one per block was ~40 000 wake-ups at 1024 ranks × 50 M).
        let mut bundle: (Vec<Vec<u8>>, usize) = (Vec::new(), 0);
        let mut flush = |b: Vec<u8>| {
            if b.is_empty() || !self.output {
                return;
            }
            let b = self.blocks.finish(b);
            bundle.1 += b.len();
            bundle.0.push(b);
            if bundle.1 >= SEND_BYTES {
                let _ = tx.send(Block::Bundle(index, std::mem::take(&mut bundle.0)));
                bundle.1 = 0;
            }
        };
        let issues = model.run(input, out, kernel_sink.as_mut(), &mut obs, &mut flush);
        if !bundle.0.is_empty() {
            let _ = tx.send(Block::Bundle(index, bundle.0));
        }
        let _ = tx.send(Block::Done(index));
        if let ProcSink::Recorded(r) = sink {
            let (recorder, groups) = *r;
            self.pool.put(recorder, groups);
        }
        let warn = issues
            .into_iter()
            .map(|i| format!("{}: offset {}: {}", p.path.display(), i.offset, i.what))
            .collect();
        obs.0.iter_mut().for_each(|s| s.finish());
        (model.totals, obs.0, warn)
    }

    /// Merges the Nsight Systems exports into the trace (their own sequences).
    pub(super) fn emit_nsys(
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

/// Bytes of blocks a worker collects before it sends them to the writer.
const SEND_BYTES: usize = 1 << 20;

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
        totals.recv_undrawn += t.recv_undrawn;
        totals.kernels_malformed += t.kernels_malformed;
        totals.observed_late += t.observed_late;
        totals.poll_runs += t.poll_runs;
        totals.empty_polls = totals.empty_polls.saturating_add(t.empty_polls);
        totals.empty_poll_ns = totals.empty_poll_ns.saturating_add(t.empty_poll_ns);
        totals.poll_runs_malformed += t.poll_runs_malformed;
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

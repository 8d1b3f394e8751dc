//! The pipeline: tokenize (open, scan) → align → model → emit, and the output writer.
//!
//! Output is streamed: every process is modelled by a rayon worker into its own packet
//! sequence(s), which hands ~1 MiB blocks (zlib-compressed into `compressed_packets` unless
//! disabled) through a bounded channel to one writer thread and a `BufWriter`. Blocks of
//! different sequences may interleave freely; each sequence's blocks stay in order.
//!
//! Files: `options` (what a conversion is asked and answers), `load` (open → scan →
//! topology → align), `pass` (the per-process model pass and what it shares), `writer`
//! (block compression and the one writer thread), `metadata` (the trace header: clock
//! snapshot, alignment track and labels). They use each other one way: `load`, `writer` →
//! `options`; `pass` → `options`, `load`, `writer`, `metadata`; this file runs them.

mod load;
mod metadata;
mod options;
mod pass;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use crate::error::ConvertError;
use crate::model::order::Block;
use crate::progress::Progress;
use crate::report::default_sections;

pub(crate) use load::load_scanned;
pub(crate) use load::selected;
pub(crate) use load::Loaded;
pub use options::ConvertOptions;
pub use options::Report;
pub use options::Summary;
pub(crate) use pass::merge_results;
pub(crate) use pass::model_subset;
pub(crate) use pass::Frame;
pub(crate) use pass::ProcResult;

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
    } = load::load(paths, opts)?;
    let model_started = Instant::now();
    let frame = Frame::new(opts, &inputs, &topo, &alignment);
    let progress = Progress::start(opts.progress && output.is_some(), records);
    let (tx, rx) = sync_channel::<Block>(2 * rayon::current_num_threads() + 2);
    let writer = output.map(|path| {
        writer::spawn_writer(
            path.to_owned(),
            frame.header.clone(),
            rx,
            frame.json_tracks.is_some(),
            topo.procs.len(),
        )
    });
    let pass = frame.pass(&topo, &ud, &inputs, &progress, output.is_some(), opts);
    let template = match opts.report_sections {
        true => default_sections(),
        false => Vec::new(),
    };
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

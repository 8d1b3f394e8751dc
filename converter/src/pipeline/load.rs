//! Loading: the logs opened (in parallel, filtered by rank and host), scanned, their topology
//! built and their host clocks aligned — everything the model pass starts from.

use std::path::PathBuf;
use std::time::Instant;

use crate::align;
use crate::align::topology::Topology;
use crate::align::Alignment;
use crate::error::ConvertError;
use crate::pipeline::options::ConvertOptions;
use crate::read::input::LogInput;
use crate::read::scan;

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

/// Whether the rank and host filters of `opts` select the log with header `h`.
pub(crate) fn selected(opts: &ConvertOptions, h: &sigmatrace_schemas::FileHeader) -> bool {
    let rank_ok = opts
        .ranks
        .as_ref()
        .is_none_or(|rs| h.rank.rank.is_some_and(|r| rs.contains(&r)));
    let host_ok = opts
        .hosts
        .as_ref()
        .is_none_or(|hs| hs.contains(&h.hostname));
    rank_ok && host_ok
}

/// Opens the logs (in parallel), keeps those the rank and host filters select and warns about
/// salvaged damage and newer minor versions.
fn open_inputs(
    paths: &[PathBuf],
    opts: &ConvertOptions,
    warnings: &mut Vec<String>,
) -> Result<Vec<LogInput>, ConvertError> {
    let opened = crate::read::open::open_logs(paths, opts.skip_unreadable, |h| selected(opts, h))?;
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

pub(super) fn load(paths: &[PathBuf], opts: &ConvertOptions) -> Result<Loaded, ConvertError> {
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

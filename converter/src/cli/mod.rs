//! The command line: [`args`] defines and checks the arguments; this module runs the conversion
//! (default), `stats` and `nsys-summary` and prints their results. Errors go back to `main()`,
//! the only place that maps them to exit codes.

mod args;

use sigmatrace_convert::import::nsys::{cli as nsys_cli, NsysOptions};
use sigmatrace_convert::report::{heatmap_svg, Traffic};
use sigmatrace_convert::shard::{self, Launch};
use sigmatrace_convert::{ConvertError, ConvertOptions, Summary};

pub use args::Cli;
use args::{options, Cmd, ConvertArgs, StatsArgs};

/// Runs what the command line asks for.
pub fn run(cli: Cli) -> Result<(), ConvertError> {
    match cli.cmd {
        Some(Cmd::Stats(a)) => stats(a),
        Some(Cmd::NsysSummary(a)) => {
            print!("{}", nsys_cli::summary(&a.file, a.json)?);
            Ok(())
        }
        None => convert(cli.convert),
    }
}

/// Under a launcher, what only one process does (the stats report, Nsight Systems merging):
/// rank 0 does it alone (it must see every log), the others stop here. Says so loudly.
fn rank0_alone(what: &str) -> Result<bool, ConvertError> {
    let Some(l) = Launch::from_env()? else {
        return Ok(false);
    };
    if l.rank == 0 {
        eprintln!(
            "sigmatrace-convert: warning: {what} is not sharded: rank 0 of {} ({}) converts alone and must see every log; the other ranks exit",
            l.size, l.source
        );
        Ok(false)
    } else {
        eprintln!(
            "sigmatrace-convert: rank {} of {}: {what} is converted by rank 0 alone; nothing to do here",
            l.rank, l.size
        );
        Ok(true)
    }
}

/// `sigmatrace-convert stats`: the report as tables or JSON, and the optional SVG heatmap.
fn stats(a: StatsArgs) -> Result<(), ConvertError> {
    if rank0_alone("the stats report")? {
        return Ok(());
    }
    let mut opts = options(&a.common)?;
    opts.verify_alignment = true;
    let report = sigmatrace_convert::stats(&a.common.inputs, &opts)?;
    for w in &report.summary.warnings {
        eprintln!("warning: {w}");
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.json()).unwrap_or_default()
        );
    } else {
        print!("{}", report.text());
    }
    if let Some(svg) = a.svg {
        let t = report
            .section::<Traffic>()
            .ok_or_else(|| ConvertError::Options("no traffic section".into()))?;
        let labels: Vec<String> = report.topology.procs.iter().map(|p| p.label()).collect();
        std::fs::write(
            &svg,
            heatmap_svg("Traffic rank × rank (bytes)", &labels, &t.bytes_matrix()),
        )
        .map_err(|source| ConvertError::Output {
            path: svg.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The default command: logs (and Nsight exports) → one trace.
fn convert(a: ConvertArgs) -> Result<(), ConvertError> {
    let nsys = NsysOptions {
        files: a.nsys.clone(),
        offset_ns: a.nsys_offset,
    };
    if a.common.inputs.is_empty() && !nsys.files.is_empty() {
        return convert_nsys_only(&nsys, &a);
    }
    let mut opts = options(&a.common)?;
    opts.format = a.format;
    opts.detail = a.detail;
    opts.compress_level = a.compress;
    opts.progress = !a.quiet;
    // The report's sections only when it is printed.
    opts.report_sections = a.stats;
    let unsharded = a.stats || !nsys.files.is_empty();
    opts.nsys = nsys;
    if unsharded {
        if rank0_alone(if a.stats { "--stats" } else { "--nsys" })? {
            return Ok(());
        }
    } else if let Some(launch) = Launch::from_env()? {
        return convert_sharded(&a, &opts, &launch);
    }
    let report = sigmatrace_convert::convert_with_report(&a.common.inputs, &a.output, &opts)?;
    let s = &report.summary;
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    for line in nsys_cli::report_lines(&s.nsys) {
        eprintln!("{line}");
    }
    if a.stats {
        print!("{}", report.text());
    }
    print_done(s, &a.output.display().to_string(), "phases");
    Ok(())
}

/// The phase times (with `SIGMATRACE_TIMING` set) and the closing line of a conversion that
/// wrote `written`.
fn print_done(s: &Summary, written: &str, phases: &str) {
    if std::env::var_os("SIGMATRACE_TIMING").is_some() {
        let p: Vec<String> = s
            .phases
            .iter()
            .map(|(n, t)| format!("{n} {t:.3}s"))
            .collect();
        eprintln!("{phases}: {}", p.join(", "));
    }
    // Bytes per WR event only when there are WR events (a log of control calls alone has none).
    let per_event = match s.wr_events {
        0 => String::new(),
        n => format!(" ({:.2} B/WR event)", s.output_bytes as f64 / n as f64),
    };
    eprintln!(
        "{written}: {} processes on {} hosts, {} WR events, {} slices, {} flows, {} bytes{per_event} in {:.2} s",
        s.processes,
        s.hosts,
        s.wr_events,
        s.totals.slices,
        s.totals.flows_out,
        s.output_bytes,
        s.elapsed_s
    );
}

/// The default command under a launcher: this process's shard (see `sigmatrace_convert::shard`).
fn convert_sharded(a: &ConvertArgs, opts: &ConvertOptions, l: &Launch) -> Result<(), ConvertError> {
    let opts = ConvertOptions {
        progress: false,
        ..opts.clone()
    };
    let r = shard::convert_sharded(&a.common.inputs, &a.output, &opts, l, a.per_shard)?;
    let Some(s) = &r.summary else {
        eprintln!(
            "sigmatrace-convert: shard {} of {}: {} processes of hosts {} modelled; rank 0 writes {}",
            r.rank,
            r.shards,
            r.processes,
            if r.hosts.is_empty() { "-".to_string() } else { r.hosts.join(", ") },
            if a.per_shard { "the summary" } else { "the trace" }
        );
        return Ok(());
    };
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    let written: Vec<String> = if a.per_shard {
        (0..r.shards)
            .map(|k| shard::per_shard_path(&a.output, k).display().to_string())
            .collect()
    } else {
        vec![a.output.display().to_string()]
    };
    print_done(s, &written.join(", "), "phases (rank 0)");
    eprintln!(
        "converted in {} shards ({}; rank 0 modelled {} processes of hosts {})",
        r.shards,
        l.source,
        r.processes,
        if r.hosts.is_empty() {
            "-".to_string()
        } else {
            r.hosts.join(", ")
        }
    );
    Ok(())
}

/// `--nsys` without SigmaTrace logs: a trace of the Nsight Systems exports alone.
fn convert_nsys_only(nsys: &NsysOptions, a: &ConvertArgs) -> Result<(), ConvertError> {
    let merged = nsys_cli::convert_only(nsys, &a.output, a.format, a.compress)?;
    for line in nsys_cli::report_lines(&merged) {
        eprintln!("{line}");
    }
    eprintln!(
        "{}: Nsight Systems exports only (no SigmaTrace logs given)",
        a.output.display()
    );
    Ok(())
}

//! The command line: [`args`] defines and checks the arguments; this module runs the conversion
//! (default), `stats` and `nsys-summary` and prints their results. Errors go back to `main()`,
//! the only place that maps them to exit codes.

mod args;

use sigmatrace_convert::import::nsys::{cli as nsys_cli, NsysOptions};
use sigmatrace_convert::report::{heatmap_svg, Traffic};
use sigmatrace_convert::ConvertError;

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

/// `sigmatrace-convert stats`: the report as tables or JSON, and the optional SVG heatmap.
fn stats(a: StatsArgs) -> Result<(), ConvertError> {
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
            heatmap_svg("Traffic rank × rank (bytes)", &labels, &t.bytes),
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
    opts.nsys = nsys;
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
    if std::env::var_os("SIGMATRACE_TIMING").is_some() {
        let p: Vec<String> = s
            .phases
            .iter()
            .map(|(n, t)| format!("{n} {t:.3}s"))
            .collect();
        eprintln!("phases: {}", p.join(", "));
    }
    eprintln!(
        "{}: {} processes on {} hosts, {} WR events, {} slices, {} flows, {} bytes ({:.2} B/WR event) in {:.2} s",
        a.output.display(),
        s.processes,
        s.hosts,
        s.wr_events,
        s.totals.slices,
        s.totals.flows_out,
        s.output_bytes,
        s.output_bytes as f64 / s.wr_events.max(1) as f64,
        s.elapsed_s
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

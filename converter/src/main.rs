//! `sigmatrace-convert` command line. Library errors are mapped to exit codes here only:
//! 0 ok, 1 input logs unreadable, 2 usage/options, 3 output cannot be written.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sigmatrace_convert::report::{heatmap_svg, Traffic};
use sigmatrace_convert::{ConvertError, ConvertOptions, Detail, Format};

#[derive(Parser)]
#[command(
    name = "sigmatrace-convert",
    version,
    about = "Convert SigmaTrace logs of many ranks into one clock-aligned Perfetto trace",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    convert: ConvertArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print traffic matrices, skew, per-QP latency and errors.
    Stats(StatsArgs),
    /// Show what an Nsight Systems SQLite export holds (check it before merging with --nsys).
    NsysSummary(NsysSummaryArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Log files or directories (searched recursively).
    inputs: Vec<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(short, long, default_value_t = 0)]
    jobs: usize,
    /// Only these ranks (comma separated, ranges allowed: 0-3,8).
    #[arg(long, value_parser = parse_ranks)]
    ranks: Option<Vec<u32>>,
    /// Only processes on these hosts (comma separated host names).
    #[arg(long, value_delimiter = ',')]
    hosts: Option<Vec<String>>,
    /// Start of the time window, seconds after the trace start.
    #[arg(long)]
    from: Option<f64>,
    /// End of the time window, seconds after the trace start.
    #[arg(long)]
    to: Option<f64>,
    /// Keep REALTIME as recorded (no causality-based host clock correction).
    #[arg(long)]
    no_align: bool,
    /// Skip logs that cannot be read at all instead of failing.
    #[arg(long)]
    skip_unreadable: bool,
}

#[derive(Args)]
struct ConvertArgs {
    #[command(flatten)]
    common: Common,
    /// Output trace file.
    #[arg(short, long, default_value = "sigmatrace.perfetto-trace")]
    output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Perfetto)]
    format: Format,
    /// Per-WR detail: compact, normal or full (args on every WR, exact counters).
    #[arg(long, value_enum, default_value_t = Detail::Normal)]
    detail: Detail,
    /// Compression of packet blocks: 0 = none, 1 = fast structured deflate (default), 2-9 = zlib level.
    #[arg(long, default_value_t = 1)]
    compress: u32,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
    /// Merge an Nsight Systems SQLite export (`nsys export --type sqlite`); repeatable.
    #[arg(long = "nsys", value_name = "FILE")]
    nsys: Vec<PathBuf>,
    /// Add NS nanoseconds to every Nsight Systems time (after the automatic alignment).
    #[arg(long, value_name = "NS", allow_hyphen_values = true)]
    nsys_offset: Option<i64>,
    /// Also print the stats report.
    #[arg(long)]
    stats: bool,
}

#[derive(Args)]
struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Write an SVG heatmap of the rank × rank traffic matrix.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Args)]
struct NsysSummaryArgs {
    /// The export (`nsys export --type sqlite -o report.sqlite report.nsys-rep`).
    file: PathBuf,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_ranks(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|e| format!("{part}: {e}"))?;
                let b: u32 = b.trim().parse().map_err(|e| format!("{part}: {e}"))?;
                if b < a {
                    return Err(format!("{part}: empty range"));
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().map_err(|e| format!("{part}: {e}"))?),
        }
    }
    Ok(out)
}

fn options(c: &Common) -> Result<ConvertOptions, ConvertError> {
    let window = match (c.from, c.to) {
        (None, None) => None,
        (a, b) => {
            let (a, b) = (a.unwrap_or(0.0), b.unwrap_or(f64::MAX / 4e9));
            if b <= a {
                return Err(ConvertError::Options(format!(
                    "--to {b} must be after --from {a}"
                )));
            }
            Some((a, b))
        }
    };
    if c.inputs.is_empty() {
        return Err(ConvertError::Options(
            "no input logs given (files or directories)".into(),
        ));
    }
    Ok(ConvertOptions {
        jobs: c.jobs,
        ranks: c.ranks.clone(),
        hosts: c.hosts.clone(),
        window_s: window,
        causality_alignment: !c.no_align,
        skip_unreadable: c.skip_unreadable,
        ..Default::default()
    })
}

fn run(cli: Cli) -> Result<(), ConvertError> {
    match cli.cmd {
        Some(Cmd::Stats(a)) => {
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
        Some(Cmd::NsysSummary(a)) => {
            print!(
                "{}",
                sigmatrace_convert::import::nsys::cli::summary(&a.file, a.json)?
            );
            Ok(())
        }
        None => {
            let a = cli.convert;
            let nsys = sigmatrace_convert::import::nsys::NsysOptions {
                files: a.nsys.clone(),
                offset_ns: a.nsys_offset,
            };
            if a.common.inputs.is_empty() && !nsys.files.is_empty() {
                let merged = sigmatrace_convert::import::nsys::cli::convert_only(
                    &nsys, &a.output, a.format, a.compress,
                )?;
                for line in sigmatrace_convert::import::nsys::cli::report_lines(&merged) {
                    eprintln!("{line}");
                }
                eprintln!(
                    "{}: Nsight Systems exports only (no SigmaTrace logs given)",
                    a.output.display()
                );
                return Ok(());
            }
            let mut opts = options(&a.common)?;
            opts.format = a.format;
            opts.detail = a.detail;
            opts.compress_level = a.compress;
            opts.progress = !a.quiet;
            opts.nsys = nsys;
            let report =
                sigmatrace_convert::convert_with_report(&a.common.inputs, &a.output, &opts)?;
            let s = &report.summary;
            for w in &s.warnings {
                eprintln!("warning: {w}");
            }
            for line in sigmatrace_convert::import::nsys::cli::report_lines(&s.nsys) {
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
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sigmatrace-convert: error: {e}");
            ExitCode::from(match e {
                ConvertError::Options(_) | ConvertError::NothingSelected(_) => 2,
                ConvertError::Output { .. } => 3,
                _ => 1,
            })
        }
    }
}

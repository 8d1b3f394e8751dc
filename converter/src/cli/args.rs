//! The arguments of `sigmatrace-convert` and its subcommands, their parsers and the checks that
//! turn them into [`ConvertOptions`]. Nonsense values (a NaN or negative time, a compression
//! level above 9, an empty or absurdly large rank range) are rejected with a message naming the
//! option; clap reports them as usage errors (exit code 2).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sigmatrace_convert::{ConvertError, ConvertOptions, Detail, Format};

#[derive(Parser)]
#[command(
    name = "sigmatrace-convert",
    version,
    about = "Convert SigmaTrace logs of many ranks into one clock-aligned Perfetto trace",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
    #[command(flatten)]
    pub convert: ConvertArgs,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Print traffic matrices, skew, per-QP latency and errors.
    Stats(StatsArgs),
    /// Show what an Nsight Systems SQLite export holds (check it before merging with --nsys).
    NsysSummary(NsysSummaryArgs),
}

/// Rank selection `0-3,8`: one value (clap would otherwise read a `Vec` as repeated values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankList(pub Vec<u32>);

/// The most ranks one `--ranks` may select (a typo like `0-4000000000` would otherwise
/// allocate gigabytes).
pub const MAX_SELECTED_RANKS: u64 = 1 << 20;

#[derive(Args, Clone)]
pub struct Common {
    /// Log files or directories (searched recursively).
    pub inputs: Vec<PathBuf>,
    /// Worker threads (default, or 0: all cores; more than the cores are capped with a note).
    #[arg(short, long, default_value_t = 0)]
    pub jobs: usize,
    /// Only these ranks (comma separated, ranges allowed: 0-3,8).
    #[arg(long, value_parser = parse_ranks)]
    pub ranks: Option<RankList>,
    /// Only processes on these hosts (comma separated host names).
    #[arg(long, value_delimiter = ',', value_parser = parse_host)]
    pub hosts: Option<Vec<String>>,
    /// Start of the time window, seconds after the trace start.
    #[arg(long, value_parser = parse_seconds)]
    pub from: Option<f64>,
    /// End of the time window, seconds after the trace start.
    #[arg(long, value_parser = parse_seconds)]
    pub to: Option<f64>,
    /// Keep REALTIME as recorded (no causality-based host clock correction).
    #[arg(long)]
    pub no_align: bool,
    /// Skip logs that cannot be read at all instead of failing.
    #[arg(long)]
    pub skip_unreadable: bool,
}

#[derive(Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub common: Common,
    /// Output trace file.
    #[arg(short, long, default_value = "sigmatrace.perfetto-trace")]
    pub output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Perfetto)]
    pub format: Format,
    /// Per-WR detail: compact, normal or full (args on every WR, exact counters, empty polls).
    #[arg(long, value_enum, default_value_t = Detail::Normal)]
    pub detail: Detail,
    /// Compression of packet blocks: 0 = none, 1 = fast structured deflate (default), 2-9 = zlib level.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=9))]
    pub compress: u32,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Merge an Nsight Systems SQLite export (`nsys export --type sqlite`); repeatable.
    #[arg(long = "nsys", value_name = "FILE")]
    pub nsys: Vec<PathBuf>,
    /// Add NS nanoseconds to every Nsight Systems time (after the automatic alignment).
    #[arg(long, value_name = "NS", allow_hyphen_values = true)]
    pub nsys_offset: Option<i64>,
    /// Also print the stats report.
    #[arg(long)]
    pub stats: bool,
    /// Under a launcher (mpirun, srun): keep one trace per shard (OUT.shard<k>.<ext>) instead
    /// of rank 0 joining them into OUT.
    #[arg(long)]
    pub per_shard: bool,
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub common: Common,
    /// JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG heatmap of the rank × rank traffic matrix.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

#[derive(Args)]
pub struct NsysSummaryArgs {
    /// The export (`nsys export --type sqlite -o report.sqlite report.nsys-rep`).
    pub file: PathBuf,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `--ranks`: comma separated ranks and inclusive ranges, at least one, at most
/// [`MAX_SELECTED_RANKS`] in all.
pub fn parse_ranks(s: &str) -> Result<RankList, String> {
    let mut out = Vec::new();
    let rank = |v: &str, part: &str| -> Result<u32, String> {
        v.trim()
            .parse()
            .map_err(|e| format!("{part}: not a rank number ({e})"))
    };
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (rank(a, part)?, rank(b, part)?),
            None => {
                let r = rank(part, part)?;
                (r, r)
            }
        };
        if b < a {
            return Err(format!("{part}: empty range"));
        }
        if out.len() as u64 + (b - a) as u64 + 1 > MAX_SELECTED_RANKS {
            return Err(format!(
                "{part}: more than {MAX_SELECTED_RANKS} ranks selected"
            ));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err("no rank given".into());
    }
    Ok(RankList(out))
}

/// `--hosts`: host names are not empty.
fn parse_host(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty host name".into());
    }
    Ok(s.to_owned())
}

/// `--from` / `--to`: a finite, non-negative number of seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("not a number of seconds ({e})"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!(
            "{s}: seconds after the trace start must be finite and ≥ 0"
        ));
    }
    Ok(v)
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `--jobs`: 0 means all `cores`; more threads than cores only add switching (thousands of them
/// take minutes to start on a loaded machine), so a larger request is capped, with a note.
pub fn worker_threads(requested: usize, cores: usize) -> (usize, Option<String>) {
    match requested {
        0 => (cores, None),
        n if n > cores => (
            cores,
            Some(format!(
                "--jobs {n} capped to {cores} worker threads (the cores available to this process)"
            )),
        ),
        n => (n, None),
    }
}

/// The options shared by conversion and `stats`.
pub fn options(c: &Common) -> Result<ConvertOptions, ConvertError> {
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
    let (jobs, note) = worker_threads(c.jobs, cores());
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    Ok(ConvertOptions {
        jobs,
        ranks: c.ranks.clone().map(|r| r.0),
        hosts: c.hosts.clone(),
        window_s: window,
        causality_alignment: !c.no_align,
        skip_unreadable: c.skip_unreadable,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_lists_and_ranges() {
        assert_eq!(parse_ranks("0-3,8").unwrap().0, vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_ranks(" 5 ").unwrap().0, vec![5]);
        assert!(parse_ranks("3-1").unwrap_err().contains("empty range"));
        assert!(parse_ranks("").unwrap_err().contains("no rank"));
        assert!(parse_ranks("x").unwrap_err().contains("not a rank"));
        assert!(parse_ranks("0-4000000000")
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn jobs_are_capped_at_the_cores() {
        assert_eq!(worker_threads(0, 16), (16, None));
        assert_eq!(worker_threads(3, 16), (3, None));
        let (n, note) = worker_threads(8192, 16);
        assert_eq!(n, 16);
        assert!(note.unwrap().contains("--jobs 8192 capped to 16"));
    }

    #[test]
    fn seconds_are_finite_and_not_negative() {
        assert_eq!(parse_seconds("1.5"), Ok(1.5));
        for bad in ["nan", "NaN", "inf", "-1", "x"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_option_parses() {
        let cli = Cli::try_parse_from([
            "sigmatrace-convert",
            "logs",
            "--ranks",
            "0-7",
            "--hosts",
            "a,b",
            "--from",
            "0.5",
            "--to",
            "2",
            "--compress",
            "9",
        ])
        .unwrap();
        let o = options(&cli.convert.common).unwrap();
        assert_eq!(o.ranks, Some((0..8).collect()));
        assert_eq!(o.hosts, Some(vec!["a".into(), "b".into()]));
        assert_eq!(o.window_s, Some((0.5, 2.0)));
        for bad in [
            &["--from", "nan"][..],
            &["--to", "inf"],
            &["--compress", "10"],
            &["--hosts", "a,,b"],
            &["--ranks", "-"],
        ] {
            let mut argv = vec!["sigmatrace-convert", "logs"];
            argv.extend_from_slice(bad);
            assert!(Cli::try_parse_from(&argv).is_err(), "{bad:?} accepted");
        }
    }
}

//! `sigmatrace`: trace a program (`run`) or the embedded multi-rank demo (`demo`) and turn
//! the logs into a Perfetto timeline. Errors are mapped to exit codes here only: the traced
//! command's own status is forwarded; 125 = sigmatrace itself failed; 2 = usage.

use sigmatrace_launcher::{demo, run};

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sigmatrace",
    version,
    about = "Per-operation RDMA tracing: run a program traced, or the demo"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run CMD with the tracer preloaded, then convert its logs (unless it is one rank of many).
    Run {
        /// Output directory for the logs and the trace (default: ./sigmatrace-<cmd>-<time>).
        #[arg(short = 'o', long)]
        out: Option<PathBuf>,
        /// Always convert, even when the environment says this is one rank of a job.
        #[arg(long, conflicts_with = "no_convert")]
        convert: bool,
        /// Never convert; only write logs.
        #[arg(long)]
        no_convert: bool,
        /// What to trace (SIGMATRACE_TRACE), e.g. "control,data".
        #[arg(long)]
        trace: Option<String>,
        /// Size cap per process log (SIGMATRACE_MAX_BYTES), e.g. 512M.
        #[arg(long)]
        max_bytes: Option<String>,
        /// Run on softnic (the software RDMA device) as simulated node N.
        #[arg(long, value_name = "N")]
        softnic_node: Option<u32>,
        /// Print nothing of our own except errors.
        #[arg(short, long)]
        quiet: bool,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<OsString>,
    },
    /// Run the embedded multi-rank workload on softnic, traced, and convert it.
    Demo {
        /// Output directory (default: ./sigmatrace-demo).
        #[arg(short = 'o', long, default_value = "sigmatrace-demo")]
        out: PathBuf,
        /// Simulated nodes (one process each).
        #[arg(long, default_value_t = 4)]
        ranks: u32,
        /// All-reduce iterations.
        #[arg(long, default_value_t = 20)]
        iters: u32,
        /// Vector length (u64 elements).
        #[arg(long, default_value_t = 16384)]
        elems: usize,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
}

fn default_out(cmd: &[OsString]) -> PathBuf {
    let name = cmd
        .first()
        .map(|c| {
            PathBuf::from(c)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!("sigmatrace-{name}-{secs}"))
}

fn main() {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            out,
            convert,
            no_convert,
            trace,
            max_bytes,
            softnic_node,
            quiet,
            cmd,
        } => {
            let opts = run::RunOptions {
                out_dir: out.unwrap_or_else(|| default_out(&cmd)),
                convert: if convert {
                    Some(true)
                } else if no_convert {
                    Some(false)
                } else {
                    None
                },
                trace,
                max_bytes,
                softnic_node,
                quiet,
            };
            match run::run(&opts, &cmd) {
                Ok(outcome) => run::exit_like(outcome.ended),
                Err(e) => {
                    eprintln!("sigmatrace: {e}");
                    std::process::exit(125);
                }
            }
        }
        Cmd::Demo {
            out,
            ranks,
            iters,
            elems,
            timeout,
        } => {
            let opts = demo::DemoOptions {
                out_dir: out,
                ranks,
                iters,
                elems,
                timeout: Duration::from_secs(timeout),
                quiet: false,
            };
            match demo::demo(&opts) {
                Ok(o) => {
                    println!("{}", o.report_text);
                    println!("{}\n", o.moe.report_text);
                    println!("trace: {}", o.trace.display());
                    println!("GPU-initiated-style MoE trace: {}", o.moe.trace.display());
                    println!("open it in https://ui.perfetto.dev (Open trace file), {} work requests from {} ranks", o.wr_events, o.logs.len());
                }
                Err(e) => {
                    eprintln!("sigmatrace demo: {e}");
                    std::process::exit(125);
                }
            }
        }
    }
}

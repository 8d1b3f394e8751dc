//! `sigmatrace-trace-check TRACE [--json] [--expect-min KEY=N ...]`: checks a Perfetto trace
//! (plain or gzip) with the repository's own checker and prints its statistics and violations.
//! Exit status: 0 valid (and every expectation met), 1 violations, 2 unreadable or bad usage.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use sigmatrace_testkit::trace::{self, Report};

const USAGE: &str = "usage: sigmatrace-trace-check TRACE [--json] [--expect-min KEY=N ...]";

fn text(path: &str, r: &Report) -> String {
    if let Some(f) = &r.fatal {
        return format!("{path}: UNREADABLE: {f}");
    }
    let s = &r.stats;
    let verdict = if r.ok {
        "OK".to_string()
    } else {
        format!("FAILED ({} violation(s))", r.error_count)
    };
    let mut out = vec![
        format!("{path}: {verdict}"),
        format!(
            "  packets {} ({} compressed blocks), sequences {}, track events {}",
            s.packets, s.compressed_blocks, s.sequences, s.track_events
        ),
        format!(
            "  tracks {} (process {}, thread {}, counter {}, other {})",
            s.tracks, s.process_tracks, s.thread_tracks, s.counter_tracks, s.other_tracks
        ),
        format!(
            "  slices {}, instants {}, counter events {}, flows {} ({} backward)",
            s.slices, s.instants, s.counter_events, s.flows, s.backward_flows
        ),
    ];
    if let (Some(a), Some(b)) = (s.min_timestamp, s.max_timestamp) {
        out.push(format!(
            "  timestamps {a} .. {b} (span {:.3} ms)",
            (b - a) as f64 / 1e6
        ));
    }
    for e in &r.errors {
        let at = e
            .packet
            .map_or("trace".to_string(), |p| format!("packet {p}"));
        out.push(format!("  {at}: [{}] {}", e.check, e.message));
    }
    if r.errors.len() < r.error_count {
        out.push(format!("  ... {} violation(s) in all", r.error_count));
    }
    out.join("\n")
}

fn main() -> ExitCode {
    let mut path: Option<String> = None;
    let mut json = false;
    let mut expect = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--expect-min" => match args.next() {
                Some(e) => expect.push(e),
                None => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if path.is_none() && !a.starts_with("--") => path = Some(a),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut report = trace::check(&PathBuf::from(&path));
    let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
    if let Err(e) = report.expect_min(&expect) {
        eprintln!("sigmatrace-trace-check: {e}");
        return ExitCode::from(2);
    }
    if json {
        println!("{:#}", report.json());
    } else {
        println!("{}", text(&path, &report));
    }
    match (&report.fatal, report.ok) {
        (Some(_), _) => ExitCode::from(2),
        (None, true) => ExitCode::SUCCESS,
        (None, false) => ExitCode::from(1),
    }
}

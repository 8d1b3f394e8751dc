//! Prints the records of SigmaTrace logs, one per line (a debugging aid for the interposer).
//!
//! `cargo run -p sigmatrace-interposer --example sigmalog_dump -- [--summary] LOG...`

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use sigmatrace_schemas::{LogFile, Record};

fn main() -> ExitCode {
    let mut summary = false;
    let mut paths = Vec::new();
    for a in std::env::args().skip(1) {
        if a == "--summary" {
            summary = true;
        } else {
            paths.push(a);
        }
    }
    if paths.is_empty() {
        eprintln!("usage: sigmalog_dump [--summary] LOG...");
        return ExitCode::from(2);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for p in &paths {
        let log = match LogFile::open(Path::new(p)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let h = log.header();
        let _ = writeln!(
            out,
            "== {p}: pid {} ppid {} rank {:?} chunks {} dropped {} salvage clean {}",
            h.pid,
            h.ppid,
            h.rank.rank,
            log.chunks().len(),
            h.dropped,
            log.salvage().is_clean()
        );
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for c in log.chunks() {
            for raw in log.records(c) {
                let Ok(raw) = raw else { break };
                let Ok(rec) = raw.decode() else { continue };
                let name = format!("{rec:?}");
                let kind = name.split('(').next().unwrap_or("?").to_string();
                *counts.entry(kind).or_default() += 1;
                if !summary {
                    let r = match rec {
                        Record::StringDef(m) | Record::Annotation(m) | Record::ThreadName(m) => {
                            writeln!(out, "tid {} {:?} {}", c.header.tid, raw.kind, m.text())
                        }
                        _ => writeln!(out, "tid {} {name}", c.header.tid),
                    };
                    if r.is_err() {
                        return ExitCode::SUCCESS; // reader went away (e.g. `| head`)
                    }
                }
            }
        }
        for (k, n) in counts {
            let _ = writeln!(out, "{k}: {n}");
        }
    }
    ExitCode::SUCCESS
}

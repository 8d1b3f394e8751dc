//! What must hold of a traced MPI run over softnic (open_mpi.rs, mpich.rs): each rank's log
//! exactly what softnic counted for it (posts and completions), every message paired, no failed WR or orphan completion, no backward flow, the conversion byte-identical
//! with 1 and 2 workers, the payload on the wire, and, with clock errors, the alignment.

use std::path::{Path, PathBuf};

use sigmatrace_convert::{ConvertOptions, Report};
use sigmatrace_integration::*;

/// Clock errors injected per rank (offset ns, drift ppb; `SIGMATRACE_DEBUG_CLOCK_SKEW`), as
/// real_timelines.rs injects them per softnic node.
pub const SKEWS: [(i64, i64); 2] = [(1_700_000, 45_000), (-1_900_000, -38_000)];

/// How the ranks run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tracing {
    Off,
    On,
    /// Traced, each rank's clock off by its [`SKEWS`] entry.
    Skewed,
}

/// Round trips per size and trial (`NPopenmpi -n`), and NetPIPE's trials per size (`TRIALS`
/// in its netpipe.h).
pub const REPEATS: u64 = 20;
pub const TRIALS: u64 = 3;

/// Sums a per-QP column ("== Queue pairs" rows; `col` from the end) of the stats text.
pub fn qp_column_sum(text: &str, col_from_end: usize) -> u64 {
    let section = text
        .split("== Queue pairs")
        .nth(1)
        .expect("stats have a queue-pair section");
    let section = section.split("\n== ").next().unwrap();
    section
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        // "rank N 0x…" rows, not the header.
        .filter(|f| f.len() > 3 && f[0] == "rank" && f[2].starts_with("0x"))
        .map(|f| f[f.len() - 1 - col_from_end].parse::<u64>().unwrap())
        .sum()
}

/// Bytes from rank `from` to rank `to` ("== Traffic rank × rank" of the stats text).
pub fn traffic(text: &str, from: usize, to: usize) -> u64 {
    let section = text
        .split("== Traffic rank × rank")
        .nth(1)
        .expect("stats have a rank traffic matrix");
    let row = section
        .lines()
        .find(|l| l.starts_with(&format!("rank {from} ")))
        .expect("a row per rank");
    let f: Vec<&str> = row.split_whitespace().collect();
    f[2 + to].parse().unwrap()
}

/// Converts the logs of a traced run of `ranks` ranks (with 1 and 2 workers) and checks what
/// must hold (see the file's doc), with at least `payload` RDMA bytes from every rank to every
/// other; returns the report.
pub fn check_run(dir: &Path, logs: &Path, ranks: usize, payload: u64) -> Report {
    let (report, text, _) = check_paired(dir, logs, ranks);
    let pairs = (0..ranks).flat_map(|a| (0..ranks).filter(move |&b| b != a).map(move |b| (a, b)));
    for (from, to) in pairs {
        let bytes = traffic(&text, from, to);
        assert!(
            bytes >= payload,
            "rank {from} → {to}: {bytes} RDMA bytes for {payload} payload bytes"
        );
    }
    report
}

/// The only warning a run may give: a UD stream whose receiver did not poll its last datagram
/// before exiting (UCX's wire-up on its UD QPs, when the machine is loaded at teardown; at
/// most one per stream). The converter pairs the others only where it proves the missing one
/// is the last sent: one machine clock, and that datagram sent after the last receive
/// completed (`converter/tests/ud.rs` checks both outcomes); otherwise — across clock domains,
/// or when the last datagram was already in flight while the receiver polled the one before
/// (seen in CI under load, HPC Challenge over UCX: 4 sent, 3 received) — it draws none of the
/// stream's flows. Returns the receives left unpaired that way.
pub fn unpolled_datagrams(warnings: &[String]) -> u64 {
    warnings
        .iter()
        .map(|w| {
            let counts = w.split_once(" datagrams sent, ").and_then(|(sent, rest)| {
                let sent: u64 = sent.rsplit(' ').next()?.parse().ok()?;
                let recvd: u64 = rest.split(' ').next()?.parse().ok()?;
                Some((sent, recvd))
            });
            let Some((sent, recvd)) = counts else {
                panic!("a warning: {w}\nall: {warnings:?}");
            };
            assert_eq!(sent, recvd + 1, "{w}");
            if w.ends_with("no flows drawn") {
                return recvd;
            }
            let proven = format!("the first {recvd} paired, the last 1 sent after");
            assert!(w.contains(&proven), "{w}");
            0
        })
        .sum()
}

/// [`check_run`] but the traffic between ranks; returns the report, its text and the trace.
pub fn check_paired(dir: &Path, logs: &Path, ranks: usize) -> (Report, String, PathBuf) {
    let n_logs = std::fs::read_dir(logs).unwrap().count();
    assert_eq!(n_logs, ranks, "one log per rank");
    // Each rank's log holds what softnic counted for it (its own tally, SOFTNIC_TALLY).
    assert_eq!(check_against_device(logs, "MPI"), ranks, "a tally per rank");
    let trace = convert_with_one_and_two_workers(logs, dir, "Open MPI");
    let logs = logs.to_path_buf();
    let report =
        sigmatrace_convert::stats(std::slice::from_ref(&logs), &ConvertOptions::default()).unwrap();
    let text = report.text();
    let t = &report.summary.totals;
    let unpaired = unpolled_datagrams(&report.summary.warnings);
    assert_eq!((t.wr_failed, t.orphan_completions), (0, 0), "{t:?}");
    // Failed WRs are 0, so the per-QP errors are the receives flushed at teardown.
    let flushed = qp_column_sum(&text, 0);
    let received = t.recv_completed - flushed;
    assert!(received > 8, "udcm's datagrams and RC sends: {t:?}");
    assert_eq!(
        (t.flows_out + unpaired, t.flows_in + unpaired),
        (received, received),
        "{t:?}\n{text}"
    );
    let v = validate(&trace, &[]);
    assert_eq!(v["stats"]["flows"], received - unpaired);
    assert_eq!(v["stats"]["backward_flows"], 0);
    eprintln!(
        "{ranks} ranks: {} WR events, {} completed WRs, {received} messages paired \
         ({flushed} receives flushed)",
        report.summary.wr_events, t.wr_completed
    );
    (report, text, trace)
}

/// `sh -c SCRIPT sh CMD…`: runs CMD with `SIGMATRACE_DEBUG_CLOCK_SKEW` set to the
/// [`SKEWS`] entry of the rank that `$rank_var` names (the launcher passes one environment to
/// all ranks).
pub fn skew_wrap(rank_var: &str) -> [String; 4] {
    let (a, b) = (SKEWS[0], SKEWS[1]);
    let pick = format!(
        "case ${rank_var} in 0) s={},{};; *) s={},{};; esac; \
         SIGMATRACE_DEBUG_CLOCK_SKEW=$s exec \"$@\"",
        a.0, a.1, b.0, b.1
    );
    ["sh".into(), "-c".into(), pick, "sh".into()]
}

/// NetPIPE's arguments for every run here (its output file appended by the caller).
pub const NETPIPE_ARGS: [&str; 6] = ["-n", "20", "-u", "65536", "-p", "0"];

/// The payload bytes each way that NetPIPE's output file reports: one line per message size
/// (bytes, Mbps, seconds), each size timed in [`TRIALS`] trials of [`REPEATS`] round trips.
pub fn netpipe_payload(out: &Path) -> u64 {
    assert_eq!(NETPIPE_ARGS[1], REPEATS.to_string());
    let sizes: u64 = std::fs::read_to_string(out)
        .expect("NetPIPE's output file")
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        sizes > 65536,
        "NetPIPE ran every size up to 64 KiB: {sizes}"
    );
    sizes * REPEATS * TRIALS
}

/// [`check_run`] of a 2-rank run made with a known clock error per rank: no receive before its
/// send after alignment, the recovered offset within its reported uncertainty of the injected
/// one, no uncertainty wider than half the tightest round trip (real_timelines.rs's check).
pub fn check_clock_errors(dir: &Path, logs: &Path, payload: u64, what: &str) {
    let report = check_run(dir, logs, 2, payload);
    let a = &report.summary.alignment;
    assert_eq!(a.domains.len(), 2, "each rank its own clock: {a:#?}");
    assert_eq!(a.inverted_after, 0, "{a:#?}");
    let errors = crate::alignment::check_alignment(logs, &report);
    eprintln!(
        "{what} with clock errors: receive before send {} before alignment, 0 after; {errors:?}",
        a.inverted_before
    );
}

//! rdma-core's own test suite (Debian's python3-pyverbs 44, unmodified; see
//! `sigmatrace_testkit::pyverbs` and softnic's `pyverbs` tests), traced: 273 tests of
//! every corner of the verbs API — bad parameters, QPs moved through every state, flushes,
//! remote access errors, re-registered and device-memory regions, SRQs, UD, the new post API,
//! extended CQs, ODP, atomics, mlx5dv and devx calls — in one process. The tracer must not
//! change what any of them does: the same random choices (seeded), the same outcome for every
//! test as the untraced run. The log holds exactly the work requests softnic accepted and the
//! completions it delivered (softnic's own count, `SOFTNIC_TALLY`: the device's ground truth,
//! not the tracer's). The log converts; every completion lands on its QP, every message
//! received is paired by a flow, no flow ends before it starts, nothing was lost, and the
//! datagrams one test sends to a UD QP that posted no receive are reported with their count
//! and where they went (the converter's warning said "receiver not found or ambiguous").

use super::*;
use sigmatrace_testkit::pyverbs::Suite;

/// One run of the suite as softnic node 1, traced (into `dir/logs`) or not, with softnic's
/// own count of posts and completions in `dir/tally.jsonl` (`SOFTNIC_TALLY`) and the
/// settings `env` (`NAME=value`).
fn run(dir: &Path, traced: bool, env: &[&str]) -> sigmatrace_testkit::pyverbs::Results {
    let suite = Suite::prepare(dir);
    let tally = format!("SOFTNIC_TALLY={}", dir.join("tally.jsonl").display());
    let p = Proc {
        node: 1,
        argv: ["/usr/bin/env".to_owned(), tally]
            .into_iter()
            .chain(env.iter().map(|e| e.to_string()))
            .chain(
                suite
                    .command()
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned()),
            )
            .collect(),
    };
    let what = if traced { "traced" } else { "untraced" };
    let (ok, text) = start(&p, dir, traced.then_some(false)).finish(
        &format!("rdma-core tests ({what})"),
        Duration::from_secs(600),
    );
    let results = suite.results();
    let tail: Vec<&str> = text.lines().collect();
    let tail = tail[tail.len().saturating_sub(40)..].join("\n");
    results.check(&format!("rdma-core tests ({what})\n{tail}"));
    assert!(ok, "rdma-core tests ({what}) failed:\n{tail}");
    results
}

#[test]
fn rdma_core_test_suite_traced() {
    let (plain_dir, traced_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let plain = run(plain_dir.path(), false, &[]);
    let traced = run(traced_dir.path(), true, &[]);
    let outcomes = |r: &sigmatrace_testkit::pyverbs::Results| -> Vec<(String, String, String)> {
        r.tests
            .iter()
            .map(|t| {
                // A skip's reason is part of its outcome; a traceback is not compared.
                let detail = if t.outcome == "skipped" {
                    t.detail.clone()
                } else {
                    String::new()
                };
                (t.id.clone(), t.outcome.clone(), detail)
            })
            .collect()
    };
    let (a, b) = (outcomes(&plain), outcomes(&traced));
    let differ: Vec<String> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("{x:?} untraced, {y:?} traced"))
        .collect();
    assert!(
        a.len() == b.len() && differ.is_empty(),
        "the tracer changed outcomes ({} vs {} tests):\n{}",
        a.len(),
        b.len(),
        differ.join("\n")
    );

    let logs = traced_dir.path().join("logs");
    let device = device_tally(&traced_dir.path().join("tally.jsonl"));
    assert!(!device.is_empty(), "softnic counted no work request");
    let logged = clean_logs(&logs);
    // What the tracer logged is what the device counted, process by process: every send and
    // receive work request it accepted and every completion it delivered, by success.
    for (pid, counts) in &device {
        assert_eq!(
            logged.get(pid),
            Some(counts),
            "pid {pid}: logged (sends, recvs, ok completions, failed) vs softnic's count"
        );
    }
    assert!(
        logged.keys().all(|p| device.contains_key(p)),
        "{logged:?} {device:?}"
    );
    let trace = convert_with_one_and_two_workers(&logs, traced_dir.path(), "rdma-core tests");
    let v = validate(&trace, &[]);
    let report =
        sigmatrace_convert::stats(std::slice::from_ref(&logs), &ConvertOptions::default()).unwrap();
    let t = &report.summary.totals;
    let warnings = report.summary.warnings.join("\n");
    assert_eq!(
        t.orphan_completions, 0,
        "completions without their QP\n{warnings}"
    );
    let flows = v["stats"]["flows"].as_u64().unwrap();
    assert_eq!(
        (t.flows_out, t.flows_in),
        (flows, flows),
        "flows\n{warnings}"
    );
    // Every receive completion is a message received, each paired with its send (the
    // suite's failed completions are all its senders': remote access and operation errors).
    assert_eq!(
        t.recv_completed, flows,
        "receives without their send\n{warnings}"
    );
    assert!(t.wr_failed > 0 && t.wr_completed > 0, "{t:?}");
    assert_eq!(
        v["stats"]["backward_flows"], 0,
        "flows ending before they start"
    );
    // UD datagrams the suite sends to a QP that posted no receive (or did not poll) are
    // named with their count; no stream may be left unpaired for want of a receiver.
    for w in report
        .summary
        .warnings
        .iter()
        .filter(|w| w.contains(" UD QP "))
    {
        assert!(
            w.contains(" datagrams sent, none received by "),
            "an unpaired UD stream: {w}"
        );
    }
    for p in &report.topology.procs {
        assert!(p.qp(0).is_none(), "{} has a QP 0 track", p.label());
    }
    eprintln!(
        "rdma-core tests traced: {} tests ({} passed), {} WRs completed, {} failed, {} receives, {} flows; softnic's count (sends, recvs, ok, failed completions) {:?}\n{warnings}",
        traced.tests.len(),
        traced.count("ok"),
        t.wr_completed,
        t.wr_failed,
        t.recv_completed,
        flows,
        device
    );
}

/// The suite traced in flight-recorder mode (`SIGMATRACE_MODE=ring`: each thread's ring is the
/// log, written at exit): it passes, and the log — large enough to be kept whole — holds
/// exactly what softnic counted.
#[test]
fn rdma_core_test_suite_flight_recorder() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), true, &["SIGMATRACE_MODE=ring"]);
    let logs = dir.path().join("logs");
    clean_logs(&logs);
    check_against_device(&logs, "rdma-core tests (flight recorder)");
}

/// Each log in `logs` read whole (nothing to salvage) with nothing dropped: what it logged,
/// by pid.
fn clean_logs(logs: &Path) -> std::collections::BTreeMap<u32, Counts> {
    let mut logged = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(logs).unwrap() {
        let path = e.unwrap().path();
        let log = sigmatrace_schemas::LogFile::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(log.salvage().is_clean(), "{}", path.display());
        assert_eq!(
            log.header().dropped,
            0,
            "{}: records dropped",
            path.display()
        );
        logged.insert(log.header().pid, logged_counts(&log));
    }
    logged
}

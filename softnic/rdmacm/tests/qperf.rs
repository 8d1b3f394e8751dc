//! qperf, unmodified, on softnic: the server (`qperf -lp PORT`) on node 1, the client
//! (`qperf -lp PORT 127.0.0.1 -t 1 -vvs TEST`) on node 2, each pair untraced and then traced.
//! qperf uses the verbs directly (RC tests connect through librdmacm, UD tests exchange QP
//! numbers and LIDs over its TCP connection) and forks a server child per test. Both runs must
//! exit 0 with the same output lines (values masked: they are measurements), and the traced
//! logs must hold exactly the messages qperf itself counted (`loc_send_msgs`, `rem_*`).

mod common;
use common::{count, read_log, Logged, LIMIT};
use sigmatrace_schemas::LogFile;
use sigmatrace_testkit::{free_port, listening, softnic_run, system_bin, Cmd, Out};
use std::path::Path;
use std::time::{Duration, Instant};

const WR_RDMA_WRITE_WITH_IMM: u8 = 1;
const WR_SEND: u8 = 2;
const WR_RDMA_READ: u8 = 4;
const WR_ATOMIC_CMP_AND_SWP: u8 = 5;
const WR_ATOMIC_FETCH_AND_ADD: u8 = 6;

/// qperf's window on its RC read and atomic rate tests (`NCQE`): it posts this many WRs, then
/// reposts as many as each poll completed; when the time is up it stops counting and
/// reposting, so at most this many are posted and not counted as completed.
const QPERF_OUTSTANDING: u64 = 1024;

/// Output lines with each `name = value` value masked (values and their units vary).
fn shape(s: &str) -> Vec<String> {
    s.lines()
        .map(|l| match l.split_once('=') {
            Some((name, _)) => format!("{} = #", name.trim()),
            None => l.trim().to_string(),
        })
        .collect()
}

/// One `name = value` statistic of qperf's output, as an integer (thousands separators
/// removed).
fn stat(out: &str, name: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.split('=').next().is_some_and(|n| n.trim() == name))
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"));
    let v = line.split('=').nth(1).unwrap().trim().replace(',', "");
    v.split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// Waits until the log in `dir` was closed (the forked server child exits after the client).
fn wait_closed_log(dir: &Path) {
    let t0 = Instant::now();
    loop {
        let clean = std::fs::read_dir(dir).ok().is_some_and(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "sigmalog"))
                .any(|p| LogFile::open(&p).is_ok_and(|l| l.salvage().is_clean()))
        });
        if clean || t0.elapsed() > Duration::from_secs(30) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one qperf test between two nodes on a fresh fabric; returns the client's outcome
/// and the server's stdout+stderr (the server runs until it is killed).
fn run(test: &str, logs: Option<&Path>) -> (Out, String) {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric").display().to_string();
    let port = free_port().to_string();
    let qperf = system_bin("qperf");
    let run = softnic_run().display().to_string();
    let mk = |node: &str, args: &[&str], sub: &str| {
        let mut v = vec![run.as_str(), "--node", node, "--fabric", &fabric, "--"];
        v.push(&qperf);
        v.extend_from_slice(args);
        let c = Cmd::new(&v);
        match logs {
            Some(l) => c.traced(&l.join(sub)),
            None => c,
        }
    };
    let server = mk("1", &["-lp", &port], "server").spawn();
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let args = ["-lp", &port, "127.0.0.1", "-t", "1", "-vvs", test];
    let client = mk("2", &args, "client").run(LIMIT);
    if let Some(l) = logs {
        wait_closed_log(&l.join("server"));
    }
    let s = server.wait(Duration::ZERO);
    (client, format!("{}{}", s.stdout, s.stderr))
}

/// Untraced, then traced: same exit status and output shape; returns the traced client's
/// output and the server and client logs.
fn traced_like_untraced(test: &str) -> (String, Logged, Logged) {
    let (plain, plain_server) = run(test, None);
    assert!(
        plain.ok(),
        "{test} untraced: {plain:#?}\nserver: {plain_server}"
    );
    let logs = tempfile::tempdir().unwrap();
    let (traced, traced_server) = run(test, Some(logs.path()));
    assert!(
        traced.ok(),
        "{test} traced: {traced:#?}\nserver: {traced_server}"
    );
    assert_eq!(shape(&plain.stdout), shape(&traced.stdout), "{test} stdout");
    assert_eq!(plain.stderr, traced.stderr, "{test} stderr");
    assert_eq!(
        shape(&plain_server),
        shape(&traced_server),
        "{test} server output"
    );
    // The test name, its result and the verbose statistics.
    assert!(shape(&plain.stdout).len() >= 6, "{}", plain.stdout);
    let s = read_log(&logs.path().join("server"));
    let c = read_log(&logs.path().join("client"));
    (traced.stdout, s, c)
}

/// A latency test: a ping-pong of 1-byte SENDs; qperf counts each message it posts, on both
/// sides.
fn ping_pong(test: &str) {
    let (out, s, c) = traced_like_untraced(test);
    assert_eq!(
        count(&c.sends, WR_SEND, 1) as u64,
        stat(&out, "loc_send_msgs")
    );
    assert_eq!(
        count(&s.sends, WR_SEND, 1) as u64,
        stat(&out, "rem_send_msgs")
    );
    assert!(stat(&out, "loc_send_msgs") > 10, "{out}");
}

#[test]
fn qperf_rc_lat() {
    ping_pong("rc_lat");
}

#[test]
fn qperf_ud_lat() {
    ping_pong("ud_lat");
}

#[test]
fn qperf_rc_bw() {
    let (out, s, c) = traced_like_untraced("rc_bw");
    // The client streams 64 KiB SENDs; the server only receives.
    assert_eq!(
        count(&c.sends, WR_SEND, 65536) as u64,
        stat(&out, "send_msgs")
    );
    assert_eq!(s.sends.len(), 0, "{:?}", s.sends);
    // Every message received was posted as a receive first (the rest flush at the end).
    assert!(stat(&out, "recv_msgs") > 0, "{out}");
    assert!(s.recvs as u64 >= stat(&out, "recv_msgs"), "{out}");
}

#[test]
fn qperf_rc_rdma_write_bw() {
    let (out, s, c) = traced_like_untraced("rc_rdma_write_bw");
    // 64 KiB RDMA WRITEs with immediate from the client, each consuming a server receive.
    assert_eq!(
        count(&c.sends, WR_RDMA_WRITE_WITH_IMM, 65536) as u64,
        stat(&out, "send_msgs")
    );
    assert!(s.recvs as u64 >= stat(&out, "recv_msgs"), "{out}");
    assert_eq!(s.sends.len(), 0, "{:?}", s.sends);
    assert!(stat(&out, "send_msgs") > 0, "{out}");
}

#[test]
fn qperf_rc_rdma_read_bw() {
    let (out, s, c) = traced_like_untraced("rc_rdma_read_bw");
    // 64 KiB RDMA READs from the client; qperf counts the completed ones, each of which the
    // log holds as posted and as completed.
    let (posted, counted) = (
        count(&c.sends, WR_RDMA_READ, 65536) as u64,
        stat(&out, "send_msgs"),
    );
    assert!(
        posted >= counted && posted - counted <= QPERF_OUTSTANDING,
        "{posted} posted\n{out}"
    );
    assert!(
        c.completions as u64 >= counted,
        "{} completions\n{out}",
        c.completions
    );
    assert_eq!(c.sends.len() as u64, posted);
    assert!(counted > 0, "{out}");
    assert_eq!(s.sends.len(), 0, "{:?}", s.sends);
}

/// An atomic rate test: the client posts 8-byte atomics of `opcode`, each counted by qperf
/// as it posts it; their completions as in [`qperf_rc_rdma_read_bw`].
fn atomics(test: &str, opcode: u8) {
    let (out, s, c) = traced_like_untraced(test);
    let posted = stat(&out, "send_msgs");
    assert_eq!(count(&c.sends, opcode, 8) as u64, posted, "{out}");
    assert_eq!(c.sends.len() as u64, posted);
    let completed = stat(&out, "recv_msgs");
    assert!(posted - completed <= QPERF_OUTSTANDING, "{out}");
    assert!(
        c.completions as u64 >= completed,
        "{} completions\n{out}",
        c.completions
    );
    assert_eq!(s.sends.len(), 0, "{:?}", s.sends);
}

#[test]
fn qperf_rc_compare_swap_mr() {
    atomics("rc_compare_swap_mr", WR_ATOMIC_CMP_AND_SWP);
}

#[test]
fn qperf_rc_fetch_add_mr() {
    atomics("rc_fetch_add_mr", WR_ATOMIC_FETCH_AND_ADD);
}

/// A one-way SEND bandwidth test: the client posts `bytes`-byte SENDs (counted by qperf), the
/// server only receives (on UC and UD a message may be dropped: it completes no receive).
fn one_way_sends(test: &str, bytes: u32) {
    let (out, s, c) = traced_like_untraced(test);
    assert_eq!(
        count(&c.sends, WR_SEND, bytes) as u64,
        stat(&out, "send_msgs"),
        "{out}"
    );
    assert_eq!(c.sends.len(), count(&c.sends, WR_SEND, bytes));
    assert_eq!(s.sends.len(), 0, "{:?}", s.sends);
    assert!(stat(&out, "recv_msgs") > 0, "{out}");
    assert!(s.completions as u64 >= stat(&out, "recv_msgs"), "{out}");
    assert!(
        s.recvs >= s.completions,
        "a completion per posted receive at most"
    );
}

#[test]
fn qperf_uc_bw() {
    one_way_sends("uc_bw", 65536);
}

#[test]
fn qperf_ud_bw() {
    one_way_sends("ud_bw", 2048);
}

/// A test where both sides post `bytes`-byte WRs of `opcode` and nothing else; qperf counts
/// each side's (`loc_send_msgs`, `rem_send_msgs`). Returns qperf's output.
fn both_sides_send(test: &str, opcode: u8, bytes: u32) -> String {
    let (out, s, c) = traced_like_untraced(test);
    assert_eq!(
        count(&c.sends, opcode, bytes) as u64,
        stat(&out, "loc_send_msgs")
    );
    assert_eq!(
        count(&s.sends, opcode, bytes) as u64,
        stat(&out, "rem_send_msgs")
    );
    assert_eq!(
        (c.sends.len(), s.sends.len()),
        (
            count(&c.sends, opcode, bytes),
            count(&s.sends, opcode, bytes)
        )
    );
    out
}

#[test]
fn qperf_rc_bi_bw() {
    // Both sides stream 64 KiB SENDs.
    both_sides_send("rc_bi_bw", WR_SEND, 65536);
}

#[test]
fn qperf_rc_rdma_write_lat() {
    // A ping-pong of 1-byte RDMA WRITEs with immediate (each consuming the peer's receive).
    let out = both_sides_send("rc_rdma_write_lat", WR_RDMA_WRITE_WITH_IMM, 1);
    assert!(stat(&out, "loc_send_msgs") > 10, "{out}");
}

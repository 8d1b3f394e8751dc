//! Flight-recorder mode (`SIGMATRACE_MODE=ring`, `SIGMATRACE_RING_MB`) on cprogs/flight.c (a
//! real program over fake_verbs' in-process provider: one signaled send per WR, polled at
//! once, wr_ids counting up): the log keeps only the last ring of each thread, everything
//! overwritten is counted per kind in the header's loss table (recorded + dropped = what the
//! program did, exactly), the converter converts it and reports the loss; SIGUSR2 dumps the
//! rings into the log while the program keeps running; after abort(), SIGSEGV or SIGKILL
//! the last window is in the file and the program ended exactly as untraced. And a real
//! program: `ib_write_bw` on softnic, kept + dropped = its `-n` WRs and their completions.

mod common;
use common::*;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sigmatrace_schemas::{LogFile, RecordKind, HEADER_SIZE};
use sigmatrace_testkit::artifacts::{artifact, libsigmatrace};

const LIMIT: Duration = Duration::from_secs(120);
/// 1 MiB rings of 16 KiB chunks: 64 chunks, about 18 700 WRs (a 32-byte compact send and a
/// 24-byte short completion each).
const CHUNK: u64 = 16 << 10;
/// The fewest log bytes a WR takes: a `PostSendCompact` (32) and a `CompletionShort` (24).
const MIN_WR_BYTES: u64 = 56;
const RING_CHUNKS: u64 = 64;
const RING_ENV: [(&str, &str); 3] = [
    ("SIGMATRACE_MODE", "ring"),
    ("SIGMATRACE_RING_MB", "1"),
    ("SIGMATRACE_CHUNK_BYTES", "16K"),
];

fn flight(args: &[&str]) -> Cmd {
    let mut argv = vec![cprog("flight").display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    Cmd::new(&argv)
}

fn ring(mut c: Cmd) -> Cmd {
    for (k, v) in RING_ENV {
        c = c.env(k, v);
    }
    c
}

/// Dropped events of `kind` in the log's loss table.
fn lost(path: &Path, kind: RecordKind) -> u64 {
    let l = LogFile::open(path).unwrap().losses();
    l.by_kind
        .iter()
        .find(|(k, _)| *k == kind as u16)
        .map_or(0, |&(_, n)| n)
}

/// The WR numbers of the posts in log order (flight.c's wr_id is a tag | the number).
fn wr_ids(t: &Trace) -> Vec<u64> {
    t.sends()
        .iter()
        .map(|s| {
            assert_eq!(s.wr_id >> 40, 1, "flight.c's tag");
            s.wr_id & ((1 << 40) - 1)
        })
        .collect()
}

/// The posts' WR numbers in log order, each once (asserted); the exact accounting against
/// `posted` WRs (sends and completions).
fn check_accounting(t: &Trace, posted: u64) -> Vec<u64> {
    let ids = wr_ids(t);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, ids, "posts in order, none twice");
    assert_eq!(
        ids.len() as u64 + lost(&t.path, RecordKind::PostSend),
        posted,
        "posts recorded + dropped"
    );
    assert_eq!(
        t.wcs().len() as u64 + lost(&t.path, RecordKind::WorkCompletion),
        posted,
        "completions recorded + dropped"
    );
    ids
}

/// The last window: posts `first..end`, contiguous, about one ring of them.
fn assert_window(ids: &[u64], end: u64) {
    let first = *ids.first().expect("posts kept");
    assert_eq!(ids, (first..end).collect::<Vec<u64>>(), "the last posts");
    let kept = end - first;
    // A WR takes 56–128 log bytes (a send and a completion record, compact, short or
    // not); the window is the ring, less at most the chunk being refilled.
    let ring = RING_CHUNKS * CHUNK;
    assert!(
        kept * MIN_WR_BYTES <= ring && kept * 128 >= ring - 2 * CHUNK,
        "{kept} WRs kept by a 1 MiB ring"
    );
}

/// Converts the logs in `dir`; its stdout and stderr.
fn convert(dir: &Path, trace: &Path) -> String {
    let out = Command::new(artifact("sigmatrace-convert"))
        .arg(dir)
        .arg("-o")
        .arg(trace)
        .args(["--stats", "--quiet"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(trace.metadata().unwrap().len() > 0);
    text
}

/// The posts kept from the start — the first chunk, kept for the control records it holds
/// (the device, written before the first post) — and the last window, ending at `end`.
fn assert_start_and_window(ids: &[u64], end: u64) {
    assert_eq!(ids[0], 0, "the first chunk is kept (control records)");
    let gap = ids
        .windows(2)
        .position(|w| w[1] != w[0] + 1)
        .expect("a gap after the kept start")
        + 1;
    assert!(
        gap as u64 <= CHUNK / MIN_WR_BYTES,
        "{gap} posts kept with the first chunk"
    );
    assert_window(&ids[gap..], end);
}

#[test]
fn a_long_run_keeps_the_last_ring_and_counts_the_rest_exactly() {
    const N: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let untraced = flight(&["run", &N.to_string()]).run(LIMIT);
    let traced = ring(flight(&["run", &N.to_string()]))
        .traced(&logs)
        .run(LIMIT);
    assert!(untraced.ok() && traced.ok(), "{untraced:?} {traced:?}");
    assert_eq!(traced.stdout, untraced.stdout);
    assert_eq!(traced.stderr, "", "no diagnostics at the default level");
    let t = only_log(&logs);
    assert!(t.clean, "nothing torn");
    let ids = check_accounting(&t, N);
    assert_start_and_window(&ids, N);
    let log = LogFile::open(&t.path).unwrap();
    assert!(log
        .header()
        .attrs
        .contains(&"flight_recorder=ring_bytes:1048576".to_string()));
    // Memory and file stay one ring: the file is the header, the ring and the first chunk
    // (kept for its control records: its committed bytes), nothing else.
    let size = std::fs::metadata(&t.path).unwrap().len();
    let ring_end = HEADER_SIZE as u64 + RING_CHUNKS * CHUNK;
    assert!(size > ring_end && size <= ring_end + CHUNK, "{size}");
    assert_eq!(log.chunks().len() as u64, RING_CHUNKS + 1);
    assert_eq!(t.devices().len(), 1, "the device's record kept");

    // The converter converts it and reports what the flight recorder dropped, per kind.
    let text = convert(&logs, &dir.path().join("t.perfetto-trace"));
    let lost_sends = lost(&t.path, RecordKind::PostSend);
    assert!(
        text.contains("the tracer dropped")
            && text.contains(&format!("PostSend {lost_sends}"))
            && lost_sends == N - ids.len() as u64,
        "{text}"
    );
}

#[test]
fn sigusr2_dumps_the_rings_and_recording_goes_on() {
    const N: u64 = 40_000;
    const K: u64 = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let out = ring(flight(&["usr2", &N.to_string(), &K.to_string()]))
        .traced(dir.path())
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    assert!(out.stdout.contains(&format!("posted {}", N + K)), "{out:?}");
    let t = only_log(dir.path());
    assert!(t.clean);
    let ids = check_accounting(&t, N + K);
    // Two windows: the one the dump preserved (ending with the last post before the signal)
    // and the last ring at exit; a counted gap between them.
    let split = ids
        .iter()
        .position(|&i| i >= N)
        .expect("posts after the dump");
    assert_start_and_window(&ids[..split], N);
    assert_window(&ids[split..], N + K);
    // The dump's copies are chunks beyond the ring.
    let log = LogFile::open(&t.path).unwrap();
    assert!(log.chunks().len() as u64 > RING_CHUNKS);
    let size = std::fs::metadata(&t.path).unwrap().len();
    assert!(
        size <= HEADER_SIZE as u64 + (2 * RING_CHUNKS + 1) * CHUNK,
        "{size}"
    );
    let trace_dir = tempfile::tempdir().unwrap();
    let text = convert(dir.path(), &trace_dir.path().join("t.perfetto-trace"));
    assert!(text.contains("the tracer dropped"), "{text}");
}

#[test]
fn a_second_sigusr2_copies_only_what_changed_since_the_first() {
    const N: u64 = 40_000;
    const K: u64 = 100; // less than a chunk: the second dump has little new to copy
    const M: u64 = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let args = [N, K, M].map(|n| n.to_string());
    let out = ring(flight(&["usr2", &args[0], &args[1], &args[2]]))
        .env("SIGMATRACE_DIAG", "info")
        .traced(dir.path())
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    let dumps: Vec<u64> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("sigmatrace: flight recorder dump: "))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(dumps.len(), 2, "{}", out.stderr);
    assert!(
        dumps[0] >= RING_CHUNKS - 1,
        "the first dump copies the ring: {dumps:?}"
    );
    assert!(
        (1..=2).contains(&dumps[1]),
        "the second copies the chunk that grew (and a new one): {dumps:?}"
    );
    let t = only_log(dir.path());
    assert!(t.clean);
    let ids = check_accounting(&t, N + K + M);
    // The first dump's window and the second's join (N + K - 1 is the last post before the
    // second signal); then the last ring.
    let split = ids
        .iter()
        .position(|&i| i >= N + K)
        .expect("posts after the dumps");
    assert_start_and_window(&ids[..split], N + K);
    assert_window(&ids[split..], N + K + M);
}

#[test]
fn sigusr2_ignored_by_the_program_stays_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let prog = cprog("flight").display().to_string();
    let status = Command::new("sh")
        .args(["-c", &format!("trap '' USR2; exec {prog} usr2 1000 1000")])
        .env("LD_PRELOAD", libsigmatrace())
        .env("SIGMATRACE_DIR", dir.path())
        .envs(RING_ENV)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let t = only_log(dir.path());
    // No dump: the ring only (2000 WRs fit, nothing dropped).
    assert_eq!(check_accounting(&t, 2000), (0..2000).collect::<Vec<u64>>());
    // No dump: the file is the ring and at most the first chunk's copy (kept for its
    // control records); a dump would have copied all ~14 chunks written.
    let size = std::fs::metadata(&t.path).unwrap().len();
    assert!(
        size <= HEADER_SIZE as u64 + (RING_CHUNKS + 1) * CHUNK,
        "{size}: no dump copies"
    );
}

/// Runs `flight <mode> N` untraced and traced; both must end with `signal`.
fn fatal(mode: &str, signal: i32) {
    const N: u64 = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let prog = cprog("flight");
    let plain = Command::new(&prog)
        .args([mode, &N.to_string()])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let traced = Command::new(&prog)
        .args([mode, &N.to_string()])
        .env("LD_PRELOAD", libsigmatrace())
        .env("SIGMATRACE_DIR", dir.path())
        .envs(RING_ENV)
        .output()
        .unwrap();
    assert_eq!(plain.status.signal(), Some(signal), "{plain:?}");
    assert_eq!(traced.status.signal(), Some(signal), "{traced:?}");
    assert_eq!(traced.stdout, plain.stdout);
    let t = only_log(dir.path());
    assert!(t.clean);
    let ids = check_accounting(&t, N);
    assert_start_and_window(&ids, N);
}

#[test]
fn abort_leaves_the_last_ring_and_dies_as_untraced() {
    fatal("abort", libc::SIGABRT);
}

#[test]
fn sigsegv_leaves_the_last_ring_and_dies_as_untraced() {
    fatal("segv", libc::SIGSEGV);
}

#[test]
fn sigkill_leaves_the_last_ring() {
    const MANY: u64 = 1_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(cprog("flight"))
        .args(["run", &MANY.to_string()])
        .env("LD_PRELOAD", libsigmatrace())
        .env("SIGMATRACE_DIR", dir.path())
        .envs(RING_ENV)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until the ring wrapped several times (the log is the ring: its size says nothing).
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let t = only_log(dir.path());
    assert!(t.clean, "nothing torn");
    let ids = wr_ids(&t);
    let end = ids.last().expect("posts kept") + 1;
    assert!(end < MANY, "killed mid-run");
    // Kept + dropped = every post up to the last one kept (a later post was not committed).
    // Exact, except when the kill lands in the few stores between a thread dropping its
    // oldest chunk and counting it (README "Flight recorder"): then that one chunk's posts
    // (at most 292) are missing from both. Never more, never counted twice.
    let accounted = ids.len() as u64 + lost(&t.path, RecordKind::PostSend);
    assert!(
        accounted <= end && end - accounted <= CHUNK / MIN_WR_BYTES,
        "posts recorded + dropped up to the kill: {accounted} of {end}"
    );
    assert_start_and_window(&ids, end);
}

#[test]
fn bad_mode_and_ring_size_give_one_line_each_and_the_log_mode() {
    let dir = tempfile::tempdir().unwrap();
    let out = flight(&["run", "1000"])
        .env("SIGMATRACE_MODE", "flight")
        .env("SIGMATRACE_RING_MB", "0")
        .traced(dir.path())
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stderr,
        "sigmatrace: SIGMATRACE_MODE=\"flight\" is invalid (expected log/ring); using log\n\
         sigmatrace: SIGMATRACE_RING_MB=\"0\" is invalid (expected whole MiB, 1..65536); using 64\n"
    );
    let t = only_log(dir.path());
    let log = LogFile::open(&t.path).unwrap();
    assert!(!log
        .header()
        .attrs
        .iter()
        .any(|a| a.starts_with("flight_recorder=")));
    assert_eq!(check_accounting(&t, 1000), (0..1000).collect::<Vec<u64>>());
}

/// `ib_write_bw -n ITERS -Q 25 -s 8` on softnic (server node 1, client node 2), both traced
/// in ring mode into `logs/{server,client}`; the client's output and exit code.
fn ib_write_bw_ring(logs: &Path, iters: u64) -> (Out, Out) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let fabric = dir.path().join("fabric").display().to_string();
    let iters = iters.to_string();
    let side = |node: &str, client: bool| {
        let mut v = vec![
            softnic_run().display().to_string(),
            "--node".into(),
            node.into(),
            "--fabric".into(),
            fabric.clone(),
            "--".into(),
            system_bin("ib_write_bw"),
        ];
        v.extend(["-n", &iters, "-Q", "25", "-s", "8", "-p", &port].map(String::from));
        if client {
            v.push("localhost".into());
        }
        let sub = if client { "client" } else { "server" };
        ring(Cmd::new(&v)).traced(&logs.join(sub))
    };
    let server = side("1", false).spawn();
    let t0 = std::time::Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = side("2", true).spawn().wait(LIMIT);
    (server.wait(LIMIT), client)
}

#[test]
fn ib_write_bw_on_softnic_keeps_the_last_ring_with_exact_accounting() {
    const ITERS: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let (server, client) = ib_write_bw_ring(&logs, ITERS);
    assert!(server.ok() && client.ok(), "{server:?}\n{client:?}");
    let t = only_log(&logs.join("client"));
    assert!(t.clean, "nothing torn");
    let sends = t.sends().len() as u64;
    let lost_sends = lost(&t.path, RecordKind::PostSend);
    assert!(lost_sends > 0, "the ring wrapped ({sends} posts kept)");
    assert_eq!(sends + lost_sends, ITERS, "posts recorded + dropped");
    // perftest signals every 25th WR (and the last): one completion each.
    assert_eq!(
        t.wcs().len() as u64 + lost(&t.path, RecordKind::WorkCompletion),
        ITERS / 25,
        "completions recorded + dropped"
    );
    // The control records of the start are kept: the QP, its connection, its MR.
    assert_eq!(t.qps().len(), 1, "the client's QP creation");
    assert_eq!(lost(&t.path, RecordKind::QpCreate), 0);
    assert!(
        t.modifies().iter().any(|m| m.new_state == 3),
        "its RTR transition"
    );
    assert!(!t.mrs().is_empty());
    // The file is the header, one ring and the chunks kept for their control records.
    let size = std::fs::metadata(&t.path).unwrap().len();
    let chunks = LogFile::open(&t.path).unwrap().chunks().len() as u64;
    assert!(
        chunks > RING_CHUNKS && chunks <= RING_CHUNKS + 4,
        "{chunks} chunks"
    );
    assert!(size <= HEADER_SIZE as u64 + chunks * CHUNK, "{size}");
    let trace_dir = tempfile::tempdir().unwrap();
    let text = convert(&logs, &trace_dir.path().join("t.perfetto-trace"));
    assert!(
        text.contains(&format!("PostSend {lost_sends}")),
        "the converter reports the dropped posts:\n{text}"
    );
}

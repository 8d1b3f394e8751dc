//! Helpers for the rdmacm tests: two programs under softnic-run on one fabric.

#![allow(dead_code)]

use sigmatrace_schemas::{LogFile, Record};
use sigmatrace_testkit::{softnic_run, Cmd, Out};
use std::path::Path;
use std::time::{Duration, Instant};

pub const LIMIT: Duration = Duration::from_secs(120);

pub use sigmatrace_testkit::{cm_listening, listening};

/// The `ready` "port space" of [`run_pair`] for a server whose first listener is a plain TCP
/// socket of its own (an out-of-band exchange before any rdma_cm call).
pub const TCP_SOCKET: &str = "tcp";

/// What rping's CM thread prints when rdma_get_cm_event fails — as it does when the thread,
/// never joined, loops back into the call after main destroyed the event channel (over the
/// kernel, EBADF from the closed fd; on softnic, EINVAL for the unknown channel).
pub const RPING_CM_THREAD_ERROR: &str = "rdma_get_cm_event: Invalid argument";

/// rping's CM thread then calls `exit(-1)`: when it loses that race to main's own exit the
/// process exits 255 instead of 0, with the error as its last line (the kernel has the same
/// window; later rdma-core signals the thread through an eventfd and joins it before
/// destroying the channel). Such an exit counts as the 0 it would have been — only such an
/// exit: any other status or last line still fails.
pub fn settle_rping_exit(out: &mut Out) {
    if out.code == Some(255) && out.stderr.trim_end().ends_with(RPING_CM_THREAD_ERROR) {
        out.code = Some(0);
    }
}

pub struct Pair {
    pub server: Out,
    pub client: Out,
}

impl Pair {
    /// Both programs succeeded; else a panic showing both outputs, after `what`.
    pub fn assert_ok(&self, what: &str) {
        assert!(
            self.server.ok() && self.client.ok(),
            "{what}\n{:#?}\n{:#?}",
            self.server,
            self.client
        );
    }
}

/// Runs server and client (full argv each) under softnic-run as nodes 1 and 2 on a fresh
/// fabric, the client once the server listens (`ready`: its CM id bound in port space `.0` on
/// port `.1`, or a TCP socket on it for [`TCP_SOCKET`]); traced into `logs` if given.
pub fn run_pair(
    server: &[String],
    client: &[String],
    ready: (&str, u16),
    logs: Option<&Path>,
) -> Pair {
    run_pair_with(server, client, ready, logs, LIMIT)
}

/// [`run_pair`] for a server that never exits by itself (a daemon such as `cmtime`'s): it is
/// killed once the client has exited (its [`Out`] then says `timed_out`).
pub fn run_pair_daemon(
    server: &[String],
    client: &[String],
    ready: (&str, u16),
    logs: Option<&Path>,
) -> Pair {
    run_pair_with(server, client, ready, logs, Duration::ZERO)
}

fn run_pair_with(
    server: &[String],
    client: &[String],
    ready: (&str, u16),
    logs: Option<&Path>,
    server_after_client: Duration,
) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric").display().to_string();
    let run = softnic_run().display().to_string();
    let mk = |node: &str, prog: &[String], sub: &str| {
        let mut v = vec![run.clone(), "--node".into(), node.into(), "--fabric".into()];
        v.extend([fabric.clone(), "--".into()]);
        v.extend(prog.iter().cloned());
        let c = Cmd::new(&v);
        match logs {
            Some(l) => c.traced(&l.join(sub)),
            None => c,
        }
    };
    let s = mk("1", server, "server").spawn();
    let t0 = Instant::now();
    let listens = || match ready {
        (TCP_SOCKET, port) => listening(port),
        (ps, port) => cm_listening(ps, port),
    };
    while !listens() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = mk("2", client, "client").spawn();
    let client = c.wait(LIMIT);
    let server = s.wait(server_after_client);
    Pair { server, client }
}

/// What one traced process logged: (opcode, bytes) of each posted send, and record counts.
#[derive(Debug, Default)]
pub struct Logged {
    pub sends: Vec<(u8, u32)>,
    pub recvs: usize,
    pub completions: usize,
    pub qps: usize,
    pub modifies: usize,
}

/// Decodes the single log a traced process wrote into `dir` (every record must decode).
pub fn read_log(dir: &Path) -> Logged {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sigmalog"))
        .collect();
    assert_eq!(logs.len(), 1, "one log in {}: {logs:?}", dir.display());
    let path = logs.pop().unwrap();
    let log = LogFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        log.salvage().is_clean(),
        "{} not closed cleanly",
        path.display()
    );
    let mut l = Logged::default();
    for c in log.chunks() {
        for raw in log.records(c) {
            let raw = raw.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            match raw
                .decode()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            {
                Record::PostSend(r) => l.sends.push((r.opcode, r.bytes)),
                Record::PostRecv(_) => l.recvs += 1,
                Record::WorkCompletion(_) => l.completions += 1,
                Record::QpCreate(_) => l.qps += 1,
                Record::QpModify(_) => l.modifies += 1,
                _ => {}
            }
        }
    }
    l
}

/// How many posted sends have this opcode and byte count.
pub fn count(sends: &[(u8, u32)], opcode: u8, bytes: u32) -> usize {
    sends.iter().filter(|s| **s == (opcode, bytes)).count()
}

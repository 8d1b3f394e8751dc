//! Helpers for the rdmacm tests: two programs under softnic-run on one fabric.

#![allow(dead_code)]

use sigmatrace_testkit::{softnic_run, Cmd, Out};
use std::path::Path;
use std::time::{Duration, Instant};

pub const LIMIT: Duration = Duration::from_secs(120);

/// Whether a socket named `...:<ps>:127.0.1.1:<port>` (a bound softnic CM id) exists.
pub fn cm_listening(ps: &str, port: u16) -> bool {
    let suffix = format!(":{ps}:127.0.1.1:{port}");
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("@softnic-cm:") && l.trim_end().ends_with(&suffix))
}

pub struct Pair {
    pub server: Out,
    pub client: Out,
}

/// Runs server and client (full argv each) under softnic-run as nodes 1 and 2 on a fresh
/// fabric, the client once the server's CM id is bound; traced into `logs` if given.
pub fn run_pair(
    server: &[String],
    client: &[String],
    ready: (&str, u16),
    logs: Option<&Path>,
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
    while !cm_listening(ready.0, ready.1) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = mk("2", client, "client").spawn();
    let client = c.wait(LIMIT);
    let server = s.wait(LIMIT);
    Pair { server, client }
}

//! Verb semantics across two processes on two simulated nodes: each test runs the C program
//! cprogs/verbs_test.c in one mode as server (node 1) and client (node 2); the program checks
//! the bytes that arrived and every completion field, and exits non-zero on any mismatch.

mod common;
use common::*;
use std::time::Duration;

fn mode(m: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let prog = cprog("verbs_test").display().to_string();
    let p = port.to_string();
    // verbs_test's client retries its TCP connect, so both can start at once.
    let s = spawn(dir.path(), "server", 1, &os(&[&prog, m, "server", &p]));
    let c = spawn(dir.path(), "client", 2, &os(&[&prog, m, "client", &p]));
    let cd = c.wait(Duration::from_secs(60));
    let sd = s.wait(Duration::from_secs(60));
    assert!(
        sd.ok(),
        "server {m}: {:?} timed_out={} {}",
        sd.code,
        sd.timed_out,
        sd.out
    );
    assert!(
        cd.ok(),
        "client {m}: {:?} timed_out={} {}",
        cd.code,
        cd.timed_out,
        cd.out
    );
    assert!(sd.out.contains(&format!("OK {m} server")), "{}", sd.out);
    assert!(cd.out.contains(&format!("OK {m} client")), "{}", cd.out);
}

macro_rules! modes {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            mode(stringify!($name));
        }
    )*};
}

modes!(
    send,
    write,
    read,
    atomic,
    unsignaled,
    rkey,
    access,
    bounds,
    lkey,
    len,
    rnr,
    rnr_recover,
    ud,
    uc,
    srq,
    events,
    wrapi,
    query,
    flush,
    peer_exit
);

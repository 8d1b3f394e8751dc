//! Verb semantics across two processes on two simulated nodes: each test runs the C program
//! cprogs/verbs_test.c in one mode as server (node 1) and client (node 2); the program checks
//! the bytes that arrived and every completion field, and exits non-zero on any mismatch.

mod common;
use common::*;

fn mode(m: &str) {
    c_pair("verbs_test", m);
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
    acked_error,
    peer_exit,
    peer_gone
);

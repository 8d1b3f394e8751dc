//! softnic as a RoCE v2 port (`SOFTNIC_LINK_LAYER=ethernet`): link layer Ethernet, LID 0,
//! GID 0 = the node's IPv4 address as an IPv4-mapped IPv6 address, GID type RoCE v2; the
//! engine and librdmacm address peers by GID. Debian's binaries, unmodified, untraced and
//! traced.

mod common;
use common::{cm_listening, count, read_log, settle_rping_exit, LIMIT};
use sigmatrace_testkit::{free_port, listening, softnic_run, system_bin, Cmd, Out};
use std::path::Path;
use std::time::{Duration, Instant};

const WR_SEND: u8 = 2;

fn cmd(fabric: &str, node: &str, prog: &[&str], logs: Option<&Path>) -> Cmd {
    let run = softnic_run().display().to_string();
    let bin = system_bin(prog[0]);
    let mut v = vec![run.as_str(), "--node", node, "--fabric", fabric, "--", &bin];
    v.extend_from_slice(&prog[1..]);
    let c = Cmd::new(&v).env("SOFTNIC_LINK_LAYER", "ethernet");
    match logs {
        Some(l) => c.traced(&l.join(if node == "1" { "server" } else { "client" })),
        None => c,
    }
}

/// Server on node 1, client on node 2 once `ready` holds; both on a fresh fabric.
fn pair(
    server: &[&str],
    client: &[&str],
    ready: impl Fn() -> bool,
    logs: Option<&Path>,
) -> (Out, Out) {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric").display().to_string();
    let s = cmd(&fabric, "1", server, logs).spawn();
    let t0 = Instant::now();
    while !ready() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = cmd(&fabric, "2", client, logs).run(LIMIT);
    (s.wait(LIMIT), c)
}

#[test]
fn roce_port_identity() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric").display().to_string();
    let out = cmd(&fabric, "3", &["ibv_devinfo", "-v"], None).run(LIMIT);
    assert!(out.ok(), "{out:#?}");
    let field = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name}:\n{}", out.stdout))
            .split_once(':')
            .unwrap()
            .1
            .trim()
            .to_string()
    };
    assert_eq!(field("link_layer"), "Ethernet");
    assert_eq!(field("port_lid"), "0");
    assert_eq!(field("sm_lid"), "0");
    assert_eq!(field("GID[  0]"), "::ffff:127.0.1.3, RoCE v2");
}

#[test]
fn roce_rc_pingpong_by_gid() {
    let port = free_port();
    let p = port.to_string();
    let server = ["ibv_rc_pingpong", "-g", "0", "-p", &p];
    let client = ["ibv_rc_pingpong", "-g", "0", "-p", &p, "localhost"];
    let (s, c) = pair(&server, &client, || listening(port), None);
    assert!(s.ok() && c.ok(), "{s:#?}\n{c:#?}");
    for (out, me, peer) in [(&s, "1", "2"), (&c, "2", "1")] {
        assert!(out.stdout.contains("LID 0x0000, QPN"), "{}", out.stdout);
        assert!(
            out.stdout.contains(&format!("GID ::ffff:127.0.1.{me}")),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains(&format!("GID ::ffff:127.0.1.{peer}")),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("1000 iters in"), "{}", out.stdout);
    }
    // Traced: the same, and each side's log holds its 1000 ping-pong SENDs of 4096 bytes
    // (ibv_rc_pingpong's defaults).
    let port = free_port();
    let p = port.to_string();
    let server = ["ibv_rc_pingpong", "-g", "0", "-p", &p];
    let client = ["ibv_rc_pingpong", "-g", "0", "-p", &p, "localhost"];
    let logs = tempfile::tempdir().unwrap();
    let (s, c) = pair(&server, &client, || listening(port), Some(logs.path()));
    assert!(s.ok() && c.ok(), "traced: {s:#?}\n{c:#?}");
    for who in ["server", "client"] {
        let l = read_log(&logs.path().join(who));
        assert_eq!(count(&l.sends, WR_SEND, 4096), 1000, "{who}");
    }
}

#[test]
fn roce_needs_the_gid() {
    // Without -g the program addresses the peer by LID 0 and no GRH, which an Ethernet port
    // cannot route: the transition to RTR fails, as on RoCE hardware.
    let port = free_port();
    let p = port.to_string();
    let server = ["ibv_rc_pingpong", "-p", &p];
    let client = ["ibv_rc_pingpong", "-p", &p, "localhost"];
    let (s, c) = pair(&server, &client, || listening(port), None);
    // The server connects first (it has the client's address first) and fails; the client
    // then loses its TCP peer.
    assert!(!s.ok() && !c.ok(), "{s:#?}\n{c:#?}");
    assert!(s.stderr.contains("Failed to modify QP to RTR"), "{s:#?}");
}

#[test]
fn roce_rping() {
    for traced in [false, true] {
        let port = free_port();
        let p = port.to_string();
        let server = ["rping", "-s", "-a", "127.0.1.1", "-p", &p, "-C", "10"];
        let client = ["rping", "-c", "-a", "127.0.1.1", "-p", &p, "-C", "10", "-v"];
        let logs = tempfile::tempdir().unwrap();
        let l = traced.then(|| logs.path());
        let (s, mut c) = pair(&server, &client, || cm_listening("106", port), l);
        settle_rping_exit(&mut c);
        assert!(s.ok() && c.ok(), "traced={traced}: {s:#?}\n{c:#?}");
        let pings = c
            .stdout
            .lines()
            .filter(|x| x.starts_with("ping data: rdma-ping-"));
        assert_eq!(pings.count(), 10, "{}", c.stdout);
        if traced {
            // The client's source and sink advertisements (16-byte SENDs) each iteration.
            let cl = read_log(&logs.path().join("client"));
            assert_eq!(count(&cl.sends, WR_SEND, 16), 20);
        }
    }
}

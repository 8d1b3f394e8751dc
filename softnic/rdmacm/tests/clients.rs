//! rdmacm-utils clients, `ib_write_bw -R` and libfabric's `fi_pingpong` (verbs provider),
//! unmodified, on softnic's librdmacm: server on simulated node 1 (127.0.1.1), client on
//! node 2, each pair run untraced and traced (LD_PRELOAD=libsigmatrace.so). Both runs must
//! exit 0 with the same output shape (digits masked), and each traced process must leave one
//! readable log whose work requests are the ones the program's protocol posts.

mod common;
use common::{
    count, read_log, run_pair, run_pair_daemon, settle_rping_exit, Logged, Pair,
    RPING_CM_THREAD_ERROR, TCP_SOCKET,
};
use sigmatrace_testkit::{free_port, system_bin};

const PS_TCP: &str = "106";
const PS_UDP: &str = "111";
const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
const WR_SEND_WITH_IMM: u8 = 3;
const WR_RDMA_READ: u8 = 4;
const WR_RDMA_WRITE_CREDIT: (u8, u32) = (WR_RDMA_WRITE, 8);

/// Lines whose presence depends on thread timing inside the program itself: rping's CM
/// thread prints the client's DISCONNECT event only if it runs before the main thread exits;
/// and if that never-joined thread loops back into rdma_get_cm_event after main destroyed the
/// event channel, the call fails and rping prints the error (over the kernel, EBADF from the
/// closed fd; on softnic, EINVAL for the unknown channel) while main is already exiting 0.
const RACY: &[&str] = &["client DISCONNECT EVENT...", RPING_CM_THREAD_ERROR];

/// Output with every number replaced by `#` (timings, PSNs, QPNs vary between runs).
fn shape(s: &str) -> Vec<String> {
    s.lines()
        .filter(|l| !l.contains("CPU Frequency") && !l.contains("Conflicting CPU frequency"))
        .filter(|l| !RACY.contains(&l.trim()))
        .map(|l| {
            let mut out = String::new();
            let mut prev_alnum = false;
            let mut in_num = false;
            for ch in l.chars() {
                if in_num && (ch.is_ascii_hexdigit() || ch == 'x' || ch == '.') {
                    continue;
                }
                in_num = false;
                if ch.is_ascii_digit() && !prev_alnum {
                    out.push('#');
                    in_num = true;
                } else {
                    out.push(ch);
                }
                prev_alnum = ch.is_ascii_alphanumeric();
            }
            out.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect()
}

/// Untraced, then traced: both succeed with the same output shape; returns the two logs.
fn traced_like_untraced(
    server: &[&str],
    client: &[&str],
    ready: (&str, u16),
) -> (Logged, Logged, Pair) {
    let own = |v: &[&str]| {
        let mut o: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        o[0] = system_bin(v[0]);
        o
    };
    let (server, client) = (own(server), own(client));
    let mut plain = run_pair(&server, &client, ready, None);
    settle_rping_exit(&mut plain.client);
    plain.assert_ok(&format!("{server:?} / {client:?} untraced:"));
    let logs = tempfile::tempdir().unwrap();
    let mut traced = run_pair(&server, &client, ready, Some(logs.path()));
    settle_rping_exit(&mut traced.client);
    traced.assert_ok(&format!("{server:?} / {client:?} traced:"));
    for (p, t, who) in [
        (&plain.server, &traced.server, "server"),
        (&plain.client, &traced.client, "client"),
    ] {
        assert_eq!(shape(&p.stdout), shape(&t.stdout), "{who} stdout");
        assert_eq!(shape(&p.stderr), shape(&t.stderr), "{who} stderr");
    }
    let s = read_log(&logs.path().join("server"));
    let c = read_log(&logs.path().join("client"));
    (s, c, plain)
}

/// Stands in an argument list of [`tcp_pair`] for the fresh port.
const PORT: &str = "{port}";

/// [`traced_like_untraced`] for a pair that meets over rdma_cm TCP on a fresh port, written
/// [`PORT`] in the argument lists.
fn tcp_pair(server: &[&str], client: &[&str]) -> (Logged, Logged, Pair) {
    fn fill<'a>(v: &[&'a str], port: &'a str) -> Vec<&'a str> {
        v.iter()
            .map(|a| if *a == PORT { port } else { a })
            .collect()
    }
    let port = free_port();
    let p = port.to_string();
    traced_like_untraced(&fill(server, &p), &fill(client, &p), (PS_TCP, port))
}

#[test]
fn rping() {
    let n = 20;
    let c = n.to_string();
    let (s, cl, plain) = tcp_pair(
        &["rping", "-s", "-a", "127.0.1.1", "-p", PORT, "-C", &c],
        &["rping", "-c", "-a", "127.0.1.1", "-p", PORT, "-C", &c, "-v"],
    );
    // The client prints each of its n ping buffers, as the server received them.
    let pings: Vec<_> = plain
        .client
        .stdout
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .collect();
    assert_eq!(pings.len(), n, "{}", plain.client.stdout);
    assert!(
        plain.server.stderr.contains("DISCONNECT EVENT"),
        "{}",
        plain.server.stderr
    );
    // Per iteration: the client SENDs its source and then its sink buffer advertisement (16
    // bytes each); the server RDMA READs the ping (64 bytes by default), SENDs "go ahead",
    // RDMA WRITEs the ping back and SENDs "done".
    assert_eq!(cl.sends.len(), 2 * n, "{:?}", cl.sends);
    assert_eq!(count(&cl.sends, WR_SEND, 16), 2 * n);
    assert_eq!(count(&s.sends, WR_RDMA_READ, 64), n, "{:?}", s.sends);
    assert_eq!(count(&s.sends, WR_RDMA_WRITE, 64), n);
    assert_eq!(count(&s.sends, WR_SEND, 16), 2 * n);
    assert_eq!((s.qps, cl.qps), (1, 1));
    // INIT, RTR, RTS (librdmacm) and ERR (rdma_disconnect) on each side.
    assert_eq!((s.modifies, cl.modifies), (4, 4));
}

/// `rdma_xserver` / `rdma_xclient` in their default RC mode (`-c x`, XRC, is not offered:
/// softnic has no XRC domains): the client sends one 16-byte message with rdma_post_send.
#[test]
fn rdma_xserver_xclient_rc() {
    let (s, c, plain) = tcp_pair(
        &["rdma_xserver", "-p", PORT],
        &["rdma_xclient", "-s", "127.0.1.1", "-p", PORT],
    );
    assert!(
        plain.server.stdout.contains("rdma_xserver: end 0"),
        "{:#?}",
        plain.server
    );
    assert!(
        plain.client.stdout.contains("rdma_xclient: end 0"),
        "{:#?}",
        plain.client
    );
    assert_eq!(c.sends, vec![(WR_SEND, 16)], "client");
    assert!(s.sends.is_empty(), "server: {:?}", s.sends);
    assert_eq!((s.recvs, c.recvs), (1, 0));
}

/// `cmtime -c 200`: 200 ids connect at once, each with a QP, then all disconnect. Their REQs
/// reach the one listener's socket together — more than a Unix datagram socket queues
/// (`net.unix.max_dgram_qlen`, 10): the refused ones are sent again, as the IB CM retransmits
/// (before, about 7 % were REJECTED with status 8, "no listener"). Untraced and traced, every
/// connection is made: no error event, the step table complete; the traced client's log has
/// its 200 QPs. The server (a daemon) is killed after the client exits.
#[test]
fn cmtime_connection_burst() {
    let n = 200;
    let port = free_port();
    let p = port.to_string();
    let argv = |v: &[&str]| -> Vec<String> {
        let mut a = vec![system_bin(v[0])];
        a.extend(v[1..].iter().map(|s| s.to_string()));
        a
    };
    let server = argv(&["cmtime", "-b", "127.0.1.1", "-p", &p]);
    let client = argv(&["cmtime", "-s", "127.0.1.1", "-p", &p, "-c", &n.to_string()]);
    let steps = [
        "create id",
        "resolve addr",
        "resolve route",
        "create qp",
        "connect",
        "disconnect",
        "destroy",
    ];
    let logs = tempfile::tempdir().unwrap();
    for traced in [None, Some(logs.path())] {
        let run = run_pair_daemon(&server, &client, (PS_TCP, port), traced);
        let out = &run.client;
        assert!(
            out.ok(),
            "cmtime client (traced: {}): {out:#?}",
            traced.is_some()
        );
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains("event:") && !all.contains("error"), "{all}");
        for step in steps {
            assert!(
                out.stdout
                    .lines()
                    .any(|l| l.starts_with(step) && l.contains(':')),
                "no {step:?} line: {all}"
            );
        }
        assert!(
            run.server.timed_out,
            "the server ran until killed: {:#?}",
            run.server
        );
    }
    let cl = read_log(&logs.path().join("client"));
    assert_eq!(cl.qps, n, "QPs created by the traced client");
}

#[test]
fn ucmatose() {
    // Server (-b) and client (-s) differ only in how they name the address.
    let side = |flag| {
        [
            "ucmatose",
            flag,
            "127.0.1.1",
            "-p",
            PORT,
            "-C",
            "15",
            "-S",
            "200",
        ]
    };
    let (s, c, plain) = tcp_pair(&side("-b"), &side("-s"));
    assert!(
        plain.server.stdout.contains("disconnected"),
        "{}",
        plain.server.stdout
    );
    assert!(plain.client.stdout.contains("return status 0"));
    // Each side sends its 15 messages of 200 bytes (server first, client replies).
    each_side_sent_only(&s, &c, (WR_SEND, 200), 15);
}

/// Server and client each posted exactly `n` sends, every one an `opcode` of `bytes` bytes.
fn each_side_sent_only(s: &Logged, c: &Logged, (opcode, bytes): (u8, u32), n: usize) {
    assert_eq!(count(&s.sends, opcode, bytes), n, "{:?}", s.sends);
    assert_eq!(count(&c.sends, opcode, bytes), n, "{:?}", c.sends);
    assert_eq!((s.sends.len(), c.sends.len()), (n, n));
}

#[test]
fn udaddy() {
    let (s, c, plain) = traced_like_untraced(
        &["udaddy", "-b", "127.0.1.1", "-C", "12", "-S", "100"],
        &["udaddy", "-s", "127.0.1.1", "-C", "12", "-S", "100"],
        (PS_UDP, 7174),
    );
    assert!(plain.client.stdout.contains("return status 0"));
    // UD datagrams carrying the sender's QPN as immediate data: the client sends 12 of 100
    // bytes, the server replies to each through an AH made from the completion.
    each_side_sent_only(&s, &c, (WR_SEND_WITH_IMM, 100), 12);
}

#[test]
fn rdma_server_client() {
    let (s, c, plain) = tcp_pair(
        &["rdma_server", "-s", "127.0.1.1", "-p", PORT],
        &["rdma_client", "-s", "127.0.1.1", "-p", PORT],
    );
    assert!(
        plain.server.stdout.contains("rdma_server: end 0"),
        "{}",
        plain.server.stdout
    );
    assert!(
        plain.client.stdout.contains("rdma_client: end 0"),
        "{}",
        plain.client.stdout
    );
    // One 16-byte message each way (rdma_post_send through rdma_verbs.h).
    assert_eq!(c.sends, vec![(WR_SEND, 16)]);
    assert_eq!(s.sends, vec![(WR_SEND, 16)]);
    assert_eq!((s.recvs, c.recvs), (1, 1));
}

#[test]
fn ib_write_bw_rdma_cm() {
    let n = 200;
    let iters = n.to_string();
    let (s, c, plain) = tcp_pair(
        &["ib_write_bw", "-R", "-n", &iters, "-p", PORT],
        &["ib_write_bw", "-R", "-n", &iters, "-p", PORT, "127.0.1.1"],
    );
    assert!(
        plain.client.stdout.contains("Data ex. method : rdma_cm"),
        "{}",
        plain.client.stdout
    );
    let row = plain
        .client
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .unwrap_or_else(|| panic!("no result row:\n{}", plain.client.stdout));
    let cols: Vec<f64> = row
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    assert_eq!(cols[1], n as f64, "{row}");
    assert!(cols[3] > 0.0, "{row}");
    // The client writes n messages of 64 KiB; the server only receives.
    assert_eq!(
        count(&c.sends, WR_RDMA_WRITE, 65536),
        n,
        "{:?}",
        c.sends.len()
    );
    assert_eq!(count(&s.sends, WR_RDMA_WRITE, 65536), 0);
    assert!(s.qps >= 1 && c.qps >= 1);
}

/// riostream over softnic's rsockets: `riomap` on both sides, a 16-byte `rsend`/`rrecv`
/// exchange, then `riowrite`s into the peer's mapped buffer (each side spins on the buffer's
/// last byte, which only the peer's RDMA WRITE changes), `riounmap`, `rshutdown`, `rclose`.
/// Returns the two logs after checking what every rsocket connection posts once.
fn riostream(extra: &[&str], writes: usize, size: u32) -> (Logged, Logged, Pair) {
    let (s, c, plain) = riostream_pair(extra);
    for (who, out) in [("server", &plain.server), ("client", &plain.client)] {
        let rows: Vec<_> = out.stdout.lines().collect();
        assert_eq!(
            rows.len(),
            2,
            "{who}: header and one result row:\n{}",
            out.stdout
        );
        assert!(rows[0].starts_with("name"), "{who}: {}", out.stdout);
        assert!(rows[1].starts_with("custom"), "{who}: {}", out.stdout);
        assert!(out.stderr.trim().is_empty(), "{who}: {}", out.stderr);
    }
    for (who, l) in [("server", &s), ("client", &c)] {
        // Each side: `transfer_count` writes per iteration into the peer's iomap; one iomap
        // announcement (28 bytes), one 16-byte sync message, one end-of-stream message (SENDs
        // with the message kind as immediate data); one 8-byte credit RDMA WRITE per
        // received message the peer will reuse the buffer of (its iomap and sync messages).
        assert_eq!(
            count(&l.sends, WR_RDMA_WRITE, size),
            writes,
            "{who}: {:?}",
            l.sends
        );
        assert_eq!(count(&l.sends, WR_SEND_WITH_IMM, 28), 1, "{who}");
        assert_eq!(count(&l.sends, WR_SEND_WITH_IMM, 16), 1, "{who}");
        assert_eq!(count(&l.sends, WR_SEND_WITH_IMM, 0), 1, "{who}");
        let credits = l
            .sends
            .iter()
            .filter(|x| **x == WR_RDMA_WRITE_CREDIT)
            .count();
        assert_eq!(credits, 2, "{who}: {:?}", l.sends);
        assert_eq!(l.sends.len(), writes + 5, "{who}");
        // 16 receive buffers up front, the two consumed ones reposted.
        assert_eq!(l.recvs, 18, "{who}");
        assert_eq!(l.qps, 1, "{who}");
    }
    (s, c, plain)
}

#[test]
fn riostream_nonblocking() {
    // Default test option (MSG_DONTWAIT, O_NONBLOCK): 100 transfers of 4 KiB each way.
    riostream(&["-C", "100", "-S", "4096"], 100, 4096);
}

#[test]
fn riostream_blocking_verify_multi_packet() {
    // Blocking calls, data verified by riostream, 20 iterations of 3 transfers of 9000 bytes
    // (three packets each).
    riostream(
        &["-T", "b", "-T", "v", "-I", "20", "-C", "3", "-S", "9000"],
        60,
        9000,
    );
}

#[test]
fn riostream_async_poll() {
    // rpoll before every call, 20 transfers of 100000 bytes (two 64 KiB chunks each: two
    // RDMA WRITEs per riowrite).
    let (s, c, _) = riostream_chunks();
    for l in [&s, &c] {
        assert_eq!(count(&l.sends, WR_RDMA_WRITE, 65536), 20);
        assert_eq!(count(&l.sends, WR_RDMA_WRITE, 100000 - 65536), 20);
    }
}

/// `rstream -T v -C 500 -S 4096` (rsockets stream, rsend/rrecv, data verified by rstream),
/// untraced and traced alike: each side sends 500 transfers of 4 KiB, each one data message
/// (a SEND_WITH_IMM of its bytes); its log holds exactly those and the protocol's others.
#[test]
fn rstream_verify() {
    let (n, size) = (500usize, 4096u32);
    let opts = ["-T", "v", "-C", "500", "-S", "4096"];
    let server = [&["rstream", "-b", "127.0.1.1", "-p", PORT][..], &opts].concat();
    let client = [&["rstream", "-s", "127.0.1.1", "-p", PORT][..], &opts].concat();
    let (s, c, plain) = tcp_pair(&server, &client);
    for (who, out, l) in [("server", &plain.server, &s), ("client", &plain.client, &c)] {
        let rows: Vec<_> = out.stdout.lines().collect();
        assert_eq!(rows.len(), 2, "{who}: header and one row:\n{}", out.stdout);
        assert!(rows[1].starts_with("custom"), "{who}: {}", out.stdout);
        assert!(out.stderr.trim().is_empty(), "{who}: {}", out.stderr);
        assert_eq!(
            count(&l.sends, WR_SEND_WITH_IMM, size),
            n,
            "{who}: {:?}",
            l.sends
        );
        // Besides: rstream's one 16-byte sync message, at most one end of stream (none when
        // the peer's arrived first: rclose then only disconnects), and one credit write per
        // receive buffer reposted (each side posts 16 up front).
        assert_eq!(count(&l.sends, WR_SEND_WITH_IMM, 16), 1, "{who}");
        let eos = count(&l.sends, WR_SEND_WITH_IMM, 0);
        assert!(eos <= 1, "{who}: {eos} ends of stream");
        let credits = count(&l.sends, WR_RDMA_WRITE_CREDIT.0, WR_RDMA_WRITE_CREDIT.1);
        assert_eq!(credits, l.recvs - 16, "{who}: a credit per reposted buffer");
        assert_eq!(l.sends.len(), n + 1 + eos + credits, "{who}: {:?}", l.sends);
        assert_eq!(l.qps, 1, "{who}");
    }
}

/// `rcopy` (rsockets file copy; the server is a daemon, killed after the client exits): a
/// 1 MB file of pseudo-random bytes arrives intact, untraced and traced; the traced client's
/// log holds the file's bytes in its data messages (SEND_WITH_IMM) exactly once.
#[test]
fn rcopy_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let logs = tempfile::tempdir().unwrap();
    for traced in [None, Some(logs.path())] {
        let dst = dir.path().join(format!("dst-{}", traced.is_some()));
        let port = free_port();
        let p = port.to_string();
        let server = vec![system_bin("rcopy"), "-p".into(), p.clone()];
        let target = format!("127.0.1.1:{}", dst.display());
        let client = vec![
            system_bin("rcopy"),
            src.display().to_string(),
            target,
            "-p".into(),
            p,
        ];
        let run = run_pair_daemon(&server, &client, (PS_TCP, port), traced);
        assert!(run.client.ok(), "rcopy client: {:#?}", run.client);
        assert!(run.client.stdout.contains("done"), "{:#?}", run.client);
        assert!(
            std::fs::read(&dst).unwrap() == data,
            "{} differs",
            dst.display()
        );
    }
    // The file in messages of at most 64 KiB (an rsockets message's limit): 15 full ones and
    // the rest; rcopy's own control messages (its request and reply) are below 64 bytes.
    let c = read_log(&logs.path().join("client"));
    let size = data.len() as u32;
    assert_eq!(
        count(&c.sends, WR_SEND_WITH_IMM, 65536),
        (size / 65536) as usize
    );
    assert_eq!(count(&c.sends, WR_SEND_WITH_IMM, size % 65536), 1);
    let file_bytes: u64 = c
        .sends
        .iter()
        .filter(|(op, b)| *op == WR_SEND_WITH_IMM && *b > 64)
        .map(|(_, b)| u64::from(*b))
        .sum();
    assert_eq!(file_bytes, u64::from(size), "{:?}", c.sends);
    assert_eq!(c.qps, 1);
}

/// A riostream server and client with the options `extra`.
fn riostream_pair(extra: &[&str]) -> (Logged, Logged, Pair) {
    let server = [&["riostream", "-p", PORT][..], extra].concat();
    let client = [&["riostream", "-s", "127.0.1.1", "-p", PORT][..], extra].concat();
    tcp_pair(&server, &client)
}

fn riostream_chunks() -> (Logged, Logged, Pair) {
    riostream_pair(&["-T", "a", "-C", "20", "-S", "100000"])
}

/// libfabric's verbs provider (Debian's libfabric-bin, unmodified `fi_pingpong -p verbs`):
/// the two sides meet on fi_pingpong's own TCP control socket, then over rdma_cm (a MSG
/// endpoint: libfabric resolves its peer from the address it puts in the `rdma_getaddrinfo`
/// hints, with no node) or through UD address handles (DGRAM). Per side: `iters` messages of
/// 64 bytes and the one 4-byte message of fi_pingpong's sync before the size.
fn fi_pingpong(ep: &str, iters: usize) -> (Logged, Logged, Pair) {
    let port = free_port().to_string();
    let n = iters.to_string();
    let common = ["fi_pingpong", "-p", "verbs", "-e", ep, "-I", &n, "-S", "64"];
    let server = [&common[..], &["-B", &port]].concat();
    let client = [&common[..], &["-P", &port, "127.0.1.1"]].concat();
    let (s, c, plain) = traced_like_untraced(&server, &client, (TCP_SOCKET, port.parse().unwrap()));
    for out in [&plain.server, &plain.client] {
        // "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec", then the one size.
        let row = out.stdout.lines().find(|l| l.starts_with("64 "));
        assert!(
            row.is_some_and(|r| r.split_whitespace().nth(1) == Some(&*n)),
            "{}",
            out.stdout
        );
    }
    (s, c, plain)
}

/// Each side's sends: its 100 messages and the sync message, nothing else.
fn fi_pingpong_sends(ep: &str) {
    let (s, c, _) = fi_pingpong(ep, 100);
    for l in [&s, &c] {
        assert_eq!(count(&l.sends, WR_SEND, 64), 100, "{:?}", l.sends);
        assert_eq!(count(&l.sends, WR_SEND, 4), 1, "{:?}", l.sends);
        assert_eq!(l.sends.len(), 101);
    }
}

#[test]
fn fi_pingpong_msg() {
    fi_pingpong_sends("msg");
}

#[test]
fn fi_pingpong_dgram() {
    fi_pingpong_sends("dgram");
}

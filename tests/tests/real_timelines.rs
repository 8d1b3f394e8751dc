//! Trustworthy timelines on real clients: unmodified Debian verbs programs (ibverbs-utils,
//! perftest, qperf, rping, UCX's ucx_perftest, libfabric's fi_pingpong, fio, QEMU's RDMA live
//! migration, iSER, rdma-core's own test suite) and the demo's ring all-reduce, each process a simulated softnic node, traced
//! with `libsigmatrace.so` and converted.
//!
//! For every client: the work requests and completions the options imply (never counted from
//! the trace), every completion on its QP (none orphaned), every message paired by a flow,
//! no flow that ends before it starts (the trace checker's `backward_flows`), the conversion
//! byte-identical with 1 and 2 worker threads. Then the same client with a known clock error
//! per process (`SIGMATRACE_DEBUG_CLOCK_SKEW`, offsets within ±2 ms, drifts within ±50 ppm):
//! no receive before its send after alignment, each recovered offset within its reported
//! uncertainty of the injected one (from the logs' `clock_skew=` / `clock_skew_origin=`), and
//! no uncertainty wider than half the tightest round trip between two clock domains.
//!
//! Run with `--nocapture` to see what each case measured.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sigmatrace_convert::ConvertOptions;
use sigmatrace_integration::*;
use sigmatrace_testkit::{cm_listening, listening};

#[path = "timelines/alignment.rs"]
mod alignment;
#[path = "timelines/iser.rs"]
mod iser;
#[path = "timelines/libraries.rs"]
mod libraries;
#[path = "timelines/pyverbs.rs"]
mod pyverbs;
#[path = "timelines/qemu.rs"]
mod qemu;
#[path = "timelines/round_trips.rs"]
mod round_trips;
#[path = "timelines/waits.rs"]
mod waits;
#[path = "timelines/windows.rs"]
mod windows;

/// Injected clock errors (offset ns, drift ppb) by softnic node (1-based, cycled).
const SKEWS: [(i64, i64); 8] = [
    (1_700_000, 45_000),
    (-1_900_000, -38_000),
    (600_000, -50_000),
    (-250_000, 50_000),
    (2_000_000, 12_000),
    (-2_000_000, -20_000),
    (1_100_000, 30_000),
    (-800_000, -44_000),
];

/// One traced process: its softnic node and command line.
struct Proc {
    node: u32,
    argv: Vec<String>,
}

fn proc_(node: u32, cmd: &str) -> Proc {
    Proc {
        node,
        argv: cmd.split_whitespace().map(str::to_owned).collect(),
    }
}

/// Client/server runs: servers listening on their TCP ports first, then the clients.
struct Run {
    servers: Vec<(Proc, u16)>,
    clients: Vec<Proc>,
    /// Servers that never exit by themselves (qperf): stopped after the clients.
    persistent_servers: bool,
}

fn launch(p: &Proc, logs: &Path, fabric: &Path, skew: bool) -> Guarded {
    let mut c = Command::new(artifact("sigmatrace"));
    c.args(["run", "--no-convert", "--quiet", "--softnic-node"])
        .arg(p.node.to_string())
        .arg("-o")
        .arg(logs)
        .arg("--")
        .args(&p.argv)
        .env("SOFTNIC_FABRIC", fabric)
        .env_remove("LD_PRELOAD")
        .env_remove("SIGMATRACE_DEBUG_CLOCK_SKEW")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if skew {
        let (o, d) = SKEWS[(p.node as usize - 1) % SKEWS.len()];
        c.env("SIGMATRACE_DEBUG_CLOCK_SKEW", format!("{o},{d}"));
    }
    // softnic's own count of what each process posted and polled, for `check`.
    c.env("SOFTNIC_TALLY", tally_path(logs));
    Guarded::spawn(&mut c)
}

/// Cases softnic writes no tally for: fio's job processes never run softnic's exit handler
/// (no tally file at all in their runs), and the demo does not run under [`launch`].
const NO_TALLY: [&str; 2] = ["fio ", "sigmatrace demo"];

/// Runs everything; returns the log directory and each client's output.
/// Held from choosing a case's TCP ports until its servers listen on them: the tests run in
/// parallel, and a port another test was given but does not listen on yet looks free (a
/// client once reached another test's server, on another fabric: retry counter exceeded).
static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn execute(make: impl FnOnce() -> Run, dir: &Path, skew: bool) -> (PathBuf, Vec<String>) {
    let (logs, fabric) = (dir.join("logs"), dir.join("fabric"));
    std::fs::create_dir_all(&fabric).unwrap();
    let ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let run = make();
    let servers: Vec<Guarded> = run
        .servers
        .iter()
        .map(|(p, port)| {
            let g = launch(p, &logs, &fabric, skew);
            let t = Instant::now();
            // A TCP listener, or a softnic rdma_cm one (librdmacm programs).
            while !listening(*port) && !cm_listening("106", *port) {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "{:?} never listened on {port}",
                    p.argv
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            g
        })
        .collect();
    drop(ports);
    let clients: Vec<Guarded> = run
        .clients
        .iter()
        .map(|p| launch(p, &logs, &fabric, skew))
        .collect();
    let mut outs = Vec::new();
    for (g, p) in clients.into_iter().zip(&run.clients) {
        let (ok, text) = g.finish(&p.argv.join(" "), Duration::from_secs(120));
        assert!(ok, "{:?} failed:\n{text}", p.argv);
        outs.push(text);
    }
    if run.persistent_servers {
        // Let the servers' children finish their last test, then stop them (dropped guards
        // kill the process groups; the logs are complete up to there).
        std::thread::sleep(Duration::from_millis(300));
        drop(servers);
    } else {
        for (g, (p, _)) in servers.into_iter().zip(&run.servers) {
            let (ok, text) = g.finish(&p.argv.join(" "), Duration::from_secs(120));
            assert!(ok, "{:?} failed:\n{text}", p.argv);
        }
    }
    (logs, outs)
}

/// What the options imply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Expect {
    /// Send-queue WRs completed (successfully).
    wrs: u64,
    /// Receive completions.
    recvs: u64,
    /// Messages (each a flow from its send to its receive).
    flows: u64,
    /// Allowed difference of `wrs` and `recvs` (0: exact; see qperf).
    slack: u64,
}

/// What a case measured (printed).
#[allow(dead_code)]
#[derive(Debug, Default)]
struct Measured {
    counts: Expect,
    inverted_before: u64,
    inverted_after: u64,
    domains: usize,
    /// Per non-reference domain at t0: (offset error ns, uncertainty ns, half tightest round
    /// trip with the reference).
    offsets: Vec<(f64, Option<f64>, Option<f64>)>,
    /// Per pair of domains with messages both ways, at its best time: (error of the pair's
    /// estimate ns, uncertainty ns, half its tightest round trip ns).
    links: Vec<(f64, f64, f64)>,
    /// Smallest slack of a kept constraint at the final correction (ns).
    min_slack_ns: Option<f64>,
    /// The bytes the trace's "completed bytes/s" counters add up to, all processes together.
    completed_bytes: i128,
    /// Per QP with send WRs (stats' queue-pair table and the log's counts): (process, QPN,
    /// WRs, WRs timed, WRs implied, completions of the QP in the log, receives).
    qp_rows: Vec<(String, u32, u64, u64, u64, u64, u64)>,
    /// Slice tracks in the trace (QPs, their lanes, arrival tracks), the most send lanes of a
    /// QP, and the receive WRs not drawn as slices.
    lanes: (u64, u64, u64),
}

/// Converts twice (1 and 2 worker threads) and checks the trace and the report.
fn check(logs: &Path, expect: Expect, skew: bool, what: &str) -> Measured {
    if !NO_TALLY.iter().any(|c| what.starts_with(c)) {
        check_against_device(logs, what);
    }
    let trace = convert_with_one_and_two_workers(logs, logs.parent().unwrap(), what);
    let v = validate(&trace, &[]);
    let completed_bytes = completed_bytes(&trace);
    let report = sigmatrace_convert::stats(&[logs.to_owned()], &ConvertOptions::default()).unwrap();
    let t = &report.summary.totals;
    let a = &report.summary.alignment;
    let mut m = Measured {
        counts: Expect {
            wrs: t.wr_completed,
            recvs: t.recv_completed,
            flows: v["stats"]["flows"].as_u64().unwrap(),
            slack: 0,
        },
        inverted_before: a.inverted_before,
        inverted_after: a.inverted_after,
        domains: a.domains.len(),
        min_slack_ns: a.min_slack_ns,
        completed_bytes,
        lanes: (
            v["stats"]["other_tracks"].as_u64().unwrap(),
            t.max_lanes,
            t.recv_undrawn,
        ),
        ..Default::default()
    };
    let qps = report
        .section::<sigmatrace_convert::report::QpTable>()
        .expect("a queue-pair table");
    for r in qps.rows.iter().filter(|r| r.ops > 0) {
        let p = &report.topology.procs[r.proc_];
        let completions = p.qp(r.qpn).map_or(0, |q| q.counts.completions);
        m.qp_rows.push((
            p.label(),
            r.qpn,
            r.ops,
            r.timed(),
            r.implied,
            completions,
            r.recvs,
        ));
    }
    let warnings = report.summary.warnings.join("\n");
    m.counts.slack = expect.slack;
    let near = |a: u64, b: u64| a.abs_diff(b) <= expect.slack;
    assert!(
        near(m.counts.wrs, expect.wrs) && near(m.counts.recvs, expect.recvs),
        "{what}: counts {:?}, expected {expect:?}\n{warnings}",
        m.counts
    );
    // Every received message is paired with its send. A UD stream whose receiver did not get
    // (or did not poll before exiting) every datagram (qperf's last one; at most one per
    // stream) is paired up to its last receive where the converter can prove the missing
    // ones are the last sent (one machine clock, the next datagram sent after the last
    // receive); otherwise it draws none of that stream's flows. Either way a warning names
    // the counts.
    let unpaired_ud: u64 = report
        .summary
        .warnings
        .iter()
        .filter_map(|w| {
            let (sent, rest) = w.split_once(" datagrams sent, ")?;
            let sent: u64 = sent.rsplit(' ').next()?.parse().ok()?;
            let recvd: u64 = rest.split(' ').next()?.parse().ok()?;
            assert!(sent.abs_diff(recvd) <= 1, "{what}: {w}");
            if w.ends_with("no flows drawn") {
                // Only where nothing proves which datagram is missing: different clocks.
                assert!(skew, "{what}: one machine clock, yet unpaired: {w}");
                return Some(recvd);
            }
            assert!(
                w.contains(&format!(
                    "the first {recvd} paired, the last {} sent after",
                    sent - recvd
                )),
                "{what}: {w}"
            );
            None
        })
        .sum();
    assert_eq!(
        m.counts.flows + unpaired_ud,
        m.counts.recvs,
        "{what}: flows\n{warnings}"
    );
    assert_eq!(t.wr_failed, 0, "{what}");
    assert_eq!(
        t.orphan_completions, 0,
        "{what}: completions without their QP\n{warnings}"
    );
    assert_eq!(
        (t.flows_out, t.flows_in),
        (m.counts.flows, m.counts.flows),
        "{what}: flows\n{warnings}"
    );
    for p in &report.topology.procs {
        assert!(p.qp(0).is_none(), "{what}: {} has a QP 0 track", p.label());
    }
    assert_eq!(
        v["stats"]["backward_flows"], 0,
        "{what}: flows ending before they start; alignment: {:#?}",
        report.summary.alignment
    );
    assert_eq!(
        a.inverted_after, 0,
        "{what}: receive before send after alignment"
    );
    if skew {
        assert_eq!(
            a.domains.len(),
            report.topology.procs.len(),
            "{what}: every skewed process is its own clock domain"
        );
        let errors = alignment::check_alignment(logs, &report);
        (m.offsets, m.links) = (errors.offsets, errors.links);
    } else {
        assert_eq!(
            a.domains.len(),
            1,
            "{what}: softnic nodes share one machine clock"
        );
    }
    eprintln!("{what}: {m:?}");
    m
}

/// rping (rdmacm-utils, unmodified) over softnic's librdmacm. Per iteration the client SENDs
/// two 16-byte buffer advertisements; the server RDMA READs the 64-byte ping, SENDs "go ahead",
/// RDMA WRITEs the ping back and SENDs "done". At disconnect each side's posted receive is
/// flushed — a failed completion, whose opcode verbs leaves undefined (rping polls into a
/// stack `ibv_wc`; softnic, like mlx5, writes no opcode for it) — when its CQ thread polls it
/// before the program exits (so, sometimes, is the last SEND of a side whose message arrived).
/// Every completion lands on its QP, every message is paired, and the completed-bytes
/// counters add up to what the program moved.
#[test]
fn rping_with_flushed_receives() {
    let n = 10u64;
    for skew in [false, true] {
        let what = format!("rping -C {n}{}", if skew { " (clock errors)" } else { "" });
        let tmp = tempfile::tempdir().unwrap();
        let run = || {
            let port = free_port();
            let cmd = |side: &str| format!("rping {side} -a 127.0.1.1 -p {port} -C {n}");
            Run {
                servers: vec![(proc_(1, &cmd("-s")), port)],
                clients: vec![proc_(2, &format!("{} -v", cmd("-c")))],
                persistent_servers: false,
            }
        };
        let (logs, _) = execute(run, tmp.path(), skew);
        let out = tmp.path().join("t.perfetto-trace");
        let report =
            sigmatrace_convert::convert_with_report(&[logs], &out, &ConvertOptions::default())
                .unwrap();
        let t = &report.summary.totals;
        // Each side's last WR is a 16-byte SEND; its message can arrive while its own
        // acknowledgement does not before the peer disconnects: then it is flushed (seen
        // once in a CI run), as on a NIC.
        assert_eq!(t.wr_completed + t.wr_failed, 6 * n, "{what}: {t:?}");
        assert!(t.wr_failed <= 2, "{what}: {t:?}");
        assert_eq!(t.orphan_completions, 0, "{what}: {t:?}");
        assert_eq!((t.flows_out, t.flows_in), (4 * n, 4 * n), "{what}: {t:?}");
        let flushed = t.recv_completed - 4 * n;
        assert!(flushed <= 2, "{what}: {t:?}");
        let v = validate(&out, &[]);
        assert_eq!(v["stats"]["flows"], 4 * n, "{what}");
        assert_eq!(v["stats"]["backward_flows"], 0, "{what}");
        // Sends 2n·16 (client) and 2n·16 (server), reads and writes n·64 each, receives 4n·16;
        // a flushed WR completed no bytes (a side's last SEND, 16, or its WRITE and SEND, 80).
        let missing = 256 * n as i128 - completed_bytes(&out);
        if t.wr_failed == 0 {
            assert_eq!(missing, 0, "{what}: completed bytes");
        } else {
            let most = 80 * t.wr_failed as i128;
            assert!(
                missing > 0 && missing <= most && missing % 16 == 0,
                "{what}: {missing}"
            );
        }
        eprintln!("{what}: {flushed} flushed receives polled");
    }
}

/// The bytes a trace's "completed bytes/s" counters add up to: each sample is one
/// throughput bucket's bytes times 1e9 / bucket width.
fn completed_bytes(trace: &Path) -> i128 {
    let per_ns = (1_000_000_000 / sigmatrace_convert::model::THROUGHPUT_BUCKET) as i128;
    let r = sigmatrace_testkit::trace::check(trace);
    let rates: i128 = r
        .counter_totals
        .iter()
        .filter(|(name, _)| name.ends_with(" completed bytes/s"))
        .map(|(_, sum)| sum)
        .sum();
    assert_eq!(rates % per_ns, 0, "{}: rates {rates}", trace.display());
    rates / per_ns
}

/// Runs a case plain and with clock errors; asserts, when `bytes` is given, that the
/// completed-bytes counters add up to it (what the program moved: the posted bytes of its
/// completed sends, writes, reads and atomics and the bytes of its receives).
fn case_bytes(
    name: &str,
    run: impl Fn() -> Run,
    expect: impl Fn(&[String]) -> Expect,
    bytes: Option<u64>,
) -> Vec<Measured> {
    let mut all = Vec::new();
    for skew in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (logs, outs) = execute(&run, tmp.path(), skew);
        let what = format!("{name}{}", if skew { " (clock errors)" } else { "" });
        let m = check(&logs, expect(&outs), skew, &what);
        if let Some(b) = bytes {
            assert_eq!(m.completed_bytes, b as i128, "{what}: completed bytes");
        }
        all.push(m);
    }
    all
}

/// [`case_bytes`] without a byte count.
fn case(name: &str, run: impl Fn() -> Run, expect: impl Fn(&[String]) -> Expect) {
    case_bytes(name, run, expect, None);
}

fn pingpong(prog: &'static str, opts: &str, iters: u64) -> impl Fn() -> Run {
    let opts = opts.to_owned();
    move || {
        let port = free_port();
        let cmd = format!("{prog} {opts} -p {port} -n {iters}");
        Run {
            servers: vec![(proc_(1, &cmd), port)],
            clients: vec![proc_(2, &format!("{cmd} 127.0.0.1"))],
            persistent_servers: false,
        }
    }
}

/// Each side sends `iters` messages and receives the other's.
fn both_ways(iters: u64) -> impl Fn(&[String]) -> Expect {
    move |_| Expect {
        wrs: 2 * iters,
        recvs: 2 * iters,
        flows: 2 * iters,
        slack: 0,
    }
}

#[test]
fn rc_pingpong_default() {
    // 4096-byte messages (the default -s); each side completes 100 sends and 100 receives.
    case_bytes(
        "ibv_rc_pingpong",
        pingpong("ibv_rc_pingpong", "", 100),
        both_ways(100),
        Some(4 * 100 * 4096),
    );
}

#[test]
fn rc_pingpong_completion_timestamps() {
    case(
        "ibv_rc_pingpong -t",
        pingpong("ibv_rc_pingpong", "-t", 100),
        both_ways(100),
    );
}

#[test]
fn rc_pingpong_events() {
    case(
        "ibv_rc_pingpong -e",
        pingpong("ibv_rc_pingpong", "-e", 100),
        both_ways(100),
    );
}

#[test]
fn rc_pingpong_new_send_api() {
    case(
        "ibv_rc_pingpong -N",
        pingpong("ibv_rc_pingpong", "-N", 100),
        both_ways(100),
    );
}

#[test]
fn uc_pingpong() {
    case(
        "ibv_uc_pingpong",
        pingpong("ibv_uc_pingpong", "", 100),
        both_ways(100),
    );
}

#[test]
fn ud_pingpong() {
    case(
        "ibv_ud_pingpong",
        pingpong("ibv_ud_pingpong", "", 100),
        both_ways(100),
    );
}

#[test]
fn srq_pingpong() {
    // 4 QPs sharing one SRQ. The program stops once it has counted `iters` sends and
    // receives; a QP's next send goes out when its previous send and receive are both done,
    // so each side sends exactly `iters` + (what was in flight at that moment) — the latter
    // depends on timing; what is fixed: every message sent is received (the peer keeps
    // polling until its own counts are reached) and paired.
    let iters = 100;
    for skew in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (logs, _) = execute(
            pingpong("ibv_srq_pingpong", "-q 4", iters),
            tmp.path(),
            skew,
        );
        let report =
            sigmatrace_convert::stats(std::slice::from_ref(&logs), &ConvertOptions::default())
                .unwrap();
        let t = &report.summary.totals;
        let per_side: Vec<(u64, u64)> = report
            .topology
            .procs
            .iter()
            .map(|p| {
                let c = p.qps.iter().fold((0, 0), |a, q| {
                    (a.0 + q.counts.consuming_sends, a.1 + q.counts.recv_ok)
                });
                assert_eq!(p.qps.len(), 4, "{}", p.label());
                c
            })
            .collect();
        for &(sends, recvs) in &per_side {
            assert!((iters..iters + 4).contains(&sends), "{per_side:?}");
            assert!(recvs >= iters, "{per_side:?}");
        }
        let sent: u64 = per_side.iter().map(|s| s.0).sum();
        let expect = Expect {
            wrs: t.wr_completed,
            recvs: t.recv_completed,
            flows: t.recv_completed,
            slack: 0,
        };
        assert!(
            t.wr_completed >= 2 * iters && sent >= t.recv_completed,
            "{t:?}"
        );
        check(
            &logs,
            expect,
            skew,
            &format!(
                "ibv_srq_pingpong -q 4{}",
                if skew { " (clock errors)" } else { "" }
            ),
        );
    }
}

fn perftest(prog: &'static str, opts: &str) -> impl Fn() -> Run {
    let opts = opts.to_owned();
    move || {
        let port = free_port();
        let cmd = format!("{prog} {opts} -p {port}");
        Run {
            servers: vec![(proc_(1, &cmd), port)],
            clients: vec![proc_(2, &format!("{cmd} 127.0.0.1"))],
            persistent_servers: false,
        }
    }
}

/// `-a`: message sizes 2 B … 8 MiB, 23 of them.
const ALL_SIZES: u64 = 23;

#[test]
fn ib_send_lat_all_sizes() {
    let n = 5;
    case(
        "ib_send_lat -a",
        perftest("ib_send_lat", &format!("-a -n {n}")),
        |_| Expect {
            wrs: 2 * ALL_SIZES * n,
            recvs: 2 * ALL_SIZES * n,
            flows: 2 * ALL_SIZES * n,
            slack: 0,
        },
    );
}

#[test]
fn ib_send_bw_all_sizes() {
    let n = 5;
    // n messages of each size 2^1 … 2^23, sent by the client and received by the server.
    let sizes: u64 = (1..=ALL_SIZES).map(|k| 1u64 << k).sum();
    case_bytes(
        "ib_send_bw -a",
        perftest("ib_send_bw", &format!("-a -n {n}")),
        |_| Expect {
            wrs: ALL_SIZES * n,
            recvs: ALL_SIZES * n,
            flows: ALL_SIZES * n,
            slack: 0,
        },
        Some(2 * n * sizes),
    );
}

#[test]
fn ib_write_bw_eight_qps() {
    let n = 1000;
    // 8-byte writes, most of them unsignaled (one in 100, perftest's default -Q, is
    // signaled; with 64 KiB writes perftest signals every one): the counter adds the posted
    // bytes of every WR a completion completes.
    let runs = case_bytes(
        "ib_write_bw -q 8",
        perftest("ib_write_bw", &format!("-q 8 -s 8 -n {n}")),
        |_| Expect {
            wrs: 8 * n,
            recvs: 0,
            flows: 0,
            slack: 0,
        },
        Some(8 * n * 8),
    );
    // The client's 8 QPs: a WR's latency is timed only when a completion reports it (one
    // per completion the program polled); the unsignaled WRs retired with it are implied.
    for m in runs {
        assert_eq!(m.qp_rows.len(), 8, "{:?}", m.qp_rows);
        for &(ref proc_, qpn, ops, timed, implied, completions, recvs) in &m.qp_rows {
            let row = format!("{proc_} QP {qpn:#x}: {:?}", m.qp_rows);
            assert_eq!((ops, recvs), (n, 0), "{row}");
            assert_eq!(timed, completions, "{row}");
            assert_eq!(timed + implied, ops, "{row}");
            assert!(implied > 0 && timed > 0, "{row}");
        }
    }
}

#[test]
fn ib_read_lat() {
    let n = 50;
    // 2-byte reads (the default -s).
    case_bytes(
        "ib_read_lat",
        perftest("ib_read_lat", &format!("-n {n}")),
        |_| Expect {
            wrs: n,
            recvs: 0,
            flows: 0,
            slack: 0,
        },
        Some(2 * n),
    );
}

#[test]
fn ib_atomic_lat() {
    let n = 50;
    // 8-byte atomics.
    case_bytes(
        "ib_atomic_lat",
        perftest("ib_atomic_lat", &format!("-n {n}")),
        |_| Expect {
            wrs: n,
            recvs: 0,
            flows: 0,
            slack: 0,
        },
        Some(8 * n),
    );
}

fn qperf(test: &'static str) -> impl Fn() -> Run {
    move || {
        let port = free_port();
        Run {
            servers: vec![(proc_(1, &format!("qperf -lp {port}")), port)],
            clients: vec![proc_(
                2,
                &format!("qperf 127.0.0.1 -lp {port} -t 1 -vvs {test}"),
            )],
            persistent_servers: true,
        }
    }
}

/// A `name = 4,009` statistic of qperf's `-vvs` output.
fn qperf_stat(out: &str, key: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().replace(',', "").parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

/// qperf runs for a time, not a count: the counts are the ones it reports (`-vvs`). It
/// samples its counters when the time is up, while each side may still complete (or not yet
/// poll) its last message: one per side either way.
fn qperf_counts(outs: &[String]) -> Expect {
    let o = &outs[0];
    let sends = qperf_stat(o, "loc_send_msgs") + qperf_stat(o, "rem_send_msgs");
    let recvs = qperf_stat(o, "loc_recv_msgs") + qperf_stat(o, "rem_recv_msgs");
    Expect {
        wrs: sends,
        recvs,
        flows: recvs,
        slack: 2,
    }
}

#[test]
fn qperf_rc_lat() {
    case("qperf rc_lat", qperf("rc_lat"), qperf_counts);
}

#[test]
fn qperf_ud_lat() {
    case("qperf ud_lat", qperf("ud_lat"), qperf_counts);
}

#[test]
fn eight_concurrent_rc_pingpong_pairs() {
    let iters = 50;
    case(
        "8 × ibv_rc_pingpong",
        move || {
            let mut r = Run {
                servers: Vec::new(),
                clients: Vec::new(),
                persistent_servers: false,
            };
            for i in 0..8u32 {
                let port = free_port();
                let cmd = format!("ibv_rc_pingpong -p {port} -n {iters}");
                r.servers.push((proc_(2 * i + 1, &cmd), port));
                r.clients
                    .push(proc_(2 * i + 2, &format!("{cmd} 127.0.0.1")));
            }
            r
        },
        |_| Expect {
            wrs: 16 * iters,
            recvs: 16 * iters,
            flows: 16 * iters,
            slack: 0,
        },
    );
}

/// The demo's ring all-reduce: `ranks` processes, per iteration 2·(ranks − 1) chunk writes
/// with immediate to the right neighbour and one credit to the left.
#[test]
fn ring_allreduce_demo() {
    let (ranks, iters) = (4u64, 5u64);
    let msgs = ranks * iters * (2 * (ranks - 1) + 1);
    // `sigmatrace demo` itself (one machine clock) ...
    let tmp = tempfile::tempdir().unwrap();
    output_ok(
        Command::new(artifact("sigmatrace"))
            .args([
                "demo", "--ranks", "4", "--iters", "5", "--elems", "4096", "-o",
            ])
            .arg(tmp.path().join("demo"))
            .env_remove("LD_PRELOAD"),
    );
    // The all-reduce logs (the demo directory also holds the MoE example's in moe/).
    let logs = tmp.path().join("ring-logs");
    std::fs::create_dir_all(&logs).unwrap();
    for e in std::fs::read_dir(tmp.path().join("demo")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sigmalog") {
            std::fs::rename(&p, logs.join(p.file_name().unwrap())).unwrap();
        }
    }
    let expect = Expect {
        wrs: msgs,
        recvs: msgs,
        flows: msgs,
        slack: 0,
    };
    check(&logs, expect, false, "sigmatrace demo");
    // ... and the same workload with a clock error per rank.
    let tmp = tempfile::tempdir().unwrap();
    let rz = tmp.path().join("rz");
    let w = artifact("ring_allreduce");
    let run = Run {
        servers: Vec::new(),
        clients: (0..ranks as u32)
            .map(|r| {
                proc_(
                    r + 1,
                    &format!(
                        "{} --rank {r} --ranks {ranks} --rendezvous {} --elems 4096 --iters {iters}",
                        w.display(),
                        rz.display()
                    ),
                )
            })
            .collect(),
        persistent_servers: false,
    };
    let (logs, _) = execute(|| run, tmp.path(), true);
    check(&logs, expect, true, "ring all-reduce (clock errors)");
}

/// (opcode, bytes) of every WR posted to a send queue, per log in `logs` (each closed cleanly).
fn posted_sends(logs: &Path) -> Vec<Vec<(u8, u32)>> {
    use sigmatrace_schemas::{LogFile, Record};
    let mut all = Vec::new();
    for e in std::fs::read_dir(logs).unwrap() {
        let path = e.unwrap().path();
        let log = LogFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(log.salvage().is_clean(), "{}", path.display());
        let mut sends = Vec::new();
        for c in log.chunks() {
            for raw in log.records(c) {
                if let Record::PostSend(r) = raw.unwrap().decode().unwrap() {
                    sends.push((r.opcode, r.bytes));
                }
            }
        }
        all.push(sends);
    }
    all
}

/// Starts `p` under softnic on `dir/fabric`: traced into `dir/logs` (with its node's clock
/// error if the flag says so, as [`launch`]) or untraced (softnic-run alone).
fn start(p: &Proc, dir: &Path, traced: Option<bool>) -> Guarded {
    let fabric = dir.join("fabric");
    std::fs::create_dir_all(&fabric).unwrap();
    match traced {
        Some(skew) => launch(p, &dir.join("logs"), &fabric, skew),
        None => Guarded::spawn(
            Command::new(artifact("softnic-run"))
                .args(["--node", &p.node.to_string(), "--fabric"])
                .arg(&fabric)
                .arg("--")
                .args(&p.argv)
                .env_remove("LD_PRELOAD")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        ),
    }
}

//! Debian's unmodified ibverbs-utils and perftest binaries on softnic: server on simulated node 1,
//! client on node 2, TCP exchange on a free localhost port, default options (plus the
//! ibv_rc_pingpong variants -N, -e, -t), and UCX's ucx_info and ucx_perftest over its verbs
//! transports. Each must exit 0 and print sane results.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn bin(name: &str) -> String {
    let p = Path::new("/usr/bin").join(name);
    assert!(
        p.exists(),
        "{} missing: run scripts/install-deps.sh (ibverbs-utils, perftest)",
        p.display()
    );
    p.display().to_string()
}

fn pair(name: &str, extra: &[&str]) -> (Done, Done) {
    pair_within(name, extra, LIMIT)
}

fn pair_within(name: &str, extra: &[&str], limit: Duration) -> (Done, Done) {
    pair_env(&[], name, extra, limit)
}

/// [`pair_within`] with environment settings `env` (`NAME=value`, through `env(1)`).
fn pair_env(env: &[&str], name: &str, extra: &[&str], limit: Duration) -> (Done, Done) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().to_string();
    let b = bin(name);
    let mut s: Vec<&str> = match env {
        [] => Vec::new(),
        _ => [&["/usr/bin/env"][..], env].concat(),
    };
    s.extend_from_slice(&[b.as_str(), "-p", &port]);
    s.extend_from_slice(extra);
    let mut c = s.clone();
    c.push("localhost");
    let (sd, cd) = run_pair(
        dir.path(),
        port.parse().expect("port"),
        &os(&s),
        &os(&c),
        limit,
    );
    assert!(
        sd.ok(),
        "{name} {extra:?} server: {:?} timed_out={}\n{}",
        sd.code,
        sd.timed_out,
        sd.out
    );
    assert!(
        cd.ok(),
        "{name} {extra:?} client: {:?} timed_out={}\n{}",
        cd.code,
        cd.timed_out,
        cd.out
    );
    (sd, cd)
}

/// Checks a pingpong's closing lines: "N bytes in T seconds = R Mbit/sec", "N iters in ...";
/// returns the server's and the client's runs.
fn pingpong(name: &str, extra: &[&str]) -> (Done, Done) {
    let (sd, cd) = pair(name, extra);
    for d in [&sd, &cd] {
        assert!(
            d.out.contains("local address:") && d.out.contains("remote address:"),
            "{}",
            d.out
        );
        let iters = d
            .out
            .lines()
            .find(|l| l.contains("iters in"))
            .unwrap_or_else(|| panic!("no iteration line in {name} output:\n{}", d.out));
        let n: u64 = iters
            .split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .expect("iters");
        assert_eq!(n, 1000, "{iters}");
        let usec: f64 = iters
            .split_whitespace()
            .rev()
            .nth(1)
            .and_then(|t| t.parse().ok())
            .expect("usec/iter");
        assert!(usec > 0.0, "{iters}");
    }
    if extra.contains(&"-t") {
        assert!(cd.out.contains("completion clock cycles"), "{}", cd.out);
    }
    (sd, cd)
}

/// The data line after perftest's "#bytes" header, split into numbers.
fn perftest_row(out: &str) -> Vec<f64> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next().expect("no #bytes header");
    let row = lines.next().expect("no result row");
    row.split_whitespace()
        .map(|t| t.parse().unwrap_or(f64::NAN))
        .collect()
}

fn perftest_bw(name: &str, size: f64) {
    perftest_bw_with(name, &[], size);
}

fn perftest_bw_with(name: &str, extra: &[&str], size: f64) {
    let (_sd, cd) = pair(name, extra);
    let r = perftest_row(&cd.out);
    // #bytes #iterations BW-peak BW-average MsgRate
    assert_eq!(r[0], size, "{}", cd.out);
    assert!(r[1] >= 1000.0, "{}", cd.out);
    assert!(r[3] > 0.0 && r[3].is_finite() && r[4] > 0.0, "{}", cd.out);
}

fn perftest_lat(name: &str) {
    let (_sd, cd) = pair(name, &[]);
    let r = perftest_row(&cd.out);
    // #bytes #iterations t_min t_max t_typical t_avg ...
    assert_eq!(r[0], 2.0, "{}", cd.out);
    assert_eq!(r[1], 1000.0, "{}", cd.out);
    assert!(r[2] > 0.0 && r[2] <= r[3] && r[5] > 0.0, "{}", cd.out);
}

#[test]
fn ibv_devices() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = spawn(dir.path(), "devices", 7, &os(&[&bin("ibv_devices")])).wait(LIMIT);
    assert!(d.ok(), "{}", d.out);
    assert!(
        d.out.contains("softnic0") && d.out.contains("53464e0000000007"),
        "{}",
        d.out
    );
}

#[test]
fn ibv_devinfo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = spawn(dir.path(), "devinfo", 7, &os(&[&bin("ibv_devinfo"), "-v"])).wait(LIMIT);
    assert!(d.ok(), "{}", d.out);
    for want in [
        "hca_id:\tsoftnic0",
        "PORT_ACTIVE",
        "port_lid:\t\t8",
        "link_layer:\t\tInfiniBand",
        "board_id:\t\t\tSOFTNIC_0001",
        "GID[  0]:\t\tfe80:0000:0000:0000:5346:4e00:0000:0007",
        "general_odp_caps:\n\t\t\t\t\tODP_SUPPORT\n",
        "ud_odp_caps:\n\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n",
    ] {
        assert!(d.out.contains(want), "missing {want:?} in\n{}", d.out);
    }
}

#[test]
fn ibv_rc_pingpong_default() {
    pingpong("ibv_rc_pingpong", &[]);
}
#[test]
fn ibv_rc_pingpong_new_post_api() {
    pingpong("ibv_rc_pingpong", &["-N"]);
}
#[test]
fn ibv_rc_pingpong_events() {
    pingpong("ibv_rc_pingpong", &["-e"]);
}
#[test]
fn ibv_rc_pingpong_timestamps() {
    pingpong("ibv_rc_pingpong", &["-t"]);
}
/// On-demand paging (`-o`) and its prefetch (`-P`): `ibv_advise_mr` succeeds (before,
/// without the verb, rc_pingpong printed "Couldn't prefetch MR(95). Continue anyway").
#[test]
fn ibv_rc_pingpong_on_demand_paging() {
    pingpong("ibv_rc_pingpong", &["-o"]);
    let (sd, cd) = pingpong("ibv_rc_pingpong", &["-o", "-P"]);
    for d in [&sd, &cd] {
        assert!(!d.out.contains("Couldn't prefetch"), "{}", d.out);
    }
}

/// Device memory (`-j`): the buffer is allocated on the device, registered zero-based.
#[test]
fn ibv_rc_pingpong_device_memory() {
    pingpong("ibv_rc_pingpong", &["-j"]);
}

#[test]
fn ibv_uc_pingpong() {
    pingpong("ibv_uc_pingpong", &[]);
}
#[test]
fn ibv_ud_pingpong() {
    pingpong("ibv_ud_pingpong", &[]);
}
#[test]
fn ibv_srq_pingpong() {
    pingpong("ibv_srq_pingpong", &[]);
}
#[test]
fn ib_write_bw() {
    perftest_bw("ib_write_bw", 65536.0);
}
#[test]
fn ib_read_bw() {
    perftest_bw("ib_read_bw", 65536.0);
}
#[test]
fn ib_send_bw() {
    perftest_bw("ib_send_bw", 65536.0);
}

/// Receiver not ready, repeatedly: 128 sends of 64 KiB (16 packets each) in flight against 16
/// receive WQEs, so the responder RNR-NAKs while the requester's ring is full part way through a
/// later message. Every send the client completes must have been placed: the server counts
/// all 1000 and both exit 0. (Before the fix a partly pushed message resumed without its FIRST
/// packet after the rewind and was acknowledged unplaced: 7 of 10 runs hung.)
#[test]
fn ib_send_bw_rnr_bursts() {
    for run in 0..6 {
        let args = ["-n", "1000", "-r", "16", "-t", "128"];
        let (_sd, cd) = pair_within("ib_send_bw", &args, Duration::from_secs(30));
        let r = perftest_row(&cd.out);
        assert_eq!(r[0], 65536.0, "run {run}: {}", cd.out);
        assert_eq!(r[1], 1000.0, "run {run}: {}", cd.out);
    }
}
/// On-demand paging (`--odp`): perftest checks the device's ODP capabilities for the
/// transport's operations (`ibv_query_device_ex`), registers its buffers with
/// `IBV_ACCESS_ON_DEMAND` and runs as usual (softnic touches a region's pages only when a
/// request does: ODP's contract). Before softnic reported the capabilities perftest refused:
/// "Send is not supported for RC transport".
#[test]
fn perftest_on_demand_paging() {
    perftest_bw_with("ib_write_bw", &["--odp"], 65536.0);
    perftest_bw_with("ib_read_bw", &["--odp"], 65536.0);
    perftest_bw_with("ib_send_bw", &["--odp", "-c", "UD"], 4096.0);
}

#[test]
fn ib_atomic_bw() {
    perftest_bw("ib_atomic_bw", 8.0);
}
#[test]
fn ib_write_lat() {
    perftest_lat("ib_write_lat");
}
#[test]
fn ib_send_lat() {
    perftest_lat("ib_send_lat");
}

/// UCX (Debian's ucx-utils, unmodified) takes softnic for its verbs transports: `uct_ib`
/// vets a device by its `/dev/infiniband/uverbsN` node (softnic-run shows one) and its sysfs
/// tree, then lists `rc_verbs` and `ud_verbs` on `softnic0:1`. (It does not open its mlx5
/// transports on softnic: they need the device's PCI ids from sysfs, which softnic's tree does
/// not lay out as PCI, and `dc_mlx5` also devx event channels.)
#[test]
fn ucx_info_lists_softnic_for_verbs_transports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = spawn(dir.path(), "ucx_info", 1, &os(&[&bin("ucx_info"), "-d"])).wait(LIMIT);
    assert!(d.ok(), "ucx_info -d: {:?}\n{}", d.code, d.out);
    for tl in ["rc_verbs", "ud_verbs"] {
        let listed = d.out.lines().collect::<Vec<_>>().windows(2).any(|w| {
            w[0].trim_start_matches(['#', ' ']) == format!("Transport: {tl}")
                && w[1].trim_start_matches(['#', ' ']) == "Device: softnic0:1"
        });
        assert!(listed, "{tl} on softnic0:1 in:\n{}", d.out);
    }
}

/// `ucx_perftest`'s closing line: "Final: iterations, latency 50%ile/average/overall (µs),
/// bandwidth average/overall (MB/s), message rate average/overall".
fn ucx_final(out: &str) -> Vec<f64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line in\n{out}"));
    line.split_whitespace()
        .skip(1)
        .map(|v| v.parse().expect("a number"))
        .collect()
}

/// A UCT-level ucx_perftest run over `tl` on softnic: `iters` iterations, no warm-up.
fn ucx_perftest(args: &[&str], iters: u32) {
    ucx_perftest_env(&[], args, iters);
}

/// [`ucx_perftest`] with environment settings `env`.
fn ucx_perftest_env(env: &[&str], args: &[&str], iters: u32) {
    let n = iters.to_string();
    let mut all = vec!["-d", "softnic0:1", "-n", &n, "-w", "0"];
    all.extend_from_slice(args);
    let (_sd, cd) = pair_env(env, "ucx_perftest", &all, LIMIT);
    let f = ucx_final(&cd.out);
    assert_eq!(f.len(), 8, "{}", cd.out);
    assert_eq!(f[0], iters as f64, "{}", cd.out);
    // Latencies and message rates are positive. The bandwidth columns are printed in MB/s
    // with two decimals: small messages on a loaded machine (8-byte `am_lat` at 590 msg/s
    // is 0.0047 MB/s) print 0.00, so they are only required to be numbers ≥ 0.
    let (latency, bandwidth, rate) = (&f[1..4], &f[4..6], &f[6..8]);
    assert!(
        latency.iter().chain(rate).all(|v| *v > 0.0) && bandwidth.iter().all(|v| *v >= 0.0),
        "{}",
        cd.out
    );
}

#[test]
fn ucx_perftest_am_lat_rc_verbs() {
    ucx_perftest(&["-t", "am_lat", "-x", "rc_verbs"], 1000);
}

#[test]
fn ucx_perftest_am_lat_ud_verbs() {
    ucx_perftest(&["-t", "am_lat", "-x", "ud_verbs"], 1000);
}

#[test]
fn ucx_perftest_put_bw_rc_verbs_zcopy() {
    ucx_perftest(
        &[
            "-t", "put_bw", "-x", "rc_verbs", "-D", "zcopy", "-s", "65536",
        ],
        2000,
    );
}

/// UCT over `rc_verbs`: RDMA READ (`get`, zero-copy 4 KiB), the fetching atomics (`fadd`,
/// `cswap`) and the posted one at full rate (`add_mr`). (`swap` is not offered by UCX's
/// `rc_verbs` on any device: verbs has no atomic swap.)
#[test]
fn ucx_perftest_rc_verbs_get_and_atomics() {
    ucx_perftest(
        &["-t", "get", "-x", "rc_verbs", "-D", "zcopy", "-s", "4096"],
        1000,
    );
    ucx_perftest(&["-t", "fadd", "-x", "rc_verbs"], 1000);
    ucx_perftest(&["-t", "cswap", "-x", "rc_verbs"], 1000);
    ucx_perftest(&["-t", "add_mr", "-x", "rc_verbs"], 1000);
}

/// UCP with only the verbs transports (`UCX_TLS=rc_verbs,ud_verbs,self`: no shared memory or
/// TCP between the two processes): tag matching eager and 64 KiB rendezvous, streams, and
/// 64 KiB gets.
#[test]
fn ucx_perftest_ucp_over_verbs() {
    let env = ["UCX_TLS=rc_verbs,ud_verbs,self"];
    ucx_perftest_env(&env, &["-t", "tag_lat"], 1000);
    ucx_perftest_env(&env, &["-t", "tag_bw", "-s", "65536"], 1000);
    ucx_perftest_env(&env, &["-t", "stream_bw"], 1000);
    ucx_perftest_env(&env, &["-t", "ucp_get", "-s", "65536"], 1000);
}

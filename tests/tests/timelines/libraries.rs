//! Communication libraries over softnic, traced (used by real_timelines.rs, whose checks every
//! case gets): UCX's `ucx_perftest` (Debian's ucx-utils), libfabric's `fi_pingpong`
//! (libfabric-bin, verbs provider) and fio's `rdma` I/O engine, unmodified, one process per
//! softnic node.
//!
//! What UCX does on the wire, per side, for `-t am_lat -x rc_verbs -n N -w 0`: N SENDs of 9
//! bytes (the 8-byte message and UCT's 1-byte active-message id), mostly unsignaled (a
//! completion every few sends retires the ones before it), and at the end one signaled 0-byte
//! RDMA WRITE: `uct_ep_flush` on an RC endpoint with unsignaled sends outstanding posts it to
//! learn that they all completed. Each side receives the other's N messages into receives it
//! posted ahead (UCX keeps its receive queue full: thousands of receive WRs in flight).
//!
//! libfabric's `fi_pingpong -e msg -I N -S 64`: per side N SENDs of 64 bytes and the 4-byte
//! message of its sync, every one signaled, over an RC QP libfabric connects with rdma_cm.

use super::*;

/// The SEND WRs and receive completions per side of `am_lat -n N`, and the one flush WRITE.
fn am_lat_counts(iters: u64) -> impl Fn(&[String]) -> Expect {
    move |_| Expect {
        wrs: 2 * (iters + 1),
        recvs: 2 * iters,
        flows: 2 * iters,
        slack: 0,
    }
}

#[test]
fn ucx_perftest_am_lat_rc_verbs() {
    let iters = 1000;
    let all = case_bytes(
        "ucx_perftest am_lat rc_verbs",
        move || {
            let port = free_port();
            let cmd = format!(
                "ucx_perftest -p {port} -t am_lat -x rc_verbs -d softnic0:1 -n {iters} -w 0"
            );
            Run {
                servers: vec![(proc_(1, &cmd), port)],
                clients: vec![proc_(2, &format!("{cmd} 127.0.0.1"))],
                persistent_servers: false,
            }
        },
        am_lat_counts(iters),
        // Each message's 9 bytes, counted where it was sent and where it arrived.
        Some(2 * 2 * iters * 9),
    );
    for m in &all {
        // Thousands of receives posted ahead, at most RECV_LANES of a queue drawn as slices:
        // per side its send lanes, its receive lanes and a few more (the QP's own track and
        // group, its arrival track, the flush WRITE's inferred lane on the peer). Drawing
        // every posted receive made 8 335 tracks here.
        let (tracks, send_lanes, undrawn) = m.lanes;
        assert!(undrawn > 0, "{m:?}");
        let per_side = send_lanes + sigmatrace_convert::model::RECV_LANES as u64 + 8;
        assert!(tracks <= 2 * per_side, "{tracks} slice tracks: {m:?}");
        // One RC QP per side: its N sends and the flush, N receives.
        assert_eq!(m.qp_rows.len(), 2, "{m:?}");
        for &(ref p, qpn, ops, timed, implied, completions, recvs) in &m.qp_rows {
            assert_eq!((ops, recvs), (iters + 1, iters), "{p} QP {qpn:#x}");
            // Every WR is timed by its own completion or retired by a later one.
            assert_eq!(timed + implied, ops, "{p} QP {qpn:#x}");
            assert!(timed >= 1 && timed <= completions, "{p} QP {qpn:#x}: {m:?}");
        }
    }
}

#[test]
fn fi_pingpong_msg_verbs() {
    let iters = 500;
    case_bytes(
        "fi_pingpong -p verbs -e msg",
        move || {
            let port = free_port();
            let cmd = format!("fi_pingpong -p verbs -e msg -I {iters} -S 64");
            Run {
                servers: vec![(proc_(1, &format!("{cmd} -B {port}")), port)],
                clients: vec![proc_(2, &format!("{cmd} -P {port} 127.0.1.1"))],
                persistent_servers: false,
            }
        },
        move |_| Expect {
            wrs: 2 * (iters + 1),
            recvs: 2 * (iters + 1),
            flows: 2 * (iters + 1),
            slack: 0,
        },
        // Every message's bytes where it was sent and where it arrived.
        Some(2 * 2 * (iters * 64 + 4)),
    );
}

/// fio's `rdma` I/O engine (Debian's fio), unmodified: the server job on node 1, the client
/// job on node 2 (softnic/rdmacm/tests/fio.rs has what engines/rdma.c posts). Each side
/// SENDs one 8 208-byte `rdma_info_blk` at connect; with a one-sided verb the client then
/// moves `blocks` 64 KiB blocks by RDMA WRITE or READ and SENDs the block once more to
/// finish (3 messages in all); with `send` it SENDs the blocks into receives the server
/// posted ahead (2 + `blocks` messages).
fn fio_case(verb: &'static str, blocks: u64) {
    const INFO: u64 = 8208;
    const BLOCK: u64 = 64 * 1024;
    let server_depth = if verb == "send" { blocks } else { 4 };
    let messages = if verb == "send" { 2 + blocks } else { 3 };
    let data_wrs = if verb == "send" { 0 } else { blocks };
    case_bytes(
        &format!("fio --ioengine=rdma --verb={verb}"),
        move || {
            let port = free_port();
            let job = |name: &str| {
                format!(
                    "fio --name={name} --ioengine=rdma --port={port} --bs={BLOCK} --size={}",
                    blocks * BLOCK
                )
            };
            Run {
                servers: vec![(
                    proc_(
                        1,
                        &format!("{} --rw=read --iodepth={server_depth}", job("srv")),
                    ),
                    port,
                )],
                clients: vec![proc_(
                    2,
                    &format!(
                        "{} --hostname=127.0.1.1 --verb={verb} --rw=write --iodepth=4",
                        job("cli")
                    ),
                )],
                persistent_servers: false,
            }
        },
        move |_| Expect {
            wrs: messages + data_wrs,
            recvs: messages,
            flows: messages,
            slack: 0,
        },
        // The blocks once (written, read, or sent and received: then twice) and every
        // info block where it was sent and where it arrived.
        Some(if verb == "send" {
            2 * (blocks * BLOCK + 2 * INFO)
        } else {
            blocks * BLOCK + 2 * 3 * INFO
        }),
    );
}

#[test]
fn fio_rdma_write() {
    fio_case("write", 64);
}

#[test]
fn fio_rdma_read() {
    fio_case("read", 64);
}

#[test]
fn fio_rdma_send() {
    fio_case("send", 64);
}

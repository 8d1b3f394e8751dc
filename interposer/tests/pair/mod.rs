//! Running Debian's client/server programs as a pair on softnic (server on simulated node 1,
//! client on node 2, TCP exchange on a free localhost port), untraced and traced
//! (`LD_PRELOAD=libsigmatrace.so`), comparing exit codes and output shapes, and checking in
//! the logs that each side's QPs are the ones it printed, connected to the peer's.

#![allow(dead_code)]

use crate::common::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

pub const LIMIT: Duration = Duration::from_secs(180);
pub const WR_SEND: u8 = 2;
pub const WR_RDMA_WRITE: u8 = 0;
pub const WR_RDMA_READ: u8 = 4;
pub const WR_FETCH_ADD: u8 = 6;
pub const WC_SEND: u8 = 0;
pub const WC_RDMA_WRITE: u8 = 1;
pub const WC_RDMA_READ: u8 = 2;
pub const WC_FETCH_ADD: u8 = 4;
pub const WC_RECV: u8 = 128;
pub const SIGNALED: u32 = 2;
pub const QPS_RTR: u8 = 2;
pub const QP_DEST_QPN: u32 = 1 << 20;

pub struct Side {
    pub out: Out,
    pub trace: Option<Trace>,
}

/// Runs `bin` as server (node 1) and client (node 2) on softnic; traced into `logs` if given.
pub fn run_pair(bin: &str, args: &[&str], logs: Option<&Path>) -> (Side, Side) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let run = softnic_run().display().to_string();
    let fabric = dir.path().join("fabric").display().to_string();
    let argv = |node: &str, client: bool| {
        let mut v = vec![
            run.clone(),
            "--node".into(),
            node.into(),
            "--fabric".into(),
            fabric.clone(),
            "--".into(),
        ];
        v.push(system_bin(bin));
        v.extend(args.iter().map(|s| s.to_string()));
        v.extend(["-p".to_string(), port.clone()]);
        if client {
            v.push("localhost".into());
        }
        v
    };
    let mk = |node: &str, client: bool, sub: &str| {
        let c = Cmd::new(&argv(node, client));
        match logs {
            Some(l) => c.traced(&l.join(sub)),
            None => c,
        }
    };
    let server = mk("1", false, "server").spawn();
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = mk("2", true, "client").spawn();
    let c = client.wait(LIMIT);
    let s = server.wait(LIMIT);
    let trace = |sub: &str| logs.map(|l| only_log(&l.join(sub)));
    (
        Side {
            out: s,
            trace: trace("server"),
        },
        Side {
            out: c,
            trace: trace("client"),
        },
    )
}

/// Untraced and traced runs; returns the traced sides after comparing both.
pub fn traced_like_untraced(bin: &str, args: &[&str]) -> (Side, Side, tempfile::TempDir) {
    let (ps, pc) = run_pair(bin, args, None);
    assert!(
        ps.out.ok() && pc.out.ok(),
        "{bin} {args:?} untraced:\n{:?}\n{:?}",
        ps.out,
        pc.out
    );
    let logs = tempfile::tempdir().unwrap();
    let (ts, tc) = run_pair(bin, args, Some(logs.path()));
    assert!(
        ts.out.ok() && tc.out.ok(),
        "{bin} {args:?} traced:\n{:?}\n{:?}",
        ts.out,
        tc.out
    );
    for (p, t, who) in [(&ps, &ts, "server"), (&pc, &tc, "client")] {
        assert_eq!(
            shape(&p.out.stdout),
            shape(&t.out.stdout),
            "{bin} {args:?} {who} stdout"
        );
        assert_eq!(
            shape(&p.out.stderr),
            shape(&t.out.stderr),
            "{bin} {args:?} {who} stderr"
        );
    }
    (ts, tc, logs)
}

/// (LID, QPN) pairs of the "local address" and "remote address" lines a program prints.
pub fn addresses(stdout: &str, which: &str) -> Vec<(u32, u32)> {
    let hex_after = |l: &str, key: &str| -> Option<u32> {
        let rest = &l[l.find(key)? + key.len()..];
        let tok = rest.trim_start().trim_start_matches("0x");
        let end = tok
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(tok.len());
        u32::from_str_radix(&tok[..end], 16).ok()
    };
    stdout
        .lines()
        .filter(|l| l.contains(which))
        .filter_map(|l| Some((hex_after(l, "LID")?, hex_after(l, "QPN")?)))
        .collect()
}

/// Each side's QPs are the ones it printed, connected (RTR) to the QPs the peer printed.
pub fn check_connection(server: &Side, client: &Side) {
    for (me, peer) in [(server, client), (client, server)] {
        let t = me.trace.as_ref().unwrap();
        let local = addresses(&me.out.stdout, "local address");
        let remote = addresses(&me.out.stdout, "remote address");
        assert!(
            !local.is_empty() && local.len() == remote.len(),
            "{}",
            me.out.stdout
        );
        assert_eq!(
            addresses(&peer.out.stdout, "remote address"),
            local,
            "the peer saw our addresses"
        );
        let qpns: Vec<u32> = t.qps().iter().map(|q| q.qpn).collect();
        assert_eq!(
            qpns,
            local.iter().map(|a| a.1).collect::<Vec<_>>(),
            "QpCreate QPNs = printed QPNs"
        );
        // The context's own port address, as queried through the provider, is the LID the
        // program printed for itself (what the peer addresses it with).
        let ctx = t.devices()[0].context;
        let port = t
            .defs(sigmatrace_schemas::string_ns::PROCESS_ATTR)
            .into_iter()
            .find_map(|(_, a)| {
                a.strip_prefix(&format!("port_addr=context={ctx:#x},port=1,lid="))
                    .map(|l| num(l.split(',').next().unwrap()) as u32)
            })
            .expect("port_addr attribute of port 1");
        assert!(local.iter().all(|a| a.0 == port), "own LID {port:#x}");
        let rtr: BTreeMap<u32, (u32, u16)> = t
            .modifies()
            .iter()
            .filter(|m| m.new_state == QPS_RTR && m.result == 0 && m.hdr.aux & QP_DEST_QPN != 0)
            .map(|m| (m.qpn, (m.dest_qpn, m.dlid)))
            .collect();
        let peer_qpns: Vec<u32> = peer
            .trace
            .as_ref()
            .unwrap()
            .qps()
            .iter()
            .map(|q| q.qpn)
            .collect();
        for (i, (_, qpn)) in local.iter().enumerate() {
            let (lid, rqpn) = remote[i];
            if let Some(&(dest, dlid)) = rtr.get(qpn) {
                assert_eq!(
                    (dest, dlid as u32),
                    (rqpn, lid),
                    "QP {qpn:#x} connected to the printed peer"
                );
                assert_eq!(
                    dest, peer_qpns[i],
                    "QP {qpn:#x} connected to the peer's QpCreate"
                );
            }
        }
    }
}

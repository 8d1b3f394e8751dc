//! iSCSI over RDMA (iSER) with both ends unmodified: Debian's tgtd (the SCSI target framework
//! daemon, its `iser` driver) on node 1 serving one LUN backed by a file, and QEMU's `qemu-io`
//! (qemu-utils, with qemu-block-extra's libiscsi driver, `transport=iser`) on node 2 as the
//! initiator. tgtd binds its iSER portal on `[::]` (IPv6-only) and `0.0.0.0`, and frees a
//! connection — ending its session — only at RDMA_CM_EVENT_TIMEWAIT_EXIT; libiscsi keeps its
//! SGEs in packed structs. The initiator SENDs its login and SCSI command PDUs; the target
//! moves the data itself, as iSER does: an RDMA READ of the initiator's buffer for a WRITE
//! command, an RDMA WRITE into it for a READ command (and for the small data of INQUIRY, READ
//! CAPACITY and the like), then SENDs the response.
//!
//! qemu-io writes two patterns (256 KiB and 64 KiB) and reads each back, checking them (its
//! own `read -P`); the target's backing file must then hold exactly those bytes. Untraced
//! once, then traced plain and with clock errors: the target's RDMA READs carry exactly the
//! written blocks and its large RDMA WRITEs exactly the read ones, the initiator posts only
//! SENDs, every WR completes, every SEND is received and paired by a flow (the receives
//! tgtd still had posted are flushed when the connection closes), no flow ends before it
//! starts, and with clock errors the alignment recovers the injected offsets. (libiscsi 1.19's
//! iSER transport crashes the initiator on any transfer above 256 KiB, before posting
//! anything: the test stays at or below.)

use super::*;

const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
const WR_RDMA_READ: u8 = 4;
const TARGET: &str = "iqn.2026-12.dev.sigmatrace:softnic";
const INITIATOR: &str = "iqn.2026-12.dev.sigmatrace:initiator";
/// The LUN's size, and the blocks written then read: (pattern byte, offset, length).
const LUN_BYTES: usize = 1 << 20;
const BLOCKS: [(u8, usize, usize); 2] = [(0x5a, 0, 256 << 10), (0xa5, 256 << 10, 64 << 10)];

/// Runs `tgtadm -C ctl ARGS` (the target's management socket; not an RDMA program).
fn tgtadm(ctl: u16, args: &[&str]) -> bool {
    Command::new("tgtadm")
        .args(["-C", &ctl.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("tgtadm (scripts/install-deps.sh installs tgt): {e}"))
        .success()
}

/// Waits up to 30 s for `ok()`.
fn wait_for(what: &str, ok: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One run in `dir`: tgtd up and configured, qemu-io's writes and checked reads, tgtd shut
/// down once the session ended; checks qemu-io's output and the backing file.
fn run(dir: &Path, traced: Option<bool>, what: &str) {
    let lun = dir.join("lun.img");
    std::fs::write(&lun, vec![0u8; LUN_BYTES]).unwrap();
    let ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // The management socket's number and tgtd's iSCSI/TCP portal (unused, but tgtd opens it).
    let (ctl, tcp) = (free_port(), free_port());
    let tgtd = start(
        &proc_(
            1,
            &format!("tgtd -f -C {ctl} --iscsi portal=127.0.0.1:{tcp}"),
        ),
        dir,
        traced,
    );
    wait_for(&format!("{what}: tgtd's management socket"), || {
        tgtadm(ctl, &["--op", "show", "--mode", "target"])
    });
    drop(ports);
    let lun_path = lun.display().to_string();
    let iser = ["--lld", "iser", "--tid", "1"];
    for args in [
        &["--mode", "target", "--op", "new", "-T", TARGET][..],
        &[
            "--mode",
            "logicalunit",
            "--op",
            "new",
            "--lun",
            "1",
            "-b",
            &lun_path,
        ],
        &["--mode", "target", "--op", "bind", "-I", "ALL"],
        // tgt 1.0.85's iSER login also requires the initiator's name on the target's list.
        &["--mode", "target", "--op", "bind", "-Q", INITIATOR],
    ] {
        let a = [&iser[..], args].concat();
        assert!(tgtadm(ctl, &a), "{what}: tgtadm {a:?}");
    }
    let opts = format!(
        "driver=iscsi,transport=iser,portal=127.0.1.1,target={TARGET},lun=1,\
         initiator-name={INITIATOR}"
    );
    let mut argv = vec!["qemu-io".to_string(), "--image-opts".into(), opts];
    for (byte, at, len) in BLOCKS {
        for op in ["write", "read"] {
            argv.extend(["-c".into(), format!("{op} -P {byte:#x} {at} {len}")]);
        }
    }
    let client = start(&Proc { node: 2, argv }, dir, traced);
    let (ok, text) = client.finish("qemu-io", Duration::from_secs(120));
    if !ok {
        // tgtd's side of it, for the failure's message.
        let target = tgtd.kill();
        panic!("{what}: qemu-io failed:\n{text}\ntgtd:\n{target}");
    }
    for (_, at, len) in BLOCKS {
        for done in ["wrote", "read"] {
            let line = format!("{done} {len}/{len} bytes at offset {at}");
            assert!(text.contains(&line), "{what}: no {line:?}:\n{text}");
        }
    }
    assert!(
        !text.contains("Pattern verification failed"),
        "{what}:\n{text}"
    );
    // The session ends when tgtd frees the connection, at its TIMEWAIT_EXIT: only then can the
    // target be deleted, and then tgtd asked to exit.
    wait_for(&format!("{what}: the session ended"), || {
        tgtadm(
            ctl,
            &[
                "--lld", "iser", "--op", "delete", "--mode", "target", "--tid", "1",
            ],
        )
    });
    assert!(
        tgtadm(ctl, &["--op", "delete", "--mode", "system"]),
        "{what}"
    );
    let (ok, text) = tgtd.finish("tgtd", Duration::from_secs(30));
    assert!(ok, "{what}: tgtd failed:\n{text}");
    let disk = std::fs::read(&lun).unwrap();
    for (byte, at, len) in BLOCKS {
        assert!(
            disk[at..at + len].iter().all(|&b| b == byte),
            "{what}: the LUN's bytes at {at}"
        );
    }
    let end = BLOCKS.iter().map(|b| b.1 + b.2).max().unwrap();
    assert!(disk[end..].iter().all(|&b| b == 0), "{what}: beyond");
}

#[test]
fn iser_tgtd_and_qemu_io() {
    let plain = tempfile::tempdir().unwrap();
    run(plain.path(), None, "iSER untraced");
    for skew in [false, true] {
        let what = format!("iSER{}", if skew { " (clock errors)" } else { "" });
        let tmp = tempfile::tempdir().unwrap();
        run(tmp.path(), Some(skew), &what);
        let logs = tmp.path().join("logs");
        let per_log = posted_sends(&logs);
        assert_eq!(per_log.len(), 2, "{what}: tgtd's log and qemu-io's");
        let moves = |s: &[(u8, u32)]| s.iter().any(|w| w.0 != WR_SEND);
        let (target, initiator): (Vec<_>, Vec<_>) = per_log.iter().partition(|s| moves(s));
        let (target, initiator) = (target[0], initiator[0]);
        let large = |op: u8| -> Vec<u32> {
            let mut v: Vec<u32> = target
                .iter()
                .filter(|w| w.0 == op && w.1 >= 4096)
                .map(|w| w.1)
                .collect();
            v.sort_unstable();
            v
        };
        let blocks: Vec<u32> = {
            let mut v: Vec<u32> = BLOCKS.iter().map(|b| b.2 as u32).collect();
            v.sort_unstable();
            v
        };
        // The written blocks fetched, the read ones placed, by the target alone.
        assert_eq!(large(WR_RDMA_READ), blocks, "{what}: RDMA READs");
        assert_eq!(large(WR_RDMA_WRITE), blocks, "{what}: RDMA WRITEs");
        assert!(
            target
                .iter()
                .all(|w| [WR_SEND, WR_RDMA_READ, WR_RDMA_WRITE].contains(&w.0)),
            "{what}: {target:?}"
        );
        let messages = per_log.concat().iter().filter(|w| w.0 == WR_SEND).count() as u64;
        assert!(
            initiator.len() >= 6,
            "{what}: login, 4 commands, logout: {initiator:?}"
        );
        check_iser(&logs, per_log.concat().len() as u64, messages, skew, &what);
    }
}

/// The converted trace of a traced run: every WR completed, every SEND received and paired,
/// the other receive completions flushed ones, no backward flow, the alignment.
fn check_iser(logs: &Path, wrs: u64, messages: u64, skew: bool, what: &str) {
    let trace = convert_with_one_and_two_workers(logs, logs.parent().unwrap(), what);
    let v = validate(&trace, &[]);
    let report = sigmatrace_convert::stats(&[logs.to_owned()], &ConvertOptions::default()).unwrap();
    let t = &report.summary.totals;
    assert_eq!((t.wr_completed, t.wr_failed), (wrs, 0), "{what}: {t:?}");
    assert_eq!(t.orphan_completions, 0, "{what}: {t:?}");
    let qps = report
        .section::<sigmatrace_convert::report::QpTable>()
        .expect("a queue-pair table");
    let flushed: u64 = qps.rows.iter().map(|r| r.errors).sum();
    assert_eq!(t.recv_completed - flushed, messages, "{what}: {t:?}");
    assert_eq!(
        (t.flows_out, t.flows_in),
        (messages, messages),
        "{what}: {t:?}"
    );
    assert_eq!(v["stats"]["flows"], messages, "{what}");
    assert_eq!(v["stats"]["backward_flows"], 0, "{what}");
    let a = &report.summary.alignment;
    assert_eq!(
        a.inverted_after, 0,
        "{what}: receive before send after alignment"
    );
    if skew {
        assert_eq!(a.domains.len(), 2, "{what}: each process its own clock");
        let errors = alignment::check_alignment(logs, &report);
        eprintln!("{what}: {errors:?}");
    }
    eprintln!("{what}: {wrs} WRs, {messages} messages paired, {flushed} receives flushed at close");
}

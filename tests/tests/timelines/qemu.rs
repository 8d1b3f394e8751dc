//! QEMU live migration over RDMA (Debian's qemu-system-x86 7.2, unmodified, TCG): the
//! destination (`-incoming rdma:127.0.1.1:PORT`) on node 1, the source on node 2, both driven
//! over QMP. The source, paused before it ever ran (`-S`), holds 4 MiB of pseudo-random bytes
//! in guest RAM (`-device loader`); `migrate rdma:…` moves its RAM with QEMU's RDMA protocol
//! (migration/rdma.c): control messages (the QEMUFile stream of device state, RAM block
//! lists, registration requests and results, zero-chunk notices) as signaled SENDs into
//! receives each side keeps posted, and every non-zero page by a signaled RDMA WRITE into a
//! chunk of the destination's RAM that the destination registered on request. The
//! destination's guest memory must then hold the bytes exactly (`pmemsave`).
//!
//! Untraced once, then traced plain and with clock errors: QEMU's own RAM counters
//! (`query-migrate`: normal and zero pages, normal bytes) are the same each time; the logs
//! hold only SENDs and RDMA WRITEs, and the WRITEs carry exactly QEMU's normal bytes; the
//! converted trace passes every check of `check` with every WR completed and every SEND a
//! received, paired message.

use super::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
/// Where the pattern lies in guest RAM, and its length.
const BLOB_AT: u64 = 0x100_0000;
const BLOB_LEN: usize = 4 << 20;
const QEMU: &str = "qemu-system-x86_64 -nodefaults -display none -m 32 -machine pc,accel=tcg";

/// One QMP connection (JSON lines over a Unix socket).
struct Qmp {
    read: BufReader<UnixStream>,
    write: UnixStream,
    what: String,
}

impl Qmp {
    /// Connects (the socket appears once QEMU started) and leaves capabilities negotiation.
    fn connect(path: &Path, what: &str) -> Qmp {
        let t0 = Instant::now();
        let s = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(t0.elapsed() < Duration::from_secs(30), "{what}: QMP: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut q = Qmp {
            read: BufReader::new(s.try_clone().unwrap()),
            write: s,
            what: what.to_owned(),
        };
        let greeting = q.line();
        assert!(greeting.get("QMP").is_some(), "{what}: {greeting}");
        q.cmd("qmp_capabilities", json!({}));
        q
    }

    fn line(&mut self) -> Value {
        let mut l = String::new();
        self.read
            .read_line(&mut l)
            .unwrap_or_else(|e| panic!("{}: QMP read: {e}", self.what));
        assert!(!l.is_empty(), "{}: QMP closed", self.what);
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{}: QMP {l:?}: {e}", self.what))
    }

    /// Runs one command; returns its `return` value (events in between are skipped).
    fn cmd(&mut self, name: &str, args: Value) -> Value {
        // One write: QEMU runs a command as soon as its JSON is complete, and `quit` closes the
        // socket — a newline written separately after it met a closed socket (EPIPE).
        let c = format!("{}\n", json!({"execute": name, "arguments": args}));
        if let Err(e) = self.write.write_all(c.as_bytes()) {
            // What QEMU said before it closed (a SHUTDOWN event names the reason).
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut self.read, &mut rest);
            panic!("{}: QMP {name}: {e}; it said last: {rest}", self.what);
        }
        loop {
            let mut v = self.line();
            if let Some(r) = v.get_mut("return") {
                return r.take();
            }
            assert!(v.get("event").is_some(), "{}: {name}: {v}", self.what);
        }
    }
}

/// 4 MiB that no page of is zero or repeats another (xorshift64).
fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..BLOB_LEN / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// One migration in `dir`; checks the destination's copy of the pattern and returns the
/// source's RAM counters (`query-migrate`'s `ram`).
fn migrate(dir: &Path, traced: Option<bool>, what: &str) -> Value {
    let blob = dir.join("blob.bin");
    std::fs::write(&blob, pattern()).unwrap();
    let (dst_qmp, src_qmp) = (dir.join("dst.qmp"), dir.join("src.qmp"));
    let qmp = |p: &Path| format!("-qmp unix:{},server=on,wait=off", p.display());
    let ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let uri = format!("rdma:127.0.1.1:{port}");
    let dst = start(
        &proc_(1, &format!("{QEMU} {} -incoming {uri}", qmp(&dst_qmp))),
        dir,
        traced,
    );
    let t0 = Instant::now();
    while !cm_listening("106", port) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what}: no listener"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(ports);
    let load = format!("loader,file={},addr={BLOB_AT:#x}", blob.display());
    let src = start(
        &proc_(2, &format!("{QEMU} {} -S -device {load}", qmp(&src_qmp))),
        dir,
        traced,
    );
    // A QMP failure (a QEMU that died) panics with both QEMUs' output.
    let drive = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drive(&src_qmp, &dst_qmp, &uri, dir, what)
    }));
    let ram = match drive {
        Ok(ram) => ram,
        Err(e) => {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let (d, s) = (dst.kill(), src.kill());
            panic!("{what}: {why}\ndestination:\n{d}\nsource:\n{s}");
        }
    };
    for (g, who) in [(dst, "destination"), (src, "source")] {
        let (ok, text) = g.finish(who, Duration::from_secs(60));
        assert!(ok, "{what}: {who} failed:\n{text}");
    }
    ram
}

/// The QMP side of [`migrate`]: migrate, wait, check the destination's memory, quit both;
/// returns the source's RAM counters.
fn drive(src_qmp: &Path, dst_qmp: &Path, uri: &str, dir: &Path, what: &str) -> Value {
    let mut s = Qmp::connect(src_qmp, &format!("{what}: source"));
    let mut d = Qmp::connect(dst_qmp, &format!("{what}: destination"));
    s.cmd("migrate", json!({ "uri": uri }));
    let t0 = Instant::now();
    let ram = loop {
        let mut m = s.cmd("query-migrate", json!({}));
        match m["status"].as_str() {
            Some("completed") => break m["ram"].take(),
            Some("failed" | "cancelled") => panic!("{what}: {m}"),
            _ => {}
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}: {m}");
        std::thread::sleep(Duration::from_millis(20));
    };
    while d.cmd("query-status", json!({}))["status"] == "inmigrate" {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}: still inmigrate"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dump = dir.join("dump.bin");
    d.cmd(
        "pmemsave",
        json!({"val": BLOB_AT, "size": BLOB_LEN, "filename": dump}),
    );
    let got = std::fs::read(&dump).unwrap();
    assert!(
        got == pattern(),
        "{what}: the destination's guest memory differs from the source's"
    );
    d.cmd("quit", json!({}));
    s.cmd("quit", json!({}));
    ram
}

#[test]
fn qemu_rdma_live_migration() {
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = migrate(plain_dir.path(), None, "QEMU RDMA migration untraced");
    let counters =
        |ram: &Value| ["normal", "normal-bytes", "duplicate"].map(|k| ram[k].as_u64().expect(k));
    let [normal, normal_bytes, _] = counters(&plain);
    // The pattern's 1 024 pages and the few firmware pages in RAM.
    assert!(normal >= (BLOB_LEN / 4096) as u64, "{plain}");
    for skew in [false, true] {
        let what = format!(
            "QEMU RDMA migration{}",
            if skew { " (clock errors)" } else { "" }
        );
        let tmp = tempfile::tempdir().unwrap();
        let ram = migrate(tmp.path(), Some(skew), &what);
        assert_eq!(counters(&ram), counters(&plain), "{what}: {ram}");
        let logs = tmp.path().join("logs");
        let sends: Vec<(u8, u32)> = posted_sends(&logs).concat();
        let bytes =
            |op: u8| -> u64 { sends.iter().filter(|s| s.0 == op).map(|s| s.1 as u64).sum() };
        let messages = sends.iter().filter(|s| s.0 == WR_SEND).count() as u64;
        assert!(
            sends
                .iter()
                .all(|s| [WR_SEND, WR_RDMA_WRITE].contains(&s.0)),
            "{what}: {sends:?}"
        );
        assert_eq!(bytes(WR_RDMA_WRITE), normal_bytes, "{what}: written bytes");
        let m = check(
            &logs,
            Expect {
                wrs: sends.len() as u64,
                recvs: messages,
                flows: messages,
                slack: 0,
            },
            skew,
            &what,
        );
        // Every WR's bytes where it was posted, every SEND's again where it arrived.
        let moved = bytes(WR_RDMA_WRITE) + 2 * bytes(WR_SEND);
        assert_eq!(m.completed_bytes, moved as i128, "{what}: completed bytes");
    }
}

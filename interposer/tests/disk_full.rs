//! A full disk mid-run: Debian's `ibv_rc_pingpong -n 5000` client on softnic, traced into a
//! 256 KiB tmpfs (mounted by the test; CI runs as root — the test fails, never skips, when the
//! mount is refused). The program is unaffected (exit code, output) and, per record kind,
//! recorded + dropped equals exactly what the program did: 5000 sends, 10000 completions and
//! the receives its posting rule makes (500 at start, 499 more each time 499 were consumed).
//! The log marks where the loss began (a count-0 `Dropped` record and the header's first-loss
//! time).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sigmatrace_schemas::{drop_reason, LogFile, Record, RecordKind};

const LIMIT: Duration = Duration::from_secs(180);
const ITERS: u64 = 5000;
const RX_DEPTH: u64 = 500;

/// A tmpfs of `size` at `at` (inside a temporary directory), unmounted when dropped.
struct Tmpfs {
    at: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("mnt");
        std::fs::create_dir(&at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "cannot mount a {size} tmpfs at {} (the disk-full test needs root, as CI has): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { at, _parent: dir }
    }
}

impl Tmpfs {
    /// Grows the file system after the traced run: reading the log through a mapping faults
    /// pages of its holes in, which a full tmpfs answers with SIGBUS (for the reader: the
    /// writer already met the full disk).
    fn grow(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.at)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "remount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

/// Receives `ibv_rc_pingpong` posts for `iters` receive completions: `rx_depth` at start, and
/// whenever the outstanding count falls to 1, enough to make it `rx_depth` again.
fn pingpong_receives(iters: u64, rx_depth: u64) -> u64 {
    let (mut posted, mut outstanding) = (rx_depth, rx_depth);
    for _ in 0..iters {
        outstanding -= 1;
        if outstanding <= 1 {
            posted += rx_depth - outstanding;
            outstanding = rx_depth;
        }
    }
    posted
}

/// Where the traced side's log goes and how: with `rings` the default per-thread rings
/// drained by the background thread (with direct I/O where the file system has it, if
/// `direct`), else chunks written in place (`SIGMATRACE_PREFAULT_CHUNKS=0`).
#[derive(Clone, Copy)]
struct Traced<'a> {
    logs: &'a Path,
    rings: bool,
    direct: bool,
}

fn pingpong(node: &str, fabric: &Path, port: &str, client: bool, traced: Option<Traced>) -> Cmd {
    let mut v = vec![
        softnic_run().display().to_string(),
        "--node".into(),
        node.into(),
        "--fabric".into(),
        fabric.display().to_string(),
        "--".into(),
        system_bin("ibv_rc_pingpong"),
        "-n".into(),
        ITERS.to_string(),
        "-p".into(),
        port.into(),
    ];
    if client {
        v.push("localhost".into());
    }
    let c = Cmd::new(&v);
    match traced {
        Some(t) => c
            .traced(t.logs)
            .env("SIGMATRACE_CHUNK_BYTES", "16K")
            .env(
                "SIGMATRACE_PREFAULT_CHUNKS",
                if t.rings { "4" } else { "0" },
            )
            .env("SIGMATRACE_DIRECT_IO", if t.direct { "1" } else { "0" }),
        None => c,
    }
}

fn run_pair(traced: Option<Traced>) -> (Out, Out) {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric");
    let port = free_port().to_string();
    let server = pingpong("1", &fabric, &port, false, None).spawn();
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = pingpong("2", &fabric, &port, true, traced).spawn();
    let c = client.wait(LIMIT);
    (server.wait(LIMIT), c)
}

#[test]
fn a_full_disk_leaves_the_program_alone_and_every_lost_event_is_counted_per_kind() {
    full_disk(false, false);
}

/// The same with the default rings: the background thread's copy (a direct write: tmpfs has
/// direct I/O) is what meets the full disk; the chunks it could not copy stay in their ring
/// slots, readable, and the threads meet the failure at their next chunk.
#[test]
fn a_full_disk_met_by_the_ring_drainer_is_counted_per_kind_as_well() {
    full_disk(true, true);
}

/// And with rings drained through the page cache (`SIGMATRACE_DIRECT_IO=0`).
#[test]
fn a_full_disk_met_by_the_buffered_ring_drainer_is_counted_per_kind_as_well() {
    full_disk(true, false);
}

fn full_disk(rings: bool, direct: bool) {
    assert_eq!(pingpong_receives(1000, RX_DEPTH), 1498);
    let (ps, pc) = run_pair(None);
    assert!(ps.ok() && pc.ok(), "untraced:\n{ps:?}\n{pc:?}");

    let fs = Tmpfs::mount("256k");
    let (ts, tc) = run_pair(Some(Traced {
        logs: &fs.at,
        rings,
        direct,
    }));
    assert!(ts.ok() && tc.ok(), "traced:\n{ts:?}\n{tc:?}");
    assert_eq!(shape(&pc.stdout), shape(&tc.stdout));
    assert_eq!(
        tc.stderr,
        "sigmatrace: cannot extend the log (disk full or I/O error): recording stopped; \
         further events are only counted (dropped, per kind, in the log header)\n"
    );

    fs.grow("64m");
    let t = only_log(&fs.at);
    let log = LogFile::open(&t.path).unwrap();
    let losses = log.losses();
    let lost = |k: RecordKind| losses.of(k as u16);
    let (sends, recvs, wcs) = (
        t.sends().len() as u64,
        t.recvs().len() as u64,
        t.wcs().len() as u64,
    );
    println!(
        "recorded {sends} sends, {recvs} receives, {wcs} completions; dropped {:?} (total {})",
        losses.by_kind, losses.total
    );
    assert!(
        lost(RecordKind::WorkCompletion) > 0,
        "the disk never filled"
    );
    assert!(sends > 0, "nothing was recorded before the disk filled");
    assert_eq!(sends + lost(RecordKind::PostSend), ITERS);
    assert_eq!(wcs + lost(RecordKind::WorkCompletion), 2 * ITERS);
    assert_eq!(
        recvs + lost(RecordKind::PostRecv),
        pingpong_receives(ITERS, RX_DEPTH)
    );
    assert_eq!(
        losses.total,
        losses.by_kind.iter().map(|(_, n)| n).sum::<u64>()
    );
    assert_eq!(t.header.as_ref().unwrap().dropped, losses.total);

    // Where the loss began: one marker, in the program thread's stream, at the first loss.
    let markers: Vec<(u64, u32, u64)> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .filter_map(|r| match r.unwrap().decode().unwrap() {
            Record::Dropped(d) => Some((d.ts, d.hdr.aux, d.count)),
            _ => None,
        })
        .collect();
    let first = losses.first_ts.expect("the first loss is timestamped");
    assert_eq!(markers, vec![(first, drop_reason::WRITE_ERROR, 0)]);

    // The converter reports the losses per kind and marks where they began.
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("trace.json");
    let conv = Command::new(sigmatrace_testkit::artifact("sigmatrace-convert"))
        .arg(&t.path)
        .args(["--quiet", "--format", "chrome-json", "-o"])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&conv.stderr);
    assert!(conv.status.success(), "{stderr}");
    let per_kind = format!(
        "the tracer dropped {} events (ClockSnapshot {}",
        losses.total,
        lost(RecordKind::ClockSnapshot)
    );
    assert!(stderr.contains(&per_kind), "{per_kind:?} not in {stderr}");
    for k in [
        RecordKind::PostSend,
        RecordKind::PostRecv,
        RecordKind::WorkCompletion,
    ] {
        let part = format!("{} {}", k.name(), lost(k));
        assert!(stderr.contains(&part), "{part:?} not in {stderr}");
    }
    let trace = std::fs::read_to_string(&json).unwrap();
    assert_eq!(
        trace
            .matches("recording stopped: disk full (later events only counted)")
            .count(),
        1,
        "one loss marker in the trace"
    );
}

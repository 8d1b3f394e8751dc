//! Input hygiene on logs written by the real interposer: a real verbs client
//! (`ibv_rc_pingpong`, Debian ibverbs-utils) traced with `libsigmatrace.so` over softnic
//! (server on simulated node 1, client on node 2), and the golden v1 logs. Complete logs must
//! convert without a word: the interposer's per-thread rings leave a thread's last chunk in
//! its ring slot, with its final position (its index) past the end of the file — not a
//! truncated file. Logs of an older minor of an older major are not "newer".

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sigmatrace_convert::{convert_with_report, ConvertOptions};
use sigmatrace_schemas::reader::LogFile;
use sigmatrace_schemas::{FORMAT_MAJOR, FORMAT_MINOR};
use sigmatrace_testkit::{free_port, listening, softnic_run, system_bin, Cmd};

const ITERS: u64 = 500;
const LIMIT: Duration = Duration::from_secs(120);

/// Runs `ibv_rc_pingpong -n ITERS` as a traced server/client pair; returns the two logs.
fn traced_pingpong(logs: &Path) -> Vec<PathBuf> {
    let port = free_port().to_string();
    let fabric = logs.join("fabric").display().to_string();
    let run = softnic_run().display().to_string();
    let bin = system_bin("ibv_rc_pingpong");
    let n = ITERS.to_string();
    let cmd = |node: &str, client: bool| {
        let mut v = vec![
            run.as_str(),
            "--node",
            node,
            "--fabric",
            &fabric,
            "--",
            &bin,
            "-n",
            &n,
            "-p",
            &port,
        ];
        if client {
            v.push("localhost");
        }
        Cmd::new(&v).traced(&logs.join("logs"))
    };
    let server = cmd("1", false).spawn();
    let t0 = Instant::now();
    while !listening(port.parse().unwrap()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = cmd("2", true).spawn().wait(LIMIT);
    let s = server.wait(LIMIT);
    assert!(c.ok() && s.ok(), "client {c:?}\nserver {s:?}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(logs.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    files
}

/// Records of a log counted by the schemas reader (one chunk per index, rings included).
fn records_in(path: &Path) -> u64 {
    let f = LogFile::open(path).unwrap();
    let v = f.view();
    v.chunks().iter().map(|c| v.records(c).count() as u64).sum()
}

/// Sets a log's format version (header bytes 8..12: major u16, minor u16).
fn set_version(path: &Path, major: u16, minor: u16) {
    let mut b = std::fs::read(path).unwrap();
    b[8..10].copy_from_slice(&major.to_ne_bytes());
    b[10..12].copy_from_slice(&minor.to_ne_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn complete_interposer_logs_with_rings_convert_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let files = traced_pingpong(dir.path());
    // The case of the bug: the header counts more chunk positions than the file holds (the
    // last chunk was read from its ring slot, its final position lies past the end).
    let mut beyond = 0;
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        let log = LogFile::open(f).unwrap();
        let cs = u64::from(log.view().header().chunk_size);
        let allocated = u64::from(log.view().header().chunks_allocated);
        assert!(cs > 0 && allocated > 0, "{}: {cs} {allocated}", f.display());
        beyond += u64::from(allocated > (len - 4096).div_ceil(cs));
    }
    assert!(beyond > 0, "no log has chunk positions past its end");
    let out = dir.path().join("t.perfetto-trace");
    let rep =
        convert_with_report(&[dir.path().join("logs")], &out, &ConvertOptions::default()).unwrap();
    let s = &rep.summary;
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // Every record of both logs converted; each side sent ITERS messages and received ITERS.
    let records: u64 = files.iter().map(|f| records_in(f)).sum();
    assert_eq!(s.records, records);
    assert_eq!(s.processes, 2);
    assert_eq!(s.totals.wr_completed, 2 * ITERS);
    assert_eq!(s.totals.recv_completed, 2 * ITERS);
    assert_eq!(
        (s.totals.flows_out, s.totals.flows_in),
        (2 * ITERS, 2 * ITERS)
    );
    assert_eq!(s.totals.orphan_completions, 0);
}

#[test]
fn only_a_newer_minor_of_the_same_major_is_newer() {
    // The golden v1 logs (ibv_rc_pingpong -n 10, format 1.0) stamped 1.2: 1.2 only added
    // rings, which they do not use, so they are valid 1.2 logs — older than 2.x.
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("v1");
    std::fs::create_dir(&logs).unwrap();
    for name in ["client", "server"] {
        let gz = common::workspace().join(format!("fixtures/golden-v1/{name}.sigmalog.gz"));
        let mut raw = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap()),
            &mut raw,
        )
        .unwrap();
        let p = logs.join(format!("{name}.sigmalog"));
        std::fs::write(&p, raw).unwrap();
        set_version(&p, 1, 2);
    }
    let out = dir.path().join("v1.perfetto-trace");
    let s = convert_with_report(
        std::slice::from_ref(&logs),
        &out,
        &ConvertOptions::default(),
    )
    .unwrap()
    .summary;
    assert!(
        !s.warnings.iter().any(|w| w.contains("newer")),
        "{:?}",
        s.warnings
    );
    assert_eq!(s.processes, 2);
    assert_eq!(s.totals.flows_out, 20);
    // A real log of this version stamped with the next minor is newer: one warning per log,
    // naming both versions.
    let (major, minor) = (FORMAT_MAJOR, FORMAT_MINOR);
    let files = traced_pingpong(dir.path());
    for f in &files {
        set_version(f, major, minor + 1);
    }
    let s = convert_with_report(&[dir.path().join("logs")], &out, &ConvertOptions::default())
        .unwrap()
        .summary;
    let newer: Vec<&String> = s.warnings.iter().filter(|w| w.contains("newer")).collect();
    assert_eq!(newer.len(), 2, "{:?}", s.warnings);
    assert!(
        newer.iter().all(|w| w.contains(&format!(
            "format {major}.{} is newer than this reader's {major}.{minor}",
            minor + 1
        ))),
        "{newer:?}"
    );
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert_eq!(s.totals.wr_completed, 2 * ITERS);
}

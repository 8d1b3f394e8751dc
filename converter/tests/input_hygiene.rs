//! Input hygiene: every file or byte range that is not converted is reported with the file
//! (and offset) in the summary's warnings, the stats report and on stderr; copies of a log
//! count once; usable logs are converted (exit 0) and only a set with nothing usable fails;
//! nonsense `--jobs` is capped with a note; a sparse 8 GiB log converts in flat memory.

mod common;

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_sigmatrace-convert");

fn run_cli(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let r = Command::new(EXE).args(args).output().unwrap();
    (
        r.status.code(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

#[test]
fn log_cut_at_a_chunk_boundary_reports_the_missing_chunks() {
    let (dir, truth) = common::small_ring();
    let victim = &truth.files[1];
    let bytes = std::fs::read(victim).unwrap();
    let allocated = u32::from_ne_bytes(bytes[128..132].try_into().unwrap()) as u64;
    assert!(allocated >= 4, "{allocated} chunks");
    // Exactly after the first chunk: every chunk in the file is whole.
    let cut = 4096 + (1 << 14);
    common::truncate(victim, cut);
    let rep = common::convert_dir(dir.path(), "t.perfetto-trace").unwrap();
    let out = dir.path().join("t.perfetto-trace");
    let w = common::warning_about(&rep, victim, "not in the file")
        .unwrap_or_else(|| panic!("no warning: {:?}", rep.summary.warnings));
    assert!(
        w.contains(&format!("offset {cut}")) && w.contains(&format!("the last {} ", allocated - 1)),
        "{w}"
    );
    assert!(rep.text().contains(w.as_str()), "stats report lacks it");
    assert!(rep.summary.records < truth.records);
    // The command line says it on stderr and still converts (exit 0).
    let (code, err) = run_cli(&[dir.path().as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning:") && err.contains("not in the file"),
        "{err}"
    );
}

#[test]
fn a_copy_in_a_subdirectory_counts_once() {
    let (dir, truth) = common::small_ring();
    let clean = common::convert_dir(dir.path(), "a.perfetto-trace").unwrap();
    let sub = dir.path().join("backup");
    std::fs::create_dir(&sub).unwrap();
    let copy = sub.join("copy-of-rank.log");
    std::fs::copy(&truth.files[0], &copy).unwrap();
    let rep = common::convert_dir(dir.path(), "a.perfetto-trace").unwrap();
    assert_eq!(rep.summary.processes, 2);
    assert_eq!(rep.summary.records, clean.summary.records);
    assert_eq!(rep.summary.totals.flows_out, clean.summary.totals.flows_out);
    assert!(
        rep.summary
            .warnings
            .iter()
            .any(|w| w.contains("copy-of-rank.log") && w.contains("counted once")),
        "{:?}",
        rep.summary.warnings
    );
}

#[test]
fn damaged_and_unreadable_logs_are_named_and_the_rest_converted() {
    let (dir, truth) = common::small_ring();
    // A log whose magic was overwritten: found in the directory, reported, not converted.
    let mut bytes = std::fs::read(&truth.files[0]).unwrap();
    bytes[..8].copy_from_slice(b"XXXXXXXX");
    let damaged = dir.path().join("damaged.log");
    std::fs::write(&damaged, &bytes).unwrap();
    // A log shorter than its header.
    let short = dir.path().join("short.log");
    std::fs::write(
        &short,
        [&sigmatrace_schemas::MAGIC[..], &[0u8; 92]].concat(),
    )
    .unwrap();
    let rep = common::convert_dir(dir.path(), "d.perfetto-trace").unwrap();
    let out = dir.path().join("d.perfetto-trace");
    assert_eq!(rep.summary.processes, 2, "the two good logs");
    let has = |file: &str, what: &str| {
        rep.summary
            .warnings
            .iter()
            .any(|w| w.starts_with("skipped") && w.contains(file) && w.contains(what))
    };
    assert!(has("damaged.log", "magic"), "{:?}", rep.summary.warnings);
    assert!(has("short.log", "shorter"), "{:?}", rep.summary.warnings);
    let (code, err) = run_cli(&[dir.path().as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("damaged.log") && err.contains("magic"),
        "{err}"
    );
    // Nothing usable: an error naming the file (exit 1).
    let (code, err) = run_cli(&[damaged.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("damaged.log") && err.contains("magic"),
        "{err}"
    );
}

#[test]
fn a_damaged_record_names_the_skipped_byte_range() {
    let (dir, truth) = common::small_ring();
    let victim = &truth.files[0];
    let mut bytes = std::fs::read(victim).unwrap();
    // The third record of the first chunk gets an impossible length.
    let first = 4096 + sigmatrace_schemas::CHUNK_HEADER_SIZE;
    let mut at = first;
    for _ in 0..2 {
        at += u16::from_ne_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
    }
    bytes[at + 2..at + 4].copy_from_slice(&12u16.to_ne_bytes());
    std::fs::write(victim, &bytes).unwrap();
    let rep = common::convert_dir(dir.path(), "r.perfetto-trace").unwrap();
    let w = rep
        .summary
        .warnings
        .iter()
        .find(|w| w.contains(&format!("offset {at}")))
        .unwrap_or_else(|| panic!("{:?}", rep.summary.warnings));
    assert!(
        w.contains(&format!("bytes {at}..")) && w.contains("not read"),
        "{w}"
    );
}

#[test]
fn jobs_beyond_the_cores_are_capped_with_a_note() {
    let (dir, _) = common::small_ring();
    let out = dir.path().join("j.perfetto-trace");
    let started = std::time::Instant::now();
    let (code, err) = run_cli(&[
        dir.path().as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--jobs".as_ref(),
        "8192".as_ref(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("--jobs 8192 capped to"), "{err}");
    assert!(started.elapsed().as_secs() < 60);
    let (code, err) = run_cli(&[dir.path().as_os_str(), "--jobs".as_ref(), "x".as_ref()]);
    assert_eq!(code, Some(2), "{err}");
}

/// Peak RSS (KiB) of one child, from its own rusage (`wait4`, not `Child::wait`, which does
/// not return it).
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&std::ffi::OsStr]) -> (i32, i64) {
    let child = Command::new(EXE)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: plain zeroed C struct that wait4 fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child and writes into the two locals above.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as i32);
    (libc::WEXITSTATUS(status), ru.ru_maxrss)
}

#[test]
fn a_sparse_8_gib_log_converts_in_flat_memory() {
    let (dir, truth) = common::small_ring();
    let big = dir.path().join("sparse");
    std::fs::create_dir(&big).unwrap();
    let f = big.join("rank0.log");
    std::fs::copy(&truth.files[0], &f).unwrap();
    // Allocated-but-unused chunks up to 8 GiB: a hole, as a writer killed early leaves it.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    let out = dir.path().join("s.perfetto-trace");
    let (code, max_kib) = run_measured(&[big.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(code, 0);
    // Was 8.4 GB (every page of the file mapped); the limit of the issue is 256 MB.
    const LIMIT_KIB: i64 = 64 << 10;
    assert!(
        max_kib < LIMIT_KIB,
        "peak RSS {max_kib} KiB (limit {LIMIT_KIB})"
    );
    common::validate(&out, &["slices=1"]);
}

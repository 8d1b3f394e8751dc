//! Damaged input: truncated and corrupt logs are salvaged with a warning naming the file and
//! offset; unreadable ones (newer major version, not a log) are clear errors; exit codes.

mod common;

use std::process::Command;

use sigmatrace_convert::{convert_with_report, ConvertError, ConvertOptions};
use sigmatrace_synth::{Pattern, Scenario};

#[test]
fn truncated_log_is_salvaged_with_a_warning() {
    let (dir, truth) = common::small_ring();
    let victim = &truth.files[1];
    let len = std::fs::metadata(victim).unwrap().len();
    let cut = len - len / 3 - 1000;
    common::truncate(victim, cut);
    let rep = common::convert_dir(dir.path(), "t.perfetto-trace").unwrap();
    let out = dir.path().join("t.perfetto-trace");
    let w = common::warning_about(&rep, victim, "truncated");
    assert!(
        w.is_some(),
        "warning about {}: {:?}",
        victim.display(),
        rep.summary.warnings
    );
    assert!(w.unwrap().contains("offset "), "{w:?}");
    let s = &rep.summary;
    assert!(
        s.records < truth.records && s.records > truth.records / 3,
        "{} of {}",
        s.records,
        truth.records
    );
    assert!(s.totals.wr_completed > 0);
    common::validate(&out, &["slices=100", "flows=1"]);
}

#[test]
fn corrupt_record_is_skipped_with_offset() {
    let (dir, truth) = common::small_ring();
    let victim = &truth.files[0];
    // Second chunk, a few records in (records are 24–64 bytes: the sixth's header, found by
    // reading the log): a record header with an impossible length.
    let off = {
        let log = sigmatrace_schemas::LogFile::open(victim).unwrap();
        let second = &log.chunks()[1];
        assert_eq!(second.offset, 4096 + (1 << 14));
        let sixth = log.raw_records(second).nth(5).unwrap().unwrap();
        sixth.offset as usize
    };
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[off..off + 8].copy_from_slice(&[30, 0, 7, 0, 0, 0, 0, 0]);
    std::fs::write(victim, &bytes).unwrap();
    let rep = common::convert_dir(dir.path(), "c.perfetto-trace").unwrap();
    let out = dir.path().join("c.perfetto-trace");
    let w = rep
        .summary
        .warnings
        .iter()
        .find(|w| w.contains(&format!("offset {off}")));
    assert!(w.is_some(), "{:?}", rep.summary.warnings);
    assert!(rep.summary.records < truth.records);
    common::validate(&out, &["slices=100"]);
}

#[test]
fn newer_major_version_is_a_clear_error_and_can_be_skipped() {
    let (dir, truth) = common::small_ring();
    let victim = &truth.files[0];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[8..10].copy_from_slice(&99u16.to_ne_bytes());
    std::fs::write(victim, &bytes).unwrap();
    let err = common::convert_dir(dir.path(), "v.perfetto-trace")
        .err()
        .expect("must fail");
    assert!(matches!(err, ConvertError::Read(_)));
    let msg = err.to_string();
    assert!(
        msg.contains(&victim.display().to_string()) && msg.contains("99.") && msg.contains("newer"),
        "{msg}"
    );
    let o = ConvertOptions {
        skip_unreadable: true,
        ..common::two_jobs()
    };
    let out = dir.path().join("v.perfetto-trace");
    let rep = convert_with_report(&[dir.path().to_owned()], &out, &o).unwrap();
    assert_eq!(rep.summary.processes, 1);
    assert!(rep
        .summary
        .warnings
        .iter()
        .any(|w| w.starts_with("skipped") && w.contains("newer")));
    common::validate(&out, &["slices=1"]);
}

#[test]
fn cli_exit_codes_and_messages() {
    let exe = env!("CARGO_BIN_EXE_sigmatrace-convert");
    let (dir, truth) = common::small_ring();
    let junk = dir.path().join("junk.sigmatrace");
    std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
    let out = dir.path().join("x.perfetto-trace");
    let r = Command::new(exe)
        .arg(&junk)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("junk.sigmatrace") && e.contains("magic"), "{e}");
    let missing = dir.path().join("no-such-dir").join("x.perfetto-trace");
    let r = Command::new(exe)
        .arg(&truth.files[0])
        .arg("-o")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(String::from_utf8_lossy(&r.stderr).contains("no-such-dir"));
    let r = Command::new(exe)
        .args(["--from", "2", "--to", "1"])
        .arg(&truth.files[0])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let r = Command::new(exe)
        .arg(&truth.files[0])
        .arg(&truth.files[1])
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    common::validate(&out, &["slices=1"]);
    assert!(
        !dir.path().join("x.perfetto-trace.partial").exists(),
        "temporary output renamed"
    );
    let r = Command::new(exe)
        .arg("stats")
        .arg("--json")
        .arg(&truth.files[0])
        .arg(&truth.files[1])
        .output()
        .unwrap();
    assert!(r.status.success());
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["summary"]["processes"], 2);
    assert_eq!(v["traffic"]["rank_ops"][0][1], truth.ops(0, 1));
    let svg = dir.path().join("m.svg");
    let r = Command::new(exe)
        .arg("stats")
        .arg("--svg")
        .arg(&svg)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("Traffic rank × rank") && text.contains("Queue pairs"),
        "{text}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

/// `--ranks` with a range selects those ranks (it used to panic inside clap), and nonsense
/// option values are usage errors (exit 2) that name the option, before any log is read.
#[test]
fn cli_rank_ranges_and_nonsense_options() {
    let exe = env!("CARGO_BIN_EXE_sigmatrace-convert");
    let (dir, _truth) = common::generate(&Scenario::ring(2, 2, Pattern::SendRecv, 50));
    let out = dir.path().join("r.perfetto-trace");
    let run = |extra: &[&str]| {
        Command::new(exe)
            .arg(dir.path())
            .arg("-o")
            .arg(&out)
            .arg("-q")
            .args(extra)
            .output()
            .unwrap()
    };
    for (sel, procs) in [("0-7", 4), ("1-2", 2), ("0,3", 2), ("3", 1)] {
        let r = run(&["--ranks", sel]);
        let e = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "--ranks {sel}: {e}");
        assert!(
            e.contains(&format!(": {procs} processes on ")),
            "--ranks {sel}: {e}"
        );
    }
    let r = Command::new(exe)
        .args(["stats", "--json", "--ranks", "0-1"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["summary"]["processes"], 2);
    for (bad, says) in [
        (&["--from", "nan"][..], "--from"),
        (&["--to", "inf"], "--to"),
        (&["--from=-1"], "--from"),
        (&["--compress", "10"], "--compress"),
        (&["--ranks", "5-2"], "empty range"),
        (&["--ranks", "0-99999999"], "more than"),
        (&["--ranks", "x"], "--ranks"),
        (&["--hosts", ","], "--hosts"),
        (&["--from", "2", "--to", "1"], "must be after"),
    ] {
        let r = run(bad);
        let e = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{bad:?}: {e}");
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

/// The command line computes the report's sections only when it prints them: `--stats` prints
/// the same tables as the `stats` command (the trace is the same either way), a plain
/// conversion none.
#[test]
fn cli_stats_tables_only_with_stats() {
    let exe = env!("CARGO_BIN_EXE_sigmatrace-convert");
    let (dir, _truth) = common::generate(&Scenario::ring(2, 2, Pattern::SendRecv, 50));
    let convert = |out: &str, extra: &[&str]| {
        let r = Command::new(exe)
            .arg(dir.path())
            .arg("-o")
            .arg(dir.path().join(out))
            .args(["-q", "--jobs", "1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8(r.stdout).unwrap()
    };
    let with = convert("with.perfetto-trace", &["--stats"]);
    let plain = convert("plain.perfetto-trace", &[]);
    let trace = |n: &str| std::fs::read(dir.path().join(n)).unwrap();
    assert_eq!(trace("with.perfetto-trace"), trace("plain.perfetto-trace"));
    let stats = Command::new(exe)
        .arg("stats")
        .arg(dir.path())
        .output()
        .unwrap();
    let stats = String::from_utf8(stats.stdout).unwrap();
    for title in ["== Clock alignment", "== Traffic", "== Queue pairs"] {
        assert!(with.contains(title), "--stats lacks {title}:\n{with}");
        assert!(
            !plain.contains(title),
            "plain conversion printed {title}:\n{plain}"
        );
    }
    let tables = |s: &str| s[s.find("== Traffic").unwrap()..].to_string();
    assert_eq!(tables(&with), tables(&stats));
}

//! Settings the interposer cannot use: a traced program (cprogs/fake_verbs.c) started with bad
//! `SIGMATRACE_*` values prints, at the default diagnostics level, exactly one stderr line per
//! bad variable naming it, the bad value and the value used instead, and the log is written
//! with those values; the program's own output is unchanged.

mod common;
use common::*;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn fake_post(n: &str) -> Vec<String> {
    vec![
        cprog("fake_verbs").display().to_string(),
        "post".into(),
        n.into(),
    ]
}

#[test]
fn each_bad_setting_is_one_stderr_line_at_the_default_level_and_the_default_is_used() {
    let plain = Cmd::new(&fake_post("100")).run(LIMIT);
    assert!(plain.ok(), "{plain:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake_post("100"))
        .traced(dir.path())
        .env("SIGMATRACE_MAX_BYTES", "abc")
        .env("SIGMATRACE_CHUNK_BYTES", "3")
        .env("SIGMATRACE_TRACE", "bogus")
        .env("SIGMATRACE_CLOCK", "sundial")
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    assert_eq!(out.stdout, plain.stdout);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            r#"sigmatrace: SIGMATRACE_MAX_BYTES="abc" is invalid (expected a size >= 64K); using 4G"#,
            r#"sigmatrace: SIGMATRACE_CHUNK_BYTES="3" is invalid (expected a power of two between 16K and 64M); using 1M"#,
            r#"sigmatrace: SIGMATRACE_TRACE="bogus" is invalid (unknown category "bogus"); using all"#,
            r#"sigmatrace: SIGMATRACE_CLOCK="sundial" is invalid (expected auto/tsc/monotonic_raw); using auto"#,
        ],
        "{}",
        out.stderr
    );
    // The values used are the defaults: 1 MiB chunks, every category traced.
    let t = only_log(dir.path());
    let h = t.header.as_ref().unwrap();
    assert_eq!(h.chunk_size, 1 << 20);
    assert_eq!(t.sends().len(), 100);
    assert_eq!(t.wcs().len(), 100);
}

#[test]
fn a_bad_diagnostics_level_is_reported_at_the_level_it_falls_back_to() {
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake_post("10"))
        .traced(dir.path())
        .env("SIGMATRACE_DIAG", "bogus")
        .run(LIMIT);
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stderr,
        "sigmatrace: SIGMATRACE_DIAG=\"bogus\" is invalid (expected off/error/info/debug); using error\n"
    );
    assert_eq!(only_log(dir.path()).sends().len(), 10);
}

#[test]
fn diag_off_silences_the_setting_lines_and_good_settings_print_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake_post("10"))
        .traced(dir.path())
        .env("SIGMATRACE_DIAG", "off")
        .env("SIGMATRACE_MAX_BYTES", "abc")
        .run(LIMIT);
    assert!(out.ok() && out.stderr.is_empty(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = Cmd::new(&fake_post("10"))
        .traced(dir.path())
        .env("SIGMATRACE_MAX_BYTES", "1G")
        .env("SIGMATRACE_CHUNK_BYTES", "64K")
        .env("SIGMATRACE_TRACE", "all,-empty_polls")
        .run(LIMIT);
    assert!(out.ok() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(
        only_log(dir.path()).header.as_ref().unwrap().chunk_size,
        64 << 10
    );
}

//! Helpers shared by the interposer's benches.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub fn env_num(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The load average, as `uptime` prints it.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Newest modification time of the files under `dir`.
pub fn newest(dir: &Path) -> std::time::SystemTime {
    let mut t = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let m = if p.is_dir() {
            newest(&p)
        } else {
            e.metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
        };
        t = t.max(m);
    }
    t
}

/// Builds the release `libsigmatrace.so` (nothing to do when it is fresh) and checks that it
/// is not older than the sources it is built from (the bench measures it as it is).
pub fn fresh_lib(lib: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "sigmatrace-interposer"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(status.success(), "building libsigmatrace.so failed");
    let built = std::fs::metadata(lib)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    for src in ["interposer/src", "schemas/src"] {
        assert!(
            newest(&root.join(src)) <= built,
            "{} is older than {src}: run `cargo build --release -p sigmatrace-interposer`",
            lib.display()
        );
    }
}

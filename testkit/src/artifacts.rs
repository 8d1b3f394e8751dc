//! Where the workspace's built artifacts are. Integration tests run programs the workspace
//! builds (`cargo build --workspace` runs before the tests in `scripts/test.sh`): the
//! interposer, softnic's launcher and libraries, the converter and the example workloads. All
//! of them are in `target/<profile>/`, the parent of the running test binary's `deps/`.

use std::path::{Path, PathBuf};

/// The workspace root (the repository checkout).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ is inside the workspace")
        .to_path_buf()
}

/// `target/<profile>/` of the running test binary (works with any `CARGO_TARGET_DIR`).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("the test binary is in a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>/deps").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// A built artifact of the workspace; panics with a clear message when it is missing or older
/// than its crate's sources (tests never skip, and never test a stale library).
pub fn artifact(name: &str) -> PathBuf {
    let p = build_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-targets)",
        p.display()
    );
    if let Some(src) = newer_source(&p, name) {
        panic!(
            "{} is older than {}: `cargo test -p …` does not rebuild the libraries tests load; \
             build the workspace first (cargo build --workspace --all-targets)",
            p.display(),
            src.display()
        );
    }
    p
}

/// The source folders of the crate that builds cdylib `name` (a change there always relinks
/// it; binaries under `src/bin/` do not).
fn sources_of(name: &str) -> &'static [&'static str] {
    match name {
        "libsigmatrace.so" => &["interposer/src", "schemas/src"],
        "libsoftnic_verbs.so" => &["softnic/src"],
        "libsoftnic_mlx5.so" => &["softnic/libs/mlx5/src"],
        "libsoftnic_efa.so" => &["softnic/libs/efa/src"],
        "libsoftnic_rdmacm.so" => &["softnic/rdmacm/src"],
        _ => &[],
    }
}

/// A source file of `name`'s crate modified after the artifact `built`, if any.
fn newer_source(built: &Path, name: &str) -> Option<PathBuf> {
    let t = std::fs::metadata(built).and_then(|m| m.modified()).ok()?;
    let root = workspace_root();
    let mut dirs: Vec<PathBuf> = sources_of(name).iter().map(|d| root.join(d)).collect();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                if path.file_name().is_none_or(|n| n != "bin") {
                    dirs.push(path);
                }
            } else if e.metadata().and_then(|m| m.modified()).is_ok_and(|m| m > t) {
                return Some(path);
            }
        }
    }
    None
}

/// The interposer, `libsigmatrace.so`.
pub fn libsigmatrace() -> PathBuf {
    artifact("libsigmatrace.so")
}

/// softnic's launcher `softnic-run`, after checking that the provider libraries it loads are
/// built next to it.
pub fn softnic_run() -> PathBuf {
    for lib in [
        "libsoftnic_verbs.so",
        "libsoftnic_mlx5.so",
        "libsoftnic_efa.so",
    ] {
        artifact(lib);
    }
    artifact("softnic-run")
}

/// A Debian binary (ibverbs-utils, perftest) that `scripts/install-deps.sh` installs.
pub fn system_bin(name: &str) -> String {
    let p = Path::new("/usr/bin").join(name);
    assert!(
        p.exists(),
        "{} missing: run scripts/install-deps.sh",
        p.display()
    );
    p.display().to_string()
}

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
/// than one of the files it was built from (tests never skip, and never test a stale library).
pub fn artifact(name: &str) -> PathBuf {
    let p = build_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-targets)",
        p.display()
    );
    if let Some(src) = newer_source(&p) {
        panic!(
            "{} is older than {}: `cargo test -p …` does not rebuild the libraries tests load; \
             build the workspace first (cargo build --workspace --all-targets)",
            p.display(),
            src.display()
        );
    }
    p
}

/// An input of `built` modified after it, from the dep-info file cargo writes beside it
/// (`libsigmatrace.d` for `libsigmatrace.so`: every source, `include_bytes!` and
/// `rerun-if-changed` path the artifact was built from); none when there is no such file.
fn newer_source(built: &Path) -> Option<PathBuf> {
    let t = std::fs::metadata(built).and_then(|m| m.modified()).ok()?;
    let info = std::fs::read_to_string(built.with_extension("d")).ok()?;
    let (_, inputs) = info.split_once(": ")?;
    let mut paths = Vec::new();
    let mut cur = String::new();
    let mut words = inputs.split_whitespace().peekable();
    while let Some(w) = words.next() {
        // Make-style dep-info escapes a space inside a path as "\ ".
        match w.strip_suffix('\\') {
            Some(head) if words.peek().is_some() => {
                cur.push_str(head);
                cur.push(' ');
            }
            _ => {
                cur.push_str(w);
                paths.push(PathBuf::from(std::mem::take(&mut cur)));
            }
        }
    }
    // Folders (a build script's `rerun-if-changed` on a folder) are skipped: their own time
    // moves whenever an entry is added; the files in them are listed one by one.
    paths.into_iter().find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|m| m > t))
    })
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

//! The replacement libraries export every (name, version) of their tables: `dlvsym` finds each
//! one (NCCL resolves verbs with dlvsym(h, name, "IBVERBS_1.1")), `objdump -T` shows default
//! and hidden versions, and the SONAMEs/NEEDED entries are right.

mod common;
use common::*;
use std::ffi::CString;
use std::process::Command;

struct Entry {
    version: String,
    default: bool,
    name: String,
}

fn table(file: &str) -> Vec<Entry> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("exports")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("export table");
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('#').next()?.split_whitespace().collect();
            (f.first() == Some(&"sym")).then(|| Entry {
                version: f[1].into(),
                default: f[2] == "@@",
                name: f[3].into(),
            })
        })
        .collect()
}

fn dlopen(lib: &str, flags: i32) -> *mut libc::c_void {
    let p = CString::new(build_dir().join(lib).display().to_string()).expect("path");
    // SAFETY: dlopen with a valid path; the libraries' constructors are Rust's std only.
    let h = unsafe { libc::dlopen(p.as_ptr(), flags) };
    assert!(!h.is_null(), "dlopen {lib} failed");
    h
}

fn check_dlvsym(h: *mut libc::c_void, entries: &[Entry]) {
    assert!(!entries.is_empty());
    for e in entries {
        let n = CString::new(e.name.as_str()).expect("name");
        let v = CString::new(e.version.as_str()).expect("version");
        // SAFETY: valid handle and NUL-terminated strings.
        let p = unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) };
        assert!(!p.is_null(), "dlvsym({}, {}) = NULL", e.name, e.version);
    }
}

#[test]
fn ibverbs_every_name_and_version_resolves() {
    let _ = softnic_run();
    let h = dlopen("libsoftnic_verbs.so", libc::RTLD_NOW | libc::RTLD_GLOBAL);
    let t = table("ibverbs.txt");
    assert!(t.len() > 100, "table has {} entries", t.len());
    check_dlvsym(h, &t);
    // Default versions answer plain dlsym; 1.0 and 1.1 twins are distinct entry points.
    let n = CString::new("ibv_get_device_list").expect("name");
    let v10 = CString::new("IBVERBS_1.0").expect("v");
    let v11 = CString::new("IBVERBS_1.1").expect("v");
    // SAFETY: as above.
    unsafe {
        let d = libc::dlsym(h, n.as_ptr());
        assert_eq!(d, libc::dlvsym(h, n.as_ptr(), v11.as_ptr()));
        assert_ne!(d, libc::dlvsym(h, n.as_ptr(), v10.as_ptr()));
    }
}

#[test]
fn mlx5_and_efa_every_name_and_version_resolves() {
    let _ = softnic_run();
    // Load softnic's libibverbs first (SONAME libibverbs.so.1), as softnic-run arranges.
    let _v = dlopen("libsoftnic_verbs.so", libc::RTLD_NOW | libc::RTLD_GLOBAL);
    check_dlvsym(
        dlopen("libsoftnic_mlx5.so", libc::RTLD_NOW),
        &table("mlx5.txt"),
    );
    check_dlvsym(
        dlopen("libsoftnic_efa.so", libc::RTLD_NOW),
        &table("efa.txt"),
    );
}

fn objdump(args: &[&str], lib: &str) -> String {
    let out = Command::new("objdump")
        .args(args)
        .arg(build_dir().join(lib))
        .output()
        .expect("objdump (binutils) must be installed");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn objdump_shows_versions_sonames_and_no_real_libibverbs() {
    let _ = softnic_run();
    for (lib, file) in [
        ("libsoftnic_verbs.so", "ibverbs.txt"),
        ("libsoftnic_mlx5.so", "mlx5.txt"),
        ("libsoftnic_efa.so", "efa.txt"),
    ] {
        let dynsym = objdump(&["-T"], lib);
        for e in table(file) {
            let ver = if e.default {
                e.version.clone()
            } else {
                format!("({})", e.version)
            };
            let found = dynsym.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 2 && f[f.len() - 1] == e.name && f[f.len() - 2] == ver
            });
            assert!(found, "{lib}: objdump -T lacks `{ver} {}`", e.name);
        }
    }
    let p = objdump(&["-p"], "libsoftnic_verbs.so");
    assert!(p.contains("SONAME               libibverbs.so.1"), "{p}");
    assert!(!p.contains("NEEDED               libibverbs"), "{p}");
    let p = objdump(&["-p"], "libsoftnic_mlx5.so");
    assert!(p.contains("SONAME               libmlx5.so.1"), "{p}");
    let p = objdump(&["-p"], "libsoftnic_efa.so");
    assert!(p.contains("SONAME               libefa.so.1"), "{p}");
}

/// `(version, name)` of every defined dynamic symbol in `objdump -T` output; hidden (compat)
/// versions keep their parentheses. Unversioned (`Base`) symbols — softnic's own `sv_*`
/// targets — are left out: they are in no rdma-core namespace.
fn defined_versioned(dynsym: &str) -> std::collections::BTreeSet<(String, String)> {
    dynsym
        .lines()
        .filter(|l| l.contains(" g ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 7).then(|| (f[f.len() - 2].to_string(), f[f.len() - 1].to_string()))
        })
        // Base: unversioned; name == version: a version node's own marker (absolute symbol some
        // linkers emit), not an entry point.
        .filter(|(v, n)| v != "Base" && v != n)
        .collect()
}

fn objdump_path(path: &std::path::Path) -> String {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .expect("objdump (binutils) must be installed");
    assert!(out.status.success(), "objdump -T {}", path.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The installed rdma-core library `name` (Debian multiarch or plain lib directories).
fn installed(name: &str) -> std::path::PathBuf {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("{name} not installed (scripts/install-deps.sh installs rdma-core)")
        })
}

#[test]
fn exports_equal_the_installed_rdma_core_libraries() {
    let _ = softnic_run();
    for (real, ours) in [
        ("libibverbs.so.1", "libsoftnic_verbs.so"),
        ("libmlx5.so.1", "libsoftnic_mlx5.so"),
        ("libefa.so.1", "libsoftnic_efa.so"),
    ] {
        let want = defined_versioned(&objdump_path(&installed(real)));
        let have = defined_versioned(&objdump(&["-T"], ours));
        assert!(
            want.len() >= 6,
            "{real}: only {} versioned symbols",
            want.len()
        );
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{ours} vs installed {real}: missing {missing:?}, not in the real library {extra:?}"
        );
    }
}

#[test]
fn softnic_run_keeps_ld_preload_and_sets_environment() {
    let out = Command::new(softnic_run())
        .args([
            "--node",
            "42",
            "--fabric",
            "/tmp/softnic-env-test",
            "--",
            "sh",
            "-c",
        ])
        .arg("echo \"$LD_LIBRARY_PATH|$SOFTNIC_NODE|$SOFTNIC_FABRIC|$LD_PRELOAD\"")
        .env("LD_PRELOAD", "libkeepme.so")
        .env("LD_LIBRARY_PATH", "/old/path")
        .output()
        .expect("softnic-run");
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = s.trim().split('|').collect();
    let libdir = build_dir().join("softnic-lib");
    assert_eq!(f[0], format!("{}:/old/path", libdir.display()));
    assert_eq!(&f[1..], ["42", "/tmp/softnic-env-test", "libkeepme.so"]);
    for l in [
        "libibverbs.so.1",
        "libibverbs.so",
        "libmlx5.so.1",
        "libefa.so.1",
    ] {
        assert!(
            libdir.join(l).exists(),
            "{l} missing in {}",
            libdir.display()
        );
    }
    let bad = Command::new(softnic_run())
        .args(["--node", "x", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(127));
}

//! softnic's librdmacm.so.1 exports exactly the public symbol@version set of Debian's
//! librdmacm.so.1 (so a newer rdma-core cannot open a silent gap), each resolvable with
//! dlvsym, under the SONAME librdmacm.so.1.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::process::Command;

const SYSTEM: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

fn built() -> std::path::PathBuf {
    sigmatrace_testkit::artifact("libsoftnic_rdmacm.so")
}

/// Defined dynamic symbols with an RDMACM version: (name, version).
fn exports(lib: &std::path::Path) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, name) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            let ver = ver.trim_start_matches('(').trim_end_matches(')');
            (ver.starts_with("RDMACM_") && !name.starts_with("RDMACM_"))
                .then(|| (name.to_string(), ver.to_string()))
        })
        .collect()
}

#[test]
fn exports_match_debian_librdmacm() {
    let want = exports(std::path::Path::new(SYSTEM));
    assert!(want.len() > 60, "{SYSTEM}: {want:?}");
    let have = exports(&built());
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
}

#[test]
fn every_export_resolves_with_dlvsym_and_soname() {
    let lib = built();
    let path = CString::new(lib.display().to_string()).unwrap();
    // SAFETY: dlopen of a library path; RTLD_LAZY leaves its libibverbs calls unresolved
    // until used.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    for (name, ver) in exports(std::path::Path::new(SYSTEM)) {
        let (n, v) = (
            CString::new(name.clone()).unwrap(),
            CString::new(ver.clone()).unwrap(),
        );
        // SAFETY: h is a live handle; both strings are NUL-terminated.
        let p = unsafe { libc::dlvsym(h, n.as_ptr(), v.as_ptr()) };
        assert!(!p.is_null(), "dlvsym({name}, {ver})");
    }
    let out = Command::new("objdump")
        .arg("-p")
        .arg(&lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["SONAME", "librdmacm.so.1"]),
        "{text}"
    );
    assert!(
        text.contains("NEEDED               libibverbs.so.1"),
        "{text}"
    );
}

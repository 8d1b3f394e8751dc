//! Finding what `sigmatrace` launches: the interposer, softnic's launcher and the demo
//! workload. They are built into the same directory as `sigmatrace` itself
//! (`target/<profile>/`); environment variables override each path.

use std::path::{Path, PathBuf};

use crate::LaunchError;

/// A file built next to this executable, or named by `env_var`.
pub fn locate(file: &str, env_var: &str) -> Result<PathBuf, LaunchError> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok(p)
        } else {
            Err(LaunchError::Missing {
                what: file.to_string(),
                searched: vec![p],
                hint: format!("{env_var} names a path that does not exist"),
            })
        };
    }
    let mut searched = Vec::new();
    for dir in search_dirs() {
        let p = dir.join(file);
        if p.exists() {
            return Ok(p);
        }
        searched.push(p);
    }
    Err(LaunchError::Missing {
        what: file.to_string(),
        searched,
        hint: "build the whole workspace first: cargo build --release --workspace".into(),
    })
}

fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            // target/<profile>/deps/<test binary> → target/<profile>
            if d.file_name().is_some_and(|n| n == "deps") {
                if let Some(p) = d.parent() {
                    dirs.push(p.to_path_buf());
                }
            }
            // an installed layout: bin/sigmatrace + lib/sigmatrace/
            if let Some(p) = d.parent() {
                dirs.push(p.join("lib").join("sigmatrace"));
            }
        }
    }
    dirs
}

/// The interposer library.
pub fn interposer() -> Result<PathBuf, LaunchError> {
    locate("libsigmatrace.so", "SIGMATRACE_LIB")
}

/// softnic's launcher.
pub fn softnic_run() -> Result<PathBuf, LaunchError> {
    locate("softnic-run", "SIGMATRACE_SOFTNIC_RUN")
}

/// The demo's ring all-reduce workload.
pub fn ring_allreduce() -> Result<PathBuf, LaunchError> {
    locate("ring_allreduce", "SIGMATRACE_DEMO_WORKLOAD")
}

/// `LD_PRELOAD` with `lib` first, keeping what the user already preloads.
pub fn preload_value(lib: &Path, existing: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(e) = existing {
        let already = std::env::split_paths(e).any(|p| p == lib);
        if already {
            return e.to_os_string();
        }
        if !e.is_empty() {
            v.push(":");
            v.push(e);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn preload_keeps_the_users_libraries_after_ours() {
        let lib = Path::new("/x/libsigmatrace.so");
        assert_eq!(preload_value(lib, None), "/x/libsigmatrace.so");
        assert_eq!(
            preload_value(lib, Some(OsStr::new(""))),
            "/x/libsigmatrace.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/a/libfoo.so"))),
            "/x/libsigmatrace.so:/a/libfoo.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/a/libfoo.so:/x/libsigmatrace.so"))),
            "/a/libfoo.so:/x/libsigmatrace.so"
        );
    }
}

//! softnic-run: runs a program on softnic.
//!
//! ```text
//! softnic-run [--node N] [--fabric DIR] [--lib-dir DIR] -- CMD [ARGS...]
//! softnic-run --print-lib-dir
//! ```
//!
//! Puts a directory holding `libibverbs.so.1`, `libmlx5.so.1`, `libefa.so.1`, `librdmacm.so.1`
//! (symlinks to the built softnic libraries) first on LD_LIBRARY_PATH, sets SOFTNIC_NODE /
//! SOFTNIC_FABRIC when given, sets SYSFS_PATH to a generated sysfs tree of the node's device
//! and shows it at /sys/class/infiniband{,_verbs} in a private mount namespace where the
//! kernel allows it (one message on stderr where it does not), with the device's node
//! `/dev/infiniband/uverbsN` (a bind of `/dev/null`: see devnode.rs), keeps every other
//! variable (LD_PRELOAD included) and execs CMD.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[path = "softnic-run/devnode.rs"]
mod devnode;
#[path = "softnic-run/sysfs.rs"]
mod sysfs;

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("usage: softnic-run [--node N] [--fabric DIR] [--lib-dir DIR] -- CMD [ARGS...]")]
    Usage,
    #[error("--node wants a number below 65534, got {0:?}")]
    BadNode(String),
    #[error("softnic library {0} not found next to softnic-run (build the workspace first: cargo build --workspace)")]
    MissingLib(PathBuf),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("exec {0:?}: {1}")]
    Exec(OsString, std::io::Error),
    #[error("{0}")]
    Sysfs(#[from] sysfs::SysfsError),
}

/// (soname links, built file name)
const LIBS: &[(&[&str], &str)] = &[
    (&["libibverbs.so.1", "libibverbs.so"], "libsoftnic_verbs.so"),
    (&["libmlx5.so.1", "libmlx5.so"], "libsoftnic_mlx5.so"),
    (&["libefa.so.1", "libefa.so"], "libsoftnic_efa.so"),
    (&["librdmacm.so.1", "librdmacm.so"], "libsoftnic_rdmacm.so"),
];

/// Creates (or refreshes) `<build dir>/softnic-lib/` with soname symlinks.
fn lib_dir(build_dir: &Path) -> Result<PathBuf, RunError> {
    let dir = build_dir.join("softnic-lib");
    std::fs::create_dir_all(&dir).map_err(|e| RunError::Io(dir.clone(), e))?;
    for (links, file) in LIBS {
        let target = build_dir.join(file);
        if !target.exists() {
            return Err(RunError::MissingLib(target));
        }
        for l in *links {
            let link = dir.join(l);
            if std::fs::read_link(&link).ok().as_deref() == Some(target.as_path()) {
                continue;
            }
            // Atomic replace: concurrent runs may refresh the same directory.
            let tmp = dir.join(format!(".{l}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).map_err(|e| RunError::Io(tmp.clone(), e))?;
            std::fs::rename(&tmp, &link).map_err(|e| RunError::Io(link.clone(), e))?;
        }
    }
    Ok(dir)
}

fn run() -> Result<(), RunError> {
    let mut args = std::env::args_os().skip(1);
    let mut node: Option<String> = None;
    let mut fabric: Option<OsString> = None;
    let mut build_dir: Option<PathBuf> = None;
    let mut print = false;
    let mut cmd: Vec<OsString> = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--node") => {
                let n = args.next().ok_or(RunError::Usage)?;
                let s = n.to_string_lossy().into_owned();
                match s.parse::<u32>() {
                    Ok(v) if v < 0xfffe => node = Some(s),
                    _ => return Err(RunError::BadNode(s)),
                }
            }
            Some("--fabric") => fabric = Some(args.next().ok_or(RunError::Usage)?),
            Some("--lib-dir") => build_dir = Some(args.next().ok_or(RunError::Usage)?.into()),
            Some("--print-lib-dir") => print = true,
            Some("--write-sysfs") => {
                let dir = PathBuf::from(args.next().ok_or(RunError::Usage)?);
                return Ok(sysfs::write_tree(&dir)?);
            }
            Some("--") => {
                cmd.extend(args.by_ref());
                break;
            }
            _ => {
                cmd.push(a);
                cmd.extend(args.by_ref());
                break;
            }
        }
    }
    let build_dir = match build_dir {
        Some(d) => d,
        None => std::env::current_exe()
            .map_err(|e| RunError::Io("current_exe".into(), e))?
            .parent()
            .map(Path::to_path_buf)
            .ok_or(RunError::Usage)?,
    };
    let dir = lib_dir(&build_dir)?;
    if print {
        println!("{}", dir.display());
        return Ok(());
    }
    if cmd.is_empty() {
        return Err(RunError::Usage);
    }
    let mut ld = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        ld.push(":");
        ld.push(old);
    }
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]).env("LD_LIBRARY_PATH", ld);
    let node_num = node
        .clone()
        .or_else(|| std::env::var("SOFTNIC_NODE").ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|n| *n < 0xfffe)
        // softnic's default node: this process keeps its pid across exec.
        .unwrap_or(1000 + std::process::id() % 60000);
    show_sysfs(&mut c, &build_dir, &dir, node_num);
    if let Some(n) = node {
        c.env("SOFTNIC_NODE", n);
    }
    if let Some(f) = fabric {
        c.env("SOFTNIC_FABRIC", f);
    }
    Err(RunError::Exec(cmd[0].clone(), c.exec()))
}

/// SYSFS_PATH and the /sys/class view (see sysfs.rs); failures are reported once and the
/// program still runs.
fn show_sysfs(c: &mut Command, build_dir: &Path, lib_dir: &Path, node: u32) {
    let tree = match sysfs::tree(build_dir, lib_dir, node) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("softnic-run: no sysfs view of softnic's device: {e}");
            return;
        }
    };
    c.env("SYSFS_PATH", &tree);
    if let Err(e) = sysfs::private_view(&tree) {
        eprintln!(
            "softnic-run: /sys/class/infiniband not shown ({e}; needs root or CAP_SYS_ADMIN); \
             softnic's sysfs tree is at SYSFS_PATH={}",
            tree.display()
        );
        return;
    }
    // The device's uverbs names, as the tree has them.
    let names: Vec<String> = std::fs::read_dir(tree.join("class/infiniband_verbs"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Err(e) = devnode::show(&names, &tree.join(".new-dev")) {
        eprintln!("softnic-run: /dev/infiniband not shown ({e})");
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softnic-run: {e}");
            ExitCode::from(127)
        }
    }
}

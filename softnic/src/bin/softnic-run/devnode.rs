//! softnic-run's device node: `/dev/infiniband/<uverbsN>` in the private mount namespace of
//! the sysfs view, a bind mount of `/dev/null`.
//!
//! Nothing opens it — softnic's libibverbs is the whole device — but libraries that vet a
//! device before they use it look for it: UCX's InfiniBand transports (`uct_ib`) take a device
//! only when `/dev/infiniband/<dev_name>` is a character device the process may read and
//! write, and without it they see none. Where `/dev/infiniband` exists (a host with RDMA
//! hardware) a tmpfs hides its nodes in the namespace; where it does not, `/dev` itself is
//! replaced by a tmpfs that holds every original entry (bind mounts, the same symlinks) plus
//! `infiniband/`, built aside and moved over `/dev` only once complete (a failure leaves
//! `/dev` as it was), so that the real `/dev` is never written to.

use std::path::Path;

use super::sysfs::mount;

/// Shows `/dev/infiniband/<name>` for each of `names` in this process's (private, already
/// unshared) mount namespace; `staging`: an empty directory where the new `/dev` is built.
pub fn show(names: &[String], staging: &Path) -> Result<(), String> {
    let dev = Path::new("/dev");
    let ib = dev.join("infiniband");
    if ib.is_dir() {
        mount(Path::new("softnic-dev"), &ib, Some(c"tmpfs"), 0)?;
    } else {
        overlay_dev(dev, staging)?;
    }
    for name in names {
        let node = ib.join(name);
        std::fs::File::create(&node).map_err(|e| format!("{}: {e}", node.display()))?;
        mount(&dev.join("null"), &node, None, libc::MS_BIND)?;
    }
    Ok(())
}

/// Builds a tmpfs at `staging` with `dev`'s entries (directories and device nodes bound from
/// the original, symlinks copied) and an empty `infiniband/`, then moves it over `dev`.
fn overlay_dev(dev: &Path, staging: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(staging).map_err(|e| io(staging, e))?;
    mount(Path::new("softnic-dev"), staging, Some(c"tmpfs"), 0)?;
    let filled = fill(dev, staging).and_then(|()| {
        let ib = staging.join("infiniband");
        std::fs::create_dir(&ib).map_err(|e| io(&ib, e))
    });
    match filled.and_then(|()| mount(staging, dev, None, libc::MS_MOVE)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let s = std::ffi::CString::new(staging.as_os_str().as_encoded_bytes()).expect("no NUL");
            // SAFETY: detaching the unfinished staging tmpfs (lazy unmount); /dev is untouched.
            unsafe { libc::umount2(s.as_ptr(), libc::MNT_DETACH) };
            Err(e)
        }
    }
}

/// `dev`'s entries into `to`.
fn fill(dev: &Path, to: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    for e in std::fs::read_dir(dev)
        .map_err(|e| io(dev, e))?
        .filter_map(Result::ok)
    {
        let (from, at) = (e.path(), to.join(e.file_name()));
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            let target = std::fs::read_link(&from).map_err(|e| io(&from, e))?;
            std::os::unix::fs::symlink(&target, &at).map_err(|e| io(&at, e))?;
        } else if kind.is_dir() {
            std::fs::create_dir(&at).map_err(|e| io(&at, e))?;
            mount(&from, &at, None, libc::MS_BIND | libc::MS_REC)?;
        } else {
            std::fs::File::create(&at).map_err(|e| io(&at, e))?;
            mount(&from, &at, None, libc::MS_BIND)?;
        }
    }
    Ok(())
}

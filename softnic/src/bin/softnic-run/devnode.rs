//! softnic-run's device node: `/dev/infiniband/<uverbsN>` in the private mount namespace of
//! the sysfs view, a bind mount of `/dev/null`.
//!
//! Nothing opens it — softnic's libibverbs is the whole device — but libraries that vet a
//! device before they use it look for it: UCX's InfiniBand transports (`uct_ib`) take a device
//! only when `/dev/infiniband/<dev_name>` is a character device the process may read and
//! write, and without it they see none. Where `/dev/infiniband` exists (a host with RDMA
//! hardware) a tmpfs hides its nodes in the namespace; where it does not, `/dev` itself is
//! shown through a tmpfs that holds every original entry (bind mounts, the same symlinks)
//! plus `infiniband/`, so that the real `/dev` is never written to.

use std::path::Path;

use super::sysfs::mount;

/// Shows `/dev/infiniband/<name>` for each of `names` in this process's (private, already
/// unshared) mount namespace; `saved`: an empty directory for the original `/dev` while its
/// entries are bound into the new one.
pub fn show(names: &[String], saved: &Path) -> Result<(), String> {
    let dev = Path::new("/dev");
    let ib = dev.join("infiniband");
    if ib.is_dir() {
        mount(Path::new("softnic-dev"), &ib, Some(c"tmpfs"), 0)?;
    } else {
        overlay_dev(dev, saved)?;
        std::fs::create_dir(&ib).map_err(|e| format!("{}: {e}", ib.display()))?;
    }
    for name in names {
        let node = ib.join(name);
        std::fs::File::create(&node).map_err(|e| format!("{}: {e}", node.display()))?;
        mount(&dev.join("null"), &node, None, libc::MS_BIND)?;
    }
    Ok(())
}

/// Replaces `/dev` by a tmpfs holding the same entries: directories and device nodes bound
/// from the original (kept reachable at `saved` while it is filled), symlinks copied.
fn overlay_dev(dev: &Path, saved: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(saved).map_err(|e| io(saved, e))?;
    mount(dev, saved, None, libc::MS_BIND | libc::MS_REC)?;
    let entries: Vec<_> = std::fs::read_dir(saved)
        .map_err(|e| io(saved, e))?
        .filter_map(Result::ok)
        .collect();
    mount(Path::new("softnic-dev"), dev, Some(c"tmpfs"), 0)?;
    for e in &entries {
        let (from, to) = (e.path(), dev.join(e.file_name()));
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            let target = std::fs::read_link(&from).map_err(|e| io(&from, e))?;
            std::os::unix::fs::symlink(&target, &to).map_err(|e| io(&to, e))?;
        } else if kind.is_dir() {
            std::fs::create_dir(&to).map_err(|e| io(&to, e))?;
            mount(&from, &to, None, libc::MS_BIND | libc::MS_REC)?;
        } else {
            std::fs::File::create(&to).map_err(|e| io(&to, e))?;
            mount(&from, &to, None, libc::MS_BIND)?;
        }
    }
    let s = std::ffi::CString::new(saved.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: detaching the helper mount of the original /dev (lazy unmount).
    unsafe { libc::umount2(s.as_ptr(), libc::MNT_DETACH) };
    Ok(())
}

//! softnic-run's sysfs view: a generated `class/infiniband/<dev>/…` and
//! `class/infiniband_verbs/uverbsN/…` tree (what rdma-core and programs that look before any
//! verbs call expect), shown at /sys/class in a private mount namespace and named by
//! SYSFS_PATH.
//!
//! The values come from softnic itself, never restated here: a child `softnic-run
//! --write-sysfs DIR` (own process, own throw-away fabric, the node's SOFTNIC_NODE) dlopens
//! softnic's libibverbs.so.1 and writes what `ibv_read_sysfs_file` answers for the device's
//! attributes, `ibv_query_gid` for `gids/0` and `ibv_query_device` for the device ids.
//! Trees are cached per node and library build under `softnic-lib/sysfs/`.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use verbs_sys as ffi;

/// Why the sysfs view could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("writing the sysfs tree failed: {0}")]
    Writer(String),
    #[error("dlopen libibverbs.so.1: {0}")]
    Dl(String),
    #[error("softnic has no device")]
    NoDevice,
    #[error("{0}")]
    Mount(String),
}

/// Attributes of the device directory that `ibv_read_sysfs_file` answers.
const DEVICE_ATTRS: &[&str] = &[
    "node_guid",
    "sys_image_guid",
    "node_type",
    "node_desc",
    "fw_ver",
    "hca_type",
    "hw_rev",
    "board_id",
    "ports/1/state",
    "ports/1/phys_state",
    "ports/1/link_layer",
    "ports/1/lid",
    "ports/1/rate",
];

/// The (cached) tree for `node`: the directory to use as SYSFS_PATH.
pub fn tree(build_dir: &Path, lib_dir: &Path, node: u32) -> Result<PathBuf, SysfsError> {
    let lib = build_dir.join("libsoftnic_verbs.so");
    let meta = std::fs::metadata(&lib).map_err(|e| SysfsError::Io(lib.clone(), e))?;
    let stamp = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let root = lib_dir.join("sysfs");
    // The link layer (SOFTNIC_LINK_LAYER, inherited by the writer) changes the answers.
    let layer = std::env::var("SOFTNIC_LINK_LAYER").unwrap_or_default();
    let layer: String = layer
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let dir = root.join(format!("node{node}-{stamp:x}-{:x}{layer}", meta.len()));
    if dir.join("class/infiniband_verbs/abi_version").exists() {
        return Ok(dir);
    }
    let tmp = root.join(format!(".tmp-{}", std::process::id()));
    let fabric = root.join(format!(".fabric-{}", std::process::id()));
    for d in [&tmp, &fabric] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).map_err(|e| SysfsError::Io(d.clone(), e))?;
    }
    let me = std::env::current_exe().map_err(|e| SysfsError::Io("current_exe".into(), e))?;
    let out = Command::new(me)
        .arg("--write-sysfs")
        .arg(&tmp)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("SOFTNIC_NODE", node.to_string())
        .env("SOFTNIC_FABRIC", &fabric)
        .env_remove("LD_PRELOAD")
        .env_remove("SYSFS_PATH")
        .output()
        .map_err(|e| SysfsError::Io("softnic-run --write-sysfs".into(), e))?;
    let _ = std::fs::remove_dir_all(&fabric);
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(SysfsError::Writer(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    // Another run may have made the same tree meanwhile: either copy is right.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(dir)
}

fn write(path: PathBuf, text: &str) -> Result<(), SysfsError> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| SysfsError::Io(p.to_path_buf(), e))?;
    }
    std::fs::write(&path, format!("{text}\n")).map_err(|e| SysfsError::Io(path, e))
}

struct Verbs {
    lib: *mut c_void,
}

impl Verbs {
    fn open() -> Result<Verbs, SysfsError> {
        // SAFETY: dlopen with a NUL-terminated name; RTLD_NOW resolves everything up front.
        let lib = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
        if lib.is_null() {
            // SAFETY: dlerror returns a string describing the last dl failure.
            let e = unsafe { CStr::from_ptr(libc::dlerror()) };
            return Err(SysfsError::Dl(e.to_string_lossy().into_owned()));
        }
        Ok(Verbs { lib })
    }

    fn sym(&self, name: &CStr) -> Result<*mut c_void, SysfsError> {
        // SAFETY: lib is a live handle; name is NUL-terminated.
        let p = unsafe { libc::dlsym(self.lib, name.as_ptr()) };
        if p.is_null() {
            return Err(SysfsError::Dl(format!("{name:?} missing")));
        }
        Ok(p)
    }
}

fn cstr(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `--write-sysfs DIR`: writes softnic's answers into DIR (runs in its own process).
pub fn write_tree(dir: &Path) -> Result<(), SysfsError> {
    type GetList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ffi::ibv_device;
    type Open = unsafe extern "C" fn(*mut ffi::ibv_device) -> *mut ffi::ibv_context;
    type QueryDevice =
        unsafe extern "C" fn(*mut ffi::ibv_context, *mut ffi::ibv_device_attr) -> c_int;
    type QueryGid =
        unsafe extern "C" fn(*mut ffi::ibv_context, u8, c_int, *mut ffi::ibv_gid) -> c_int;
    type ReadFile = unsafe extern "C" fn(*const c_char, *const c_char, *mut c_char, usize) -> c_int;
    let v = Verbs::open()?;
    // SAFETY: each symbol is the libibverbs function of that C signature.
    let (get_list, open, query_device, query_gid, read_file) = unsafe {
        (
            std::mem::transmute::<*mut c_void, GetList>(v.sym(c"ibv_get_device_list")?),
            std::mem::transmute::<*mut c_void, Open>(v.sym(c"ibv_open_device")?),
            std::mem::transmute::<*mut c_void, QueryDevice>(v.sym(c"ibv_query_device")?),
            std::mem::transmute::<*mut c_void, QueryGid>(v.sym(c"ibv_query_gid")?),
            std::mem::transmute::<*mut c_void, ReadFile>(v.sym(c"ibv_read_sysfs_file")?),
        )
    };
    let mut n = 0;
    // SAFETY: n is a valid out pointer.
    let list = unsafe { get_list(&mut n) };
    if list.is_null() || n < 1 {
        return Err(SysfsError::NoDevice);
    }
    // SAFETY: the list holds n >= 1 device pointers (kept: this process exits soon).
    let dev = unsafe { &**list };
    let (name, uverbs, ibdev_path) = (cstr(&dev.name), cstr(&dev.dev_name), cstr(&dev.ibdev_path));
    let class = dir.join("class");
    let devdir = class.join("infiniband").join(&name);
    let cpath = CString::new(ibdev_path).map_err(|e| SysfsError::Writer(e.to_string()))?;
    for attr in DEVICE_ATTRS {
        let mut buf = [0 as c_char; 256];
        let cattr = CString::new(*attr).expect("no NUL");
        // SAFETY: NUL-terminated strings and a 256-byte buffer.
        let r = unsafe { read_file(cpath.as_ptr(), cattr.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        if r >= 0 {
            write(devdir.join(attr), cstr(&buf).trim_end())?;
        }
    }
    // SAFETY: dev is softnic's device.
    let ctx = unsafe { open(*list) };
    if ctx.is_null() {
        return Err(SysfsError::NoDevice);
    }
    let mut gid = ffi::ibv_gid::default();
    // SAFETY: ctx is open; gid is a valid out union.
    if unsafe { query_gid(ctx, 1, 0, &mut gid) } == 0 {
        // SAFETY: every bit pattern of the union is a valid byte array.
        let raw = unsafe { gid.raw };
        let groups: Vec<String> = raw
            .chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect();
        write(devdir.join("ports/1/gids/0"), &groups.join(":"))?;
        // The kernel's names of the two GID types; an Ethernet port's GIDs are RoCE v2.
        let layer = std::fs::read_to_string(devdir.join("ports/1/link_layer")).unwrap_or_default();
        let ty = if layer.trim() == "Ethernet" {
            "RoCE v2"
        } else {
            "IB/RoCE v1"
        };
        write(devdir.join("ports/1/gid_attrs/types/0"), ty)?;
    }
    write(devdir.join("ports/1/pkeys/0"), "0xffff")?;
    let mut attr = ffi::ibv_device_attr::default();
    // SAFETY: ctx is open; attr is a valid out struct.
    if unsafe { query_device(ctx, &mut attr) } == 0 {
        write(
            devdir.join("device/vendor"),
            &format!("0x{:04x}", attr.vendor_id),
        )?;
        write(
            devdir.join("device/device"),
            &format!("0x{:04x}", attr.vendor_part_id),
        )?;
    }
    let verbs = class.join("infiniband_verbs");
    write(verbs.join("abi_version"), "6")?;
    write(verbs.join(&uverbs).join("ibdev"), &name)?;
    write(verbs.join(&uverbs).join("abi_version"), "1")?;
    Ok(())
}

pub(crate) fn mount(
    src: &Path,
    dst: &Path,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
) -> Result<(), String> {
    let c = |p: &Path| {
        use std::os::unix::ffi::OsStrExt;
        CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string())
    };
    let (s, d) = (c(src)?, c(dst)?);
    let fs = fstype.map_or(std::ptr::null(), |f| f.as_ptr());
    // SAFETY: NUL-terminated paths; no data argument.
    if unsafe { libc::mount(s.as_ptr(), d.as_ptr(), fs, flags, std::ptr::null()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("mount {} on {}: {e}", src.display(), dst.display()));
    }
    Ok(())
}

/// Shows the tree at /sys/class/infiniband{,_verbs} in a private mount namespace of this
/// (single-threaded, about to exec) process; every other /sys/class entry stays visible.
pub fn private_view(tree: &Path) -> Result<(), SysfsError> {
    let err = |m: String| SysfsError::Mount(m);
    // SAFETY: plain syscalls on this single-threaded process.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(err(format!(
            "unshare(CLONE_NEWNS): {}",
            std::io::Error::last_os_error()
        )));
    }
    // Nothing mounted from here on may propagate back to the parent namespace.
    mount(
        Path::new("none"),
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
    )
    .map_err(err)?;
    let class = Path::new("/sys/class");
    let saved = tree.join(".orig-class");
    std::fs::create_dir_all(&saved).map_err(|e| SysfsError::Io(saved.clone(), e))?;
    mount(class, &saved, None, libc::MS_BIND).map_err(err)?;
    let entries: Vec<OsString> = std::fs::read_dir(&saved)
        .map_err(|e| SysfsError::Io(saved.clone(), e))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| n != "infiniband" && n != "infiniband_verbs")
        .collect();
    mount(Path::new("softnic-sysfs"), class, Some(c"tmpfs"), 0).map_err(err)?;
    for name in &entries {
        let (from, to) = (saved.join(name), class.join(name));
        std::fs::create_dir(&to).map_err(|e| SysfsError::Io(to.clone(), e))?;
        mount(&from, &to, None, libc::MS_BIND | libc::MS_REC).map_err(err)?;
    }
    for name in ["infiniband", "infiniband_verbs"] {
        let (from, to) = (tree.join("class").join(name), class.join(name));
        std::fs::create_dir(&to).map_err(|e| SysfsError::Io(to.clone(), e))?;
        mount(&from, &to, None, libc::MS_BIND).map_err(err)?;
    }
    // SAFETY: detaching the helper mount of the original /sys/class (lazy unmount).
    unsafe {
        let s = CString::new(saved.as_os_str().as_encoded_bytes()).expect("no NUL");
        libc::umount2(s.as_ptr(), libc::MNT_DETACH);
    }
    Ok(())
}

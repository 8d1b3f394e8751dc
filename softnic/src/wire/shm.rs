//! The fabric: shared-memory files in the fabric directory, MPSC packet rings, futex wake-ups.
//!
//! Layout of the fabric directory (`$SOFTNIC_FABRIC`, default `/dev/shm/softnic-$UID`):
//! - `node-<N>`: per simulated node, a QPN counter shared by every process that is node N.
//! - `proc-<pid>`: per process, the word its progress thread sleeps on.
//! - `qp-<N>-<qpn>`: per QP, a header and two rings: `req` (requests from peers, consumed by this
//!   process's responder role) and `resp` (ACK/NAK/read/atomic responses to this QP's requests).

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Payload bytes per packet (the internal MTU; UD messages are limited to it too).
pub const PKT_MTU: usize = 4096;
/// Slots per ring.
pub const RING_SLOTS: usize = 256;
const MAGIC: u64 = 0x534f_4654_4e49_4331; // "SOFTNIC1"

/// Errors of the shared-memory layer.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{0} is not a softnic object")]
    BadMagic(String),
}

fn io_err(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ShmError {
    let path = path.display().to_string();
    move |source| ShmError::Io { op, path, source }
}

/// The fabric directory, created on first use.
pub fn fabric_dir() -> PathBuf {
    let dir = std::env::var_os("SOFTNIC_FABRIC")
        .map(PathBuf::from)
        // SAFETY: getuid has no preconditions.
        .unwrap_or_else(|| {
            PathBuf::from(format!("/dev/shm/softnic-{}", unsafe { libc::getuid() }))
        });
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A shared read-write mapping of a whole file.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all concurrent access goes through atomics or the
// ring protocol.
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `path` (which must be `len` bytes or larger), creating it when `create` is set.
    pub fn open(path: &std::path::Path, len: usize, create: bool) -> Result<Mapping, ShmError> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| ShmError::BadMagic(path.display().to_string()))?;
        let flags = libc::O_RDWR | libc::O_CLOEXEC | if create { libc::O_CREAT } else { 0 };
        // SAFETY: c is a valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io_err("open", path)(std::io::Error::last_os_error()));
        }
        let res = (|| {
            if create {
                // SAFETY: fd is open; fstat fills st.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                if unsafe { libc::fstat(fd, &mut st) } != 0 {
                    return Err(io_err("fstat", path)(std::io::Error::last_os_error()));
                }
                // SAFETY: fd is open for writing.
                if (st.st_size as usize) < len && unsafe { libc::ftruncate(fd, len as i64) } != 0 {
                    return Err(io_err("ftruncate", path)(std::io::Error::last_os_error()));
                }
            }
            // SAFETY: mapping a regular file we opened read-write.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io_err("mmap", path)(std::io::Error::last_os_error()));
            }
            Ok(Mapping {
                ptr: p as *mut u8,
                len,
            })
        })();
        // SAFETY: fd is ours; the mapping stays valid after close.
        unsafe { libc::close(fd) };
        res
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// futex(FUTEX_WAIT) on a shared word, with an optional timeout in nanoseconds.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: Option<u64>) {
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word points to a live u32 (possibly in shared memory); a non-private futex works
    // across processes mapping the same file.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// futex(FUTEX_WAKE) of up to `n` waiters.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: as in futex_wait.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Wake word of one process (in `proc-<pid>`): the progress thread sleeps on it.
#[repr(C)]
pub struct ProcWord {
    pub state: AtomicU32,
}

pub const AWAKE: u32 = 0;
pub const SLEEPING: u32 = 1;

impl ProcWord {
    /// Called by a producer after making work visible to this process.
    #[inline]
    pub fn kick(&self) {
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) == SLEEPING
            && self.state.swap(AWAKE, Ordering::SeqCst) == SLEEPING
        {
            futex_wake(&self.state, 1);
        }
    }
}

/// A mapped `proc-<pid>` file.
pub struct ProcFile {
    map: Mapping,
}

impl ProcFile {
    pub fn open(pid: u32, create: bool) -> Result<ProcFile, ShmError> {
        let path = fabric_dir().join(format!("proc-{pid}"));
        Ok(ProcFile {
            map: Mapping::open(&path, 4096, create)?,
        })
    }
    pub fn word(&self) -> &ProcWord {
        // SAFETY: the file is 4096 zero-initialised bytes; ProcWord is one atomic u32.
        unsafe { &*(self.map.ptr() as *const ProcWord) }
    }
    pub fn remove(pid: u32) {
        let _ = std::fs::remove_file(fabric_dir().join(format!("proc-{pid}")));
    }
}

/// True when process `pid` no longer runs (absent, or an unreaped zombie).
pub fn pid_gone(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for the process's existence.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X")
    })
}

/// Removes fabric files left by processes that ended without cleaning up (crashes, _exit).
pub fn sweep_stale() {
    let Ok(rd) = std::fs::read_dir(fabric_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let owner = if let Some(p) = name.strip_prefix("proc-") {
            p.parse::<u32>().ok()
        } else if name.starts_with("qp-") {
            use std::io::Read;
            let mut h = [0u8; 12];
            std::fs::File::open(e.path())
                .and_then(|mut f| f.read_exact(&mut h))
                .ok()
                .map(|_| u32::from_ne_bytes([h[8], h[9], h[10], h[11]]))
        } else {
            None
        };
        if owner.is_some_and(|pid| pid != 0 && pid_gone(pid)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Allocates a QPN unique within `node` (shared counter in `node-<N>`).
pub fn alloc_qpn(node: u32) -> Result<u32, ShmError> {
    let path = fabric_dir().join(format!("node-{node}"));
    let m = Mapping::open(&path, 4096, true)?;
    // SAFETY: the first 4 bytes of the zero-initialised file are the counter.
    let ctr = unsafe { &*(m.ptr() as *const AtomicU32) };
    Ok(0x100 + (ctr.fetch_add(1, Ordering::Relaxed) % 0x00ff_ff00))
}

/// Packet kinds.
pub mod kind {
    pub const SEND: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const READ: u8 = 3;
    pub const CMP_SWP: u8 = 4;
    pub const FETCH_ADD: u8 = 5;
    /// RDMA atomic write: `swap` stored as one 8-byte write (`IBV_WR_ATOMIC_WRITE`).
    pub const ATOMIC_WRITE: u8 = 6;
    pub const ACK: u8 = 16;
    pub const NAK: u8 = 17;
    pub const READ_RESP: u8 = 18;
    pub const ATOMIC_RESP: u8 = 19;
}

/// Packet flags.
pub mod pflag {
    pub const FIRST: u8 = 1;
    pub const LAST: u8 = 2;
    pub const IMM: u8 = 4;
    pub const SOLICITED: u8 = 8;
    pub const GRH: u8 = 16;
    /// SEND with invalidate: `imm` is the rkey the responder invalidates.
    pub const INV: u8 = 32;
}

/// NAK codes.
pub mod nak {
    pub const RNR: u8 = 1;
    pub const REM_ACCESS: u8 = 2;
    pub const INV_REQ: u8 = 3;
    pub const REM_OP: u8 = 4;
    pub const FATAL: u8 = 5;
}

/// Header of every packet.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct PktHdr {
    pub kind: u8,
    pub flags: u8,
    pub code: u8,
    pub rnr_timer: u8,
    pub src_node: u32,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    pub msn: u32,
    pub len: u32,
    pub offset: u32,
    pub total: u32,
    pub imm: u32,
    pub rkey: u32,
    pub qkey: u32,
    pub sl: u32,
    pub raddr: u64,
    pub compare: u64,
    pub swap: u64,
}

#[repr(C)]
pub struct Slot {
    seq: AtomicU64,
    pub hdr: PktHdr,
    pub data: [u8; PKT_MTU],
}

#[repr(C, align(64))]
struct Padded(AtomicU64);

/// An MPSC ring of packet slots in shared memory (Vyukov bounded queue, single consumer).
#[repr(C)]
pub struct Ring {
    tail: Padded,
    head: Padded,
    slots: [Slot; RING_SLOTS],
}

impl Ring {
    /// Initialises a ring in freshly created (zeroed) memory.
    pub fn init(&self) {
        for (i, s) in self.slots.iter().enumerate() {
            s.seq.store(i as u64, Ordering::Relaxed);
        }
        self.tail.0.store(0, Ordering::Relaxed);
        self.head.0.store(0, Ordering::Release);
    }

    /// Reserves a slot, lets `fill` write header and payload, then publishes it.
    /// Returns false when the ring is full.
    #[inline]
    pub fn push(&self, fill: impl FnOnce(&mut PktHdr, &mut [u8; PKT_MTU])) -> bool {
        let mask = (RING_SLOTS - 1) as u64;
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        let slot = loop {
            let slot = &self.slots[(pos & mask) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            let dif = seq as i64 - pos as i64;
            if dif == 0 {
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break slot,
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        };
        let sp = slot as *const Slot as *mut Slot;
        // SAFETY: the CAS above gave this producer exclusive ownership of the slot until the
        // seq store below publishes it.
        unsafe { fill(&mut (*sp).hdr, &mut (*sp).data) };
        slot.seq.store(pos + 1, Ordering::Release);
        true
    }

    /// True when a published slot is waiting (consumer side).
    #[inline]
    pub fn has_data(&self) -> bool {
        let head = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[(head as usize) & (RING_SLOTS - 1)];
        slot.seq.load(Ordering::Acquire) == head + 1
    }

    /// The oldest published slot, if any. Single consumer only.
    #[inline]
    pub fn peek(&self) -> Option<&Slot> {
        let head = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[(head as usize) & (RING_SLOTS - 1)];
        if slot.seq.load(Ordering::Acquire) == head + 1 {
            Some(slot)
        } else {
            None
        }
    }

    /// Releases the slot returned by `peek`.
    #[inline]
    pub fn pop(&self) {
        let head = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[(head as usize) & (RING_SLOTS - 1)];
        slot.seq.store(head + RING_SLOTS as u64, Ordering::Release);
        self.head.0.store(head + 1, Ordering::Relaxed);
    }
}

/// Header page of a QP file.
#[repr(C)]
pub struct QpFileHdr {
    pub magic: AtomicU64,
    pub owner_pid: AtomicU32,
    pub alive: AtomicU32,
    pub node: u32,
    pub qpn: u32,
    pub qp_type: u32,
    /// CLOCK_MONOTONIC ns of the owner's last empty poll of a CQ this QP feeds (0: not polling).
    pub poll_stamp: AtomicU64,
}

impl QpFileHdr {
    /// True while the owner's application busy-polls a CQ of this QP: it will pick up new work
    /// itself, so producers need not wake the owner's progress thread.
    #[inline]
    pub fn owner_polling(&self, now: u64) -> bool {
        let s = self.poll_stamp.load(Ordering::Relaxed);
        s != 0 && now.wrapping_sub(s) < POLL_FRESH_NS
    }
}

/// How long an empty poll counts as "the application is polling".
pub const POLL_FRESH_NS: u64 = 20_000;

const HDR_BYTES: usize = 4096;

/// A QP's shared file: header plus request and response rings.
pub struct QpFile {
    map: Mapping,
    pub path: PathBuf,
}

impl QpFile {
    fn size() -> usize {
        HDR_BYTES + 2 * std::mem::size_of::<Ring>()
    }

    fn path(node: u32, qpn: u32) -> PathBuf {
        fabric_dir().join(format!("qp-{node}-{qpn}"))
    }

    /// Creates the file of a local QP (initialised under a temporary name, then renamed).
    pub fn create(node: u32, qpn: u32, qp_type: u32) -> Result<QpFile, ShmError> {
        let path = Self::path(node, qpn);
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        let tmp = fabric_dir().join(format!(".tmp-qp-{node}-{qpn}-{pid}"));
        let _ = std::fs::remove_file(&tmp);
        let map = Mapping::open(&tmp, Self::size(), true)?;
        let f = QpFile {
            map,
            path: path.clone(),
        };
        {
            // SAFETY: the file is new and only this process knows its name; the header sits at
            // offset 0 of a page-aligned mapping.
            let h = unsafe { &mut *(f.map.ptr() as *mut QpFileHdr) };
            h.node = node;
            h.qpn = qpn;
            h.qp_type = qp_type;
            h.owner_pid.store(pid, Ordering::Relaxed);
            h.alive.store(1, Ordering::Relaxed);
            f.req().init();
            f.resp().init();
            h.magic.store(MAGIC, Ordering::Release);
        }
        std::fs::rename(&tmp, &path).map_err(io_err("rename", &path))?;
        Ok(f)
    }

    /// Maps the file of a (possibly remote) QP.
    pub fn open(node: u32, qpn: u32) -> Result<QpFile, ShmError> {
        let path = Self::path(node, qpn);
        let map = Mapping::open(&path, Self::size(), false)?;
        let f = QpFile { map, path };
        if f.hdr().magic.load(Ordering::Acquire) != MAGIC {
            return Err(ShmError::BadMagic(f.path.display().to_string()));
        }
        Ok(f)
    }

    pub fn hdr(&self) -> &QpFileHdr {
        // SAFETY: offset 0 of the mapping holds the header.
        unsafe { &*(self.map.ptr() as *const QpFileHdr) }
    }
    pub fn req(&self) -> &Ring {
        // SAFETY: the request ring follows the header page; Ring is 64-byte aligned there.
        unsafe { &*(self.map.ptr().add(HDR_BYTES) as *const Ring) }
    }
    pub fn resp(&self) -> &Ring {
        // SAFETY: the response ring follows the request ring.
        unsafe { &*(self.map.ptr().add(HDR_BYTES + std::mem::size_of::<Ring>()) as *const Ring) }
    }

    /// Marks the QP dead and removes its name.
    pub fn retire(&self) {
        self.hdr().alive.store(0, Ordering::Release);
        let _ = std::fs::remove_file(&self.path);
    }
}

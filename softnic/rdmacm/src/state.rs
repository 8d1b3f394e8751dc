//! Process-wide CM state: ids, event channels, the device, and the thread that receives CM
//! messages from the loopback sockets of every id and turns them into queued events.
//!
//! Each event channel is a pipe: an event is queued, then one byte is written, so the
//! channel's fd is readable exactly while events are pending; `rdma_get_cm_event` reads one
//! byte (blocking or not, as the application set the fd) and pops one event.

use crate::addr::{Family, V4};
use crate::ffi::*;
use crate::verbs::Dev;
use crate::wire::Msg;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Where an id is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    Idle,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active side: REQ sent.
    Connecting,
    /// Active side: REP received, QP not yet brought up by the application (no QP on the id).
    Responded,
    /// Passive side: REQ received, not yet accepted.
    Requested,
    /// Passive side: REP sent, waiting for RTU.
    Accepting,
    Connected,
    Disconnected,
}

/// Library-side state of one `rdma_cm_id`.
pub struct IdState {
    pub cid: Box<rdma_cm_id>,
    pub chan: usize,
    /// The id was created without a channel: it owns `chan` and its calls wait for their event.
    pub sync: bool,
    pub sock: Option<UnixDatagram>,
    pub local: V4,
    pub remote: V4,
    /// How the program wrote the addresses (bind, resolve): the family they are reported in.
    pub family: Family,
    /// `RDMA_OPTION_ID_AFONLY`: bound with an IPv6 address, the id takes IPv6 requests only.
    pub afonly: bool,
    pub bound: bool,
    pub peer: Option<SocketAddr>,
    /// The peer's REQ (passive side) or REP (active side).
    pub peer_msg: Option<Msg>,
    pub conn: Conn,
    pub dreq_sent: bool,
    pub disc_reported: bool,
    /// When the connection's time wait ends (set at DISCONNECTED): the id then reports
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT, its last event, unless destroyed before ([`TIMEWAIT`]).
    pub timewait_until: Option<std::time::Instant>,
    /// Events handed out for this id (a CONNECT_REQUEST counts for its listener) and how
    /// many of them were acked: rdma_destroy_id waits until both agree, as librdmacm does.
    pub events_reported: u32,
    pub events_acked: u32,
    /// rdma_destroy_id is waiting for acks: events not yet handed out are discarded.
    pub destroying: bool,
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path: Box<ibv_sa_path_rec>,
    /// rdma_create_ep on a passive id: what rdma_get_request creates for each new id.
    pub ep_pd: *mut ibv_pd,
    pub ep_attr: Option<Box<ibv_qp_init_attr>>,
    /// Requests that reached this bound id before rdma_listen (answered at listen, or
    /// rejected when the id is used otherwise or destroyed).
    pub early: Vec<(Msg, SocketAddr)>,
    /// rdma_create_qp created the CQs and completion channels (destroyed with the QP).
    pub own_cqs: bool,
}

/// A queued event, materialised into a `struct rdma_cm_event` when popped.
pub struct Pending {
    pub id: usize,
    pub listen: usize,
    pub event: u32,
    pub status: i32,
    pub msg: Option<Msg>,
    pub peer: Option<SocketAddr>,
}

/// Library-side state of one event channel.
pub struct ChanState {
    /// The C object handed to the application (its address is the channel's key).
    pub _boxed: Box<rdma_event_channel>,
    pub read: OwnedFd,
    pub write: OwnedFd,
    pub queue: VecDeque<Pending>,
    /// Threads blocked reading the channel's fd.
    pub readers: Arc<AtomicUsize>,
}

impl Drop for ChanState {
    fn drop(&mut self) {
        if self.readers.load(Ordering::SeqCst) > 0 {
            // A thread is blocked in rdma_get_cm_event: as with the kernel's rdma_cm file
            // (kept open by the read in progress), it stays blocked instead of seeing EOF.
            let write = self.write.try_clone();
            if let Ok(w) = write {
                std::mem::forget(w);
            }
        }
    }
}

/// Everything, behind one lock.
#[derive(Default)]
pub struct Cm {
    pub ids: HashMap<usize, IdState>,
    pub chans: HashMap<usize, ChanState>,
    pub dev: Option<Dev>,
    pub next_private: u64,
}

// SAFETY: the raw pointers in Cm (device context, PD, C objects of ids) are owned by this
// library, only used while the lock is held, and libibverbs objects are thread-safe.
unsafe impl Send for Cm {}

static CM: OnceLock<Mutex<Cm>> = OnceLock::new();

/// Signalled whenever an event is acked (for rdma_destroy_id's wait).
static ACKED: Condvar = Condvar::new();

/// Locks the process's CM state.
pub fn lock() -> MutexGuard<'static, Cm> {
    CM.get_or_init(|| Mutex::new(Cm::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Releases the CM lock until some event is acked, then holds it again.
pub fn wait_for_ack(cm: MutexGuard<'static, Cm>) -> MutexGuard<'static, Cm> {
    ACKED.wait(cm).unwrap_or_else(|e| e.into_inner())
}

/// Wakes the threads in [`wait_for_ack`].
pub fn notify_ack() {
    ACKED.notify_all();
}

/// Errors of the library's internal operations, mapped to errno at the C boundary.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    #[error("errno {0}")]
    Errno(i32),
    #[error("device: {0}")]
    Dev(#[from] crate::verbs::DevError),
}

impl CmError {
    pub fn errno(&self) -> i32 {
        match self {
            CmError::Errno(e) => *e,
            CmError::Dev(_) => libc::ENODEV,
        }
    }
}

pub type CmResult<T> = Result<T, CmError>;

impl Cm {
    /// The device, opened on first use.
    pub fn dev(&mut self) -> CmResult<&Dev> {
        if self.dev.is_none() {
            self.dev = Some(Dev::open()?);
        }
        Ok(self.dev.as_ref().expect("just opened"))
    }

    pub fn id(&mut self, key: usize) -> CmResult<&mut IdState> {
        self.ids.get_mut(&key).ok_or(CmError::Errno(libc::EINVAL))
    }

    /// Queues an event on a channel and makes its fd readable.
    pub fn push(&mut self, chan: usize, p: Pending) {
        let Some(c) = self.chans.get_mut(&chan) else {
            return;
        };
        c.queue.push_back(p);
        let one = [1u8];
        // SAFETY: write of one byte from a valid buffer to our own pipe.
        let _ = unsafe { libc::write(c.write.as_raw_fd(), one.as_ptr().cast(), 1) };
    }

    /// Queues a plain event (no message) for an id.
    pub fn push_simple(&mut self, key: usize, event: u32, status: i32) {
        if let Some(chan) = self.ids.get(&key).map(|s| s.chan) {
            self.push(
                chan,
                Pending {
                    id: key,
                    listen: 0,
                    event,
                    status,
                    msg: None,
                    peer: None,
                },
            );
        }
    }

    /// Creates an event channel (a pipe) and returns its C object's address.
    pub fn new_channel(&mut self) -> CmResult<usize> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds is a valid array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(CmError::Errno(errno()));
        }
        use std::os::fd::FromRawFd;
        // SAFETY: pipe2 just returned these two descriptors, owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let boxed = Box::new(rdma_event_channel { fd: fds[0] });
        let key = &*boxed as *const rdma_event_channel as usize;
        self.chans.insert(
            key,
            ChanState {
                _boxed: boxed,
                read,
                write,
                queue: VecDeque::new(),
                readers: Arc::new(AtomicUsize::new(0)),
            },
        );
        Ok(key)
    }

    /// Registers an id's socket with the receiving thread.
    pub fn watch(&mut self, key: usize) -> CmResult<()> {
        let fd = match self.ids.get(&key).and_then(|s| s.sock.as_ref()) {
            Some(s) => s.as_raw_fd(),
            None => return Ok(()),
        };
        let ep = receiver();
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key as u64,
        };
        // SAFETY: ep and fd are open descriptors; ev is a valid epoll_event.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(CmError::Errno(errno()));
        }
        Ok(())
    }

    /// Stops watching and closes an id's socket.
    pub fn unwatch(&mut self, key: usize) {
        if let Some(sock) = self.ids.get_mut(&key).and_then(|s| s.sock.take()) {
            if let Some(ep) = EPOLL.get() {
                // SAFETY: both descriptors are open; a NULL event is allowed for DEL.
                unsafe {
                    libc::epoll_ctl(
                        *ep,
                        libc::EPOLL_CTL_DEL,
                        sock.as_raw_fd(),
                        std::ptr::null_mut(),
                    )
                };
            }
        }
    }
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Sets errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

static EPOLL: OnceLock<RawFd> = OnceLock::new();

/// The epoll set of the receiving thread (started on first use).
fn receiver() -> RawFd {
    *EPOLL.get_or_init(|| {
        // SAFETY: plain syscall.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // Every signal blocked in the thread, as softnic's engine thread: the kernel's rdma_cm
        // adds no thread to the program, so its process-directed signals must not land here.
        // SAFETY: sigset_t is plain data; only the calling thread's mask changes, restored
        // right after the spawn (the new thread inherits the full mask).
        let spawned = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let spawned = std::thread::Builder::new()
                .name("softnic-rdmacm".into())
                .spawn(move || receive_loop(ep));
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            spawned
        };
        if spawned.is_err() {
            eprintln!("softnic librdmacm: cannot start the CM receive thread");
        }
        ep
    })
}

/// How often connected peers are checked for having gone away (ms).
const PEER_CHECK_MS: i32 = 200;

/// How often messages a full receive queue refused are sent again (ms).
const RESEND_MS: i32 = 1;

fn receive_loop(ep: RawFd) {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
    let mut last_check = std::time::Instant::now();
    loop {
        if last_check.elapsed().as_millis() >= PEER_CHECK_MS as u128 {
            last_check = std::time::Instant::now();
            let mut cm = lock();
            crate::proto::check_peers(&mut cm);
            crate::proto::end_timewaits(&mut cm);
        }
        // Refused messages are sent again every millisecond (`proto::send`).
        let wait = if crate::proto::resends_waiting() {
            crate::proto::resend_waiting(&mut lock());
            RESEND_MS
        } else {
            PEER_CHECK_MS
        };
        // SAFETY: evs is a valid array of 16 events.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 16, wait) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        for ev in &evs[..n as usize] {
            let key = ev.u64 as usize;
            let mut cm = lock();
            let mut buf = [0u8; 2048];
            while let Some(Ok((len, from))) = cm
                .ids
                .get(&key)
                .and_then(|s| s.sock.as_ref())
                .map(|sock| sock.recv_from(&mut buf))
            {
                if let Some(m) = Msg::decode(&buf[..len]) {
                    crate::proto::on_message(&mut cm, key, m, from);
                }
            }
        }
    }
}

/// Prints a diagnostic when SOFTNIC_CM_DEBUG is set.
pub fn debug(args: std::fmt::Arguments<'_>) {
    if std::env::var_os("SOFTNIC_CM_DEBUG").is_some() {
        eprintln!("softnic librdmacm: {args}");
    }
}

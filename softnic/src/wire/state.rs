//! Process-wide device state and the Rust side of every verbs object (QP, CQ, SRQ, channel
//! internals, the MR table, mapped peers): what the engine and responder run on.

use crate::ffi::*;
use crate::wire::shm::{self, ProcFile, QpFile};
use crate::wire::work::*;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Whether the port is a RoCE v2 port (`SOFTNIC_LINK_LAYER=ethernet`) rather than
/// InfiniBand.
pub fn roce() -> bool {
    static ROCE: OnceLock<bool> = OnceLock::new();
    *ROCE.get_or_init(|| {
        std::env::var("SOFTNIC_LINK_LAYER").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "ethernet" | "eth" | "roce"
            )
        })
    })
}

/// LID of simulated node N (0 on RoCE: Ethernet ports have no LID).
pub fn node_lid(node: u32) -> u16 {
    if roce() {
        0
    } else {
        (node + 1) as u16
    }
}
/// Node GUID (also the IB GID interface id) of node N, host order.
pub fn node_guid(node: u32) -> u64 {
    0x5346_4e00_0000_0000 | node as u64
}
/// The IPv4 address of node N: 127.0.1.N for N in 1..=254, else 127.1.(N>>8).(N&255) (the
/// addresses softnic's librdmacm gives the nodes).
pub fn node_ipv4(node: u32) -> [u8; 4] {
    if (1..=254).contains(&node) {
        [127, 0, 1, node as u8]
    } else {
        [127, 1, (node >> 8) as u8, node as u8]
    }
}
/// The port GID (index 0) of node N: link-local prefix + GUID on InfiniBand; on RoCE v2 the
/// node's IPv4 address as an IPv4-mapped IPv6 address (`::ffff:127.0.1.N`).
pub fn node_gid(node: u32) -> [u8; 16] {
    let mut g = [0u8; 16];
    if roce() {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&node_ipv4(node));
        return g;
    }
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&node_guid(node).to_be_bytes());
    g
}
/// The node a GID names, if it is a softnic GID (either form).
pub fn gid_node(g: &[u8; 16]) -> Option<u32> {
    if g[..10].iter().all(|&b| b == 0) && g[10..12] == [0xff, 0xff] {
        return match g[12..] {
            [127, 0, 1, n] if n != 0 && n != 255 => Some(u32::from(n)),
            [127, 1, hi, lo] => Some(u32::from(hi) << 8 | u32::from(lo)),
            _ => None,
        };
    }
    let id = u64::from_be_bytes(g[8..].try_into().ok()?);
    (id >> 32 == 0x5346_4e00).then_some((id & 0xffff_ffff) as u32)
}

/// A mapped remote QP together with its owner's wake word.
pub struct Peer {
    pub file: QpFile,
    pub proc: Arc<ProcFile>,
}

impl Peer {
    pub fn alive(&self) -> bool {
        self.file.hdr().alive.load(Ordering::Acquire) != 0
    }

    /// Wakes the peer's progress thread unless the peer's application is polling this QP's CQ.
    #[inline]
    pub fn kick(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.file.hdr().owner_polling(now_ns()) {
            self.proc.word().kick();
        }
    }
}

/// A registered memory region as the device sees it — or a memory window (`mw` 1 or 2, its
/// type), which shares the key space: unbound it has no range and no access; bound it is the
/// bound range of its region (host `addr`, `iova` the bound address or 0 if zero-based) with
/// the bind's remote access rights and the bind's rkey as `key`.
#[derive(Clone, Copy, Debug)]
pub struct MrInfo {
    pub iova: u64,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
    pub pd: u32,
    pub key: u32,
    /// 0: a memory region; 1, 2: a memory window of that type.
    pub mw: u8,
    /// A bound type 2 window: the QP it was bound through, the only one it may be reached by.
    pub qpn: u32,
}

/// What a bind of a memory window asks ([`Global::bind_mw`]): the window's new `rkey` (its
/// index bits name it), the QP it is bound through, the region (`lkey`; 0 with `len` 0: a
/// type 1 window unbound) and the range and access rights in it.
#[derive(Clone, Copy, Debug)]
pub struct MwBind {
    pub rkey: u32,
    pub qpn: u32,
    pub qp_pd: u32,
    pub lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

impl MrInfo {
    /// True when [iova, iova+len) lies inside the region's IOVA range.
    pub fn contains(&self, iova: u64, len: u64) -> bool {
        iova >= self.iova
            && iova
                .checked_add(len)
                .is_some_and(|e| e <= self.iova + self.len)
    }
    /// Host address of an IOVA inside the region.
    pub fn host(&self, iova: u64) -> u64 {
        self.addr + (iova - self.iova)
    }
}

pub struct Global {
    pub node: u32,
    pub pid: u32,
    pub proc: Arc<ProcFile>,
    pub qps: RwLock<Vec<Arc<QpInner>>>,
    mrs: RwLock<Vec<Option<MrInfo>>>,
    /// Held (shared) by the responder while it checks a remote request against the MR table
    /// and moves its bytes ([`Global::responder_pass`]); `ibv_dereg_mr` and `ibv_rereg_mr`
    /// wait for it (exclusive) after changing the table — so, as on a NIC, an access that
    /// began before the call ends before it returns, and none begins after on the old
    /// region. Without it, a request validated just before the program deregistered and
    /// unmapped the region was written into unmapped memory.
    dma: RwLock<()>,
    peers: Mutex<HashMap<(u32, u32), Arc<Peer>>>,
    procs: Mutex<HashMap<u32, Arc<ProcFile>>>,
    pub next_id: AtomicU32,
    /// Set once some QP has mlx5 rings: the progress thread then polls doorbell records.
    pub has_dv: AtomicBool,
    /// XRC SRQs by number (the SRQs a request to an XRC target QP may name).
    xrc_srqs: Mutex<HashMap<u32, Arc<SrqInner>>>,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// At exit, removes this process's fabric files (QPs still open, its wake word).
extern "C" fn cleanup_at_exit() {
    crate::verbs::tally::write_out();
    if let Some(g) = GLOBAL.get() {
        if let Ok(qps) = g.qps.try_read() {
            for q in qps.iter() {
                q.file.retire();
            }
        }
        ProcFile::remove(g.pid);
    }
}

/// The process-wide device state (node identity from `SOFTNIC_NODE`).
pub fn global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        let node = std::env::var("SOFTNIC_NODE")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .filter(|n| *n < 0xfffe)
            .unwrap_or(1000 + pid % 60000);
        shm::sweep_stale();
        // SAFETY: registering a plain extern "C" function to run at exit.
        unsafe { libc::atexit(cleanup_at_exit) };
        let proc = Arc::new(ProcFile::open(pid, true).unwrap_or_else(|e| {
            eprintln!("softnic: cannot create process file in fabric: {e}");
            std::process::abort()
        }));
        Global {
            node,
            pid,
            proc,
            qps: RwLock::new(Vec::new()),
            mrs: RwLock::new(vec![None]),
            dma: RwLock::new(()),
            peers: Mutex::new(HashMap::new()),
            procs: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            has_dv: AtomicBool::new(false),
            xrc_srqs: Mutex::new(HashMap::new()),
        }
    })
}

impl Global {
    pub fn reg_mr(&self, iova: u64, addr: u64, len: u64, access: u32, pd: u32) -> u32 {
        self.insert_key(MrInfo {
            iova,
            addr,
            len,
            access,
            pd,
            key: 0,
            mw: 0,
            qpn: 0,
        })
    }

    /// Enters `entry` in the key table under a new key (a free index and the next tag); the
    /// key.
    fn insert_key(&self, entry: MrInfo) -> u32 {
        let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
        let idx = t
            .iter()
            .position(|m| m.is_none())
            .filter(|&i| i > 0)
            .unwrap_or_else(|| {
                t.push(None);
                t.len() - 1
            });
        let tag = self.next_id.fetch_add(1, Ordering::Relaxed) & 0xff;
        let key = ((idx as u32) << 8) | tag;
        t[idx] = Some(MrInfo { key, ..entry });
        key
    }

    pub fn dereg_mr(&self, key: u32) {
        {
            let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = t.get_mut((key >> 8) as usize) {
                if slot.is_some_and(|m| m.key == key && m.mw == 0) {
                    *slot = None;
                }
            }
        }
        self.wait_for_responders();
    }

    /// A new, unbound memory window of type `ty` on PD `pd`; its key.
    pub fn alloc_mw(&self, pd: u32, ty: u8) -> u32 {
        self.insert_key(MrInfo {
            iova: 0,
            addr: 0,
            len: 0,
            access: 0,
            pd,
            key: 0,
            mw: ty,
            qpn: 0,
        })
    }

    /// Frees the window whose current key has index `idx` (the key changes with each bind).
    pub fn dealloc_mw(&self, idx: u32) {
        {
            let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = t.get_mut(idx as usize) {
                if slot.is_some_and(|m| m.mw != 0) {
                    *slot = None;
                }
            }
        }
        self.wait_for_responders();
    }

    /// Binds (or, a type 1 window with `len` 0, unbinds) the window `b.rkey` names, as a
    /// BIND_MW work request executes: the window must exist and be on the QP's PD (type 2),
    /// the region on the window's PD with `IBV_ACCESS_MW_BIND` and the range inside it, and
    /// remote write or atomic access needs the region's local write. False: the bind fails
    /// (a memory-management error completion). Not waiting for responders: called from the
    /// engine; an access under the old key fails at its next packet (`check_remote` again).
    pub fn bind_mw(&self, b: &MwBind) -> bool {
        let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
        let mr = match t.get((b.lkey >> 8) as usize) {
            Some(Some(m)) if m.key == b.lkey && m.mw == 0 => Some(*m),
            _ => None,
        };
        let Some(Some(w)) = t.get_mut((b.rkey >> 8) as usize) else {
            return false;
        };
        if w.mw == 0 || (w.mw == 2 && w.pd != b.qp_pd) {
            return false;
        }
        if w.mw == 1 && b.len == 0 {
            (w.key, w.len, w.access, w.iova, w.addr) = (b.rkey, 0, 0, 0, 0);
            return true;
        }
        let Some(mr) = mr else {
            return false;
        };
        let remote_writes = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
        if mr.pd != w.pd
            || mr.access & IBV_ACCESS_MW_BIND == 0
            || !mr.contains(b.addr, b.len)
            || (b.access & remote_writes != 0 && mr.access & IBV_ACCESS_LOCAL_WRITE == 0)
        {
            return false;
        }
        let zero_based = b.access & IBV_ACCESS_ZERO_BASED != 0;
        w.key = b.rkey;
        w.iova = if zero_based { 0 } else { b.addr };
        w.addr = mr.host(b.addr);
        w.len = b.len;
        w.access = b.access & !IBV_ACCESS_ZERO_BASED;
        w.qpn = if w.mw == 2 { b.qpn } else { 0 };
        true
    }

    /// Invalidates the type 2 window whose key is `rkey` on PD `pd` (a LOCAL_INV work request,
    /// or a SEND_WITH_INV received); false when there is none. Not waiting for responders, as
    /// [`Self::bind_mw`].
    pub fn invalidate_mw(&self, rkey: u32, pd: u32) -> bool {
        let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
        match t.get_mut((rkey >> 8) as usize) {
            Some(Some(w)) if w.key == rkey && w.mw == 2 && w.pd == pd => {
                (w.len, w.access, w.qpn) = (0, 0, 0);
                true
            }
            _ => false,
        }
    }

    /// Registers (`Some`) or removes (`None`) the XRC SRQ numbered `srqn`.
    pub fn set_xrc_srq(&self, srqn: u32, srq: Option<Arc<SrqInner>>) {
        let mut m = self.xrc_srqs.lock().unwrap_or_else(|e| e.into_inner());
        match srq {
            Some(s) => m.insert(srqn, s),
            None => m.remove(&srqn),
        };
    }

    /// The XRC SRQ numbered `srqn` of XRC domain `xrcd`, if any.
    pub fn xrc_srq(&self, srqn: u32, xrcd: u32) -> Option<Arc<SrqInner>> {
        let m = self.xrc_srqs.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&srqn)
            .filter(|s| s.xrc.as_ref().is_some_and(|x| x.xrcd == xrcd))
            .cloned()
    }

    pub fn update_mr(&self, key: u32, f: impl FnOnce(&mut MrInfo)) -> bool {
        let changed = {
            let mut t = self.mrs.write().unwrap_or_else(|e| e.into_inner());
            match t.get_mut((key >> 8) as usize) {
                Some(Some(m)) if m.key == key && m.mw == 0 => {
                    f(m);
                    true
                }
                _ => false,
            }
        };
        self.wait_for_responders();
        changed
    }

    /// Runs `f` (one responder pass over a QP's requests) while MR changes wait ([`Self::dma`]).
    /// Never nested: `f` takes no other pass.
    pub fn responder_pass<T>(&self, f: impl FnOnce() -> T) -> T {
        let _shared = self.dma.read().unwrap_or_else(|e| e.into_inner());
        f()
    }

    /// Waits until no responder pass that may have seen the MR table before the caller's change
    /// is still running (the MR table's lock is not held here).
    fn wait_for_responders(&self) {
        drop(self.dma.write().unwrap_or_else(|e| e.into_inner()));
    }

    #[inline]
    pub fn mr(&self, key: u32) -> Option<MrInfo> {
        let t = self.mrs.read().unwrap_or_else(|e| e.into_inner());
        match t.get((key >> 8) as usize) {
            Some(Some(m)) if m.key == key => Some(*m),
            _ => None,
        }
    }

    /// Maps (and caches) the QP `qpn` of `node`.
    pub fn peer(&self, node: u32, qpn: u32) -> Option<Arc<Peer>> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.get(&(node, qpn)) {
            if p.alive() {
                return Some(p.clone());
            }
            peers.remove(&(node, qpn));
        }
        let file = QpFile::open(node, qpn).ok()?;
        if file.hdr().alive.load(Ordering::Acquire) == 0 {
            return None;
        }
        let pid = file.hdr().owner_pid.load(Ordering::Relaxed);
        let proc = {
            let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            match procs.get(&pid) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(ProcFile::open(pid, false).ok()?);
                    procs.insert(pid, p.clone());
                    p
                }
            }
        };
        let p = Arc::new(Peer { file, proc });
        peers.insert((node, qpn), p.clone());
        Some(p)
    }
}

/// Completion channel: a pipe (pollable fd) and the queue of CQs that fired.
pub struct ChannelInner {
    pub rfd: i32,
    pub wfd: i32,
    pub q: Mutex<VecDeque<usize>>,
}

impl ChannelInner {
    pub fn notify(&self, cq: usize) {
        self.q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(cq);
        let b = 1u8;
        // SAFETY: wfd is the write end of our pipe.
        unsafe { libc::write(self.wfd, &b as *const u8 as *const libc::c_void, 1) };
    }
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: both fds are ours.
        unsafe {
            libc::close(self.rfd);
            libc::close(self.wfd);
        }
    }
}

pub const ARM_NONE: u32 = 0;
pub const ARM_ALL: u32 = 1;
pub const ARM_SOLICITED: u32 = 2;

pub struct CqInner {
    pub q: Mutex<VecDeque<Cqe>>,
    pub count: AtomicUsize,
    pub armed: AtomicU32,
    pub channel: Option<Arc<ChannelInner>>,
    pub cq_ptr: usize,
    pub qps: Mutex<Vec<Arc<QpInner>>>,
    pub ts_wanted: bool,
    /// The CQE64 ring, once exposed with mlx5dv_init_obj or created with devx.
    pub dv: OnceLock<crate::mlx5::rings::DvCq>,
}

impl CqInner {
    /// A CQ nothing is written to (an XRC target's own: its receives complete on their
    /// SRQs' CQs).
    pub fn unused() -> CqInner {
        CqInner {
            q: Mutex::new(VecDeque::new()),
            count: AtomicUsize::new(0),
            armed: AtomicU32::new(ARM_NONE),
            channel: None,
            cq_ptr: 0,
            qps: Mutex::new(Vec::new()),
            ts_wanted: false,
            dv: OnceLock::new(),
        }
    }

    /// Removes the completions of QP `qpn` not yet polled, as libmlx5 cleans a CQ when one
    /// of its QPs is moved to RESET or destroyed (`mlx5_cq_clean`): the QP's next life does
    /// not meet the flushed completions of its last one. A CQ exposed as a CQE64 ring
    /// (mlx5dv/devx) is the program's to clean, as with libmlx5.
    pub fn clean(&self, qpn: u32) {
        if self.dv.get().is_some() {
            return;
        }
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.retain(|e| e.wc.qp_num != qpn);
        let gone = before - q.len();
        if gone > 0 {
            self.count.fetch_sub(gone, Ordering::AcqRel);
        }
    }

    pub fn push(&self, wc: ibv_wc, solicited: bool) {
        self.push_op(wc, solicited, 0)
    }

    /// Adds a completion; `op` is the mlx5 send opcode of a requester completion.
    pub fn push_op(&self, wc: ibv_wc, solicited: bool, op: u8) {
        self.push_full(wc, solicited, op, 0, wc.wr_id as u16)
    }

    /// Adds a completion with all CQE64 details.
    pub fn push_full(&self, wc: ibv_wc, solicited: bool, op: u8, srqn: u32, counter: u16) {
        let ts = if self.ts_wanted || self.dv.get().is_some() {
            now_ns()
        } else {
            0
        };
        let e = Cqe {
            wc,
            ts,
            op,
            srqn,
            counter,
        };
        if let Some(d) = self.dv.get() {
            d.write(e);
        } else {
            self.q
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(e);
            self.count.fetch_add(1, Ordering::Release);
        }
        let armed = self.armed.load(Ordering::Acquire);
        if armed != ARM_NONE
            && (armed == ARM_ALL || solicited || wc.status != IBV_WC_SUCCESS)
            && self.armed.swap(ARM_NONE, Ordering::AcqRel) != ARM_NONE
        {
            if let Some(ch) = &self.channel {
                ch.notify(self.cq_ptr);
            }
        }
    }
}

pub struct RecvQueue {
    pub q: VecDeque<RecvWqe>,
    pub max: u32,
}

pub struct SrqInner {
    pub rq: Mutex<RecvQueue>,
    /// Armed SRQ limit (0: disarmed): fewer posted WQEs than this raises SRQ_LIMIT_REACHED once.
    pub limit: AtomicU32,
    /// The ibv_srq this belongs to (the element of its asynchronous events).
    pub srq_ptr: AtomicUsize,
    pub srqn: u32,
    pub pd: u32,
    pub max_sge: u32,
    /// The mlx5 SRQ ring, once exposed with mlx5dv_init_obj.
    pub dv: OnceLock<crate::mlx5::rings::DvSrq>,
    /// An XRC SRQ: its XRC domain and the CQ its receives complete on.
    pub xrc: Option<XrcSrq>,
}

/// What an XRC SRQ has beside a plain SRQ (see [`Global::xrc_srq`]).
pub struct XrcSrq {
    pub xrcd: u32,
    pub cq: Arc<CqInner>,
}

impl SrqInner {
    /// Takes a receive WQE, raising SRQ_LIMIT_REACHED (once armed) as the queue drops below
    /// its limit.
    pub fn take(&self) -> Option<RecvWqe> {
        if let Some(d) = self.dv.get() {
            return d.take_recv();
        }
        let mut rq = self.rq.lock().unwrap_or_else(|e| e.into_inner());
        let w = rq.q.pop_front();
        let limit = self.limit.load(Ordering::Relaxed);
        if w.is_some() && limit > 0 && (rq.q.len() as u32) < limit {
            self.limit.store(0, Ordering::Relaxed);
            raise_async(
                IBV_EVENT_SRQ_LIMIT_REACHED,
                AsyncObj::Srq(self.srq_ptr.load(Ordering::Relaxed)),
            );
        }
        w
    }
}

/// Requester state (the send queue).
pub struct SendQueue {
    pub ring: Vec<SendWqe>,
    pub mask: u32,
    pub head: u32,
    pub next: u32,
    pub tail: u32,
    pub max_wr: u32,
    pub next_msn: u32,
    pub acked_msn: u32,
    pub rd_outstanding: u32,
    pub rnr_left: u32,
    pub rnr_until: Option<std::time::Instant>,
    pub peer: Option<Arc<Peer>>,
    /// When the requester first found its RC responder missing (see `engine::retries_exhausted`).
    pub peer_lost_since: Option<std::time::Instant>,
}

impl SendQueue {
    pub fn new(max_wr: u32) -> SendQueue {
        let cap = max_wr.max(1).next_power_of_two();
        SendQueue {
            ring: (0..cap).map(|_| SendWqe::new()).collect(),
            mask: cap - 1,
            head: 0,
            next: 0,
            tail: 0,
            max_wr,
            next_msn: 0,
            acked_msn: 0,
            rd_outstanding: 0,
            rnr_left: 0,
            rnr_until: None,
            peer: None,
            peer_lost_since: None,
        }
    }
    pub fn len(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }
    /// Re-sizes an empty queue (keeping sequence state), for direct-posted rings.
    pub fn resize(&mut self, max_wr: u32) {
        let cap = max_wr.max(1).next_power_of_two();
        if (self.mask + 1) < cap {
            self.ring = (0..cap).map(|_| SendWqe::new()).collect();
            self.mask = cap - 1;
            let t = self.tail;
            self.head = t;
            self.next = t;
        }
        self.max_wr = max_wr;
    }
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }
    pub fn at(&mut self, idx: u32) -> &mut SendWqe {
        let m = self.mask;
        &mut self.ring[(idx & m) as usize]
    }
}

/// An inbound message being assembled by the responder.
pub struct CurMsg {
    pub msn: u32,
    pub recv: Option<RecvWqe>,
    pub drop: bool,
    pub host: u64,
}

pub struct ReadJob {
    /// The protection domain the request was checked in (`responder::remote_pd`).
    pub pd: u32,
    pub msn: u32,
    /// The requested range as the requester named it (checked again before each response
    /// packet: the region may have been deregistered since) and where it lies here.
    pub rkey: u32,
    pub iova: u64,
    pub raddr: u64,
    pub total: u32,
    pub offset: u32,
}

/// Responder state.
pub struct Responder {
    pub expected_msn: u32,
    pub nak_sent: bool,
    pub cur: Option<CurMsg>,
    pub read: Option<ReadJob>,
    pub ack_pending: Option<u32>,
    /// The last message acknowledged at once, before its receive completion (see
    /// `responder::ack_before_completion`): not acknowledged again at the end of the pass.
    pub acked_early: Option<u32>,
    pub peer: Option<Arc<Peer>>,
}

pub struct QpInner {
    pub qpn: u32,
    pub qp_type: u32,
    pub pd: u32,
    pub state: AtomicU32,
    pub file: QpFile,
    pub send_cq: Arc<CqInner>,
    pub recv_cq: Arc<CqInner>,
    pub srq: Option<Arc<SrqInner>>,
    pub sq_sig_all: bool,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline: u32,
    pub dest_node: AtomicU32,
    pub dest_qpn: AtomicU32,
    pub qkey: AtomicU32,
    pub access: AtomicU32,
    pub min_rnr_timer: AtomicU32,
    pub rnr_retry: AtomicU32,
    pub retry_cnt: AtomicU32,
    /// The local ACK timeout exponent (`IBV_QP_TIMEOUT`).
    pub timeout: AtomicU32,
    pub max_rd_atomic: AtomicU32,
    pub sl: AtomicU32,
    pub sq: Mutex<SendQueue>,
    pub rq: Mutex<RecvQueue>,
    pub resp: Mutex<Responder>,
    pub backlog: AtomicBool,
    pub qp_ptr: usize,
    /// The mlx5 rings, once exposed with mlx5dv_init_obj or created with devx.
    pub dv: OnceLock<crate::mlx5::rings::DvQp>,
    /// An XRC target (receive) QP: its XRC domain (0: not one). Its messages name the XRC
    /// SRQ of that domain they go to ([`xrc_srqn`]), which gives them their receive WQE,
    /// their CQ and the protection domain their remote accesses are checked in.
    pub xrcd: u32,
}

/// The XRC SRQ a request names: an XRC initiator's requests carry it where a UD datagram
/// carries its Q_Key (RC packets carry none).
pub fn xrc_srqn(h: &shm::PktHdr) -> u32 {
    h.qkey
}

impl QpInner {
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }
    pub fn can_receive(&self) -> bool {
        matches!(self.state(), IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD)
    }

    /// Takes a receive WQE (from the SRQ if attached).
    pub fn take_recv(&self) -> Option<RecvWqe> {
        if let Some(s) = &self.srq {
            return s.take();
        }
        match self.dv.get() {
            Some(d) => d.take_recv(),
            None => self
                .rq
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .q
                .pop_front(),
        }
    }

    pub fn new_file(node: u32, qpn: u32, qp_type: u32) -> Result<QpFile, shm::ShmError> {
        QpFile::create(node, qpn, qp_type)
    }
}

/// The object an asynchronous event is about (its `ibv_qp`/`ibv_srq` address).
#[derive(Clone, Copy, Debug)]
pub enum AsyncObj {
    Qp(usize),
    Srq(usize),
}

static ASYNC_SINK: OnceLock<fn(u32, AsyncObj)> = OnceLock::new();

/// Installs the function that delivers asynchronous events (the verbs layer owns contexts).
pub fn set_async_sink(f: fn(u32, AsyncObj)) {
    let _ = ASYNC_SINK.set(f);
}

/// Raises an affiliated asynchronous event (`IBV_EVENT_*`) on `obj`.
pub fn raise_async(event: u32, obj: AsyncObj) {
    if let Some(f) = ASYNC_SINK.get() {
        f(event, obj);
    }
}

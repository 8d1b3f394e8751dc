//! One connected rsocket: an RC QP on its own CQ, a registered send staging area, a ring of
//! posted receive buffers, receive credits returned by RDMA WRITE into the peer's credit word,
//! and the iomaps (riomap/riowrite). The protocol is described in the softnic README
//! ("rsockets").

use crate::ffi::*;
use std::collections::VecDeque;
use std::ptr;

/// Size of one send staging slot and of one receive buffer (the largest message).
pub const SLOT: usize = 64 * 1024;
/// Send staging slots (messages and RDMA writes in flight).
pub const SLOTS: usize = 16;
/// Receive buffers each side posts, which is also the sender's initial credit.
pub const RECVS: usize = 16;
/// Send queue depth: every slot, plus credit updates.
const SQ_DEPTH: u32 = (SLOTS + RECVS + 4) as u32;

/// Message kinds, carried as the immediate data of each SEND.
const MSG_DATA: u32 = 1;
const MSG_IOMAP: u32 = 2;
const MSG_FIN: u32 = 3;

/// Tags in the high half of a send's wr_id (receives carry their buffer index).
const WR_SLOT: u64 = 1 << 32;
const WR_CREDIT: u64 = 2 << 32;

/// A failed rsocket operation, as the errno the caller reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rsocket operation failed: errno {0}")]
pub struct Errno(pub i32);

/// What each side tells the other in the connection's private data: where its credit word
/// is. Encoded as magic "RSN1", rkey, address (little endian).
#[derive(Debug, Clone, Copy, Default)]
pub struct Hello {
    pub credit_addr: u64,
    pub credit_rkey: u32,
}

const HELLO_MAGIC: [u8; 4] = *b"RSN1";
pub const HELLO_LEN: usize = 16;

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&HELLO_MAGIC);
        b[4..8].copy_from_slice(&self.credit_rkey.to_le_bytes());
        b[8..16].copy_from_slice(&self.credit_addr.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() < HELLO_LEN || b[..4] != HELLO_MAGIC {
            return None;
        }
        Some(Hello {
            credit_rkey: u32::from_le_bytes(b[4..8].try_into().ok()?),
            credit_addr: u64::from_le_bytes(b[8..16].try_into().ok()?),
        })
    }
}

/// A buffer registered with the QP's PD.
struct Region {
    buf: Box<[u8]>,
    mr: *mut ibv_mr,
}

impl Region {
    fn new(pd: *mut ibv_pd, len: usize, access: u32) -> Result<Region, Errno> {
        let mut buf = vec![0u8; len].into_boxed_slice();
        // SAFETY: buf is len writable bytes that live as long as the Region (MR released
        // in Drop before the buffer).
        let mr = unsafe { ibv_reg_mr(pd, buf.as_mut_ptr().cast(), len, access as i32) };
        if mr.is_null() {
            return Err(Errno(libc::ENOMEM));
        }
        Ok(Region { buf, mr })
    }

    fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    fn lkey(&self) -> u32 {
        // SAFETY: mr is the live MR of this region.
        unsafe { (*self.mr).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: mr is the live MR of this region.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: mr was registered by Region::new and is released once.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// A region the peer may riowrite into (announced to it by an IOMAP message).
pub struct RemoteMap {
    offset: i64,
    addr: u64,
    rkey: u32,
    len: u64,
}

/// A region of this process mapped with riomap.
struct LocalMap {
    offset: i64,
    addr: usize,
    len: usize,
    mr: *mut ibv_mr,
}

/// The verbs state of one connection.
pub struct Link {
    pub id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    send: Region,
    recv: Region,
    /// The word the peer writes its count of consumed receive buffers into.
    credit: Region,
    peer: Hello,
    /// SENDs posted (each consumes one of the peer's receive buffers).
    sent_msgs: u64,
    /// Receive buffers this side consumed and reposted.
    consumed: u64,
    /// Credit updates owed to the peer (one RDMA WRITE per reposted buffer).
    credit_due: u32,
    slots_used: u64,
    slots_done: u64,
    sq_out: u32,
    /// Received data not yet read: (buffer index, length, bytes already read).
    rx: VecDeque<(usize, usize, usize)>,
    /// Control messages waiting for credit, in order: (kind, payload).
    pending: VecDeque<(u32, Vec<u8>)>,
    pub fin_recv: bool,
    pub fin_queued: bool,
    /// Errors after this are expected (the connection is being torn down).
    pub closing: bool,
    /// First transport error (0: none).
    pub err: i32,
    remote_maps: Vec<RemoteMap>,
    local_maps: Vec<LocalMap>,
}

impl Link {
    /// Creates the CQ, the QP on `id`, the registered buffers, and posts every receive.
    pub fn new(id: *mut rdma_cm_id) -> Result<Box<Link>, Errno> {
        // SAFETY: id is a live CM id whose device context is set (after address
        // resolution or on a connect request).
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(Errno(libc::ENODEV));
        }
        let cqe = (SQ_DEPTH as usize + RECVS + 8) as i32;
        // SAFETY: ctx is an open device context.
        let cq = unsafe { ibv_create_cq(ctx, cqe, ptr::null_mut(), ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(Errno(libc::ENOMEM));
        }
        let mut attr = ibv_qp_init_attr {
            send_cq: cq,
            recv_cq: cq,
            qp_type: IBV_QPT_RC,
            ..Default::default()
        };
        attr.cap.max_send_wr = SQ_DEPTH;
        attr.cap.max_recv_wr = RECVS as u32;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = 64;
        if crate::qp::sv_rdma_create_qp(id, ptr::null_mut(), &mut attr) != 0 {
            let e = crate::state::errno();
            // SAFETY: cq was created above and has no QP.
            unsafe { ibv_destroy_cq(cq) };
            return Err(Errno(e));
        }
        // SAFETY: rdma_create_qp succeeded, so id->qp is the new QP.
        let qp = unsafe { (*id).qp };
        // SAFETY: qp is live; its PD is the one the id's QP was created on.
        let pd = unsafe { (*qp).pd };
        let local = IBV_ACCESS_LOCAL_WRITE;
        let regions = (|| {
            Ok::<_, Errno>((
                Region::new(pd, SLOT * SLOTS, local)?,
                Region::new(pd, SLOT * RECVS, local)?,
                Region::new(pd, 8, local | IBV_ACCESS_REMOTE_WRITE)?,
            ))
        })();
        let (send, recv, credit) = match regions {
            Ok(r) => r,
            Err(e) => {
                crate::qp::sv_rdma_destroy_qp(id);
                // SAFETY: the QP using cq is destroyed.
                unsafe { ibv_destroy_cq(cq) };
                return Err(e);
            }
        };
        let mut l = Box::new(Link {
            id,
            qp,
            cq,
            send,
            recv,
            credit,
            peer: Hello::default(),
            sent_msgs: 0,
            consumed: 0,
            credit_due: 0,
            slots_used: 0,
            slots_done: 0,
            sq_out: 0,
            rx: VecDeque::new(),
            pending: VecDeque::new(),
            fin_recv: false,
            fin_queued: false,
            closing: false,
            err: 0,
            remote_maps: Vec::new(),
            local_maps: Vec::new(),
        });
        for i in 0..RECVS {
            l.post_recv(i)?;
        }
        Ok(l)
    }

    /// This side's hello (for the connection's private data).
    pub fn hello(&self) -> Hello {
        Hello {
            credit_addr: self.credit.addr(0),
            credit_rkey: self.credit.rkey(),
        }
    }

    pub fn set_peer(&mut self, h: Hello) {
        self.peer = h;
    }

    fn post_recv(&mut self, idx: usize) -> Result<(), Errno> {
        let mut sge = ibv_sge {
            addr: self.recv.addr(idx * SLOT),
            length: SLOT as u32,
            lkey: self.recv.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: idx as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; wr and its SGE are valid for the call; the provider's
        // post_recv is what the inline ibv_post_recv calls.
        let rc = unsafe {
            let f = (*(*self.qp).context)
                .ops
                .post_recv
                .ok_or(Errno(libc::ENOSYS))?;
            f(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(Errno(rc));
        }
        Ok(())
    }

    /// Posts one signaled send WR (the inline ibv_post_send).
    fn post_send(&mut self, wr: &mut ibv_send_wr) -> Result<(), Errno> {
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; wr and its SGE are valid for the call.
        let rc = unsafe {
            let f = (*(*self.qp).context)
                .ops
                .post_send
                .ok_or(Errno(libc::ENOSYS))?;
            f(self.qp, wr, &mut bad)
        };
        if rc != 0 {
            return Err(Errno(rc));
        }
        self.sq_out += 1;
        Ok(())
    }

    /// The peer's receive buffers this side may still fill.
    fn credits(&self) -> u64 {
        // SAFETY: the credit word is 8 bytes of our registered memory that the peer's RDMA
        // WRITEs update; a volatile read sees the latest value.
        let word = unsafe { ptr::read_volatile(self.credit.buf.as_ptr() as *const [u8; 8]) };
        let peer_consumed = u64::from_ne_bytes(word);
        (RECVS as u64 + peer_consumed).saturating_sub(self.sent_msgs)
    }

    fn slot_free(&self) -> bool {
        self.slots_used - self.slots_done < SLOTS as u64 && self.sq_out < SQ_DEPTH
    }

    fn can_send_msg(&self) -> bool {
        self.err == 0 && self.slot_free() && self.credits() > 0
    }

    /// Copies `data` into the next staging slot and posts it as a SEND (kind as immediate
    /// data) or as an RDMA WRITE to `remote`.
    fn post_slot(
        &mut self,
        data: &[u8],
        kind: u32,
        remote: Option<(u64, u32)>,
    ) -> Result<(), Errno> {
        let idx = (self.slots_used % SLOTS as u64) as usize;
        self.send.buf[idx * SLOT..idx * SLOT + data.len()].copy_from_slice(data);
        let mut sge = ibv_sge {
            addr: self.send.addr(idx * SLOT),
            length: data.len() as u32,
            lkey: self.send.lkey(),
        };
        let mut wr = ibv_send_wr {
            wr_id: WR_SLOT | idx as u64,
            sg_list: &mut sge,
            num_sge: 1,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        match remote {
            Some((addr, rkey)) => {
                wr.opcode = IBV_WR_RDMA_WRITE;
                wr.wr.rdma.remote_addr = addr;
                wr.wr.rdma.rkey = rkey;
            }
            None => {
                wr.opcode = IBV_WR_SEND_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = kind.to_be();
            }
        }
        self.post_send(&mut wr)?;
        self.slots_used += 1;
        if remote.is_none() {
            self.sent_msgs += 1;
        }
        Ok(())
    }

    /// Tells the peer how many of our receive buffers it may reuse (inline RDMA WRITE).
    fn post_credit(&mut self) -> Result<(), Errno> {
        let value = self.consumed;
        let mut sge = ibv_sge {
            addr: &value as *const u64 as u64,
            length: 8,
            lkey: 0,
        };
        let mut wr = ibv_send_wr {
            wr_id: WR_CREDIT,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: IBV_SEND_SIGNALED | IBV_SEND_INLINE,
            ..Default::default()
        };
        wr.wr.rdma.remote_addr = self.peer.credit_addr;
        wr.wr.rdma.rkey = self.peer.credit_rkey;
        self.post_send(&mut wr)
    }

    fn fail(&mut self, e: i32) {
        if self.err == 0 && !self.closing {
            self.err = e;
        }
    }

    /// Reaps completions, returns credits and sends queued control messages.
    pub fn progress(&mut self) {
        let mut wcs = [ibv_wc::default(); 16];
        loop {
            // SAFETY: cq is live; wcs has room for 16 completions; the provider's poll_cq is
            // what the inline ibv_poll_cq calls.
            let n = unsafe {
                match (*(*self.cq).context).ops.poll_cq {
                    Some(f) => f(self.cq, 16, wcs.as_mut_ptr()),
                    None => -1,
                }
            };
            if n <= 0 {
                break;
            }
            for wc in &wcs[..n as usize] {
                self.on_completion(wc);
            }
        }
        while self.credit_due > 0 && self.err == 0 && !self.closing && self.sq_out < SQ_DEPTH {
            self.credit_due -= 1;
            if let Err(e) = self.post_credit() {
                self.fail(e.0);
            }
        }
        while self.can_send_msg() {
            let Some((kind, data)) = self.pending.pop_front() else {
                break;
            };
            if let Err(e) = self.post_slot(&data, kind, None) {
                self.fail(e.0);
            }
        }
    }

    fn on_completion(&mut self, wc: &ibv_wc) {
        let tag = wc.wr_id & !0xffff_ffff;
        if tag != 0 {
            self.sq_out -= 1;
            if tag == WR_SLOT {
                self.slots_done += 1;
            }
            if wc.status != IBV_WC_SUCCESS {
                self.fail(libc::ECONNRESET);
            }
            return;
        }
        if wc.status != IBV_WC_SUCCESS {
            // Receives flushed after the peer's end of stream are its disconnect.
            if !self.fin_recv {
                self.fail(libc::ECONNRESET);
            }
            return;
        }
        let idx = wc.wr_id as usize;
        // SAFETY: every receive is posted by post_recv and arrives as SEND_WITH_IMM.
        let kind = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
        let len = wc.byte_len as usize;
        match kind {
            MSG_DATA if len > 0 => self.rx.push_back((idx, len, 0)),
            MSG_IOMAP => {
                let b = &self.recv.buf[idx * SLOT..idx * SLOT + len.min(28)];
                if let Some(m) = decode_map(b) {
                    self.remote_maps.retain(|r| r.offset != m.offset);
                    self.remote_maps.push(m);
                }
                self.recycle(idx);
            }
            // The last message: its buffer is not reposted (no credit goes back).
            MSG_FIN => self.fin_recv = true,
            _ => self.recycle(idx),
        }
    }

    /// Reposts a consumed receive buffer; the credit goes back on the next progress.
    fn recycle(&mut self, idx: usize) {
        if self.closing || self.err != 0 {
            return;
        }
        match self.post_recv(idx) {
            Ok(()) => {
                self.consumed += 1;
                self.credit_due += 1;
            }
            Err(e) => self.fail(e.0),
        }
    }

    /// Data waiting, end of stream, or an error to report.
    pub fn readable(&self) -> bool {
        !self.rx.is_empty() || self.fin_recv || self.err != 0
    }

    /// Received bytes wait to be read.
    pub fn readable_data(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Whether a send would make progress now.
    pub fn writable(&self) -> bool {
        self.err != 0 || (self.pending.is_empty() && self.can_send_msg())
    }

    /// Every posted send completed and no control message waits.
    pub fn idle(&self) -> bool {
        self.sq_out == 0 && self.pending.is_empty()
    }

    /// Sends as much of `data` as credits and slots allow now; returns the bytes taken.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, Errno> {
        self.progress();
        if self.err != 0 {
            return Err(Errno(self.err));
        }
        if self.fin_queued {
            return Err(Errno(libc::EPIPE));
        }
        let mut done = 0;
        while done < data.len() && self.pending.is_empty() && self.can_send_msg() {
            let n = (data.len() - done).min(SLOT);
            self.post_slot(&data[done..done + n], MSG_DATA, None)?;
            done += n;
        }
        Ok(done)
    }

    /// Copies received data into `out`; returns the bytes copied (0: nothing waiting).
    pub fn recv(&mut self, out: &mut [u8]) -> usize {
        self.progress();
        let mut done = 0;
        while done < out.len() {
            let Some(&(idx, len, off)) = self.rx.front() else {
                break;
            };
            let n = (len - off).min(out.len() - done);
            let from = idx * SLOT + off;
            out[done..done + n].copy_from_slice(&self.recv.buf[from..from + n]);
            done += n;
            if off + n == len {
                self.rx.pop_front();
                self.recycle(idx);
            } else if let Some(front) = self.rx.front_mut() {
                front.2 = off + n;
            }
        }
        if done > 0 {
            self.progress();
        }
        done
    }

    /// RDMA WRITEs `data` into the peer's iomap at `offset`, as far as slots allow now.
    pub fn iowrite(&mut self, data: &[u8], offset: i64) -> Result<usize, Errno> {
        self.progress();
        if self.err != 0 {
            return Err(Errno(self.err));
        }
        let mut done = 0;
        while done < data.len() && self.pending.is_empty() && self.slot_free() {
            let at = offset + done as i64;
            let Some(m) = self
                .remote_maps
                .iter()
                .find(|m| at >= m.offset && ((at - m.offset) as u64) < m.len)
            else {
                if done == 0 {
                    return Err(Errno(libc::EINVAL));
                }
                break;
            };
            let within = (at - m.offset) as u64;
            let n = ((data.len() - done) as u64)
                .min(SLOT as u64)
                .min(m.len - within) as usize;
            let remote = (m.addr + within, m.rkey);
            self.post_slot(&data[done..done + n], 0, Some(remote))?;
            done += n;
        }
        Ok(done)
    }

    /// Registers `len` bytes at `addr` for the peer's RDMA WRITEs and announces them.
    pub fn iomap(
        &mut self,
        addr: usize,
        len: usize,
        offset: i64,
        max: usize,
    ) -> Result<i64, Errno> {
        if self.local_maps.len() >= max {
            return Err(Errno(libc::ENOMEM));
        }
        let offset = if offset == -1 {
            self.local_maps
                .iter()
                .map(|m| m.offset + m.len as i64)
                .max()
                .unwrap_or(0)
        } else {
            offset
        };
        // SAFETY: qp is live.
        let pd = unsafe { (*self.qp).pd };
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: the application maps len bytes at addr it owns until riounmap.
        let mr = unsafe { ibv_reg_mr(pd, addr as *mut libc::c_void, len, access as i32) };
        if mr.is_null() {
            return Err(Errno(crate::state::errno()));
        }
        // SAFETY: mr was just registered.
        let rkey = unsafe { (*mr).rkey };
        let mut msg = Vec::with_capacity(28);
        msg.extend_from_slice(&offset.to_le_bytes());
        msg.extend_from_slice(&(addr as u64).to_le_bytes());
        msg.extend_from_slice(&rkey.to_le_bytes());
        msg.extend_from_slice(&(len as u64).to_le_bytes());
        self.local_maps.push(LocalMap {
            offset,
            addr,
            len,
            mr,
        });
        self.pending.push_back((MSG_IOMAP, msg));
        self.progress();
        Ok(offset)
    }

    /// Releases the iomap of `addr`.
    pub fn iounmap(&mut self, addr: usize, len: usize) -> Result<(), Errno> {
        let i = self
            .local_maps
            .iter()
            .position(|m| m.addr == addr && m.len == len)
            .ok_or(Errno(libc::EINVAL))?;
        let m = self.local_maps.remove(i);
        // SAFETY: m.mr was registered by iomap and is released once.
        unsafe { ibv_dereg_mr(m.mr) };
        Ok(())
    }

    /// Queues the end-of-stream message after everything already sent.
    pub fn queue_fin(&mut self) {
        if !self.fin_queued && self.err == 0 {
            self.fin_queued = true;
            self.pending.push_back((MSG_FIN, Vec::new()));
        }
        self.progress();
    }
}

fn decode_map(b: &[u8]) -> Option<RemoteMap> {
    if b.len() < 28 {
        return None;
    }
    Some(RemoteMap {
        offset: i64::from_le_bytes(b[0..8].try_into().ok()?),
        addr: u64::from_le_bytes(b[8..16].try_into().ok()?),
        rkey: u32::from_le_bytes(b[16..20].try_into().ok()?),
        len: u64::from_le_bytes(b[20..28].try_into().ok()?),
    })
}

impl Drop for Link {
    fn drop(&mut self) {
        crate::qp::sv_rdma_destroy_qp(self.id);
        // SAFETY: the only QP using cq is destroyed.
        unsafe { ibv_destroy_cq(self.cq) };
        for m in self.local_maps.drain(..) {
            // SAFETY: each iomap MR is released once.
            unsafe { ibv_dereg_mr(m.mr) };
        }
        crate::id::sv_rdma_destroy_id(self.id);
    }
}

//! Per-thread state: the thread's chunk writer and a scratch area for the recording layer's
//! per-thread state, in a thread-local block.
//!
//! On x86_64 the block is a `.tbss` symbol reached with the initial-exec TLS model (one GOT
//! load and an add of `%fs:0`, no `__tls_get_addr` call): libsigmatrace.so is loaded at
//! startup by `LD_PRELOAD`, so its TLS is static. (A consequence: `dlopen`ing the library
//! later can fail with "cannot allocate memory in static TLS block"; preload it.) Other
//! architectures use a `thread_local!`. The block starts zeroed, which is a valid, empty
//! [`Local`]; it has no destructor, so it is usable until the thread's last instruction.
//!
//! The scratch area ([`Thread::state`]) is plain bytes the sink never interprets: the layer
//! above keeps its per-thread state there (open empty-poll runs, `ibv_wr_*` batches) as any
//! [`Pod`] type — all-zero at thread start, zeroed again in a fork child. `Pod` makes every
//! byte pattern a valid value, so the view is sound whatever type reads it.

use std::mem::MaybeUninit;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};

use sigmatrace_schemas::{
    compact::{CompletionBody, CompletionHead, CompletionSource, PlacedSend, SendBody, SendHead},
    drop_reason, ChunkWriter, Dropped, FixedRecord, PostSend, RecordHeader, RecordKind, Reserved,
};

use super::{now, process, Process, PERIOD, PROCESS};
use bytemuck::Pod;

/// `Local::gate` when the thread can record right away: it has a writer, is not inside the
/// sink already, and has no refused records to report. Anything else takes `prepare`.
const READY: u8 = 1;
/// Bit of `gate` set while this thread is inside the sink.
const BUSY: u8 = 2;
/// `gate` while this thread is in a provider call after placing a record it will publish once
/// the call returns ([`place_plain_send`]): not [`READY`], so a signal handler recording
/// meanwhile goes through `prepare`, which marks the placed record [`OVERWRITTEN`].
const PENDING: u8 = 4;
/// Bit of `Local::dirty`: something was appended while a placed record was pending (it may
/// have been written over).
const OVERWRITTEN: u8 = 1;
/// Bit of `Local::dirty`: a record was refused (re-entry) and is still to be reported.
const MISSED: u8 = 2;
/// `gate` while an `ibv_wr_*` batch's one WR is placed at the append position, unpublished,
/// from its opcode builder until its `wr_complete` publishes it ([`place_wr`]): not
/// [`READY`], so that anything else this thread records first goes through `prepare`, which
/// *displaces* the placed WR (see `Local::placed`) before writing over it.
const OPEN: u8 = 8;

/// Every field is valid when all-zero (the initial state of a thread's block).
#[repr(C)]
struct Local {
    /// [`READY`], or 0 (not ready: no writer yet, or drops to report), possibly | [`BUSY`]
    /// while this thread is inside the sink (a signal handler re-entering is refused), or
    /// [`PENDING`].
    gate: u8,
    /// [`OVERWRITTEN`] | [`MISSED`]: what a pending placed record must not be published
    /// after. Next to `gate`, so that one 16-bit load tests both.
    dirty: u8,
    /// Bits the layer above holds the hot completion path off for ([`Thread::hold_hot`],
    /// [`enter_ready`]).
    hold: u8,
    /// Whether `sink.writer` is initialised.
    has_writer: bool,
    /// Nonzero while the layer above holds placing `ibv_wr_*` WRs off ([`place_wr`]): it has
    /// a batch open, or a displaced WR is still to be taken ([`Thread::hold_placing`]).
    place_hold: u8,
    /// The time of the placed record while [`PENDING`] (for recording the call again).
    pending_ts: u64,
    /// The arguments of the call whose record is [`PENDING`] (for recording it again): kept
    /// here rather than in registers across the provider call.
    pending_args: [usize; 3],
    /// Records refused while busy, reported as a `Dropped` record later (atomic only so that
    /// reading and clearing it is one instruction a handler cannot fall between).
    missed: AtomicU64,
    /// The `ibv_wr_*` WRs placed at the append position, unpublished ([`place_wr`]).
    placed: Placed,
    /// Placed WRs `prepare` displaced (their records read back), until the layer above takes
    /// them ([`Thread::take_displaced`]).
    displaced: Displaced,
    sink: Sink,
    state: StateArea,
}

/// The `ibv_wr_*` WRs of one batch placed one after the other at the append position,
/// unpublished ([`place_wr`]).
#[repr(C)]
struct Placed {
    /// Their `ibv_qp_ex` (its address); 0 = none. Nonzero only while `gate` is not [`READY`]
    /// (it is [`OPEN`], or 0 after a hook found a signal handler had changed it); set and
    /// cleared only while [`BUSY`]. `prepare` displaces the WRs before anything is written
    /// over them.
    qp: u64,
    /// How many (at most [`MAX_PLACED`]), and the last one's record (when `n` > 0).
    n: u32,
    last: PlacedSend,
}

/// `ibv_wr_*` WRs `prepare` displaced: their QP (0 = none), count and records.
#[repr(C)]
struct Displaced {
    qp: u64,
    n: u32,
    recs: [PostSend; MAX_PLACED as usize],
}

/// Bytes of the per-thread scratch area.
pub const STATE_BYTES: usize = 2560;

/// The per-thread scratch area (64-byte aligned, all-zero at start).
#[repr(C, align(64))]
struct StateArea([u8; STATE_BYTES]);

/// The part of the block records go through (one pointer for the hot and the cold paths).
struct Sink {
    /// Whether this thread already reported its writer running dry.
    reported_full: bool,
    /// Never dropped: it only holds an `Arc` of the never-freed process log.
    writer: MaybeUninit<ChunkWriter>,
}

const BLOCK: usize = 8192;
const _: () = assert!(std::mem::size_of::<Local>() <= BLOCK && std::mem::align_of::<Local>() <= 64);
const _: () = assert!(std::mem::offset_of!(Local, has_writer) == 3 && size_of::<bool>() == 1);

mod placed;
pub use placed::{
    abandon_placed, place_next_wr, place_plain_send, place_wr, placed_args, placed_ts,
    placed_wr_sge, publish_placed, publish_placed_wr, MAX_PLACED,
};

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 6",
    ".globl sigmatrace_tls_block",
    ".hidden sigmatrace_tls_block",
    ".type sigmatrace_tls_block,@object",
    ".size sigmatrace_tls_block, {size}",
    "sigmatrace_tls_block:",
    ".zero {size}",
    ".popsection",
    size = const BLOCK,
);

/// Whether the block's `gate` is [`READY`] and its `dirty` 0 (one 16-bit load of both, as a
/// signal handler may change them between any two instructions): a compare in memory and its
/// branch.
#[inline(always)]
fn ready_clean(l: *const Local) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `gate` and `dirty` are the first two bytes of this thread's block (checked
        // below); the compare only reads them; no stack, branches to one of two labels.
        unsafe {
            core::arch::asm!(
                "cmp word ptr [{l}], {want}",
                "je {yes}",
                l = in(reg) l,
                want = const u16::from_ne_bytes([READY, 0]),
                yes = label { return true },
                options(nostack, readonly),
            );
        }
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: `gate` and `dirty`, the first two bytes of this thread's block, read as one word.
    unsafe {
        std::ptr::addr_of!((*l).gate).cast::<u16>().read_volatile()
            == u16::from_ne_bytes([READY, 0])
    }
}
const _: () =
    assert!(std::mem::offset_of!(Local, gate) == 0 && std::mem::offset_of!(Local, dirty) == 1);

/// This thread's block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn local_ptr() -> *mut Local {
    let p: usize;
    // SAFETY: loads the block's static-TLS offset from its GOT slot and adds this thread's
    // thread pointer (%fs:0); reads only, no side effects. Both are constant for the thread
    // (`nomem`: the compiler may reuse one result within a function).
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + sigmatrace_tls_block@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, nomem, nostack),
        )
    };
    p as *mut Local
}

#[cfg(not(target_arch = "x86_64"))]
thread_local! {
    static LOCAL: std::cell::UnsafeCell<MaybeUninit<Local>> =
        const { std::cell::UnsafeCell::new(MaybeUninit::zeroed()) };
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn local_ptr() -> *mut Local {
    LOCAL.with(|c| c.get().cast())
}

/// Where a thread's records go.
pub struct Out<'a> {
    /// Only ever made for a block whose writer is initialised (`has_writer`).
    s: &'a mut Sink,
}

impl Sink {
    /// The writer.
    ///
    /// # Safety
    /// It must be initialised (`has_writer`).
    #[inline(always)]
    unsafe fn writer(&mut self) -> &mut ChunkWriter {
        // SAFETY: per caller.
        unsafe { self.writer.assume_init_mut() }
    }
}

/// A thread inside the sink: its writer and its scratch area. Leaving (drop) makes the thread
/// ready for its next record. Not `Send`: it is this thread's block.
pub struct Thread<'a> {
    pub out: Out<'a>,
    state: &'a mut StateArea,
    gate: &'a mut u8,
    hold: &'a mut u8,
    place_hold: &'a mut u8,
    displaced: &'a mut Displaced,
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl Drop for Thread<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // READY again — unless a signal handler was refused meanwhile (it cleared READY, so
        // that the next record reports the refusal: read here, not assumed).
        let gate: *mut u8 = self.gate;
        // SAFETY: our own gate byte; a volatile read and write (a handler may have changed it).
        unsafe { gate.write_volatile(gate.read_volatile() & !BUSY) };
    }
}

/// Enters the sink on this thread, creating the process log and the thread's writer on first
/// use. `None` (record nothing) when tracing is off, the log cannot be created, or the thread
/// is already inside the sink (a signal handler interrupted it).
#[inline(always)]
pub fn enter() -> Option<Thread<'static>> {
    enter_with(true)
}

/// Like [`enter`] but only when the thread is ready right away and the hot completion path
/// is not held off for any of the bits `of` ([`Thread::hold_hot`]); `None` otherwise, where
/// `enter` would take its out-of-line preparation: for the hot completion path, which makes
/// no call and falls back to `enter`.
#[inline(always)]
pub fn enter_ready(of: u8) -> Option<Thread<'static>> {
    // SAFETY: as in `enter_with`.
    let l: &'static mut Local = unsafe { &mut *local_ptr() };
    // gate READY, dirty 0, nothing held (and `has_writer`, implied by READY): one load; when
    // something is held, whether it is one of `of`.
    let word = std::ptr::addr_of!(l.gate).cast::<u32>();
    // SAFETY: `gate`, `dirty`, `hold` and `has_writer` are the block's first four bytes
    // (repr(C), the block is 64-byte aligned), read as one word.
    let word = unsafe { word.read() }.to_ne_bytes();
    if word != [READY, 0, 0, 1] && (word[..2] != [READY, 0] || word[2] & of != 0) {
        return None;
    }
    Some(inside(l))
}

/// Runs `f` inside the sink (see [`enter`]).
#[inline(always)]
pub fn with_thread<R>(f: impl FnOnce(&mut Thread<'_>) -> R) -> Option<R> {
    enter_with(true).map(|mut t| f(&mut t))
}

/// Like [`with_thread`] but never creates the log (for exit-time bookkeeping).
pub fn with_existing_thread<R>(f: impl FnOnce(&mut Thread<'_>) -> R) -> Option<R> {
    enter_with(false).map(|mut t| f(&mut t))
}

#[inline(always)]
fn enter_with(create: bool) -> Option<Thread<'static>> {
    // SAFETY: the block is this thread's and lives as long as the thread; BUSY keeps the &mut
    // exclusive even when a signal handler on this thread re-enters (refused in `prepare`),
    // and the returned Thread cannot leave the thread (not Send) nor outlive the hook call
    // that holds it in practice.
    let l: &'static mut Local = unsafe { &mut *local_ptr() };
    // Not READY, or READY with something to report (a refusal during a preparation, a
    // pending record written over): `prepare`.
    let gd = std::ptr::addr_of!(l.gate).cast::<u16>();
    // SAFETY: `gate` and `dirty`, the block's first two bytes, read as one word.
    if unsafe { gd.read_volatile() } != u16::from_ne_bytes([READY, 0]) && !prepare(l, create) {
        return None;
    }
    Some(inside(l))
}

/// Enters the sink on a ready block (READY: the writer is initialised, so `Out` may be made).
#[inline(always)]
fn inside(l: &'static mut Local) -> Thread<'static> {
    l.gate = READY | BUSY;
    Thread {
        out: Out { s: &mut l.sink },
        state: &mut l.state,
        gate: &mut l.gate,
        hold: &mut l.hold,
        place_hold: &mut l.place_hold,
        displaced: &mut l.displaced,
        _not_send: std::marker::PhantomData,
    }
}

/// The uncommon cases: re-entry, first use on this thread, drops to report.
#[cold]
#[inline(never)]
fn prepare(l: &mut Local, create: bool) -> bool {
    let gate = std::ptr::addr_of_mut!(l.gate);
    let dirty = std::ptr::addr_of_mut!(l.dirty);
    // SAFETY (all volatile accesses): this thread's own gate and dirty bytes; a signal handler
    // on this thread may change them between any two instructions.
    let g = unsafe { gate.read_volatile() };
    if g & BUSY != 0 {
        l.missed.fetch_add(1, Ordering::Relaxed);
        // Not READY: the outer call reports the drops on its next record.
        unsafe { gate.write_volatile(BUSY) };
        unsafe { dirty.write_volatile(dirty.read_volatile() | MISSED) };
        return false;
    }
    if g & PENDING != 0 {
        // A signal handler records while the interrupted call's placed record is pending: it
        // appends where that record lies; the interrupted call sees this and records again.
        unsafe { dirty.write_volatile(dirty.read_volatile() | OVERWRITTEN) };
    }
    // From here a handler interrupting this preparation (or the log's creation and its lock)
    // is refused and counted, like one interrupting a record.
    unsafe { gate.write_volatile(BUSY) };
    compiler_fence(Ordering::SeqCst);
    if !l.has_writer {
        let p = if create {
            process()
        } else {
            let p = PROCESS.load(Ordering::Acquire);
            // SAFETY: PROCESS only holds leaked, never-freed Box<Process>es.
            (!p.is_null()).then(|| unsafe { &*p })
        };
        let Some(p): Option<&Process> = p else {
            compiler_fence(Ordering::SeqCst);
            unsafe { gate.write_volatile(0) };
            return false;
        };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let mut w = p.writer.thread_writer(tid);
        w.set_horizon(super::NEXT_SNAPSHOT.load(Ordering::Relaxed));
        l.sink.writer = MaybeUninit::new(w);
        l.has_writer = true;
        l.sink.reported_full = false;
    }
    displace(l);
    // Cleared before the count is taken: a refusal after this sets it again (and is reported
    // now or by the next record, which comes here again for it).
    unsafe { dirty.write_volatile(dirty.read_volatile() & !MISSED) };
    compiler_fence(Ordering::SeqCst);
    // One instruction: a refusal cannot fall between reading and clearing the count.
    let count = l.missed.swap(0, Ordering::Relaxed);
    if count != 0 {
        // SAFETY: has_writer.
        let w = unsafe { l.sink.writer() };
        w.append(&Dropped {
            hdr: RecordHeader::of::<Dropped>(drop_reason::INTERNAL_ERROR),
            ts: now(),
            count,
        });
    }
    compiler_fence(Ordering::SeqCst);
    unsafe { gate.write_volatile(READY) };
    true
}

/// In `prepare` (BUSY): when `ibv_wr_*` WRs are placed ([`place_wr`]), reads them back
/// before whatever this thread records now is written over them, for the layer above to take
/// ([`Thread::take_displaced`]), and holds placing off until it has.
fn displace(l: &mut Local) {
    // SAFETY: this thread's own word; volatile as the hooks that test it.
    let qp = unsafe { std::ptr::addr_of!(l.placed.qp).read_volatile() };
    if qp == 0 {
        return;
    }
    // `place_hold` keeps WRs from being placed while those displaced are not taken yet.
    debug_assert_eq!(
        l.displaced.qp, 0,
        "WRs displaced before the last were taken"
    );
    // SAFETY: WRs are placed only on a thread with a writer.
    let w = unsafe { l.sink.writer() };
    let d = &mut l.displaced;
    d.n = 0;
    for k in 0..l.placed.n.min(MAX_PLACED) {
        if let Some(rec) = w.placed_send(k) {
            d.recs[d.n as usize] = rec;
            d.n += 1;
        }
    }
    d.qp = qp;
    l.place_hold = 1;
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!(l.placed.qp).write_volatile(0) };
}

/// Fork child: forget the parent's writer (its chunk is the parent's; writing through the
/// shared mapping would corrupt the parent's log) and every open batch or run.
pub(super) fn reset_in_child() {
    // SAFETY: the child has one thread (this one), and nothing else borrows its block.
    let l = unsafe { &mut *local_ptr() };
    l.has_writer = false; // the old ChunkWriter is leaked, never dropped
    l.gate = 0;
    l.dirty = 0;
    l.hold = 0;
    l.place_hold = 0;
    l.placed.qp = 0;
    l.displaced.qp = 0;
    l.missed.store(0, Ordering::Relaxed);
    l.sink.reported_full = false;
    l.state.0.fill(0);
}

impl<'a> Thread<'a> {
    /// Appends one record.
    #[inline(always)]
    pub fn append<R: FixedRecord>(&mut self, rec: &R) {
        self.out.append(rec);
    }

    /// Reserves a slot for one record ([`Out::reserve`]; the caller checks the snapshot
    /// after the commit).
    #[inline(always)]
    pub fn reserve<R: FixedRecord>(&mut self) -> Option<Reserved<'_, R>> {
        self.out.reserve()
    }

    /// [`Out::snapshot_check`].
    #[inline(always)]
    pub fn snapshot_check(&mut self, ts: u64) {
        self.out.snapshot_check(ts);
    }

    /// Appends the compact `PostSend` of a plain send WR (then a due snapshot), as
    /// `append` of the full record would; false when it has no compact form (nothing
    /// written: the caller appends the full record).
    #[inline(always)]
    pub fn append_plain_send(
        &mut self,
        ts: u64,
        head: &SendHead,
        body: impl FnOnce() -> SendBody,
    ) -> bool {
        // SAFETY: an Out's writer is initialised.
        let r = unsafe { self.out.s.writer() }.try_append_plain_send(ts, head, body);
        let compact = self.out.compact_appended(r);
        if compact {
            self.out.snapshot_check(ts);
        }
        compact
    }

    /// Appends the compact `WorkCompletion` of a plain completion without the snapshot
    /// check (as [`Out::append_raw`]); false when it has no compact form (nothing written:
    /// the caller appends the full record).
    #[inline(always)]
    pub fn append_plain_completion_raw(
        &mut self,
        ts: u64,
        head: &CompletionHead,
        body: impl FnOnce() -> CompletionBody,
    ) -> bool {
        // SAFETY: an Out's writer is initialised.
        let r = unsafe { self.out.s.writer() }.try_append_plain_completion(ts, head, body);
        self.out.compact_appended(r)
    }

    /// `ChunkWriter::append_bound_completion`: the compact `WorkCompletion` of `wc` when it
    /// needs no bookkeeping (a due snapshot included: the writer's horizon); false when
    /// nothing was written.
    #[inline(always)]
    pub fn append_bound_completion(
        &mut self,
        ts: u64,
        cq: u64,
        wc: &impl CompletionSource,
    ) -> bool {
        // SAFETY: an Out's writer is initialised.
        unsafe { self.out.s.writer() }.append_bound_completion(ts, cq, wc)
    }

    /// The hot receive path: the compact `PostRecv` of a one-SGE receive WR at `ts`, when it
    /// needs no bookkeeping (`ChunkWriter::append_bound_recv`); false when nothing was
    /// written.
    #[inline(always)]
    pub fn append_bound_recv(
        &mut self,
        ts: u64,
        object: u64,
        queue: (u32, u8),
        body: impl FnOnce() -> (u64, u32),
    ) -> bool {
        // SAFETY: an Out's writer is initialised.
        unsafe { self.out.s.writer() }.append_bound_recv(ts, object, queue, body)
    }

    /// Appends a metadata record (StringDef, Annotation, ThreadName).
    pub fn append_meta(&mut self, kind: RecordKind, aux: u32, key: u64, payload: &[u8]) {
        // SAFETY: an Out's writer is initialised.
        if !unsafe { self.out.s.writer() }.append_meta(kind, aux, now(), key, payload) {
            append_failed(self.out.s);
        }
    }

    /// Holds the hot completion path ([`enter_ready`]) off for the bits `held` (the layer
    /// above has bookkeeping some completions must go through first: open empty-poll runs of
    /// their CQs).
    #[inline(always)]
    pub fn hold_hot(&mut self, held: u8) {
        *self.hold = held;
    }

    /// Holds placing `ibv_wr_*` WRs ([`place_wr`]) off while `held` (the layer above has a
    /// batch open, where a WR placed as its batch's first would be out of place), or lets it.
    #[inline(always)]
    pub fn hold_placing(&mut self, held: bool) {
        *self.place_hold = held as u8;
    }

    /// Hands the WRs `prepare` displaced ([`place_wr`]), if any, to `take` one by one, in
    /// order, with their QP (its `ibv_qp_ex` address), the writer and the scratch area viewed
    /// as `S`: once; placing stays held off until [`Thread::hold_placing`] lets it.
    #[inline(always)]
    pub fn take_displaced<S: Pod>(
        &mut self,
        take: impl FnMut(&mut Out<'a>, &mut S, u64, &PostSend),
    ) {
        if self.displaced.qp != 0 {
            self.take_displaced_cold(take);
        }
    }

    #[cold]
    #[inline(never)]
    fn take_displaced_cold<S: Pod>(
        &mut self,
        mut take: impl FnMut(&mut Out<'a>, &mut S, u64, &PostSend),
    ) {
        let qp = std::mem::take(&mut self.displaced.qp);
        let n = (self.displaced.n as usize).min(self.displaced.recs.len());
        for k in 0..n {
            let rec = self.displaced.recs[k];
            let (out, st) = self.parts::<S>();
            take(out, st, qp, &rec);
        }
    }

    /// The snapshot period in timestamp units (`u64::MAX` before the log exists).
    #[inline(always)]
    pub fn period(&self) -> u64 {
        PERIOD.load(Ordering::Relaxed)
    }

    /// The scratch area viewed as `S` (see the module documentation).
    #[inline(always)]
    pub fn state<S: Pod>(&mut self) -> &mut S {
        self.parts().1
    }

    /// The writer and the scratch area viewed as `S`, borrowed together.
    #[inline(always)]
    pub fn parts<S: Pod>(&mut self) -> (&mut Out<'a>, &mut S) {
        const { assert!(size_of::<S>() <= STATE_BYTES && align_of::<S>() <= 64) };
        let p: *mut StateArea = self.state;
        // SAFETY: the area is STATE_BYTES bytes, 64-byte aligned and initialised (zeroed at
        // thread start); S fits and needs no more alignment (checked above); S is Pod, so any
        // bytes are a valid S and any S written leaves valid bytes. `p` is this thread's
        // exclusive area for as long as `self` is borrowed.
        (&mut self.out, unsafe { &mut *p.cast::<S>() })
    }
}

impl Out<'_> {
    /// This `Out` by value (one pointer), for an out-of-line path: passing `&mut Out` would
    /// keep the thread's parts in memory on the hot path that calls it.
    #[inline(always)]
    pub fn reborrow(&mut self) -> Out<'_> {
        Out { s: &mut *self.s }
    }

    /// Appends one record. Its `ts` (offset 8, every hot record has one) also drives the
    /// periodic clock snapshots: the first thread to pass the due time writes one, *after*
    /// the record (a snapshot is taken now, later than the record's event: written before
    /// it, it would put a later time ahead of an earlier one in the thread's append order).
    #[inline(always)]
    pub fn append<R: FixedRecord>(&mut self, rec: &R) {
        let ts = super::ts_of(rec);
        self.append_raw(rec);
        self.snapshot_check(ts);
    }

    /// [`Out::append`] of a `PostSend`, with no call when its compact form needs no
    /// bookkeeping (`ChunkWriter::append_post_send_placed`: a due snapshot is bookkeeping
    /// too, see [`Out::snapshot_check`]); otherwise `append`, out of line.
    #[inline(always)]
    pub fn append_post_send(&mut self, rec: &PostSend) {
        // SAFETY: an Out's writer is initialised.
        if !unsafe { self.s.writer() }.append_post_send_placed(rec) {
            append_post_send_slow(self.s, rec);
        }
    }

    /// Reserves a slot for one record, to be filled in place and committed
    /// ([`Reserved::commit`]); the hot paths' alternative to [`Out::append`] (no copy of the
    /// record). It writes no clock snapshot: the caller runs [`Out::snapshot_check`] after
    /// the commit.
    #[inline(always)]
    pub fn reserve<R: FixedRecord>(&mut self) -> Option<Reserved<'_, R>> {
        let s: *mut Sink = self.s;
        // SAFETY: an Out's writer is initialised; `s` is our exclusive `Sink`. Through the raw
        // pointer because the borrow checker keeps a conditionally returned borrow alive in
        // the other arm too: the `None` arm holds no borrow of the writer.
        match unsafe { (*s).writer() }.reserve::<R>() {
            Some(r) => Some(r),
            None => {
                // SAFETY: as above; nothing else borrows `*s` here.
                append_failed(unsafe { &mut *s });
                None
            }
        }
    }

    /// What a `ChunkWriter::try_append_plain_*` did: false when the record had no compact
    /// form (nothing written), else true — after reporting a writer that ran dry.
    #[inline(always)]
    fn compact_appended(&mut self, r: Option<bool>) -> bool {
        if r == Some(false) {
            append_failed(self.s);
        }
        r.is_some()
    }

    /// Writes a clock snapshot now.
    pub fn snapshot_now(&mut self) {
        self.append_raw(&super::snapshot());
    }

    /// Writes the periodic clock snapshot if it is due at `ts` (the timestamp of the record
    /// just written). The writer's hot paths take no record at or after its horizon, which is
    /// kept at or before the due time (the due time only grows): passing it sends a record
    /// here, which writes the snapshot when it is due, and else moves the horizon up to the
    /// due time another thread's snapshot set.
    #[inline(always)]
    pub fn snapshot_check(&mut self, ts: u64) {
        // SAFETY: an Out's writer is initialised.
        if ts >= unsafe { self.s.writer() }.horizon() {
            snapshot_due(self.s, ts);
        }
    }

    /// Appends one record without the periodic snapshot check (for records written right
    /// before an explicit [`Out::snapshot_now`]).
    #[inline(always)]
    pub fn append_raw<R: FixedRecord>(&mut self, rec: &R) {
        // SAFETY: an Out's writer is initialised.
        if !unsafe { self.s.writer() }.append(rec) {
            append_failed(self.s);
        }
    }
}

// The cold paths take the writer's parts, not `&mut Out`, so the hot paths never need the
// `Out` itself in memory.

/// [`Out::append_post_send`] of a record that needs bookkeeping (or has no compact form).
#[inline(never)]
fn append_post_send_slow(s: &mut Sink, rec: &PostSend) {
    Out { s }.append(rec);
}

/// [`Out::snapshot_check`] past the writer's horizon: the snapshot if it is due (the first
/// thread to get there writes it), then the horizon moved up to the next due time.
#[cold]
#[inline(never)]
fn snapshot_due(s: &mut Sink, ts: u64) {
    let due = super::NEXT_SNAPSHOT.load(Ordering::Relaxed);
    let next = ts.saturating_add(PERIOD.load(Ordering::Relaxed));
    if ts >= due
        && super::NEXT_SNAPSHOT
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        // SAFETY: the Out this Sink came from has an initialised writer.
        && !unsafe { s.writer() }.append(&super::snapshot())
    {
        append_failed(s);
    }
    // SAFETY: as above.
    unsafe { s.writer() }.set_horizon(super::NEXT_SNAPSHOT.load(Ordering::Relaxed));
}

#[cold]
#[inline(never)]
fn append_failed(s: &mut Sink) {
    if s.reported_full {
        return;
    }
    s.reported_full = true;
    super::report_full();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_all_zero_block_is_an_empty_local() {
        // SAFETY: this test's own thread block, never used by anything else in this thread.
        let l = unsafe { &*local_ptr() };
        assert!(l.gate == 0 && l.dirty == 0 && !l.has_writer);
        assert_eq!(l.missed.load(Ordering::Relaxed), 0);
        assert!(l.state.0.iter().all(|&b| b == 0));
    }
}

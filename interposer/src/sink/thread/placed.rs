//! Records placed *before* a call, published after it: a one-WR `ibv_post_send` around its
//! provider call ([`place_plain_send`]), and an `ibv_wr_*` batch's one WR from its opcode
//! builder to its `wr_complete` ([`place_wr`]).

use std::sync::atomic::{compiler_fence, Ordering};

use sigmatrace_schemas::compact::{SendBody, SendHead};

use super::{local_ptr, ready_clean, Local, Placed, BUSY, OPEN, OVERWRITTEN, PENDING, READY};

/// Records a plain send (RDMA write or send, one SGE, connected QP) *before* its provider
/// call, when sends are on the hot path (`fast::SEND`): its compact `PostSend` at the TSC
/// read now is written at the append position of this thread's chunk, unpublished, and only
/// [`publish_placed`] after the call makes it visible. `args` (the call's) are kept in the
/// thread's block, for the call ([`placed_args`]) and for recording it again.
/// `Err(args)` (nothing placed; the caller records after the call, as for any other post)
/// when the thread is not ready (first use, inside the sink already, something to report),
/// the send has no compact form, or needs bookkeeping first: no room in the current chunk,
/// a time base out of reach, its queue's slot not bound, or a clock snapshot due (the
/// writer's horizon, see [`Out::snapshot_check`](super::Out::snapshot_check)). The arguments are handed back from the
/// block where they were kept, so that the caller keeps none in registers meanwhile.
/// While the call runs the thread is [`PENDING`]: a signal handler may record meanwhile (its
/// records go where the placed one lies, and mark it [`OVERWRITTEN`]).
#[inline(always)]
pub fn place_plain_send(
    head: impl FnOnce() -> SendHead,
    body: impl FnOnce() -> SendBody,
    args: [usize; 3],
) -> Result<(), [usize; 3]> {
    let l = local_ptr();
    // SAFETY: `l` is this thread's block (valid, all fields valid when zero). `gate` and
    // `dirty` are accessed with volatile single loads/stores: a signal handler on this thread
    // can change them between any two instructions, and each decision below rests on one load.
    unsafe {
        if !ready_clean(l) {
            return Err(args);
        }
        let gate = std::ptr::addr_of_mut!((*l).gate);
        gate.write_volatile(READY | BUSY);
        compiler_fence(Ordering::SeqCst);
        // BUSY: the block's `pending_args` are ours (a handler placing a send of its own is
        // refused) until PENDING, or until they are read back below.
        let kept = std::ptr::addr_of_mut!((*l).pending_args);
        kept.write(args);
        // READY means the writer is initialised.
        let w = (*l).sink.writer.assume_init_mut();
        // `fast::SEND`, the caller's condition, says that timestamps are TSC reads.
        let ts = crate::sink::tsc();
        // (Unused unless placed; stored now, so that `ts` need not be kept.)
        (*l).pending_ts = ts;
        if w.place_plain_send(ts, &head(), body) {
            compiler_fence(Ordering::SeqCst);
            gate.write_volatile(PENDING);
            return Ok(());
        }
        let args = kept.read_volatile();
        compiler_fence(Ordering::SeqCst);
        // As `Thread::drop`: READY again unless a handler was refused meanwhile.
        gate.write_volatile(gate.read_volatile() & !BUSY);
        Err(args)
    }
}

/// After the provider call of a [`place_plain_send`] that placed its record: publishes it
/// when the provider accepted it (returned `rc` 0) and nothing was recorded or refused on
/// this thread meanwhile, and returns true. Otherwise publishes nothing and returns false:
/// the caller then calls [`abandon_placed`] and records the call the ordinary way (the
/// placed bytes are written over).
#[inline(always)]
pub fn publish_placed(rc: i32) -> bool {
    let l = local_ptr();
    // SAFETY: as in `place_plain_send`. The thread is PENDING (set there), so `has_writer`.
    unsafe {
        let gate = std::ptr::addr_of_mut!((*l).gate);
        // From here a signal handler's record is refused (as inside any recording), so the
        // check below cannot be overtaken.
        gate.write_volatile(READY | BUSY);
        compiler_fence(Ordering::SeqCst);
        let dirty = std::ptr::addr_of!((*l).dirty).read_volatile();
        if rc as u32 | dirty as u32 != 0 {
            // The caller calls `abandon_placed` (out of line) before recording the call.
            return false;
        }
        (*l).sink.writer.assume_init_mut().publish_placed_send();
        compiler_fence(Ordering::SeqCst);
        gate.write_volatile(gate.read_volatile() & !BUSY);
        true
    }
}

/// The time of the record [`place_plain_send`] placed, for recording its call again after
/// [`publish_placed`] returned false (only [`place_plain_send`] writes it, and it cannot run
/// while a placed record is pending: see [`PENDING`] and [`OVERWRITTEN`]).
#[inline(always)]
pub fn placed_ts() -> u64 {
    // SAFETY: this thread's block; a plain u64 field.
    unsafe { std::ptr::addr_of!((*local_ptr()).pending_ts).read_volatile() }
}

/// The arguments [`place_plain_send`] kept with the record it placed (as [`placed_ts`]).
#[inline(always)]
pub fn placed_args() -> [usize; 3] {
    // SAFETY: this thread's block; plain words.
    unsafe { std::ptr::addr_of!((*local_ptr()).pending_args).read_volatile() }
}

/// After [`publish_placed`] returned false (the thread is still inside the sink): drops the
/// placed record and leaves the sink not ready, so the next record goes through `prepare`
/// (which reports refused records). The call is then recorded the ordinary way.
#[cold]
#[inline(never)]
pub fn abandon_placed() {
    let l = local_ptr();
    // SAFETY: this thread's block; single volatile loads and stores as in `publish_placed`.
    unsafe {
        let dirty = std::ptr::addr_of_mut!((*l).dirty);
        dirty.write_volatile(dirty.read_volatile() & !OVERWRITTEN);
        compiler_fence(Ordering::SeqCst);
        std::ptr::addr_of_mut!((*l).gate).write_volatile(0);
    }
}

/// WRs of one `ibv_wr_*` batch placed at most ([`place_wr`]); the next is recorded the
/// ordinary way (which displaces those placed).
pub const MAX_PLACED: u32 = 16;

/// Records an `ibv_wr_*` opcode builder's WR on `qp` (its `ibv_qp_ex` address) *before* the
/// builder's provider call, when sends are on the hot path (`fast::SEND`, the caller's
/// condition): its compact `PostSend` at the TSC read now — with no data yet (`bytes` and the
/// SGE count 0: [`placed_wr_sge`] sets them) — is written in this thread's chunk, unpublished:
/// a batch's first WR at the append position (when the layer above has no batch open:
/// `place_hold` 0, [`Thread::hold_placing`](super::Thread::hold_placing)), each next one of
/// the same batch right after the one before, up to [`MAX_PLACED`]. The thread is left
/// [`OPEN`] until the batch's `wr_complete` publishes them together ([`publish_placed_wr`]).
/// Only when the record needs no bookkeeping (as [`place_plain_send`]); false otherwise
/// (nothing written: the caller records the builder the ordinary way).
///
/// This is the batch's first WR; [`place_next_wr`] the others.
///
/// While [`OPEN`], anything else this thread records (a signal handler's records, another
/// QP's batch, a poll between the builder and `wr_complete`) first goes through `prepare`,
/// which reads the placed WRs back and *displaces* them to the layer above
/// ([`Thread::take_displaced`](super::Thread::take_displaced)) before writing over them; the
/// hooks that would touch the placed records then find them gone and take the ordinary way
/// too.
#[inline(always)]
pub fn place_wr(qp: u64, head: impl FnOnce() -> SendHead, body: impl FnOnce() -> SendBody) -> bool {
    let l = local_ptr();
    // SAFETY: `l` is this thread's block; `gate`, `dirty` and `placed.qp` are accessed with
    // volatile single loads and stores (a signal handler on this thread can change them
    // between any two instructions; while BUSY it changes nothing but is refused).
    unsafe {
        if !ready_clean(l) {
            return false;
        }
        let gate = std::ptr::addr_of_mut!((*l).gate);
        gate.write_volatile(READY | BUSY);
        compiler_fence(Ordering::SeqCst);
        // READY, so nothing is placed (`placed.qp` 0) and the writer is initialised.
        let w = (*l).sink.writer.assume_init_mut();
        // `place_hold` changes only while BUSY: read after the store above.
        if (*l).place_hold == 0 {
            if let Some(rec) = w.place_plain_send_at(0, crate::sink::tsc(), &head(), body) {
                // BUSY: nothing else reads these meanwhile.
                (*l).placed.n = 1;
                (*l).placed.last = rec;
                std::ptr::addr_of_mut!((*l).placed.qp).write_volatile(qp);
                compiler_fence(Ordering::SeqCst);
                gate.write_volatile(OPEN);
                return true;
            }
        }
        compiler_fence(Ordering::SeqCst);
        // As `Thread::drop`: READY again unless a handler was refused meanwhile.
        gate.write_volatile(gate.read_volatile() & !BUSY);
        false
    }
}

/// [`place_wr`] of a batch's next WR (for the caller to try where `place_wr` did not place):
/// placed right after those of its batch when the thread is [`OPEN`] with `qp`'s batch, fewer
/// than [`MAX_PLACED`] of them, and the record needs no bookkeeping; false otherwise.
#[inline(always)]
pub fn place_next_wr(
    qp: u64,
    head: impl FnOnce() -> SendHead,
    body: impl FnOnce() -> SendBody,
) -> bool {
    let l = local_ptr();
    // SAFETY: this thread's block; entered, `qp`'s WRs are placed, `placed.n` of them, right
    // after the append position, with nothing written since.
    unsafe {
        if !enter_placed(l, qp, OPEN) {
            return false;
        }
        let placed = std::ptr::addr_of_mut!((*l).placed);
        let n = (*placed).n;
        let w = (*l).sink.writer.assume_init_mut();
        let mut done = false;
        if n < MAX_PLACED {
            if let Some(rec) = w.place_plain_send_at(n, crate::sink::tsc(), &head(), body) {
                (*placed).n = n + 1;
                (*placed).last = rec;
                done = true;
            }
        }
        leave_placed(l);
        done
    }
}

/// Whether `gate` is [`OPEN`] and `dirty` 0: one compare of both bytes in memory and its
/// branch (as [`ready_clean`]).
#[inline(always)]
fn open_clean(l: *const Local) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `gate` and `dirty` are the first two bytes of this thread's block; the
        // compare only reads them; no stack, branches to one of two labels.
        unsafe {
            core::arch::asm!(
                "cmp word ptr [{l}], {want}",
                "je {yes}",
                l = in(reg) l,
                want = const u16::from_ne_bytes([OPEN, 0]),
                yes = label { return true },
                options(nostack, readonly),
            );
        }
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: `gate` and `dirty`, the first two bytes of this thread's block, read as one word.
    unsafe {
        std::ptr::addr_of!((*l).gate).cast::<u16>().read_volatile() == u16::from_ne_bytes([OPEN, 0])
    }
}

/// Whether the block's `placed.qp` is `qp`: one compare in memory and its branch (it is read
/// once: a signal handler may change it between any two instructions).
#[inline(always)]
fn placed_is(l: *const Local, qp: u64) -> bool {
    const QP: usize = std::mem::offset_of!(Local, placed) + std::mem::offset_of!(Placed, qp);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `placed.qp`, a word of this thread's block; the compare only reads it; no
        // stack, branches to one of two labels.
        unsafe {
            core::arch::asm!(
                "cmp qword ptr [{l} + {at}], {qp}",
                "je {yes}",
                l = in(reg) l,
                at = const QP,
                qp = in(reg) qp,
                yes = label { return true },
                options(nostack, readonly),
            );
        }
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        l.cast::<u8>().add(QP).cast::<u64>().read_volatile() == qp
    }
}

/// Enters the sink (BUSY) for the WRs placed on `qp`, keeping `keep` of the gate (what it
/// becomes when leaving): true when they are there. The test before the store tells whether
/// WRs are placed at all; the one after it whether they are `qp`'s and still there — a signal
/// handler may have displaced them (and placed its own) between the two. When they are not,
/// the gate is left 0 (not ready: the next record goes through `prepare`, which sorts out
/// what the handler left, as `placed.qp` says) and false returned: the caller takes the
/// ordinary way.
///
/// # Safety
/// `l` is this thread's block.
#[inline(always)]
unsafe fn enter_placed(l: *mut Local, qp: u64, keep: u8) -> bool {
    // SAFETY: per caller; volatile single accesses as in `place_wr`.
    unsafe {
        if !open_clean(l) {
            return false;
        }
        let gate = std::ptr::addr_of_mut!((*l).gate);
        gate.write_volatile(keep | BUSY);
        compiler_fence(Ordering::SeqCst);
        if !placed_is(l, qp) {
            gate.write_volatile(0);
            return false;
        }
        true
    }
}

/// Leaves the sink after [`enter_placed`]: the gate as it kept it, unless a signal handler
/// was refused meanwhile (as `Thread::drop`).
///
/// # Safety
/// `l` is this thread's block.
#[inline(always)]
unsafe fn leave_placed(l: *mut Local) {
    compiler_fence(Ordering::SeqCst);
    // SAFETY: per caller.
    unsafe {
        let gate = std::ptr::addr_of_mut!((*l).gate);
        gate.write_volatile(gate.read_volatile() & !BUSY);
    }
}

/// `wr_set_sge` (or `wr_set_inline_data`) on `qp` giving the last WR [`place_wr`] placed one
/// piece of `bytes`: set in its placed record (`ChunkWriter::set_placed_sge`), true. False when no
/// WR of `qp` is placed (another QP's, none, or displaced): nothing written, the caller
/// records the setter the ordinary way.
#[inline(always)]
pub fn placed_wr_sge(qp: u64, bytes: u32) -> bool {
    let l = local_ptr();
    // SAFETY: this thread's block. Entered, WRs of `qp` are placed, the last one's record at
    // `placed.last`; its SGE count only this function sets (to 1), and nothing was written
    // since (anything would have displaced it).
    unsafe {
        if !enter_placed(l, qp, OPEN) {
            return false;
        }
        let last = (*l).placed.last;
        (*l).sink
            .writer
            .assume_init_mut()
            .set_placed_sge(last, bytes);
        leave_placed(l);
        true
    }
}

/// A successful `wr_complete` on `qp`: publishes the WRs [`place_wr`] placed and returns true
/// (the thread is READY again). False when no WR of `qp` is placed: nothing written, the
/// caller records the call the ordinary way (which writes displaced WRs).
#[inline(always)]
pub fn publish_placed_wr(qp: u64) -> bool {
    let l = local_ptr();
    // SAFETY: this thread's block; entered, the `placed.n` records of `qp` lie at the append
    // position with nothing written since.
    unsafe {
        if !enter_placed(l, qp, READY) {
            return false;
        }
        let n = (*l).placed.n;
        (*l).sink.writer.assume_init_mut().publish_placed_sends(n);
        std::ptr::addr_of_mut!((*l).placed.qp).write_volatile(0);
        leave_placed(l);
        true
    }
}

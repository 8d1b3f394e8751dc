//! Records placed *before* a call, published after it: a one-WR `ibv_post_send` around its
//! provider call ([`place_plain_send`]), and an `ibv_wr_*` batch's one WR from its opcode
//! builder to its `wr_complete` ([`place_wr`]).

use std::sync::atomic::{compiler_fence, Ordering};

use sigmatrace_schemas::compact::{SendBody, SendHead};

use super::{local_ptr, ready_clean, Local, BUSY, OPEN, OVERWRITTEN, PENDING, READY};

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

/// Records an `ibv_wr_*` opcode builder's WR on `qp` (its `ibv_qp_ex` address) *before* the
/// builder's provider call, when sends are on the hot path (`fast::SEND`, the caller's
/// condition): its compact `PostSend` at the TSC read now — with no data yet (`bytes` and the
/// SGE count 0: [`placed_wr_sge`] sets them) — is written at the append position of this
/// thread's chunk, unpublished, and the thread is left [`OPEN`] until the batch's
/// `wr_complete` publishes it ([`publish_placed_wr`]). Only as its batch's first WR, when the
/// layer above has no batch open (`place_hold` 0, [`Thread::hold_placing`](super::Thread::hold_placing)), and when the
/// record needs no bookkeeping (as [`place_plain_send`]); false otherwise (nothing written:
/// the caller records the builder the ordinary way).
///
/// While [`OPEN`], anything else this thread records (a signal handler's records, another
/// batch, a poll between the builder and `wr_complete`) first goes through `prepare`, which
/// reads the placed WR back and *displaces* it to the layer above ([`Thread::take_displaced`](super::Thread::take_displaced))
/// before writing over it; the hooks that would touch the placed record then find it gone
/// and take the ordinary way too.
#[inline(always)]
pub fn place_wr(qp: u64, head: impl FnOnce() -> SendHead, body: impl FnOnce() -> SendBody) -> bool {
    let l = local_ptr();
    // SAFETY: `l` is this thread's block; `gate`, `dirty` and `placed_qp` are accessed with
    // volatile single loads and stores (a signal handler on this thread can change them
    // between any two instructions; while BUSY it changes nothing but is refused).
    unsafe {
        if !ready_clean(l) {
            return false;
        }
        let gate = std::ptr::addr_of_mut!((*l).gate);
        gate.write_volatile(READY | BUSY);
        compiler_fence(Ordering::SeqCst);
        // READY, so nothing is placed (`placed_qp` 0) and the writer is initialised.
        let w = (*l).sink.writer.assume_init_mut();
        // `place_hold` changes only while BUSY: read after the store above.
        if (*l).place_hold == 0 && w.place_plain_send(crate::sink::tsc(), &head(), body) {
            std::ptr::addr_of_mut!((*l).placed_qp).write_volatile(qp);
            compiler_fence(Ordering::SeqCst);
            gate.write_volatile(OPEN);
            return true;
        }
        compiler_fence(Ordering::SeqCst);
        // As `Thread::drop`: READY again unless a handler was refused meanwhile.
        gate.write_volatile(gate.read_volatile() & !BUSY);
        false
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

/// Enters the sink (BUSY) for the WR placed on `qp`, keeping `keep` of the gate (what it
/// becomes when leaving): true when it is there. The test before the store tells whether a
/// WR is placed at all; the one after it whether it is `qp`'s and still there — a signal
/// handler may have displaced it (and placed its own) between the two. When it is not, the
/// gate is left 0 (not ready: the next record goes through `prepare`, which sorts out what
/// the handler left, as `placed_qp` says) and false returned: the caller takes the ordinary
/// way.
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
        if std::ptr::addr_of!((*l).placed_qp).read_volatile() != qp {
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

/// `wr_set_sge` (or `wr_set_inline_data`) on `qp` giving the WR [`place_wr`] placed one
/// piece of `bytes`: set in the placed record (`ChunkWriter::set_placed_send_sge`), true.
/// False when no WR of `qp` is placed (another QP's, none, or displaced): nothing written,
/// the caller records the setter the ordinary way.
#[inline(always)]
pub fn placed_wr_sge(qp: u64, bytes: u32) -> bool {
    let l = local_ptr();
    // SAFETY: this thread's block. Entered, a WR of `qp` is placed, whose SGE count only this
    // function sets (to 1), and nothing was written since (anything would have displaced it).
    unsafe {
        if !enter_placed(l, qp, OPEN) {
            return false;
        }
        (*l).sink
            .writer
            .assume_init_mut()
            .set_placed_send_sge(bytes);
        leave_placed(l);
        true
    }
}

/// A successful `wr_complete` on `qp`: publishes the WR [`place_wr`] placed and returns true
/// (the thread is READY again). False when no WR of `qp` is placed: nothing written, the
/// caller records the call the ordinary way (which writes a displaced WR).
#[inline(always)]
pub fn publish_placed_wr(qp: u64) -> bool {
    let l = local_ptr();
    // SAFETY: this thread's block; entered, the placed record of `qp` is at the append
    // position with nothing written since.
    unsafe {
        if !enter_placed(l, qp, READY) {
            return false;
        }
        (*l).sink.writer.assume_init_mut().publish_placed_send();
        std::ptr::addr_of_mut!((*l).placed_qp).write_volatile(0);
        leave_placed(l);
        true
    }
}

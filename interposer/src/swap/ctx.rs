//! Context instrumentation: the data path is `static inline` in verbs.h and jumps through
//! `ctx->ops` and the `verbs_context` extension pointers, so the hooks replace those pointers
//! on every context (after `ibv_open_device`/`ibv_import_device`, or when a context is first
//! seen on a PD/CQ/QP), keeping the originals in a slot ([`super::slots`]). The hooks forward
//! to the provider exactly once, then hand the call to `decode` inside the panic guard.

use std::ffi::{c_int, c_void};
use std::mem::offset_of;

use super::objects;
use super::slots::{variants, Slots, SLOTS};
use crate::decode::{control, datapath};
use crate::ffi::{self, *};
use crate::runtime::guard;
use crate::sink::{self, cat, Diag};

// Words of a context slot.
const POST_SEND: usize = 0;
const POST_RECV: usize = 1;
const POST_SRQ_RECV: usize = 2;
const POLL_CQ: usize = 3;
const REQ_NOTIFY_CQ: usize = 4;
const BIND_MW: usize = 5;
const CREATE_QP_EX: usize = 6;
const CREATE_CQ_EX: usize = 7;
const CREATE_SRQ_EX: usize = 8;
const POST_SRQ_OPS: usize = 9;
const OPEN_QP: usize = 10;
const CREATE_WQ: usize = 11;
const WORDS: usize = 12;

static CTX: Slots<WORDS> = Slots::new();
static WQ: Slots<1> = Slots::new();

type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
type CreateQpExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
type PostSrqOpsFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int;
type OpenQpFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp;
type CreateWqFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq;
type WqRecvFn = unsafe extern "C" fn(*mut ibv_wq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// Where a swapped pointer lives.
#[derive(Clone, Copy)]
enum Place {
    /// Offset in `ibv_context`.
    Ops(usize),
    /// Offset in `verbs_context` (present only if the provider's `sz` covers it).
    Ext(usize),
}

/// The swapped fields: (word, where it lives, the slots' hooks), one line per field.
macro_rules! swapped {
    ($($word:ident: $place:ident $field:ident as $ty:ty,)*) => {
        [$((
            $word,
            swapped!(@place $place $field),
            variants!($field as $ty).map(|f| f as usize),
        )),*]
    };
    (@place Ops $field:ident) => {
        Place::Ops(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, $field))
    };
    (@place Ext $field:ident) => {
        Place::Ext(offset_of!(verbs_context, $field))
    };
}

fn fields() -> [(usize, Place, [usize; SLOTS]); WORDS] {
    swapped! {
        POST_SEND: Ops post_send as PostSendFn,
        POST_RECV: Ops post_recv as PostRecvFn,
        POST_SRQ_RECV: Ops post_srq_recv as PostSrqRecvFn,
        POLL_CQ: Ops poll_cq as PollCqFn,
        REQ_NOTIFY_CQ: Ops req_notify_cq as ReqNotifyFn,
        BIND_MW: Ops bind_mw as BindMwFn,
        CREATE_QP_EX: Ext create_qp_ex as CreateQpExFn,
        CREATE_CQ_EX: Ext create_cq_ex as CreateCqExFn,
        CREATE_SRQ_EX: Ext create_srq_ex as CreateSrqExFn,
        POST_SRQ_OPS: Ext post_srq_ops as PostSrqOpsFn,
        OPEN_QP: Ext open_qp as OpenQpFn,
        CREATE_WQ: Ext create_wq as CreateWqFn,
    }
}

/// Result of [`instrument`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instrumented {
    /// The context's pointers were swapped now.
    Now,
    /// They already were.
    Already,
    /// No room for its function set (or no context): left untouched.
    No,
}

static LOCK: sink::spin::SpinLock = sink::spin::SpinLock::new();

/// Swaps the data-path pointers of `ctx` (idempotent).
///
/// # Safety
/// `ctx` must be null or a live context handed out by the provider.
pub unsafe fn instrument(ctx: *mut ibv_context) -> Instrumented {
    if ctx.is_null() {
        return Instrumented::No;
    }
    let _g = LOCK.lock();
    // SAFETY: ctx is a live context (caller).
    let vctx = unsafe { ffi::verbs_context_of(ctx) };
    let fields = fields();
    let mut ptrs = [std::ptr::null_mut::<usize>(); WORDS];
    let mut orig = [0usize; WORDS];
    for (word, place, hooks) in &fields {
        let p: *mut usize = match (*place, vctx) {
            (Place::Ops(off), _) => (ctx as *mut u8).wrapping_add(off).cast(),
            // SAFETY: vctx is the live verbs_context around ctx.
            (Place::Ext(off), Some(v)) if unsafe { ffi::verbs_context_has(v, off) } => {
                (v as *mut u8).wrapping_add(off).cast()
            }
            _ => continue,
        };
        // SAFETY: p is an aligned pointer-sized field of the live context.
        let cur = unsafe { ffi::load_ptr(p) };
        if hooks.contains(&cur) {
            return Instrumented::Already;
        }
        ptrs[*word] = p;
        orig[*word] = cur;
    }
    let Some(slot) = CTX.claim(&orig) else {
        sink::diag(
            Diag::Error,
            "sigmatrace: too many distinct provider tables; a context stays untraced",
        );
        return Instrumented::No;
    };
    for (word, _, hooks) in &fields {
        if !ptrs[*word].is_null() && orig[*word] != 0 {
            // SAFETY: writable provider field (context memory is provider heap); hooks[slot]
            // has the field's prototype and forwards to orig[word] through slot `slot`.
            unsafe { ffi::store_ptr(ptrs[*word], hooks[slot]) };
        }
    }
    Instrumented::Now
}

#[inline(always)]
fn orig<F: Copy>(s: usize, word: usize) -> F {
    // SAFETY: slot s is only installed after word `word` was stored with the provider's
    // function for this very field, whose prototype is F.
    unsafe { as_fn::<F>(CTX.word(s, word)) }
}

/// `ibv_post_send`. The hot path — sends traced with TSC timestamps, one RDMA write or send
/// WR with one SGE on a connected QP — is recorded before the provider call, when its fields
/// are at hand (`datapath::place_send`, which keeps the three arguments in the thread's
/// block), and published after it once the provider accepted it: only `rc` lives across
/// the call, so this function saves no register. Every other call is recorded after the
/// provider call ([`post_send_unplaced`]). Not inside `guard::run`: the hot path makes no
/// call and cannot panic; everything else goes through functions that are `extern "C"`
/// (cannot unwind), so that no landing pad is needed here and they are tail calls.
unsafe extern "C" fn post_send<const S: usize>(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if !sink::is_fast_send() {
        // SAFETY: the program's own arguments.
        return unsafe { post_send_other::<S>(qp, wr, bad) };
    }
    // SAFETY: the program's own arguments, as the provider receives them.
    if let Err([qp, wr, bad]) = unsafe { datapath::place_send(qp, wr, bad) } {
        // SAFETY: as above (handed back).
        return unsafe { post_send_unplaced::<S>(qp as _, wr as _, bad as _) };
    }
    let real: PostSendFn = orig(S, POST_SEND);
    // Reloaded from the thread's block (where `place_send` kept them), so that the placing
    // has every scratch register.
    let [qp, wr, bad] = sink::placed_args();
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(qp as _, wr as _, bad as _) };
    if sink::publish_placed(rc) {
        return rc;
    }
    // SAFETY: the placed call's arguments are kept in the thread's block.
    unsafe { post_send_unpublished(rc) }
}

/// [`post_send`] off the hot path: sends untraced (forwarded), or timestamps that are not
/// plain TSC reads (recorded after the call).
///
/// # Safety
/// The program's arguments to `ibv_post_send`.
#[inline(never)]
unsafe extern "C" fn post_send_other<const S: usize>(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if !sink::tracing(cat::SEND) {
        let real: PostSendFn = orig(S, POST_SEND);
        // SAFETY: forwarding the program's own arguments to the provider.
        return unsafe { real(qp, wr, bad) };
    }
    // SAFETY: per caller.
    unsafe { post_send_unplaced::<S>(qp, wr, bad) }
}

/// [`post_send`] when its placed record was not published — the provider refused the WR, or
/// something was recorded meanwhile (a signal handler): the call (its arguments and time
/// kept by `sink::place_plain_send`) is recorded the ordinary way, at the placed record's
/// time.
///
/// # Safety
/// Only right after `sink::publish_placed` returned false.
#[cold]
#[inline(never)]
unsafe extern "C" fn post_send_unpublished(rc: c_int) -> c_int {
    let [qp, wr, bad] = sink::placed_args();
    let ts = sink::placed_ts();
    sink::abandon_placed();
    // SAFETY: the arguments of the interrupted call, still the program's.
    let rc = unsafe { post_send_after(qp as _, wr as _, bad as _, rc, ts) };
    // Opaque, so that the hook does not keep `rc` across this call but jumps here.
    std::hint::black_box(rc)
}

/// [`post_send`] when nothing was placed: the call is recorded after it (at the time read
/// before it).
///
/// # Safety
/// The program's arguments to `ibv_post_send`.
#[inline(never)]
unsafe extern "C" fn post_send_unplaced<const S: usize>(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let ts = sink::now();
    let real: PostSendFn = orig(S, POST_SEND);
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(qp, wr, bad) };
    // SAFETY: per caller.
    unsafe { post_send_after(qp, wr, bad, rc, ts) }
}

/// The recording of an `ibv_post_send` after its provider call returned `rc`.
///
/// # Safety
/// As `datapath::sends_list`.
#[inline(always)]
unsafe fn post_send_after(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
    rc: c_int,
    ts: u64,
) -> c_int {
    if rc != 0 {
        // SAFETY: per caller.
        return unsafe { post_send_failed(qp, wr, bad, rc, ts) };
    }
    // SAFETY: per caller.
    guard::run("post_send", || unsafe { datapath::sends_ok(qp, wr, ts) });
    0
}

/// [`post_send`] after the provider refused (out of line: the success path keeps no `rc`).
///
/// # Safety
/// As `datapath::sends_list`.
#[cold]
#[inline(never)]
unsafe fn post_send_failed(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
    rc: c_int,
    ts: u64,
) -> c_int {
    // SAFETY: per caller.
    guard::run("post_send", || unsafe {
        datapath::sends_list(qp, wr, bad, rc, ts)
    });
    rc
}

/// `ibv_post_recv` ([`post_recv_hot`]).
unsafe extern "C" fn post_recv<const S: usize>(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's arguments to `ibv_post_recv`.
    unsafe { post_recv_hot::<S, ibv_qp>(qp, wr, bad) }
}

/// `ibv_post_srq_recv` ([`post_recv_hot`]).
unsafe extern "C" fn post_srq_recv<const S: usize>(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's arguments to `ibv_post_srq_recv`.
    unsafe { post_recv_hot::<S, ibv_srq>(srq, wr, bad) }
}

/// A receive queue a post goes to: a QP's (`ibv_post_recv`) or an SRQ (`ibv_post_srq_recv`).
trait RecvQueue: Sized {
    /// The hook's name (panic reports) and the provider's function's word in the slot.
    const NAME: &'static str;
    const WORD: usize;
    /// `datapath::recv_fast` / `srq_recv_fast`.
    ///
    /// # Safety
    /// As those.
    unsafe fn fast(q: *mut Self, wr: *mut ibv_recv_wr, ts: u64) -> bool;
    /// `datapath::recvs_qp` / `recvs_srq`.
    ///
    /// # Safety
    /// As those.
    unsafe fn record(
        q: *mut Self,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
        rc: c_int,
        ts: u64,
    );
}

/// [`RecvQueue`] for a queue type: its hook's name, the provider's word, and the datapath's
/// hot and ordinary recordings of its posts.
macro_rules! recv_queue {
    ($ty:ty, $name:literal, $word:expr, $fast:path, $record:path) => {
        impl RecvQueue for $ty {
            const NAME: &'static str = $name;
            const WORD: usize = $word;
            // Inlined into the hook (the compiler's choice varies with unrelated code: left
            // to it, the hot path became a call, +6 instructions per receive post).
            #[inline(always)]
            unsafe fn fast(q: *mut Self, wr: *mut ibv_recv_wr, ts: u64) -> bool {
                // SAFETY: per caller.
                unsafe { $fast(q, wr, ts) }
            }
            unsafe fn record(
                q: *mut Self,
                wr: *mut ibv_recv_wr,
                bad: *mut *mut ibv_recv_wr,
                rc: c_int,
                ts: u64,
            ) {
                // SAFETY: per caller.
                unsafe { $record(q, wr, bad, rc, ts) }
            }
        }
    };
}

recv_queue!(
    ibv_qp,
    "post_recv",
    POST_RECV,
    datapath::recv_fast,
    datapath::recvs_qp
);
recv_queue!(
    ibv_srq,
    "post_srq_recv",
    POST_SRQ_RECV,
    datapath::srq_recv_fast,
    datapath::recvs_srq
);

type RecvFn<Q> = unsafe extern "C" fn(*mut Q, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// The receive-post hooks. The hot path — receives traced with TSC timestamps, one WR with
/// one SGE accepted — records it after the call without one (`Q::fast`); every other post
/// goes to [`post_recv_recorded`] (`extern "C"`, out of line; called, then the frame popped).
///
/// # Safety
/// The program's arguments to the post.
#[inline(always)]
unsafe fn post_recv_hot<const S: usize, Q: RecvQueue>(
    q: *mut Q,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if !sink::is_fast_recv() {
        // SAFETY: the program's own arguments.
        return unsafe { post_recv_other::<S, Q>(q, wr, bad) };
    }
    // The four values that live across the call stay in this frame, not in callee-saved
    // registers (saving and restoring four of them, and the stack alignment, cost more than
    // a store and a reload each): the asm below takes the frame's address, so the compiler
    // stores them before it and reloads after the call only what each path reads.
    let mut kept = std::mem::MaybeUninit::<Kept>::uninit();
    let frame = kept.as_mut_ptr();
    // SAFETY: frame points to this function's own `Kept`; the asm writes `ts`.
    unsafe {
        std::ptr::addr_of_mut!((*frame).q).write(q.cast());
        std::ptr::addr_of_mut!((*frame).wr).write(wr);
        std::ptr::addr_of_mut!((*frame).bad).write(bad);
    }
    let bad_arg: *mut *mut ibv_recv_wr;
    // The time before the call: a message can arrive into the buffer as soon as it returns.
    // SAFETY: reads the TSC (as `sink::tsc`) into `kept.ts` and reloads `kept.bad` into
    // rdx, which `rdtsc` overwrote; touches no other memory and no stack.
    unsafe {
        std::arch::asm!(
            "rdtsc",
            "shl rdx, 32",
            "or rax, rdx",
            "mov qword ptr [{f} + {ts}], rax",
            "mov rdx, qword ptr [{f} + {bad}]",
            f = in(reg) frame,
            ts = const offset_of!(Kept, ts),
            bad = const offset_of!(Kept, bad),
            out("rax") _,
            out("rdx") bad_arg,
            options(nostack),
        )
    };
    let real: RecvFn<Q> = orig(S, Q::WORD);
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(q, wr, bad_arg) };
    // SAFETY: every field was written above (`ts` by the asm).
    let kept = unsafe { kept.assume_init_ref() };
    if rc != 0 {
        // SAFETY: as above.
        return unsafe { post_recv_recorded(kept.q.cast::<Q>(), kept.wr, kept.bad, rc, kept.ts) };
    }
    // SAFETY: q and wr as the provider read them.
    if unsafe { Q::fast(kept.q.cast(), kept.wr, kept.ts) } {
        return 0;
    }
    // SAFETY: as above; an accepted post's record does not read `bad` (the provider set
    // nothing there).
    unsafe {
        post_recv_recorded(
            kept.q.cast::<Q>(),
            kept.wr,
            std::ptr::null_mut(),
            0,
            kept.ts,
        )
    }
}

/// What [`post_recv_hot`] keeps across the provider call (the queue as an untyped pointer,
/// so that the layout, which its asm addresses, is one).
#[repr(C)]
struct Kept {
    q: *mut c_void,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    ts: u64,
}

/// [`post_recv_hot`] off the hot path: receives untraced (forwarded), or timestamps that
/// are not plain TSC reads.
///
/// # Safety
/// The program's arguments to the post.
#[inline(never)]
unsafe extern "C" fn post_recv_other<const S: usize, Q: RecvQueue>(
    q: *mut Q,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let real: RecvFn<Q> = orig(S, Q::WORD);
    // SAFETY: the program's arguments, read as the provider reads them.
    unsafe { recv_post(Q::NAME, real, (q, wr, bad), Q::record) }
}

/// The ordinary recording of a receive post that returned `rc` (called at `ts`).
///
/// # Safety
/// As `Q::record`.
#[inline(never)]
unsafe extern "C" fn post_recv_recorded<Q: RecvQueue>(
    q: *mut Q,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    rc: c_int,
    ts: u64,
) -> c_int {
    // SAFETY: per caller.
    guard::run(Q::NAME, || unsafe { Q::record(q, wr, bad, rc, ts) });
    // Opaque, so that the hook does not keep `rc` across this call but jumps here.
    std::hint::black_box(rc)
}

/// The body of the receive-side post hooks (`ibv_post_recv`, `ibv_post_srq_recv`,
/// `ibv_post_wq_recv`, `ibv_post_srq_ops`): forwards to `real` exactly once; when receives
/// are traced, the time is taken before the provider sees the list (a message can arrive
/// into the buffer as soon as it returns) and the call is handed to `record` inside the
/// panic guard.
///
/// # Safety
/// The program's arguments to the post; `record` reads them (and the provider's result) as
/// the provider does.
#[inline(always)]
unsafe fn recv_post<O, W>(
    name: &'static str,
    real: unsafe extern "C" fn(*mut O, *mut W, *mut *mut W) -> c_int,
    (o, wr, bad): (*mut O, *mut W, *mut *mut W),
    record: unsafe fn(*mut O, *mut W, *mut *mut W, c_int, u64),
) -> c_int {
    if !sink::tracing(cat::RECV) {
        // SAFETY: forwarding the program's own arguments to the provider.
        return unsafe { real(o, wr, bad) };
    }
    let ts = sink::now();
    // SAFETY: as above.
    let rc = unsafe { real(o, wr, bad) };
    // SAFETY: per caller.
    guard::run(name, || unsafe { record(o, wr, bad, rc, ts) });
    rc
}

/// `ibv_poll_cq`. The hot path — one completion returned, completions traced with TSC
/// timestamps — records it without a call (`datapath::polled_fast`); every other poll goes
/// to [`poll_cq_recorded`] (`extern "C"`, a tail call).
unsafe extern "C" fn poll_cq<const S: usize>(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let real: PollCqFn = orig(S, POLL_CQ);
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(cq, n, wc) };
    // One compare: 1 when the hot path is on (`sink::fast::POLL`), else never `rc`.
    if sink::is_fast_poll_rc(rc) {
        // SAFETY: the provider filled wc[0] (rc is 1).
        if unsafe { datapath::polled_fast(cq, wc) } {
            return 1;
        }
        // SAFETY: as above. (1, not `rc`: nothing keeps `rc` on this path.)
        return unsafe { poll_cq_recorded(cq, wc, 1) };
    }
    // SAFETY: the provider filled wc[0..rc].
    unsafe { poll_cq_recorded(cq, wc, rc) }
}

/// The recording of an `ibv_poll_cq` that returned `rc`, off the hot path.
///
/// # Safety
/// `wc` must hold `rc` completions written by the provider.
#[inline(never)]
unsafe extern "C" fn poll_cq_recorded(cq: *mut ibv_cq, wc: *mut ibv_wc, rc: c_int) -> c_int {
    let mask = sink::mask();
    if mask & (cat::COMPLETIONS | cat::EMPTY_POLLS) != 0 {
        // SAFETY: per caller.
        guard::run("poll_cq", || unsafe { datapath::polled(cq, wc, rc, mask) });
    }
    // Opaque, so that the hook keeps no `rc` across this call but jumps here.
    std::hint::black_box(rc)
}

unsafe extern "C" fn req_notify_cq<const S: usize>(
    cq: *mut ibv_cq,
    solicited_only: c_int,
) -> c_int {
    let real: ReqNotifyFn = orig(S, REQ_NOTIFY_CQ);
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(cq, solicited_only) };
    guard::control("req_notify_cq", || {
        control::req_notify(cq, solicited_only, rc)
    });
    rc
}

unsafe extern "C" fn bind_mw<const S: usize>(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    let real: BindMwFn = orig(S, BIND_MW);
    let ts = sink::now();
    // SAFETY: forwarding the program's own arguments to the provider.
    let rc = unsafe { real(qp, mw, bind) };
    if sink::tracing(cat::SEND) {
        // SAFETY: qp, mw and bind are the program's live objects.
        guard::run("bind_mw", || unsafe {
            datapath::bind(qp, mw, bind, rc, ts)
        });
    }
    rc
}

unsafe extern "C" fn create_qp_ex<const S: usize>(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let real: CreateQpExFn = orig(S, CREATE_QP_EX);
    // SAFETY: forwarding the program's own arguments to the provider.
    let qp = unsafe { real(ctx, attr) };
    // SAFETY: attr is the program's, qp the provider's new QP (or null).
    guard::control("create_qp_ex", || unsafe {
        objects::qp_created_ex(ctx, attr, qp, 1)
    });
    qp
}

unsafe extern "C" fn create_cq_ex<const S: usize>(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let real: CreateCqExFn = orig(S, CREATE_CQ_EX);
    // SAFETY: forwarding the program's own arguments to the provider.
    let cq = unsafe { real(ctx, attr) };
    // SAFETY: attr is the program's, cq the provider's new CQ (or null).
    guard::control("create_cq_ex", || unsafe {
        objects::cq_created_ex(ctx, attr, cq, 1)
    });
    cq
}

unsafe extern "C" fn create_srq_ex<const S: usize>(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    let real: CreateSrqExFn = orig(S, CREATE_SRQ_EX);
    // SAFETY: forwarding the program's own arguments to the provider.
    let srq = unsafe { real(ctx, attr) };
    // SAFETY: attr is the program's, srq the provider's new SRQ (or null).
    guard::control("create_srq_ex", || unsafe {
        control::srq_created_ex(attr, srq)
    });
    srq
}

unsafe extern "C" fn post_srq_ops<const S: usize>(
    srq: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad: *mut *mut ibv_ops_wr,
) -> c_int {
    let real = orig(S, POST_SRQ_OPS);
    // SAFETY: the program's arguments to `ibv_post_srq_ops`.
    unsafe { recv_post("post_srq_ops", real, (srq, op, bad), datapath::srq_ops) }
}

unsafe extern "C" fn open_qp<const S: usize>(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    let real: OpenQpFn = orig(S, OPEN_QP);
    // SAFETY: forwarding the program's own arguments to the provider.
    let qp = unsafe { real(ctx, attr) };
    // SAFETY: qp is the provider's QP (or null).
    guard::control("open_qp", || unsafe { control::qp_opened(ctx, qp) });
    qp
}

unsafe extern "C" fn create_wq<const S: usize>(
    ctx: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    let real: CreateWqFn = orig(S, CREATE_WQ);
    // SAFETY: forwarding the program's own arguments to the provider.
    let wq = unsafe { real(ctx, attr) };
    // SAFETY: wq is the provider's new WQ (or null).
    guard::control("create_wq", || unsafe { instrument_wq(wq) });
    wq
}

/// Swaps `wq->post_recv` (the inline `ibv_post_wq_recv`).
///
/// # Safety
/// `wq` must be null or a live WQ.
unsafe fn instrument_wq(wq: *mut ibv_wq) {
    if wq.is_null() {
        return;
    }
    let hooks = variants!(wq_recv as WqRecvFn).map(|f| f as usize);
    // SAFETY: post_recv is a pointer-sized field of the live WQ.
    let field = unsafe { std::ptr::addr_of_mut!((*wq).post_recv) };
    // SAFETY: as above.
    let cur = unsafe { ffi::load_ptr(field) };
    if cur == 0 || hooks.contains(&cur) {
        return;
    }
    if let Some(s) = WQ.claim(&[cur]) {
        // SAFETY: writable provider field; hooks[s] forwards to cur.
        unsafe { ffi::store_ptr(field, hooks[s]) };
    }
}

unsafe extern "C" fn wq_recv<const S: usize>(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: slot S word 0 is the provider's post_recv of this WQ kind.
    let real: WqRecvFn = unsafe { as_fn(WQ.word(S, 0)) };
    // SAFETY: the program's arguments to `ibv_post_wq_recv`.
    unsafe { recv_post("wq_recv", real, (wq, wr, bad), datapath::recvs_wq) }
}

/// Type-erased view used by the fake-device benchmark and the C API.
pub fn instrument_raw(ctx: *mut c_void) -> Instrumented {
    // SAFETY: the C API documents that ctx must be a live ibv_context.
    unsafe { instrument(ctx.cast()) }
}

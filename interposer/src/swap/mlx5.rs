//! `mlx5dv_wr_*`: the mlx5 post-API extensions, pointers in `struct mlx5dv_qp_ex` (from
//! `mlx5dv_qp_ex_from_ibv_qp_ex`). They extend the `ibv_wr_*` batch of the same QP, so their
//! records join that batch (`source` = `mlx5dv_wr`). Swapped: `wr_set_dc_addr` (the DC
//! target, like `wr_set_ud_addr`: `remote_addr` = AH, `rkey` = DCT number, `compare_add` =
//! DC key) and the two oldest UMR builders, recorded with opcode `IBV_WR_DRIVER1` and `imm` =
//! 1 (`wr_mr_interleaved`) or 2 (`wr_mr_list`). Newer members are left alone: their presence
//! depends on the provider's version and writing past its struct would corrupt the QP.

use std::mem::offset_of;

use sigmatrace_schemas::post_source;

use super::qp_ex::{begin_from, set, stamp};
use super::slots::{variants, Slots, SLOTS};
use crate::decode::extended as dx;
use crate::ffi::{self, *};
use crate::record::wr_builder;
use crate::sink::{self, Diag};

const DC_ADDR: usize = 0;
const MR_INTERLEAVED: usize = 1;
const MR_LIST: usize = 2;
/// Not a function: `ibv_qp_ex` address minus `mlx5dv_qp_ex` address (the same for every QP
/// of a provider).
const QPX_DELTA: usize = 3;
const WORDS: usize = 4;

static MQP: Slots<WORDS> = Slots::new();

type Mqp = *mut mlx5dv_qp_ex;
type DcAddrFn = unsafe extern "C" fn(Mqp, *mut ibv_ah, u32, u64);
type MrInterleavedFn =
    unsafe extern "C" fn(Mqp, *mut mlx5dv_mkey, u32, u32, u16, *mut mlx5dv_mr_interleaved);
type MrListFn = unsafe extern "C" fn(Mqp, *mut mlx5dv_mkey, u32, u16, *mut ibv_sge);

fn fields() -> [(usize, usize, [usize; SLOTS]); 3] {
    [
        (
            DC_ADDR,
            offset_of!(mlx5dv_qp_ex, wr_set_dc_addr),
            variants!(dc_addr as DcAddrFn).map(|f| f as usize),
        ),
        (
            MR_INTERLEAVED,
            offset_of!(mlx5dv_qp_ex, wr_mr_interleaved),
            variants!(mr_interleaved as MrInterleavedFn).map(|f| f as usize),
        ),
        (
            MR_LIST,
            offset_of!(mlx5dv_qp_ex, wr_mr_list),
            variants!(mr_list as MrListFn).map(|f| f as usize),
        ),
    ]
}

static LOCK: sink::spin::SpinLock = sink::spin::SpinLock::new();

/// Swaps the supported `mlx5dv_wr_*` pointers of `mqp`, the mlx5 view of `qpx`.
///
/// # Safety
/// Both must be null or live views of the same QP returned by the provider.
pub unsafe fn instrument(qpx: *mut ibv_qp_ex, mqp: Mqp) -> bool {
    if qpx.is_null() || mqp.is_null() {
        return false;
    }
    let _g = LOCK.lock();
    let fields = fields();
    let mut words = [0usize; WORDS];
    for (w, off, hooks) in &fields {
        // SAFETY: pointer-sized fields of the live mlx5dv_qp_ex.
        let cur = unsafe { ffi::load_ptr((mqp as *const u8).add(*off) as *const usize) };
        if hooks.contains(&cur) {
            return true;
        }
        words[*w] = cur;
    }
    words[QPX_DELTA] = (qpx as usize).wrapping_sub(mqp as usize);
    let Some(s) = MQP.claim(&words) else {
        sink::diag(Diag::Error, "sigmatrace: too many distinct mlx5dv_qp_ex tables; a QP's mlx5dv_wr_* calls stay untraced");
        return false;
    };
    for (w, off, hooks) in &fields {
        if words[*w] != 0 {
            // SAFETY: writable provider field; hooks[s] forwards through slot s.
            unsafe { ffi::store_ptr((mqp as *mut u8).add(*off) as *mut usize, hooks[s]) };
        }
    }
    true
}

#[inline(always)]
fn orig<F: Copy>(s: usize, w: usize) -> F {
    // SAFETY: slot s word w is the provider's function for that member, prototype F.
    unsafe { as_fn::<F>(MQP.word(s, w)) }
}

fn qpx_of<const S: usize>(mqp: Mqp) -> *mut ibv_qp_ex {
    (mqp as usize).wrapping_add(MQP.word(S, QPX_DELTA)) as *mut ibv_qp_ex
}

unsafe extern "C" fn dc_addr<const S: usize>(mqp: Mqp, ah: *mut ibv_ah, dctn: u32, key: u64) {
    // SAFETY: forwarding the program's arguments to the provider.
    unsafe { orig::<DcAddrFn>(S, DC_ADDR)(mqp, ah, dctn, key) };
    let qp = qpx_of::<S>(mqp) as u64;
    set(|| wr_builder::set_address(qp, ah as u64, dctn, key));
}

unsafe extern "C" fn mr_interleaved<const S: usize>(
    mqp: Mqp,
    mkey: *mut mlx5dv_mkey,
    access: u32,
    repeat: u32,
    n: u16,
    data: *mut mlx5dv_mr_interleaved,
) {
    let ts = stamp();
    // SAFETY: forwarding the program's arguments to the provider.
    unsafe { orig::<MrInterleavedFn>(S, MR_INTERLEAVED)(mqp, mkey, access, repeat, n, data) };
    begin_from(
        qpx_of::<S>(mqp),
        ts,
        IBV_WR_DRIVER1,
        post_source::MLX5DV_WR,
        |w| (w.imm, w.num_sge) = (1, n),
    );
}

unsafe extern "C" fn mr_list<const S: usize>(
    mqp: Mqp,
    mkey: *mut mlx5dv_mkey,
    access: u32,
    n: u16,
    sge: *mut ibv_sge,
) {
    let ts = stamp();
    // SAFETY: forwarding the program's arguments to the provider.
    unsafe { orig::<MrListFn>(S, MR_LIST)(mqp, mkey, access, n, sge) };
    // SAFETY: the program passed n SGEs (or null).
    let total = unsafe { dx::sge_sum(sge, n as usize) };
    begin_from(
        qpx_of::<S>(mqp),
        ts,
        IBV_WR_DRIVER1,
        post_source::MLX5DV_WR,
        |w| (w.imm, w.num_sge, w.bytes) = (2, n, total),
    );
}

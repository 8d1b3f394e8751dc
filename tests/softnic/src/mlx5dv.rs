//! mlx5 direct-verbs entry points (exported here as `sv_mlx5dv_*`; softnic's libmlx5.so.1 holds
//! the versioned names). Not implemented yet: each fails with EOPNOTSUPP and
//! mlx5dv_is_supported reports false, so programs take their plain-verbs paths.

use crate::ctx::set_errno;
use crate::ffi::*;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

fn unsup_ptr<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    null_mut()
}

macro_rules! unsup_int {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            $(let _ = $a;)*
            libc::EOPNOTSUPP
        }
    )*};
}
macro_rules! unsup_ptr {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> *mut c_void {
            $(let _ = $a;)*
            unsup_ptr()
        }
    )*};
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_is_supported(_dev: *mut ibv_device) -> bool {
    false
}

unsup_int! {
    sv_mlx5dv_query_device(ctx: *mut ibv_context, attr: *mut c_void);
    sv_mlx5dv_init_obj(obj: *mut c_void, mask: u64);
    sv_mlx5dv_set_context_attr(ctx: *mut ibv_context, t: u32, attr: *mut c_void);
    sv_mlx5dv_get_clock_info(ctx: *mut ibv_context, info: *mut c_void);
    sv_mlx5dv_devx_general_cmd(ctx: *mut ibv_context, i: *const c_void, il: usize, o: *mut c_void, ol: usize);
    sv_mlx5dv_devx_obj_destroy(obj: *mut c_void);
    sv_mlx5dv_devx_obj_modify(obj: *mut c_void, i: *const c_void, il: usize, o: *mut c_void, ol: usize);
    sv_mlx5dv_devx_obj_query(obj: *mut c_void, i: *const c_void, il: usize, o: *mut c_void, ol: usize);
    sv_mlx5dv_devx_query_eqn(ctx: *mut ibv_context, vector: u32, eqn: *mut u32);
    sv_mlx5dv_devx_umem_dereg(umem: *mut c_void);
    sv_mlx5dv_destroy_mkey(mkey: *mut c_void);
    sv_mlx5dv_devx_subscribe_devx_event(ch: *mut c_void, obj: *mut c_void, n: u16, list: *mut u16, cookie: u64);
    sv__mlx5dv_query_port(ctx: *mut ibv_context, port: u32, info: *mut c_void, len: usize);
    sv_mlx5dv_crypto_login(ctx: *mut ibv_context, attr: *mut c_void);
    sv_mlx5dv_dek_destroy(dek: *mut c_void);
}

unsup_ptr! {
    sv_mlx5dv_create_cq(ctx: *mut ibv_context, a: *mut c_void, b: *mut c_void);
    sv_mlx5dv_create_qp(ctx: *mut ibv_context, a: *mut c_void, b: *mut c_void);
    sv_mlx5dv_devx_alloc_uar(ctx: *mut ibv_context, flags: u32);
    sv_mlx5dv_devx_obj_create(ctx: *mut ibv_context, i: *const c_void, il: usize, o: *mut c_void, ol: usize);
    sv_mlx5dv_devx_umem_reg(ctx: *mut ibv_context, addr: *mut c_void, size: usize, access: u32);
    sv_mlx5dv_devx_umem_reg_ex(ctx: *mut ibv_context, attr: *mut c_void);
    sv_mlx5dv_open_device(dev: *mut ibv_device, attr: *mut c_void);
    sv_mlx5dv_qp_ex_from_ibv_qp_ex(qp: *mut ibv_qp_ex);
    sv_mlx5dv_create_mkey(attr: *mut c_void);
    sv_mlx5dv_devx_create_event_channel(ctx: *mut ibv_context, flags: u32);
    sv_mlx5dv_dek_create(ctx: *mut ibv_context, attr: *mut c_void);
}

#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_free_uar(_uar: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_destroy_event_channel(_ch: *mut c_void) {}
#[no_mangle]
pub unsafe extern "C" fn sv_mlx5dv_devx_get_event(
    _ch: *mut c_void,
    _d: *mut c_void,
    _l: usize,
) -> isize {
    -(libc::EOPNOTSUPP as isize)
}

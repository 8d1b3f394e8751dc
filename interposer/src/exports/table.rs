//! THE hook table: every exported entry point the interposer wraps, one line each.
//!
//! A line is `name @ Lib "VERSION" (args) -> ret => [pre handler,] post handler;`. From it
//! [`hook_table!`] generates the exported C shim (resolves the real function — the next
//! definition, or the one a `dlsym`/`dlvsym` lookup found — calls it exactly once, and runs
//! the handlers inside a panic guard), and the [`ENTRIES`] list the `dlsym`/`dlvsym`
//! interposer consults: any name in this table that a program looks up in a library handle
//! is redirected to our shim. Adding a libmlx5 (`Mlx5 "MLX5_1.x"`) or libcuda (`Cuda ""`)
//! function is one line here plus its handler.
//!
//! Handlers live below: `swap::objects` for calls that hand out objects whose pointers are
//! swapped, `decode::*` for the others, `exports::proc_address` for `cuGetProcAddress`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::entry::{AltReals, Entry, Fallback, Lib};
use super::proc_address as pa;
use crate::decode::control as c;
use crate::decode::cuda::{self as cu, CuLaunchConfig};
use crate::decode::dv;
use crate::ffi::*;
use crate::runtime::guard;
use crate::swap::objects as o;

macro_rules! hook_table {
    ( $( $name:ident @ $lib:ident $ver:literal ( $($a:ident : $t:ty),* $(,)? ) -> $r:ty
         => $( pre $pre:path, )? post $post:path ; )* ) => {
        $( hook_table!(@one $name $lib $ver ($($a : $t),*) -> $r => $( pre $pre, )? post $post); )*

        /// Every entry of the table.
        pub static ENTRIES: &[&Entry] = &[ $( &$name::ENTRY ),* ];
    };

    // CUDA entry points: besides the exported shim, ALT_WRAPPERS copies bound to other real
    // addresses the driver hands out under the same name (`cuGetProcAddress`).
    (@one $name:ident Cuda $ver:literal ($($a:ident : $t:ty),*) -> $r:ty => $( pre $pre:path, )? post $post:path) => {
        #[allow(non_snake_case)]
        pub mod $name {
            use super::*;
            pub static ENTRY: Entry = Entry::new(
                concat!(stringify!($name), "\0"), concat!($ver, "\0"),
                Lib::Cuda, super::$name as *const ()).with_alts(&ALTS);
            pub static ALTS: AltReals = AltReals::new([
                alt::<0> as *const (), alt::<1> as *const (),
                alt::<2> as *const (), alt::<3> as *const ()]);

            #[doc = concat!("Alternative wrapper of `", stringify!($name), "`.\n\n# Safety\nThe real function's contract.")]
            #[allow(unused_unsafe, clippy::unused_unit)]
            pub unsafe extern "C" fn alt<const S: usize>($($a: $t),*) -> $r {
                let Some(real) = ALTS.real::<unsafe extern "C" fn($($t),*) -> $r>(S) else { return Fallback::fallback() };
                hook_table!(@body $name real ($($a),*) $( pre $pre, )? post $post)
            }
        }
        hook_table!(@shim $name ($($a : $t),*) -> $r => $( pre $pre, )? post $post);
    };

    (@one $name:ident $lib:ident $ver:literal ($($a:ident : $t:ty),*) -> $r:ty => $( pre $pre:path, )? post $post:path) => {
        #[allow(non_snake_case)]
        pub mod $name {
            pub static ENTRY: super::Entry = super::Entry::new(
                concat!(stringify!($name), "\0"), concat!($ver, "\0"),
                super::Lib::$lib, super::$name as *const ());
        }
        hook_table!(@shim $name ($($a : $t),*) -> $r => $( pre $pre, )? post $post);
    };

    (@shim $name:ident ($($a:ident : $t:ty),*) -> $r:ty => $( pre $pre:path, )? post $post:path) => {
        #[doc = concat!("Exported hook of `", stringify!($name), "`.\n\n# Safety\nThe real function's contract.")]
        #[cfg_attr(not(test), no_mangle)]
        #[allow(unused_unsafe, clippy::unused_unit, non_snake_case)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let Some(real) = $name::ENTRY.real::<unsafe extern "C" fn($($t),*) -> $r>() else { return Fallback::fallback() };
            hook_table!(@body $name real ($($a),*) $( pre $pre, )? post $post)
        }
    };

    (@body $name:ident $real:ident ($($a:ident),*) post $post:path) => {{
        // SAFETY: `real` is this symbol's real definition; the program's arguments pass through.
        let ret = unsafe { $real($($a),*) };
        // SAFETY: handlers get the arguments and result of the completed real call.
        guard::control(stringify!($name), || unsafe { $post($($a,)* ret) });
        ret
    }};

    (@body $name:ident $real:ident ($($a:ident),*) pre $pre:path, post $post:path) => {{
        // SAFETY: the pre handler reads the program's arguments before the real call.
        let st = guard::control(stringify!($name), || unsafe { $pre($($a),*) });
        // SAFETY: as above.
        let ret = unsafe { $real($($a),*) };
        // SAFETY: handlers get the arguments and result of the completed real call.
        st.map(|st| guard::control(stringify!($name), || unsafe { $post(st, $($a,)* ret) }));
        ret
    }};
}

hook_table! {
    // libibverbs: devices
    ibv_get_device_list @ Ibverbs "IBVERBS_1.1" (num: *mut c_int) -> *mut *mut ibv_device => post c::ibv_get_device_list;
    ibv_open_device @ Ibverbs "IBVERBS_1.1" (dev: *mut ibv_device) -> *mut ibv_context => post o::ibv_open_device;
    ibv_import_device @ Ibverbs "IBVERBS_1.10" (fd: c_int) -> *mut ibv_context => post o::ibv_import_device;
    ibv_close_device @ Ibverbs "IBVERBS_1.1" (ctx: *mut ibv_context) -> c_int => post c::ibv_close_device;
    // protection domains and memory regions
    ibv_alloc_pd @ Ibverbs "IBVERBS_1.1" (ctx: *mut ibv_context) -> *mut ibv_pd => post o::ibv_alloc_pd;
    ibv_dealloc_pd @ Ibverbs "IBVERBS_1.1" (pd: *mut ibv_pd) -> c_int => post c::ibv_dealloc_pd;
    ibv_reg_mr @ Ibverbs "IBVERBS_1.1" (pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr => post c::ibv_reg_mr;
    ibv_reg_mr_iova @ Ibverbs "IBVERBS_1.7" (pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, access: c_int) -> *mut ibv_mr => post c::ibv_reg_mr_iova;
    ibv_reg_mr_iova2 @ Ibverbs "IBVERBS_1.8" (pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, access: c_uint) -> *mut ibv_mr => post c::ibv_reg_mr_iova2;
    ibv_reg_dmabuf_mr @ Ibverbs "IBVERBS_1.12" (pd: *mut ibv_pd, off: u64, len: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr => post c::ibv_reg_dmabuf_mr;
    ibv_dereg_mr @ Ibverbs "IBVERBS_1.1" (mr: *mut ibv_mr) -> c_int => post c::ibv_dereg_mr;
    // completion channels, CQs, events
    ibv_create_comp_channel @ Ibverbs "IBVERBS_1.0" (ctx: *mut ibv_context) -> *mut ibv_comp_channel => post c::ibv_create_comp_channel;
    ibv_destroy_comp_channel @ Ibverbs "IBVERBS_1.0" (ch: *mut ibv_comp_channel) -> c_int => post c::ibv_destroy_comp_channel;
    ibv_get_cq_event @ Ibverbs "IBVERBS_1.1" (ch: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_ctx: *mut *mut c_void) -> c_int => post c::ibv_get_cq_event;
    ibv_ack_cq_events @ Ibverbs "IBVERBS_1.1" (cq: *mut ibv_cq, n: c_uint) -> () => post c::ibv_ack_cq_events;
    ibv_create_cq @ Ibverbs "IBVERBS_1.1" (ctx: *mut ibv_context, cqe: c_int, cq_ctx: *mut c_void, ch: *mut ibv_comp_channel, vector: c_int) -> *mut ibv_cq => post o::ibv_create_cq;
    ibv_destroy_cq @ Ibverbs "IBVERBS_1.1" (cq: *mut ibv_cq) -> c_int => pre c::destroy_cq_pre, post c::ibv_destroy_cq;
    ibv_get_async_event @ Ibverbs "IBVERBS_1.1" (ctx: *mut ibv_context, ev: *mut ibv_async_event) -> c_int => post c::ibv_get_async_event;
    // SRQs, QPs, AHs
    ibv_create_srq @ Ibverbs "IBVERBS_1.1" (pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq => post c::ibv_create_srq;
    ibv_destroy_srq @ Ibverbs "IBVERBS_1.1" (srq: *mut ibv_srq) -> c_int => post c::ibv_destroy_srq;
    ibv_create_qp @ Ibverbs "IBVERBS_1.1" (pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp => post o::ibv_create_qp;
    ibv_modify_qp @ Ibverbs "IBVERBS_1.1" (qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int => post c::ibv_modify_qp;
    ibv_destroy_qp @ Ibverbs "IBVERBS_1.1" (qp: *mut ibv_qp) -> c_int => pre c::destroy_qp_pre, post c::ibv_destroy_qp;
    ibv_qp_to_qp_ex @ Ibverbs "IBVERBS_1.6" (qp: *mut ibv_qp) -> *mut ibv_qp_ex => post o::ibv_qp_to_qp_ex;
    ibv_create_ah @ Ibverbs "IBVERBS_1.1" (pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah => post c::ibv_create_ah;
    ibv_destroy_ah @ Ibverbs "IBVERBS_1.1" (ah: *mut ibv_ah) -> c_int => post c::ibv_destroy_ah;
    // libmlx5
    mlx5dv_create_qp @ Mlx5 "MLX5_1.3" (ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex, dv: *mut c_void) -> *mut ibv_qp => post o::mlx5dv_create_qp;
    mlx5dv_create_cq @ Mlx5 "MLX5_1.1" (ctx: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex, dv: *mut c_void) -> *mut ibv_cq_ex => post o::mlx5dv_create_cq;
    mlx5dv_qp_ex_from_ibv_qp_ex @ Mlx5 "MLX5_1.10" (qp: *mut ibv_qp_ex) -> *mut mlx5dv_qp_ex => post o::mlx5dv_qp_ex_from_ibv_qp_ex;
    // libmlx5: queue discovery (rings the program writes itself)
    mlx5dv_init_obj @ Mlx5 "MLX5_1.2" (obj: *mut mlx5dv_obj, obj_type: u64) -> c_int => post dv::mlx5dv_init_obj;
    mlx5dv_devx_umem_reg @ Mlx5 "MLX5_1.7" (ctx: *mut ibv_context, addr: *mut c_void, size: usize, access: u32) -> *mut mlx5dv_devx_umem => post dv::mlx5dv_devx_umem_reg;
    mlx5dv_devx_umem_reg_ex @ Mlx5 "MLX5_1.19" (ctx: *mut ibv_context, umem_in: *mut mlx5dv_devx_umem_in) -> *mut mlx5dv_devx_umem => post dv::mlx5dv_devx_umem_reg_ex;
    mlx5dv_devx_umem_dereg @ Mlx5 "MLX5_1.7" (umem: *mut mlx5dv_devx_umem) -> c_int => pre dv::umem_dereg_pre, post dv::mlx5dv_devx_umem_dereg;
    mlx5dv_devx_obj_create @ Mlx5 "MLX5_1.7" (ctx: *mut ibv_context, cmd_in: *const c_void, inlen: usize, out: *mut c_void, outlen: usize) -> *mut c_void => post o::mlx5dv_devx_obj_create;
    mlx5dv_devx_obj_modify @ Mlx5 "MLX5_1.7" (obj: *mut c_void, cmd_in: *const c_void, inlen: usize, out: *mut c_void, outlen: usize) -> c_int => post dv::mlx5dv_devx_obj_modify;
    mlx5dv_devx_obj_destroy @ Mlx5 "MLX5_1.7" (obj: *mut c_void) -> c_int => pre dv::obj_destroy_pre, post dv::mlx5dv_devx_obj_destroy;
    mlx5dv_devx_alloc_uar @ Mlx5 "MLX5_1.7" (ctx: *mut ibv_context, flags: u32) -> *mut mlx5dv_devx_uar => post dv::mlx5dv_devx_alloc_uar;
    // CUDA driver: entry points fetched with cuGetProcAddress (the runtime's way) are wrapped
    // too; cuGetExportTable is deliberately absent (forwarded untouched).
    cuGetProcAddress @ Cuda "" (symbol: *const c_char, pfn: *mut *mut c_void, ver: c_int, flags: u64) -> c_int => post pa::cu_get_proc_address;
    cuGetProcAddress_v2 @ Cuda "" (symbol: *const c_char, pfn: *mut *mut c_void, ver: c_int, flags: u64, status: *mut c_int) -> c_int => post pa::cu_get_proc_address_v2;
    cuMemAlloc_v2 @ Cuda "" (dptr: *mut u64, size: usize) -> c_int => post cu::cu_mem_alloc;
    cuMemFree_v2 @ Cuda "" (dptr: u64) -> c_int => pre cu::cu_mem_free_pre, post cu::cu_mem_free;
    cuMemHostAlloc @ Cuda "" (pp: *mut *mut c_void, size: usize, flags: c_uint) -> c_int => post cu::cu_mem_host_alloc;
    cuMemFreeHost @ Cuda "" (p: *mut c_void) -> c_int => pre cu::cu_mem_free_host_pre, post cu::cu_mem_free_host;
    cuMemHostRegister_v2 @ Cuda "" (p: *mut c_void, size: usize, flags: c_uint) -> c_int => post cu::cu_mem_host_register;
    cuMemHostUnregister @ Cuda "" (p: *mut c_void) -> c_int => pre cu::cu_mem_host_unregister_pre, post cu::cu_mem_host_unregister;
    cuMemHostGetDevicePointer_v2 @ Cuda "" (dptr: *mut u64, p: *mut c_void, flags: c_uint) -> c_int => post cu::cu_mem_host_get_device_pointer;
    cuMemHostGetDevicePointer @ Cuda "" (dptr: *mut u32, p: *mut c_void, flags: c_uint) -> c_int => post cu::cu_mem_host_get_device_pointer_v1;
    cuModuleGetFunction @ Cuda "" (f: *mut u64, module: u64, name: *const c_char) -> c_int => post cu::cu_module_get_function;
    cuLaunchKernel @ Cuda "" (f: u64, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: u64, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => pre cu::launch_pre::<false>, post cu::launch;
    cuLaunchKernel_ptsz @ Cuda "" (f: u64, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: u64, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => pre cu::launch_pre::<true>, post cu::launch;
    cuLaunchKernelEx @ Cuda "" (cfg: *const CuLaunchConfig, f: u64, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => pre cu::launch_ex_pre::<false>, post cu::launch_ex;
    cuLaunchKernelEx_ptsz @ Cuda "" (cfg: *const CuLaunchConfig, f: u64, params: *mut *mut c_void, extra: *mut *mut c_void) -> c_int => pre cu::launch_ex_pre::<true>, post cu::launch_ex;
    cuLaunchCooperativeKernel @ Cuda "" (f: u64, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: u64, params: *mut *mut c_void) -> c_int => pre cu::coop_pre::<false>, post cu::coop;
    cuLaunchCooperativeKernel_ptsz @ Cuda "" (f: u64, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shm: c_uint, stream: u64, params: *mut *mut c_void) -> c_int => pre cu::coop_pre::<true>, post cu::coop;
    cuGraphLaunch @ Cuda "" (exec: u64, stream: u64) -> c_int => pre cu::graph_launch_pre::<false>, post cu::graph_launch;
    cuGraphLaunch_ptsz @ Cuda "" (exec: u64, stream: u64) -> c_int => pre cu::graph_launch_pre::<true>, post cu::graph_launch;
}

/// The entry for `name`, and for `dlvsym` lookups only if `version` is the table's version.
pub fn find(name: &[u8], version: Option<&[u8]>) -> Option<&'static Entry> {
    if !(name.starts_with(b"ibv_") || name.starts_with(b"mlx5dv_") || name.starts_with(b"cu")) {
        return None;
    }
    ENTRIES.iter().copied().find(|e| {
        e.name().to_bytes() == name
            && match version {
                None => true,
                Some(v) => e.version().is_some_and(|ev| ev.to_bytes() == v),
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_unique_and_findable() {
        for e in ENTRIES {
            let name = e.name().to_bytes();
            let found = find(name, None).expect("findable by name");
            assert!(std::ptr::eq(found, *e), "{:?} listed twice", e.name());
            match e.lib {
                Lib::Cuda => assert!(e.version().is_none(), "CUDA exports are unversioned"),
                _ => {
                    let v = e.version().expect("ibverbs/mlx5 entries are versioned");
                    assert!(find(name, Some(v.to_bytes())).is_some());
                }
            }
            assert_ne!(e.shim(), 0);
        }
    }

    #[test]
    fn only_the_tables_version_is_redirected() {
        assert!(find(b"ibv_reg_mr", Some(b"IBVERBS_1.1")).is_some());
        assert!(
            find(b"ibv_reg_mr", Some(b"IBVERBS_1.0")).is_none(),
            "1.0 compat ABI differs"
        );
        assert!(find(b"ibv_reg_mr_iova2", Some(b"IBVERBS_1.8")).is_some());
        assert!(find(b"mlx5dv_create_qp", Some(b"MLX5_1.3")).is_some());
        assert!(
            find(b"ibv_post_send", None).is_none(),
            "inline verbs are not symbols"
        );
        assert!(find(b"malloc", None).is_none());
        assert!(find(b"mlx5dv_devx_umem_reg_ex", Some(b"MLX5_1.19")).is_some());
        assert!(find(b"cuMemAlloc_v2", None).is_some());
        assert!(
            find(b"cuGetExportTable", None).is_none(),
            "private tables are forwarded untouched"
        );
    }

    #[test]
    fn cuda_alternatives_bind_distinct_reals_once() {
        let e = &cuMemAlloc_v2::ENTRY;
        let (a, b) = (0x1000usize, 0x2000usize);
        // The entry's own real is unknown in a unit test (no libcuda): the first address
        // handed out is adopted as the real one and maps to the exported shim.
        assert_eq!(e.wrap(a), Some(e.shim()));
        let wb = e.wrap(b).expect("an alternative");
        assert_ne!(wb, e.shim());
        assert!(e.is_wrapper(wb) && e.is_wrapper(e.shim()));
        assert_eq!(e.wrap(b), Some(wb), "same address, same wrapper");
        assert_eq!(e.wrap(wb), Some(wb), "a wrapper is never wrapped again");
        for k in 0..crate::exports::entry::ALT_WRAPPERS - 1 {
            assert!(e.wrap(0x3000 + k).is_some());
        }
        assert_eq!(
            e.wrap(0x9000),
            None,
            "all alternatives taken: left unwrapped"
        );
    }
}

//! The bindings match the installed headers as the system C compiler lays them out: sizes of
//! the structs the interposer reads or the workloads pass, and offsets of the fields they
//! touch (the `verbs_context` ops the interposer swaps, the `ibv_qp_ex` / `mlx5dv_qp_ex` /
//! `ibv_cq_ex` function tables, the `mlx5dv_init_obj` and devx outputs). A C program built
//! from `wrapper.h` prints the same list; any difference fails.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

// Through `rdma_cm`, which re-exports the root: one glob sees both generations.
use verbs_sys::rdma_cm::*;

/// `(struct, size, [(field, offset)])` for each listed struct and field.
macro_rules! layouts {
    ($( $ty:ident { $($field:ident),* $(,)? } )*) => {
        vec![$( (
            stringify!($ty),
            size_of::<$ty>(),
            vec![$( (stringify!($field), offset_of!($ty, $field)) ),*],
        ) ),*]
    };
}

type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

fn rust_layouts() -> Vec<Layout> {
    layouts! {
        ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        verbs_context {
            query_port, advise_mr, alloc_null_mr, reg_dm_mr, alloc_dm, create_cq_ex,
            query_device_ex, open_qp, create_qp_ex, sz, context
        }
        ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type }
        ibv_qp_ex {
            qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
            wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
            wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
            wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
            wr_complete, wr_abort, wr_atomic_write
        }
        ibv_cq { context, channel, cq_context, handle, cqe, comp_events_completed }
        ibv_cq_ex {
            context, cqe, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
            read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num,
            read_src_qp, read_wc_flags, read_completion_ts, read_completion_wallclock_ns
        }
        ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, wr, qp_type }
        ibv_recv_wr { wr_id, next, sg_list, num_sge }
        ibv_sge { addr, length, lkey }
        ibv_wc { wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags }
        ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        ibv_qp_attr { qp_state, path_mtu, rq_psn, sq_psn, dest_qp_num, ah_attr, port_num }
        ibv_qp_init_attr_ex { qp_type, comp_mask, pd, send_ops_flags }
        mlx5dv_qp_ex { comp_mask, wr_set_dc_addr, wr_mr_interleaved, wr_mr_list, wr_memcpy }
        mlx5dv_qp { dbrec, sq, rq, bf, comp_mask, uar_mmap_offset, tirn, tisn, rqn, sqn }
        mlx5dv_cq { buf, dbrec, cqe_cnt, cqe_size, cq_uar, cqn, comp_mask }
        mlx5dv_obj { qp, cq, srq, rwq, dm, ah, pd }
        mlx5dv_devx_uar { reg_addr, base_addr, page_id, mmap_off, comp_mask }
        mlx5dv_devx_umem { umem_id }
        mlx5dv_devx_umem_in { addr, size, access, pgsz_bitmap, comp_mask, dmabuf_fd }
        ibv_port_attr { state, max_mtu, active_mtu, gid_tbl_len, lid, link_layer, flags }
        rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type
        }
        rdma_cm_event { id, listen_id, event, status, param }
        rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth,
            flow_control, retry_count, rnr_retry_count, srq, qp_num
        }
        rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len,
            ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len,
            ai_route, ai_connect_len, ai_connect, ai_next
        }
    }
}

/// The same list, laid out by the C compiler.
fn c_layouts(list: &[Layout]) -> BTreeMap<String, usize> {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"rdma_cm.h\"\nint main(void) {\n",
    );
    for (ty, _, fields) in list {
        src += &format!("  printf(\"{ty} %zu\\n\", sizeof(struct {ty}));\n");
        for (f, _) in fields {
            src += &format!("  printf(\"{ty}.{f} %zu\\n\", offsetof(struct {ty}, {f}));\n");
        }
    }
    src += "  return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("verbs-sys-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .arg(format!("-I{}", env!("CARGO_MANIFEST_DIR")))
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "compiling {}", c.display());
    let out = Command::new(&exe).output().expect("run layout");
    std::fs::remove_dir_all(&dir).ok();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn bindings_match_the_c_compilers_layout() {
    let list = rust_layouts();
    let c = c_layouts(&list);
    let mut checked = 0;
    for (ty, size, fields) in &list {
        assert_eq!(c[*ty], *size, "sizeof(struct {ty})");
        for (f, off) in fields {
            assert_eq!(c[&format!("{ty}.{f}")], *off, "offsetof(struct {ty}, {f})");
            checked += 1;
        }
    }
    assert_eq!(c.len(), list.len() + checked);
}

/// The extended context sits in front of `ibv_context`: the interposer reaches the ops it
/// swaps at negative offsets from the `ibv_context` pointer, so `context` must be last.
#[test]
fn verbs_context_ends_with_the_ibv_context() {
    assert_eq!(
        offset_of!(verbs_context, context) + size_of::<ibv_context>(),
        size_of::<verbs_context>()
    );
}

//! How a completion reaches the program's `ibv_wc` array: field by field, only the fields
//! rdma-core's mlx5 provider writes for it (`mlx5_parse_cqe` with `handle_good_req` and
//! `handle_responder`). Every other field keeps whatever the program's array held, as on
//! hardware: verbs leaves them undefined (`ibv_poll_cq(3)`), so a program — or a tracer —
//! that reads them gets on softnic what it would get on a NIC, not convenient zeros.
//!
//! - always: `wr_id`, `status`, `qp_num`, `wc_flags`;
//! - a failed completion: `vendor_err` (not `opcode`, not `byte_len`);
//! - a successful send-side one: `opcode`, and `byte_len` for reads and atomics only;
//! - a successful receive: `opcode`, `byte_len`, the immediate data or invalidated rkey when
//!   the flags say so, `src_qp`, `slid`, `sl`, `dlid_path_bits`, `pkey_index`.

use crate::ffi::*;
use std::ptr::addr_of_mut;

/// Writes completion `w` into the program's entry `dst` the way mlx5 does (module docs).
///
/// # Safety
/// `dst` points to one writable `ibv_wc` (the program's array, `ibv_poll_cq`'s `wc + i`).
pub unsafe fn deliver(dst: *mut ibv_wc, w: &ibv_wc) {
    // SAFETY: per caller: each store writes one field of the program's entry.
    unsafe {
        addr_of_mut!((*dst).wr_id).write(w.wr_id);
        addr_of_mut!((*dst).status).write(w.status);
        addr_of_mut!((*dst).qp_num).write(w.qp_num);
        addr_of_mut!((*dst).wc_flags).write(w.wc_flags);
        if w.status != IBV_WC_SUCCESS {
            addr_of_mut!((*dst).vendor_err).write(w.vendor_err);
            return;
        }
        addr_of_mut!((*dst).opcode).write(w.opcode);
        if w.opcode & IBV_WC_RECV == 0 {
            if matches!(
                w.opcode,
                IBV_WC_RDMA_READ | IBV_WC_COMP_SWAP | IBV_WC_FETCH_ADD
            ) {
                addr_of_mut!((*dst).byte_len).write(w.byte_len);
            }
            return;
        }
        addr_of_mut!((*dst).byte_len).write(w.byte_len);
        if w.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV) != 0 {
            addr_of_mut!((*dst).__bindgen_anon_1).write(w.__bindgen_anon_1);
        }
        addr_of_mut!((*dst).src_qp).write(w.src_qp);
        addr_of_mut!((*dst).slid).write(w.slid);
        addr_of_mut!((*dst).sl).write(w.sl);
        addr_of_mut!((*dst).dlid_path_bits).write(w.dlid_path_bits);
        addr_of_mut!((*dst).pkey_index).write(w.pkey_index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GARBAGE: u8 = 0xa5;

    fn delivered(w: &ibv_wc) -> ibv_wc {
        // SAFETY: all-bits patterns are valid for ibv_wc (integers and a union of integers).
        let mut dst: ibv_wc = unsafe { std::mem::transmute([GARBAGE; size_of::<ibv_wc>()]) };
        // SAFETY: dst is one writable entry.
        unsafe { deliver(&mut dst, w) };
        dst
    }

    fn full(opcode: u32, status: u32) -> ibv_wc {
        let mut w = ibv_wc {
            wr_id: 7,
            status,
            opcode,
            vendor_err: 0x81,
            byte_len: 64,
            qp_num: 0x40,
            src_qp: 0x77,
            wc_flags: 0,
            pkey_index: 1,
            slid: 5,
            sl: 2,
            dlid_path_bits: 3,
            ..Default::default()
        };
        w.__bindgen_anon_1.imm_data = 0x0102_0304;
        w
    }

    const G32: u32 = u32::from_ne_bytes([GARBAGE; 4]);
    const G16: u16 = u16::from_ne_bytes([GARBAGE; 2]);

    #[test]
    fn a_send_side_completion_leaves_length_vendor_error_and_receive_fields_alone() {
        let d = delivered(&full(IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS));
        assert_eq!(
            (d.wr_id, d.status, d.opcode, d.qp_num, d.wc_flags),
            (7, 0, 1, 0x40, 0)
        );
        assert_eq!((d.byte_len, d.vendor_err, d.src_qp), (G32, G32, G32));
        assert_eq!((d.slid, d.pkey_index, d.sl), (G16, G16, GARBAGE));
        // A read's length is written.
        assert_eq!(delivered(&full(IBV_WC_RDMA_READ, 0)).byte_len, 64);
        assert_eq!(delivered(&full(IBV_WC_FETCH_ADD, 0)).byte_len, 64);
    }

    #[test]
    fn a_receive_gets_its_fields_and_an_error_only_its_vendor_error() {
        let d = delivered(&full(IBV_WC_RECV, IBV_WC_SUCCESS));
        assert_eq!((d.byte_len, d.src_qp, d.slid, d.sl), (64, 0x77, 5, 2));
        assert_eq!((d.dlid_path_bits, d.pkey_index, d.vendor_err), (3, 1, G32));
        // SAFETY: reading the union's integer arm.
        assert_eq!(unsafe { d.__bindgen_anon_1.imm_data }, G32, "no IMM flag");
        let mut imm = full(IBV_WC_RECV, IBV_WC_SUCCESS);
        imm.wc_flags = IBV_WC_WITH_IMM;
        // SAFETY: as above.
        assert_eq!(
            unsafe { delivered(&imm).__bindgen_anon_1.imm_data },
            0x0102_0304
        );
        let e = delivered(&full(IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR));
        assert_eq!(
            (e.wr_id, e.status, e.vendor_err, e.qp_num),
            (7, 5, 0x81, 0x40)
        );
        assert_eq!((e.opcode, e.byte_len, e.src_qp), (G32, G32, G32));
    }
}

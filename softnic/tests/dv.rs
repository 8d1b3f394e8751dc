//! mlx5 direct queues across two processes on two simulated nodes: cprogs/dv_test.c posts
//! WQEs into mlx5 send rings (doorbell record + 8-byte doorbell or BlueFlame copy), polls CQE64
//! rings directly and checks every byte and CQE field; on QPs/CQs from mlx5dv_init_obj and on
//! QPs/CQs built with devx on the program's own memory.

mod common;
use common::*;

fn mode(m: &str) {
    c_pair("dv_test", m);
}

/// WRITE (data and inline), SEND, SEND_IMM, WRITE_IMM, READ, ATOMIC_FA, ATOMIC_CS, NOP on
/// init_obj rings; responder CQEs from the receive ring.
#[test]
fn init_obj_all_opcodes() {
    mode("ops");
}

/// One CQE per 8 WQEs retires the unsignaled ones; 50x the SQ depth, many CQ wraps.
#[test]
fn selective_signalling_and_wraparound() {
    mode("selective");
}

/// Bad rkey: REQ_ERR CQE with remote-access syndrome, the next WQE flushes, QP in error.
#[test]
fn error_cqes() {
    mode("errors");
}

/// ibv_post_recv into an exposed RQ and ibv_poll_cq on an exposed CQ keep user wr_ids; ring
/// receives flush when the QP enters the error state.
#[test]
fn mixing_verbs_receive_and_poll() {
    mode("mixed");
}

/// SRQ ring: linked receive WQEs consumed in list order, recycled at the tail; CQE srqn.
#[test]
fn srq_ring() {
    mode("srq");
}

/// CREATE_CQ / CREATE_QP on umem, RST2INIT / INIT2RTR / RTR2RTS, UAR page, traffic.
#[test]
fn devx_qp_and_cq_on_umem() {
    mode("devx");
}

/// Malformed devx commands: PRM status and syndrome in the output, errno EREMOTEIO/EINVAL.
#[test]
fn devx_malformed_commands() {
    mode("devx_errors");
}

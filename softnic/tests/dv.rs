//! mlx5 direct queues across two processes on two simulated nodes: cprogs/dv_test.c posts
//! WQEs into mlx5 send rings (doorbell record + 8-byte doorbell or BlueFlame copy), polls CQE64
//! rings directly and checks every byte and CQE field; on QPs/CQs from mlx5dv_init_obj and on
//! QPs/CQs built with devx on the program's own memory.

mod common;
use common::*;
use std::time::Duration;

fn mode(m: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().to_string();
    let prog = cprog("dv_test").display().to_string();
    let s = spawn(dir.path(), "server", 1, &os(&[&prog, m, "server", &port]));
    let c = spawn(dir.path(), "client", 2, &os(&[&prog, m, "client", &port]));
    let cd = c.wait(Duration::from_secs(60));
    let sd = s.wait(Duration::from_secs(60));
    assert!(
        sd.ok(),
        "server {m}: {:?} timed_out={} {}",
        sd.code,
        sd.timed_out,
        sd.out
    );
    assert!(
        cd.ok(),
        "client {m}: {:?} timed_out={} {}",
        cd.code,
        cd.timed_out,
        cd.out
    );
    assert!(sd.out.contains(&format!("OK {m} server")), "{}", sd.out);
    assert!(cd.out.contains(&format!("OK {m} client")), "{}", cd.out);
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

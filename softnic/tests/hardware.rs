//! Hardware semantics and the compat ABI, one process each (`cprogs/hw_test.c`; two loopback
//! QPs where a peer is needed), plus Debian's `ibv_asyncwatch` seeing the port-active event.

mod common;
use common::*;
use std::time::Duration;

fn mode(m: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let prog = cprog("hw_test").display().to_string();
    let d = spawn(dir.path(), m, 1, &os(&[&prog, m])).wait(Duration::from_secs(60));
    assert!(
        d.ok(),
        "{m}: {:?} timed_out={} {}",
        d.code,
        d.timed_out,
        d.out
    );
    assert!(d.out.contains(&format!("OK {m}")), "{}", d.out);
}

/// ibv_create_cq: comp_vector >= num_comp_vectors is EINVAL; ibv_create_cq_ex: CVLAN, FLOW_TAG
/// and TM_INFO wc_flags are EOPNOTSUPP.
#[test]
fn cq_comp_vector_and_unsupported_wc_flags() {
    mode("cq");
}

/// PORT_ACTIVE is the first event on a new context (async_fd readable), nothing else without
/// cause; vendor 0x02c9 / ConnectX-6 identity, InfiniBand link layer.
#[test]
fn port_active_on_open_and_device_identity() {
    mode("async");
}

/// A bad-rkey RDMA WRITE: the requester completes with REM_ACCESS_ERR, the responder QP raises
/// IBV_EVENT_QP_ACCESS_ERR (acknowledged on the QP).
#[test]
fn responder_access_error_raises_qp_event() {
    mode("qp_event");
}

/// An armed SRQ limit fires once when fewer WQEs remain, then reads 0; a QP on the SRQ that
/// enters ERR raises LAST_WQE_REACHED.
#[test]
fn srq_limit_and_last_wqe_events() {
    mode("srq_limit");
}

/// After ibv_rereg_mr moves an MR to another address or PD, a peer's access with the old
/// rkey/range completes with REM_ACCESS_ERR.
#[test]
fn rereg_mr_then_remote_access_error() {
    mode("rereg");
}

/// On-demand paging: capabilities, an RDMA WRITE into an ODP region's untouched pages, and
/// `ibv_advise_mr`'s success and refusals.
#[test]
fn on_demand_paging_and_advise_mr() {
    mode("odp");
}

/// Device memory: allocation within `max_dm_size`, copies and their bounds, a zero-based
/// region on it as the target of an RDMA WRITE and the source of an RDMA READ.
#[test]
fn device_memory() {
    mode("dm");
}

/// Every IBVERBS_1.1 compat export resolved with dlvsym and compared with the inline path
/// (ibv_query_port@IBVERBS_1.1 fills the attribute); the IBVERBS_1.0 twins not supported.
#[test]
fn compat_exports_match_the_inline_path() {
    mode("compat");
}

#[test]
fn ibv_asyncwatch_sees_port_active() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ibv_asyncwatch runs until killed: line-buffer its stdout so the event line survives.
    let d = spawn(
        dir.path(),
        "asyncwatch",
        1,
        &os(&["stdbuf", "-oL", "ibv_asyncwatch"]),
    )
    .wait(Duration::from_secs(3));
    assert!(d.timed_out, "ibv_asyncwatch exited: {:?} {}", d.code, d.out);
    assert!(
        d.out.contains("PORT_ACTIVE") && d.out.contains("softnic0"),
        "{}",
        d.out
    );
}

/// A QP's send completion comes before the receive of the peer's answer to it (20 000 round
/// trips on one CQ): the peer acknowledged on receipt, so its ACK precedes its answer.
#[test]
fn send_completion_before_the_answers_receive() {
    mode("order");
}

/// ibv_dereg_mr and munmap of a region while a peer's 1 MiB RDMA WRITE into it is in flight:
/// the program survives, and the write completes successfully or with REM_ACCESS_ERR.
#[test]
fn dereg_during_a_remote_write() {
    mode("dereg_race");
}

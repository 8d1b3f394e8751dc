//! CM semantics without QPs (`cprogs/cm_test.c`), untraced and traced: REJECTED with status 8
//! when nobody listens, rdma_reject with private data (status 28, 148-byte REJ data), the
//! private data and swapped depths of a CONNECT_REQUEST (56-byte REQ data), rdma_migrate_id
//! before rdma_accept (ESTABLISHED arrives on the new channel), CONNECT_RESPONSE + rdma_establish
//! on an id without a QP, DISCONNECTED on both sides (rdma_destroy_id waits until another
//! thread acks the id's DISCONNECTED event), TIMEWAIT_EXIT after the time wait, a non-blocking
//! channel fd polled; IPv6 addressing (an IPv6-only and an IPv4 listener on one port, a
//! dual-stack one, each request reaching the listener of its family).

mod common;
use common::run_pair;
use sigmatrace_testkit::free_port;

fn cm_test() -> String {
    format!("{}/cm_test", env!("RDMACM_CPROGS"))
}

#[test]
fn reject_private_data_migrate_establish_disconnect() {
    let port = free_port();
    let p = port.to_string();
    let server = vec![cm_test(), "server".into(), "127.0.1.1".into(), p.clone()];
    let client = vec![cm_test(), "client".into(), "127.0.1.1".into(), p];
    let logs = tempfile::tempdir().unwrap();
    let plain = run_pair(&server, &client, ("106", port), None);
    let traced = run_pair(&server, &client, ("106", port), Some(logs.path()));
    for run in [&plain, &traced] {
        run.assert_ok("cm_test");
        assert_eq!(
            run.server.stdout,
            "ok: listening\nok: first request rejected\nok: established on the migrated channel\nok: disconnected\nok: time wait exit\n"
        );
        assert_eq!(
            run.client.stdout,
            "ok: no listener\nok: rejected with private data\nok: connect response, established\nok: disconnected\nok: destroy waited for the ack\n"
        );
    }
}

#[test]
fn peer_exit_without_disconnect_is_reported() {
    let port = free_port();
    let p = port.to_string();
    let server = vec![
        cm_test(),
        "server-vanish".into(),
        "127.0.1.1".into(),
        p.clone(),
    ];
    let client = vec![cm_test(), "client-vanish".into(), "127.0.1.1".into(), p];
    let run = run_pair(&server, &client, ("106", port), None);
    run.assert_ok("cm_test vanish");
    assert_eq!(
        run.client.stdout,
        "ok: established, exiting without disconnect\n"
    );
    assert_eq!(
        run.server.stdout,
        "ok: peer exit reported as DISCONNECTED\n"
    );
}

#[test]
fn ipv6_listeners_and_requests() {
    let port = free_port();
    let p = port.to_string();
    let server = vec![cm_test(), "server6".into(), "127.0.1.1".into(), p.clone()];
    let client = vec![cm_test(), "client6".into(), "127.0.1.1".into(), p];
    let logs = tempfile::tempdir().unwrap();
    for traced in [None, Some(logs.path())] {
        let run = run_pair(&server, &client, ("106", port), traced);
        run.assert_ok("cm_test IPv6");
        assert_eq!(
            run.server.stdout,
            "ok: IPv4 and IPv6-only listeners share a port\nok: each request reached its listener\n"
        );
        assert_eq!(
            run.client.stdout,
            "ok: IPv4, IPv6 and dual-stack requests answered\n"
        );
    }
}

//! Ports for the client/server programs the tests run.

use std::sync::atomic::{AtomicU32, Ordering};

/// How many ports below the kernel's ephemeral range [`free_port`] hands out.
const PORT_SPAN: u32 = 16_000;

/// The next candidate, as an offset into the span (starts at a place derived from the pid,
/// so that test binaries run one after another do not reuse each other's recent ports).
static NEXT_PORT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The lowest ephemeral port (`ip_local_port_range`), 32768 when unreadable.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A TCP port on localhost that is free when asked and that the program under test binds next.
///
/// Never the same port twice in one process (the tests run in parallel), and never one of the
/// kernel's ephemeral ports: those are also what any process's `connect` takes as its local
/// port, so a port handed out from that range could be taken by another test's client before
/// the server binds it (seen once in CI: a server never got its port, its client found no one).
pub fn free_port() -> u16 {
    let low = ephemeral_low().clamp(PORT_SPAN + 1024, 65_535);
    let base = low - PORT_SPAN;
    let _ = NEXT_PORT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(2_654_435_761) % PORT_SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..PORT_SPAN {
        let port = (base + NEXT_PORT.fetch_add(1, Ordering::Relaxed) % PORT_SPAN) as u16;
        // Free on every address (the programs bind the wildcard address or 127.0.x.x).
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {base}..{low}");
}

/// True when some socket listens on `port` (IPv4 or IPv6), read from /proc/net.
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// True when a server listens on `port` of port space `ps` (decimal, e.g. "106" for
/// `RDMA_PS_TCP`) at 127.0.1.1 through softnic's librdmacm, whose listeners are abstract unix
/// sockets `@softnic-cm:…:<ps>:<address>:<port>` (read from /proc/net/unix).
pub fn cm_listening(ps: &str, port: u16) -> bool {
    let suffix = format!(":{ps}:127.0.1.1:{port}");
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("@softnic-cm:") && l.trim_end().ends_with(&suffix))
}

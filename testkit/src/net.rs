//! Ports for the client/server programs the tests run.

/// A free TCP port on localhost (free when asked; the program under test binds it next).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
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

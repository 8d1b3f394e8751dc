//! Addressing: which IPv4 address a simulated node has, and the loopback socket names CM
//! messages travel to.
//!
//! Node N (SOFTNIC_NODE) has 127.0.1.N for N in 1..=254 and 127.1.(N>>8).(N&255) otherwise;
//! `SOFTNIC_CM_ADDR` (dotted IPv4) overrides it. A bound or listening id owns the abstract
//! Unix datagram socket `softnic-cm:<fabric tag>:<port space>:<ip>:<port>`; an id created for
//! an incoming connection owns `softnic-cm:<fabric tag>:c:<pid>:<n>`. The fabric tag is a
//! hash of SOFTNIC_FABRIC, so processes see each other exactly when they share a fabric.
//!
//! Nodes have IPv4 addresses only. A program may still write them as IPv6 (tgtd's iSER portal
//! binds `[::]`): the unspecified `::`, loopback `::1` and v4-mapped `::ffff:a.b.c.d` name the
//! IPv4 wildcard, loopback and `a.b.c.d`, and the id reports its addresses back in the
//! program's family ([`Family`]). As over the kernel's rdma_cm, an IPv6 listener takes IPv4
//! requests too unless `RDMA_OPTION_ID_AFONLY` is set, and a request from an IPv4 peer makes
//! an id with IPv4 addresses (softnic's requests do not say their family: a child id always
//! reports IPv4).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;

/// An IPv4 socket address in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4 {
    pub ip: Ipv4Addr,
    pub port: u16,
}

impl V4 {
    pub const UNSPECIFIED: V4 = V4 {
        ip: Ipv4Addr::UNSPECIFIED,
        port: 0,
    };
}

/// The address family a program used for an id's own address (bind) or its peer's (resolve).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Family {
    #[default]
    V4,
    V6,
}

/// The IPv4 address an IPv6 one names (module doc), if any.
pub fn v4_of(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if ip.is_unspecified() {
        Some(Ipv4Addr::UNSPECIFIED)
    } else if ip.is_loopback() {
        Some(Ipv4Addr::LOCALHOST)
    } else {
        ip.to_ipv4_mapped()
    }
}

/// How an IPv4 address is written as IPv6 ([`v4_of`]'s inverse).
pub fn v6_of(ip: Ipv4Addr) -> Ipv6Addr {
    if ip.is_unspecified() {
        Ipv6Addr::UNSPECIFIED
    } else if ip == Ipv4Addr::LOCALHOST {
        Ipv6Addr::LOCALHOST
    } else {
        ip.to_ipv6_mapped()
    }
}

/// This process's node address.
pub fn node_ip() -> Ipv4Addr {
    if let Some(ip) = std::env::var("SOFTNIC_CM_ADDR")
        .ok()
        .and_then(|s| s.trim().parse::<Ipv4Addr>().ok())
    {
        return ip;
    }
    let node = std::env::var("SOFTNIC_NODE")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(1000 + std::process::id() % 60000);
    ip_of_node(node)
}

/// The default address of simulated node `node`.
pub fn ip_of_node(node: u32) -> Ipv4Addr {
    if (1..=254).contains(&node) {
        Ipv4Addr::new(127, 0, 1, node as u8)
    } else {
        Ipv4Addr::new(127, 1, (node >> 8) as u8, node as u8)
    }
}

/// Whether `ip` is an address this process may bind (its node address, any, or loopback).
pub fn bindable(ip: Ipv4Addr) -> bool {
    ip.is_unspecified() || ip.is_loopback()
}

fn fabric_tag() -> String {
    let key = std::env::var("SOFTNIC_FABRIC")
        // SAFETY: getuid has no preconditions.
        .unwrap_or_else(|_| format!("uid-{}", unsafe { libc::getuid() }));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Name of the socket owned by an id bound to `a` in port space `ps`; `v6_only`: an IPv6 id
/// with `RDMA_OPTION_ID_AFONLY` set, reached by IPv6 requests only, beside an IPv4 id on the
/// same port (tgtd's two iSER portals).
pub fn bound_name(ps: u32, a: V4, v6_only: bool) -> SocketAddr {
    let only = if v6_only { "6:" } else { "" };
    named(&format!(
        "{}:{ps:x}:{only}{}:{}",
        fabric_tag(),
        a.ip,
        a.port
    ))
}

/// Name of the socket of the `n`th id this process created for an incoming connection.
pub fn private_name(n: u64) -> SocketAddr {
    named(&format!("{}:c:{}:{n}", fabric_tag(), std::process::id()))
}

fn named(rest: &str) -> SocketAddr {
    SocketAddr::from_abstract_name(format!("softnic-cm:{rest}").as_bytes())
        .expect("abstract socket names are short")
}

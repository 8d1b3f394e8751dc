//! Connection matching (the algorithm is described in [`super`]'s module documentation):
//! candidates by QPN and fitting addresses, then narrowed until nothing changes, learning the
//! port addresses that unambiguous pairs use.

use std::collections::BTreeMap;

use crate::align::topology::{Qp, Topology};
use crate::read::verbs;

/// A port address as a QP names its peer's: (LID, GID).
type DestAddr = (u16, [u8; 16]);

/// Per connected QP (process, QP index): the QPs that could be its peer.
type Candidates = Vec<((usize, usize), Vec<(usize, usize)>)>;

/// Two addresses of one port agree unless both LIDs (or, without LIDs, both GIDs) are known
/// and differ: a peer reached once with a GRH and once LID-only is one port.
fn addrs_agree(x: &DestAddr, y: &DestAddr) -> bool {
    if x.0 != 0 && y.0 != 0 {
        x.0 == y.0
    } else if x.1 != [0; 16] && y.1 != [0; 16] {
        x.1 == y.1
    } else {
        true
    }
}

impl Topology {
    /// Key of the port a QP uses (host, device context → guid/name, port number).
    fn port_key(&self, p: usize, q: &Qp) -> (usize, String, u8) {
        let proc_ = &self.procs[p];
        let dev = proc_
            .devices
            .iter()
            .find(|d| d.0 == q.context)
            .map(|d| {
                if d.2 != 0 {
                    format!("{:x}", d.2)
                } else {
                    d.1.clone()
                }
            })
            .unwrap_or_default();
        (proc_.host, dev, q.port.max(1))
    }

    /// Whether a destination GID's interface id can be the GUID of the device of `q`.
    fn gid_matches(&self, gid: [u8; 16], p: usize, q: &Qp) -> bool {
        let guid = self.device_guid(p, q);
        guid == 0 || named_guids(gid).is_none_or(|g| g.contains(&guid))
    }

    /// The GUID of the device of QP `q` of process `p` (0: unknown).
    fn device_guid(&self, p: usize, q: &Qp) -> u64 {
        self.procs[p]
            .devices
            .iter()
            .find(|d| d.0 == q.context)
            .map_or(0, |d| d.2)
    }

    /// Host time span (ns) in which QP `qi` of process `p` exists: creation to the next
    /// generation's creation (unknown ends: the log's first and last record).
    fn lifetime(&self, p: usize, qi: usize) -> (i64, i64) {
        let pr = &self.procs[p];
        let m = pr.clock.to_realtime(self.hosts[pr.host].realtime_offset);
        let q = &pr.qps[qi];
        let a = if q.created == 0 { pr.min_ts } else { q.created };
        let b = q.next_gen.map_or(pr.max_ts, |(t, _)| t);
        (m.map(a), m.map(b))
    }

    /// Whether QPs `a` and `b` can be each other's peer: each destination names the other's
    /// own port where the logs recorded it, and (for QPNs created more than once) their
    /// lifetimes overlap.
    fn addresses_fit(&self, a: (usize, usize), b: (usize, usize)) -> bool {
        let (qa, qb) = (&self.procs[a.0].qps[a.1], &self.procs[b.0].qps[b.1]);
        let names = |dest, p: usize, q: &Qp| {
            self.procs[p]
                .own_addr(q)
                .is_none_or(|own| own.named_by(dest))
        };
        if !names(qa.dest_addr, b.0, qb) || !names(qb.dest_addr, a.0, qa) {
            return false;
        }
        let reused = |p: usize, q: &Qp| {
            let first = self.procs[p].qp_index[&q.qpn];
            self.procs[p].qps[first].next_gen.is_some()
        };
        if reused(a.0, qa) || reused(b.0, qb) {
            let (la, lb) = (self.lifetime(a.0, a.1), self.lifetime(b.0, b.1));
            return la.0 < lb.1 && lb.0 < la.1;
        }
        true
    }

    pub(super) fn match_connections(&mut self) {
        let mut cands = self.connection_candidates();
        let resolved = self.resolve_candidates(&mut cands);
        for (a, cs) in &cands {
            let qpn = self.procs[a.0].qps[a.1].qpn;
            match resolved.get(a) {
                Some(&b) => {
                    let bqpn = self.procs[b.0].qps[b.1].qpn;
                    let q = &mut self.procs[a.0].qps[a.1];
                    q.peer = Some((b.0, bqpn));
                    q.peer_index = b.1;
                }
                None if cs.is_empty() => self.unmatched_qps.push((a.0, qpn)),
                None => self.ambiguous_qps.push((a.0, qpn)),
            }
        }
        // Flow counts need both sides.
        for p in 0..self.procs.len() {
            for qi in 0..self.procs[p].qps.len() {
                if let Some(peer) = self.peer_of(p, qi) {
                    let (peer_recv, peer_send) = (peer.counts.recv_ok, peer.counts.consuming_sends);
                    let q = &mut self.procs[p].qps[qi];
                    q.flows_out = q.counts.consuming_sends.min(peer_recv);
                    q.flows_in = q.counts.recv_ok.min(peer_send);
                }
            }
        }
    }

    /// Every connected (non-UD) QP with a destination QPN and the QPs that could be its peer:
    /// that QPN, naming it back, with fitting addresses. The peers are looked up in an index
    /// by (QPN, destination QPN, port name) ([`PeerIndex`]) instead of among every QP of that
    /// number: QPNs repeat on every node of a large job (all 4 096 ranks of the benchmark
    /// use the same nine), which made this quadratic in the rank count.
    fn connection_candidates(&self) -> Candidates {
        let index = PeerIndex::new(self);
        let mut cands: Candidates = Vec::new();
        let (mut found, mut near) = (Vec::new(), Vec::new());
        for (p, proc_) in self.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                if q.qp_type == verbs::qp_type::UD {
                    continue;
                }
                let Some(dest) = q.dest_qpn else { continue };
                let fits = |&(p2, q2): &(usize, usize)| {
                    (p2, q2) != (p, qi) && self.addresses_fit((p, qi), (p2, q2))
                };
                // The tie-breaker of [`Topology::resolve_candidates`] (a link-local
                // destination GID names its port's GUID) applied here, through the index:
                // the candidates whose device GUID it names, when there are any.
                if let Some(guids) = named_guids(q.dest_addr.1) {
                    index.named(dest, q.qpn, q.dest_addr, Some(&guids), &mut near);
                    near.retain(fits);
                    if !near.is_empty() {
                        cands.push(((p, qi), near.clone()));
                        continue;
                    }
                }
                index.named(dest, q.qpn, q.dest_addr, None, &mut found);
                found.retain(fits);
                cands.push(((p, qi), found.clone()));
            }
        }
        cands
    }

    /// Narrows the candidates until nothing changes: a QP with one candidate left is matched
    /// with it, and the addresses each side used for the other's port are learned, which rules
    /// out candidates that contradict them. Returns the matches, both ways.
    fn resolve_candidates(
        &self,
        cands: &mut Candidates,
    ) -> BTreeMap<(usize, usize), (usize, usize)> {
        let mut learned: BTreeMap<(usize, String, u8), Vec<DestAddr>> = BTreeMap::new();
        let mut resolved: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
        loop {
            let mut progress = false;
            for (a, cs) in cands.iter_mut() {
                if resolved.contains_key(a) {
                    continue;
                }
                let qa = &self.procs[a.0].qps[a.1];
                let ka = self.port_key(a.0, qa);
                // Tie-breaker: a link-local destination GID usually embeds the peer port's
                // GUID (EUI-64); drop candidates whose device GUID contradicts it, unless that
                // would drop them all.
                if cs.len() > 1 {
                    let keep: Vec<(usize, usize)> = cs
                        .iter()
                        .copied()
                        .filter(|b| {
                            self.gid_matches(qa.dest_addr.1, b.0, &self.procs[b.0].qps[b.1])
                        })
                        .collect();
                    if !keep.is_empty() {
                        *cs = keep;
                    }
                }
                cs.retain(|b| {
                    if resolved.get(b).is_some_and(|x| x != a) {
                        return false;
                    }
                    let qb = &self.procs[b.0].qps[b.1];
                    let kb = self.port_key(b.0, qb);
                    let fits = |k, addr: &DestAddr| {
                        learned
                            .get(&k)
                            .is_none_or(|v| v.iter().all(|l| addrs_agree(l, addr)))
                    };
                    fits(kb, &qa.dest_addr) && fits(ka.clone(), &qb.dest_addr)
                });
                if cs.len() == 1 {
                    let b = cs[0];
                    let qb = &self.procs[b.0].qps[b.1];
                    let kb = self.port_key(b.0, qb);
                    for (k, addr) in [(kb, qa.dest_addr), (ka, qb.dest_addr)] {
                        let v = learned.entry(k).or_default();
                        if !v.contains(&addr) {
                            v.push(addr);
                        }
                    }
                    resolved.insert(*a, b);
                    resolved.insert(b, *a);
                    progress = true;
                }
            }
            if !progress {
                return resolved;
            }
        }
    }
}

/// The device GUIDs a link-local destination GID can name: its interface id (EUI-64) is the
/// port GUID, which is the device GUID or up to 3 above it, with or without the
/// universal/local bit flipped. None for a GID that is not link-local (or zero).
fn named_guids(gid: [u8; 16]) -> Option<[u64; 8]> {
    if gid == [0; 16] || gid[0] != 0xfe || gid[1] & 0xc0 != 0x80 {
        return None;
    }
    let iface = u64::from_be_bytes(gid[8..16].try_into().expect("8 bytes"));
    let mut out = [0u64; 8];
    for k in 0..4 {
        out[k] = iface.wrapping_sub(k as u64);
        out[4 + k] = (iface ^ 0x0200_0000_0000_0000).wrapping_sub(k as u64);
    }
    Some(out)
}

/// How a QP's own port can be named by a peer's destination address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PortName {
    /// Its port's address was not logged: any destination may name it.
    Unknown,
    Lid(u16),
    Gid([u8; 16]),
}

/// QPs by (QPN, destination QPN, a name of their own port) and by that and their device
/// GUID: the QPs a destination address names ([`crate::align::topology::PortAddr::named_by`])
/// among those with one QPN pair, all of them or those on devices of given GUIDs.
struct PeerIndex {
    by_name: BTreeMap<(u32, u32, PortName), Vec<QpAt>>,
    by_guid: BTreeMap<(u32, u32, PortName, u64), Vec<QpAt>>,
}

/// A QP as (process, QP index).
type QpAt = (usize, usize);

impl PeerIndex {
    fn new(topo: &Topology) -> PeerIndex {
        let mut index = PeerIndex {
            by_name: BTreeMap::new(),
            by_guid: BTreeMap::new(),
        };
        for (p, proc_) in topo.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                let Some(dest) = q.dest_qpn else { continue };
                let guid = topo.device_guid(p, q);
                let mut add = |name| {
                    let at = (p, qi);
                    index
                        .by_name
                        .entry((q.qpn, dest, name))
                        .or_default()
                        .push(at);
                    index
                        .by_guid
                        .entry((q.qpn, dest, name, guid))
                        .or_default()
                        .push(at);
                };
                match proc_.own_addr(q) {
                    None => add(PortName::Unknown),
                    Some(own) => {
                        if own.lid != 0 {
                            add(PortName::Lid(own.lid));
                        }
                        for &g in &own.gids {
                            add(PortName::Gid(g));
                        }
                    }
                }
            }
        }
        index
    }

    /// Into `out` (cleared first), in (process, QP index) order, each QP numbered `qpn` whose
    /// destination QPN is `dest_qpn` and whose port `addr` names (or whose port is unknown);
    /// with `guids`, only those on a device of one of these GUIDs or of an unknown one.
    fn named(
        &self,
        qpn: u32,
        dest_qpn: u32,
        addr: (u16, [u8; 16]),
        guids: Option<&[u64; 8]>,
        out: &mut Vec<(usize, usize)>,
    ) {
        out.clear();
        let mut names = vec![PortName::Unknown];
        if addr.0 != 0 {
            names.push(PortName::Lid(addr.0));
        }
        if addr.1 != [0; 16] {
            names.push(PortName::Gid(addr.1));
        }
        for name in names {
            match guids {
                None => {
                    if let Some(v) = self.by_name.get(&(qpn, dest_qpn, name)) {
                        out.extend_from_slice(v);
                    }
                }
                Some(guids) => {
                    for &g in guids.iter().chain(&[0]) {
                        if let Some(v) = self.by_guid.get(&(qpn, dest_qpn, name, g)) {
                            out.extend_from_slice(v);
                        }
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
    }
}

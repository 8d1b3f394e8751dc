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
        if gid == [0; 16] || gid[0] != 0xfe || gid[1] & 0xc0 != 0x80 {
            return true;
        }
        let iface = u64::from_be_bytes(gid[8..16].try_into().expect("8 bytes"));
        let guid = self.procs[p]
            .devices
            .iter()
            .find(|d| d.0 == q.context)
            .map_or(0, |d| d.2);
        if guid == 0 {
            return true;
        }
        let near = |x: u64| x.wrapping_sub(guid) < 4;
        near(iface) || near(iface ^ 0x0200_0000_0000_0000)
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
    /// that QPN, naming it back, with fitting addresses.
    fn connection_candidates(&self) -> Candidates {
        // Candidate index: qpn → QPs with that number.
        let mut by_qpn: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
        for (p, proc_) in self.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                by_qpn.entry(q.qpn).or_default().push((p, qi));
            }
        }
        let mut cands: Candidates = Vec::new();
        for (p, proc_) in self.procs.iter().enumerate() {
            for (qi, q) in proc_.qps.iter().enumerate() {
                if q.qp_type == verbs::qp_type::UD {
                    continue;
                }
                let Some(dest) = q.dest_qpn else { continue };
                let c: Vec<(usize, usize)> = by_qpn
                    .get(&dest)
                    .map(|v| {
                        v.iter()
                            .copied()
                            .filter(|&(p2, q2)| {
                                (p2, q2) != (p, qi)
                                    && self.procs[p2].qps[q2].dest_qpn == Some(q.qpn)
                                    && self.addresses_fit((p, qi), (p2, q2))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                cands.push(((p, qi), c));
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

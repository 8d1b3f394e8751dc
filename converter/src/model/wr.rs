//! The steps of one work request in the model pass, split out of `post_send` and the
//! completions (mostly `#[inline]`: they run once per WR): the flow a message starts or ends,
//! the open send WRs, the slices a posted send opens, the WRs a send-side completion ends,
//! the slice a posted receive opens, the receive WR a completion consumes and where its
//! arrival is drawn.

use std::sync::atomic::AtomicU64;

use sigmatrace_schemas::records::{PostSend, WorkCompletion};
use sigmatrace_timeline::{ArgKey, ArgValue, Extra, TraceSink};

use crate::align::topology::{flow_id, Process, Qp};
use crate::model::emit::{Detail, Lanes, NameCache};
use crate::model::{
    DoneWr, Keys, ModelEvent, Observer, OpenRecv, ProcessModel, ProcessTotals, QpState, RECV_LANES,
};
use crate::read::verbs;

/// How many of a send's args (wr_id, bytes, remote address, rkey, immediate) full detail
/// shows: one-sided ops their target, immediates their value, plain sends wr_id and bytes.
#[inline]
fn send_arg_count(opcode: u8, full: bool) -> usize {
    if !full {
        0
    } else if verbs::one_sided(opcode) || opcode == verbs::wr::RDMA_WRITE_WITH_IMM {
        if opcode == verbs::wr::RDMA_WRITE_WITH_IMM {
            5
        } else {
            4
        }
    } else if opcode == verbs::wr::SEND_WITH_IMM {
        5
    } else {
        2
    }
}

impl ProcessModel<'_> {
    /// The flow a posted send on QP `qi` starts, when drawn: the k-th message-consuming send of
    /// a connection, or the next datagram of a UD stream (in a time window, only when both ends
    /// lie inside it). Counts the send either way.
    #[inline(always)]
    pub(super) fn send_flow(&mut self, qi: usize, ps: &PostSend, drawn: bool) -> Option<u64> {
        if !verbs::consumes_recv(ps.opcode) {
            return None;
        }
        self.consuming_send_flow(qi, ps, drawn)
    }

    /// [`Self::send_flow`] of a message-consuming send.
    #[inline(never)]
    fn consuming_send_flow(&mut self, qi: usize, ps: &PostSend, drawn: bool) -> Option<u64> {
        let q = &self.p.qps[qi];
        let k = self.qps[qi].sent_consuming;
        self.qps[qi].sent_consuming += 1;
        if drawn && self.flow_ok(q.conn, k, q.flows_out) {
            self.totals.flows_out += 1;
            return Some(flow_id(q.conn, k));
        }
        if q.qp_type == verbs::qp_type::UD {
            let key = (ps.qpn, ps.rkey, ps.remote_addr);
            if let Some((conn, i)) = self.ud.next_send(self.p.index, key, &mut self.ud_k) {
                if drawn && self.flow_ok(conn, i, u64::MAX) {
                    self.totals.flows_out += 1;
                    return Some(flow_id(conn, i));
                }
            }
        }
        None
    }

    /// The flow a successful receive completion on QP `qi` ends, when drawn (as
    /// [`Self::send_flow`], from the receiving side). Counts the receive either way.
    #[inline]
    pub(super) fn recv_flow(&mut self, qi: usize, wc: &WorkCompletion, drawn: bool) -> Option<u64> {
        let q = &self.p.qps[qi];
        let k = self.qps[qi].recv_ok;
        self.qps[qi].recv_ok += 1;
        if q.peer.is_some() {
            if drawn && self.flow_ok(q.peer_conn, k, q.flows_in) {
                self.totals.flows_in += 1;
                return Some(flow_id(q.peer_conn, k));
            }
        } else if q.qp_type == verbs::qp_type::UD {
            let key = (q.qpn, wc.src_qp, wc.slid);
            if let Some((conn, i)) = self.ud.next_recv(self.p.index, key, &mut self.ud_k) {
                if drawn && self.flow_ok(conn, i, u64::MAX) {
                    self.totals.flows_in += 1;
                    return Some(flow_id(conn, i));
                }
            }
        }
        None
    }

    /// A send-side completion on QP `qi`: ends the WRs it completes and returns their posted
    /// bytes.
    pub(super) fn send_completion<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        obs: &mut dyn Observer,
        t: i64,
        qi: usize,
        wc: &sigmatrace_schemas::records::WorkCompletion,
    ) -> i64 {
        let p = self.p;
        let q = &p.qps[qi];
        // The QP's state is looked up once, the rest of the model borrowed beside it.
        let st = &mut self.qps[qi];
        // The completed WR is the first *signaled* WR with this wr_id (programs often reuse
        // one wr_id for every WR); errors and QPs with sq_sig_all can complete any WR, so fall
        // back to the first WR with this wr_id.
        let queue = st.send.open();
        let first_any = || queue.iter().position(|w| w.wr_id == wc.wr_id);
        let found = if wc.status == 0 {
            st.send.first_signaled(wc.wr_id).or_else(first_any)
        } else {
            first_any()
        };
        let Some(pos) = found else {
            self.totals.orphan_completions += 1;
            return 0;
        };
        // What observers are told of the WRs, copied only for observers that look.
        if obs.wants_done_wrs() {
            let done = queue[..=pos].iter().map(|w| DoneWr {
                opcode: w.opcode,
                bytes: w.bytes,
                post: w.post,
            });
            self.done.extend(done);
        }
        let full = self.opts.detail == Detail::Full;
        let status_str = verbs::status_name(wc.status);
        let failed = wc.status != 0;
        let wrs = st.send.take_front(pos + 1);
        let lanes = (&mut st.send_lanes, &mut st.inferred_lanes);
        let mut bytes = 0i64;
        if !failed && !full {
            // The common case, its events without args (a WR's two at once when it has both).
            for w in wrs {
                bytes += w.bytes as i64;
                if let (Some(l), Some(il)) = (w.lane(), w.inferred_lane()) {
                    let (a, b) = (lanes.0.release_track(l), lanes.1.release_track(il));
                    sink.end_two(t as u64, a, b);
                } else {
                    end_lanes(sink, lanes.0, lanes.1, w, t, &Extra::NONE);
                }
            }
        } else {
            let sargs = [(self.keys.status, ArgValue::Str(status_str))];
            let extra = Extra {
                args: &sargs,
                ..Extra::NONE
            };
            for w in wrs {
                bytes += w.bytes as i64;
                end_lanes(sink, lanes.0, lanes.1, w, t, &extra);
                if failed && w.lane().is_some() {
                    let name = self.names.error(sink, wc.status);
                    let args = [
                        (self.keys.wr_id, ArgValue::U64(w.wr_id)),
                        (self.keys.status, ArgValue::Str(status_str)),
                    ];
                    sink.instant(
                        t as u64,
                        q.track,
                        name,
                        &Extra {
                            args: &args,
                            ..Extra::NONE
                        },
                    );
                }
            }
        }
        st.inflight_bytes -= bytes;
        let completed = pos as u64 + 1;
        if failed {
            self.totals.wr_failed += completed;
        } else {
            self.totals.wr_completed += completed;
        }
        obs.observe(
            p,
            &ModelEvent::WrsDone {
                qp: q,
                wrs: &self.done,
                done: t,
                status: wc.status,
            },
        );
        self.done.clear();
        if self.drawn(t) {
            let st = &mut self.qps[qi];
            st.outstanding
                .set(sink, q.outstanding_track, t, st.send.len() as i64);
            st.inflight
                .set(sink, q.inflight_bytes_track, t, st.inflight_bytes);
        }
        bytes
    }

    /// The receive WR `wr_id` a completion on QP `qi` consumes, taken off the QP's queue or its
    /// SRQ (any SRQ when the QP's is not known), with its lane's track.
    #[inline]
    pub(super) fn take_recv(&mut self, qi: usize, wr_id: u64) -> Option<(OpenRecv, Option<u64>)> {
        match self.find_recv(qi, wr_id)? {
            (None, pos) => {
                let st = &mut self.qps[qi];
                let r = st.recv.remove(pos).expect("in range");
                let uuid = r.lane.map(|l| st.recv_lanes.uuid(l));
                Some((r, uuid))
            }
            (Some(k), pos) => {
                let e = self.srq_lanes.get_mut(&k).expect("found there");
                let r = e.2.remove(pos).expect("in range");
                let uuid = r.lane.map(|l| e.1.uuid(l));
                Some((r, uuid))
            }
        }
    }

    /// Where QP `qi`'s open receive WR `wr_id` is: (`None`, position) on its own receive
    /// queue, else (`Some(srq)`, position) on its SRQ's — on any SRQ's when the QP names none.
    fn find_recv(&self, qi: usize, wr_id: u64) -> Option<(Option<u64>, usize)> {
        if let Some(pos) = self.qps[qi].recv.iter().position(|r| r.wr_id == wr_id) {
            return Some((None, pos));
        }
        let on = |k: u64| {
            let e = self.srq_lanes.get(&k)?;
            Some((Some(k), e.2.iter().position(|r| r.wr_id == wr_id)?))
        };
        match self.p.qps[qi].srq {
            0 => self.srq_lanes.keys().find_map(|&k| on(k)),
            srq => on(srq),
        }
    }

    /// Whether a failed completion on QP `qi` is a receive's. Verbs leaves a failed
    /// completion's opcode undefined (rdma-core's mlx5 writes none for an error CQE: it is
    /// what the program's array held), so the queue with a WR of its wr_id outstanding
    /// decides — the receive queue (or the SRQ) or the send queue; only when both or neither
    /// have one, the recorded opcode.
    pub(super) fn failed_on_recv(&self, qi: usize, wc: &WorkCompletion) -> bool {
        let sends = self.qps[qi].send.open().iter().any(|w| w.wr_id == wc.wr_id);
        match (sends, self.find_recv(qi, wc.wr_id).is_some()) {
            (true, false) => false,
            (false, true) => true,
            // Both queues (or neither) hold the `wr_id`: the status, where only one side
            // reports it; last, the opcode byte (undefined for a failed completion, so only
            // a guess — softnic and mlx5 leave what the caller's array held).
            _ => verbs::failed_status_on_recv(wc.status).unwrap_or(wc.opcode >= verbs::wc::RECV),
        }
    }

    /// The track of QP `qi`'s arrival markers when receive slices are not drawn (created on
    /// first use).
    #[inline]
    pub(super) fn arrivals_track<S: TraceSink + ?Sized>(&mut self, sink: &mut S, qi: usize) -> u64 {
        let q = &self.p.qps[qi];
        let st = &mut self.qps[qi];
        if let Some(u) = st.arrivals {
            return u;
        }
        let uuid = self
            .uuids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut def = sigmatrace_timeline::TrackDef::slices(uuid, Some(q.track), "recv");
        def.kind = sigmatrace_timeline::TrackKind::Slices {
            merge_key: Some("recv".into()),
        };
        sink.track(&def);
        st.arrivals = Some(uuid);
        uuid
    }

    /// Ends a completed receive WR's slice and frees its lane (on the QP, or on whichever SRQ
    /// holds that lane).
    #[inline]
    pub(super) fn end_recv<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        t: i64,
        qi: usize,
        r: OpenRecv,
        uuid: Option<u64>,
    ) {
        if let (Some(l), Some(u)) = (r.lane, uuid) {
            sink.end(t as u64, u, &Extra::NONE);
            if r.srq {
                for e in self.srq_lanes.values_mut() {
                    if e.1.count() > l as usize && e.1.uuid(l) == u {
                        e.1.release(l);
                    }
                }
            } else {
                self.qps[qi].recv_lanes.release(l);
            }
        }
        let _ = r.bytes;
    }
}

/// Ends a completed send WR's slice and its inferred arrival (those drawn) at `t` with
/// `extra`, and frees their lanes.
#[inline(always)]
fn end_lanes<S: TraceSink + ?Sized>(
    sink: &mut S,
    send_lanes: &mut Lanes,
    inferred_lanes: &mut Lanes,
    w: &OpenWr,
    t: i64,
    extra: &Extra<'_>,
) {
    if let Some(l) = w.lane() {
        sink.end(t as u64, send_lanes.release_track(l), extra);
    }
    if let Some(l) = w.inferred_lane() {
        sink.end(t as u64, inferred_lanes.release_track(l), extra);
    }
}

/// A posted send WR not completed yet (32 bytes: its lanes are words, [`NO_LANE`] for none).
pub(super) struct OpenWr {
    pub wr_id: u64,
    pub post: i64,
    pub bytes: u32,
    /// Its slice's lane.
    pub lane: u32,
    /// Its inferred arrival's lane (on the peer QP's track).
    pub inferred_lane: u32,
    pub opcode: u8,
    pub signaled: bool,
}

/// A QP's posted send WRs not completed yet, in posting order: a list whose completed front
/// is passed over (`head`) rather than removed one at a time, so that posting is a push and a
/// completion's WRs are one contiguous run of it. The front is dropped once it is at least half
/// the list (each WR is moved at most about once more).
#[derive(Default)]
pub(super) struct SendQueue {
    wrs: Vec<OpenWr>,
    /// WRs of `wrs` before this one are done.
    head: usize,
    /// Where the signaled WRs are in `wrs`, in order, those open from `signaled_head` on: a
    /// completion looks for its WR among them (programs signal one WR in tens or hundreds).
    signaled: Vec<usize>,
    signaled_head: usize,
}

impl SendQueue {
    /// WRs still open.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.wrs.len() - self.head
    }

    /// The open WRs, the oldest first.
    #[inline(always)]
    pub(super) fn open(&self) -> &[OpenWr] {
        &self.wrs[self.head..]
    }

    #[inline(always)]
    pub(super) fn push(&mut self, w: OpenWr) {
        if w.signaled {
            self.signaled.push(self.wrs.len());
        }
        self.wrs.push(w);
    }

    /// Where in [`SendQueue::open`] the first signaled WR `wr_id` is.
    #[inline]
    pub(super) fn first_signaled(&self, wr_id: u64) -> Option<usize> {
        let open = &self.signaled[self.signaled_head..];
        let found = open.iter().find(|&&i| self.wrs[i].wr_id == wr_id)?;
        Some(found - self.head)
    }

    /// Takes the `n` oldest open WRs (`n` ≤ [`SendQueue::len`]): returned as a run to go
    /// through, done once the run has been gone through (the list is kept until the next
    /// push or take).
    #[inline(always)]
    pub(super) fn take_front(&mut self, n: usize) -> &[OpenWr] {
        if self.head >= 64 && self.head * 2 >= self.wrs.len() {
            self.compact();
        }
        let from = self.head;
        self.head += n;
        while self
            .signaled
            .get(self.signaled_head)
            .is_some_and(|&i| i < self.head)
        {
            self.signaled_head += 1;
        }
        &self.wrs[from..self.head]
    }

    /// Drops the done front of the list.
    #[cold]
    fn compact(&mut self) {
        self.signaled.drain(..self.signaled_head);
        self.signaled_head = 0;
        self.signaled.iter_mut().for_each(|i| *i -= self.head);
        self.wrs.drain(..self.head);
        self.head = 0;
    }

    /// Takes every open WR, the oldest first.
    pub(super) fn take_all(&mut self) -> std::vec::Drain<'_, OpenWr> {
        self.signaled.clear();
        self.signaled_head = 0;
        self.wrs.drain(..std::mem::take(&mut self.head));
        self.wrs.drain(..)
    }
}

/// An [`OpenWr`] lane that is none (the WR, or its arrival, is not drawn).
pub(super) const NO_LANE: u32 = u32::MAX;

impl OpenWr {
    #[inline(always)]
    pub(super) fn lane(&self) -> Option<u32> {
        (self.lane != NO_LANE).then_some(self.lane)
    }

    #[inline(always)]
    pub(super) fn inferred_lane(&self) -> Option<u32> {
        (self.inferred_lane != NO_LANE).then_some(self.inferred_lane)
    }
}

/// What opening a posted send's slices uses of the model besides its QP and the QP's state
/// (borrowed apart from them, so that those are looked up once per WR).
pub(super) struct SendCtx<'m, 'a> {
    pub p: &'a Process,
    pub uuids: &'a AtomicU64,
    pub names: &'m mut NameCache,
    pub keys: &'m Keys,
    pub totals: &'m mut ProcessTotals,
    pub detail: Detail,
}

impl SendCtx<'_, '_> {
    /// Opens a drawn send's slice on a lane of QP `q` (state `st`; starting `flow`) and, at
    /// normal detail for one-sided ops on a matched QP, its inferred arrival on the peer's
    /// track. Returns the two lanes.
    #[inline(always)]
    pub(super) fn begin_send<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        t: i64,
        q: &Qp,
        st: &mut QpState,
        ps: &PostSend,
        flow: Option<u64>,
    ) -> (Option<u32>, Option<u32>) {
        let name = self.names.wr(sink, ps.opcode, ps.bytes);
        let (l, uuid) = st.send_lanes.acquire(sink, self.uuids, q.track, "send");
        let full = self.detail == Detail::Full;
        let nargs = send_arg_count(ps.opcode, full);
        let inferred = st.draws_inferred && verbs::one_sided(ps.opcode);
        // Most often (no args, no flow, a free lane for the arrival) both slices open at once.
        if inferred && nargs == 0 && flow.is_none() {
            let iname = self.names.inferred(sink, ps.opcode, ps.bytes);
            if let Some((il, iuuid)) = st.inferred_lanes.take_free() {
                sink.begin_two(t as u64, (uuid, name), (iuuid, iname));
                self.totals.slices += 2;
                self.totals.inferred += 1;
                return (Some(l), Some(il));
            }
        }
        // The args are built only when shown (full detail).
        let args;
        let picked;
        let args_used: &[(ArgKey, ArgValue)] = if nargs == 0 {
            &[]
        } else {
            args = [
                (self.keys.wr_id, ArgValue::U64(ps.wr_id)),
                (self.keys.bytes, ArgValue::U64(ps.bytes as u64)),
                (self.keys.raddr, ArgValue::Hex(ps.remote_addr)),
                (self.keys.rkey, ArgValue::Hex(ps.rkey as u64)),
                (self.keys.imm, ArgValue::Hex(ps.imm as u64)),
            ];
            if nargs == 5 && ps.opcode == verbs::wr::SEND_WITH_IMM {
                picked = [args[0], args[1], args[4]];
                &picked[..]
            } else {
                &args[..nargs]
            }
        };
        sink.begin(
            t as u64,
            uuid,
            name,
            &Extra {
                args: args_used,
                flows: flow.as_slice(),
                terminating: &[],
            },
        );
        self.totals.slices += 1;
        // (`max_lanes` is taken from the send lanes at the end: they are only made here.)
        let inferred = inferred.then(|| self.begin_inferred(sink, t, q, st, ps, full));
        (Some(l), inferred)
    }

    /// Opens the inferred arrival of a one-sided op on a lane of the peer QP's track; returns
    /// the lane.
    #[inline(always)]
    fn begin_inferred<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        t: i64,
        q: &Qp,
        st: &mut QpState,
        ps: &PostSend,
        full: bool,
    ) -> u32 {
        let iname = self.names.inferred(sink, ps.opcode, ps.bytes);
        let (il, iuuid) =
            st.inferred_lanes
                .acquire(sink, self.uuids, q.peer_track, "inferred arrivals");
        if full {
            let from = format!("{} QP {:#x}", self.p.label(), q.qpn);
            let fargs = [(self.keys.from, ArgValue::Str(&from))];
            sink.begin(
                t as u64,
                iuuid,
                iname,
                &Extra {
                    args: &fargs,
                    ..Extra::NONE
                },
            );
        } else {
            sink.begin(t as u64, iuuid, iname, &Extra::NONE);
        }
        self.totals.slices += 1;
        self.totals.inferred += 1;
        il
    }
}

/// A posted receive to draw: its queue's lane parent track and key, its time and size.
pub(super) struct RecvSlice {
    pub track: (u64, &'static str),
    pub t: i64,
    pub bytes: u32,
}

impl RecvSlice {
    /// Opens the receive's slice on a free one of `lanes`' [`RECV_LANES`] and returns the
    /// lane; `None` (counted in `recv_undrawn`) when all are taken.
    pub(super) fn begin<S: TraceSink + ?Sized>(
        self,
        sink: &mut S,
        uuids: &std::sync::atomic::AtomicU64,
        names: &mut NameCache,
        lanes: &mut Lanes,
        totals: &mut ProcessTotals,
    ) -> Option<u32> {
        let Some((lane, uuid)) = lanes.acquire_within(sink, uuids, self.track, RECV_LANES) else {
            totals.recv_undrawn += 1;
            return None;
        };
        let name = names.recv(sink, self.bytes, false, false);
        sink.begin(self.t as u64, uuid, name, &Extra::NONE);
        totals.slices += 1;
        Some(lane)
    }
}

#[cfg(test)]
mod tests {
    use super::{OpenWr, SendQueue, NO_LANE};

    fn wr(wr_id: u64, signaled: bool) -> OpenWr {
        OpenWr {
            wr_id,
            post: 0,
            bytes: 1,
            lane: NO_LANE,
            inferred_lane: NO_LANE,
            opcode: 0,
            signaled,
        }
    }

    /// The first signaled WR of a wr_id is found where a scan of the open WRs finds it, across
    /// completions that drop the done front of the list.
    #[test]
    fn first_signaled_matches_a_scan_of_the_open_wrs() {
        let mut q = SendQueue::default();
        let scan =
            |q: &SendQueue, id: u64| q.open().iter().position(|w| w.wr_id == id && w.signaled);
        for round in 0..50u64 {
            for i in 0..37u64 {
                q.push(wr(i % 3, (i + round) % 5 == 0));
            }
            for id in 0..4 {
                assert_eq!(q.first_signaled(id), scan(&q, id));
            }
            let n = scan(&q, round % 3).map_or(q.len() / 2, |p| p + 1);
            assert_eq!(q.take_front(n).len(), n);
            for id in 0..4 {
                assert_eq!(q.first_signaled(id), scan(&q, id));
            }
        }
        let open = q.len();
        assert_eq!(q.take_all().count(), open);
        assert_eq!((q.len(), q.first_signaled(0)), (0, None));
    }
}

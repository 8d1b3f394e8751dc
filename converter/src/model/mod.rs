//! Model, dynamic part: one process's records in time order → matched work requests.
//!
//! Per QP the send queue is a FIFO of posted WRs: a completion with `wr_id` completes that WR
//! and every earlier one (unsignaled WRs complete with the next signaled one of their send
//! queue). Receives complete in RC order; SRQ receives by `wr_id`. The k-th message-consuming
//! send of a QP (SEND*, WRITE_WITH_IMM) is paired with the k-th successful receive completion of
//! its peer QP: both sides compute the same flow id from (sender, QPN, k), so no cross-process
//! state is needed while emitting. One-sided ops are also drawn on the target QP, marked
//! inferred. Memory is bounded by the open WRs and lanes, not by the trace length.

pub mod emit;
pub mod observed;
pub mod order;
pub mod polls;
pub mod ud;
mod wr;

use wr::{OpenWr, SendQueue, NO_LANE};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;

use sigmatrace_schemas::records::Record;

use crate::align::clock::RangeMap;
use crate::align::topology::{Process, Qp, Topology};
use crate::model::emit::{qp_group, Detail, Lanes, NameCache, SampledCounter};
use crate::model::observed::ObservedState;
use crate::read::hot::Hot;
use crate::read::input::{LogInput, RecordIssue};
use crate::read::verbs;
use sigmatrace_timeline::batch::{EventBatch, Recorder};
use sigmatrace_timeline::groups::PerfettoGroups;
use sigmatrace_timeline::{ArgKey, ArgValue, Extra, TraceSink};

/// What the model tells observers (stats sections).
#[derive(Clone, Copy, Debug)]
pub enum ModelEvent<'a> {
    /// Send-queue WRs completed (or failed) by one completion at `done`, with its status, in
    /// posting order. Times are output ns.
    WrsDone {
        qp: &'a Qp,
        wrs: &'a [DoneWr],
        done: i64,
        status: u8,
    },
    /// A receive completed on `qp`.
    RecvDone {
        qp: &'a Qp,
        bytes: u32,
        done: i64,
        status: u8,
    },
}

/// One WR of a [`ModelEvent::WrsDone`].
#[derive(Clone, Copy, Debug)]
pub struct DoneWr {
    pub opcode: u8,
    pub bytes: u32,
    /// When it was posted (output ns).
    pub post: i64,
}

/// Receives model events of one process.
pub trait Observer: Send {
    fn observe(&mut self, p: &Process, ev: &ModelEvent<'_>);
    /// Whether [`ModelEvent::WrsDone`] should list the WRs done (otherwise its list is
    /// empty: the WRs are not copied for an observer that does not look at them).
    fn wants_done_wrs(&self) -> bool {
        true
    }
    /// Raw records for report sections that need more than model events, at output time `t`:
    /// `WqeObserved`, `ObserveOverrun` and atomic `PostSend`s (see `report::direct`), and
    /// `EmptyPolls` that are not damaged (`report::waits`).
    fn record(&mut self, _p: &Process, _t: i64, _rec: &Record<'_>) {}
}

/// Where the model's events go: a sink that encodes them as they come, or a recorder whose
/// batches the process's group encoders encode ([`ProcessModel::run`]).
pub enum Output<'s> {
    Direct(&'s mut dyn TraceSink),
    Recorded(&'s mut Recorder, &'s mut PerfettoGroups),
}

impl Output<'_> {
    /// The sink the model feeds.
    pub fn sink(&mut self) -> &mut dyn TraceSink {
        match self {
            Output::Direct(s) => *s,
            Output::Recorded(r, _) => *r,
        }
    }
}

/// Events per recorded batch: the model hands a batch to the encoders when it holds at least
/// this many (checked every 256 records).
const BATCH_EVENTS: usize = 1 << 15;

/// Options of the model pass.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    pub detail: Detail,
    /// Only WRs posted (receives completed) inside [from, to) output ns are drawn.
    pub window: Option<(i64, i64)>,
    /// Per connection (an RC sending QP's, a UD stream's: the `conn` of its flow ids): the
    /// range of message indices whose both ends are drawn.
    pub flow_ranges: Option<HashMap<u64, (u64, u64)>>,
    /// Bytes of encoded output after which a block is handed to the writer.
    pub block_bytes: usize,
}

/// Totals of one process's model pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessTotals {
    pub wr_completed: u64,
    pub wr_failed: u64,
    pub recv_completed: u64,
    pub flows_out: u64,
    pub flows_in: u64,
    pub inferred: u64,
    pub orphan_completions: u64,
    pub incomplete_wrs: u64,
    pub slices: u64,
    pub max_lanes: u64,
    /// Receive WRs posted while [`RECV_LANES`] of their queue's were taken: not drawn as
    /// slices (their arrivals are, on the queue's arrival track).
    pub recv_undrawn: u64,
    /// GPU kernel executions whose end maps before their start (damaged): not drawn.
    pub kernels_malformed: u64,
    /// Observed WQEs first seen after the CQE that retires them: drawn as instants.
    pub observed_late: u64,
    /// Empty-poll runs (`EmptyPolls`), the empty polls they hold and their time (ns, first
    /// poll to last): where the process polled a CQ that had nothing for it.
    pub poll_runs: u64,
    pub empty_polls: u64,
    pub empty_poll_ns: u64,
    /// Empty-poll runs whose end maps before their start (damaged): not drawn or counted.
    pub poll_runs_malformed: u64,
}

/// Receive WRs drawn as slices at once per receive queue (a QP's or an SRQ's). Libraries keep
/// thousands posted ahead (UCX: 4 096 per QP), and one lane per outstanding receive made
/// thousands of tracks per QP; past this many, a receive's arrival is drawn (with its flow)
/// but not its wait, and the report counts them.
pub const RECV_LANES: usize = 16;

struct OpenRecv {
    wr_id: u64,
    bytes: u32,
    lane: Option<u32>,
    srq: bool,
}

struct QpState {
    /// The QP's group ([`qp_group`]), kept here so that it is not computed per WR.
    group: u32,
    /// Whether its one-sided ops are drawn on the peer QP's track too (normal detail or more,
    /// a matched peer with a track).
    draws_inferred: bool,
    send: SendQueue,
    recv: VecDeque<OpenRecv>,
    send_lanes: Lanes,
    recv_lanes: Lanes,
    /// Lanes this process draws on the peer QP's track (inferred arrivals).
    inferred_lanes: Lanes,
    arrivals: Option<u64>,
    sent_consuming: u64,
    recv_ok: u64,
    outstanding: SampledCounter,
    inflight: SampledCounter,
    inflight_bytes: i64,
}

struct Keys {
    wr_id: ArgKey,
    bytes: ArgKey,
    raddr: ArgKey,
    rkey: ArgKey,
    imm: ArgKey,
    status: ArgKey,
    from: ArgKey,
    incomplete: ArgKey,
}

/// Runs the model over one process's records.
pub struct ProcessModel<'a> {
    topo: &'a Topology,
    ud: &'a crate::model::ud::UdStreams,
    p: &'a Process,
    opts: &'a ModelOptions,
    uuids: &'a AtomicU64,
    names: NameCache,
    keys: Keys,
    qps: Vec<QpState>,
    srq_lanes: BTreeMap<u64, (u64, Lanes, VecDeque<OpenRecv>)>,
    observed: ObservedState,
    polls: crate::model::polls::PollRuns,
    qp_cache: crate::fastmap::IndexCache,
    /// Datagrams so far per UD stream ([`crate::model::ud`]).
    ud_k: Vec<u64>,
    throughput: (i64, i64),
    pub totals: ProcessTotals,
    last_t: i64,
    /// Records processed are added here (progress bar).
    pub progress: Option<&'a AtomicU64>,
    /// The process's "tracer losses" track, once a loss marker needed it.
    loss_track: Option<u64>,
    /// The WRs of the completion being modelled (reused).
    done: Vec<DoneWr>,
    /// The process's clock map, its checks dropped on the log's time range.
    clock: RangeMap,
}

/// Width of a throughput bucket (ns): each "completed bytes/s" sample is the bytes completed
/// in one bucket times `1e9 / THROUGHPUT_BUCKET`.
pub const THROUGHPUT_BUCKET: i64 = 100_000;

impl<'a> ProcessModel<'a> {
    pub fn new(
        topo: &'a Topology,
        ud: &'a crate::model::ud::UdStreams,
        pi: usize,
        opts: &'a ModelOptions,
        uuids: &'a AtomicU64,
        sink: &mut dyn TraceSink,
    ) -> Self {
        let p = &topo.procs[pi];
        let keys = Keys {
            wr_id: sink.arg_key("wr_id"),
            bytes: sink.arg_key("bytes"),
            raddr: sink.arg_key("remote_addr"),
            rkey: sink.arg_key("rkey"),
            imm: sink.arg_key("imm"),
            status: sink.arg_key("status"),
            from: sink.arg_key("from"),
            incomplete: sink.arg_key("incomplete"),
        };
        ProcessModel {
            topo,
            ud,
            p,
            opts,
            uuids,
            names: NameCache::default(),
            keys,
            qps: (p.qps.iter().enumerate())
                .map(|(qi, q)| QpState {
                    group: qp_group(qi),
                    draws_inferred: opts.detail >= Detail::Normal
                        && q.peer.is_some()
                        && q.peer_track != 0,
                    send: SendQueue::default(),
                    recv: VecDeque::new(),
                    send_lanes: Lanes::default(),
                    recv_lanes: Lanes::default(),
                    inferred_lanes: Lanes::default(),
                    arrivals: None,
                    sent_consuming: 0,
                    recv_ok: 0,
                    outstanding: SampledCounter::new(opts.detail.counter_interval()),
                    inflight: SampledCounter::new(opts.detail.counter_interval()),
                    inflight_bytes: 0,
                })
                .collect(),
            srq_lanes: BTreeMap::new(),
            observed: ObservedState::default(),
            polls: Default::default(),
            qp_cache: Default::default(),
            ud_k: vec![0; ud.slots.get(pi).copied().unwrap_or(0)],
            throughput: (i64::MIN, 0),
            totals: ProcessTotals::default(),
            last_t: 0,
            progress: None,
            loss_track: None,
            done: Vec::new(),
            clock: RangeMap::new(p.map, p.min_ts, p.max_ts),
        }
    }

    #[inline]
    fn drawn(&self, t: i64) -> bool {
        match self.opts.window {
            Some((a, b)) => t >= a && t < b,
            None => true,
        }
    }

    /// Whether message `k` of connection `conn` is drawn with its flow: it has one (below
    /// `limit`) and, in a time window, both its ends are inside.
    fn flow_ok(&self, conn: u64, k: u64, limit: u64) -> bool {
        if k >= limit {
            return false;
        }
        match &self.opts.flow_ranges {
            Some(r) => r.get(&conn).is_some_and(|&(lo, hi)| k >= lo && k < hi),
            None => true,
        }
    }

    /// Processes every record of the log, flushing encoded blocks through `flush`: into `out`
    /// directly, or recorded and encoded in batches — each batch's groups encoded (in
    /// parallel) while the next batch is modelled, the blocks flushed in batch order.
    pub fn run(
        &mut self,
        input: &LogInput,
        out: Output<'_>,
        kernel_sink: &mut dyn TraceSink,
        obs: &mut dyn Observer,
        flush: &mut dyn FnMut(Vec<u8>),
    ) -> Vec<RecordIssue> {
        let mut recs = input.merged();
        let mut n = 0u32;
        let sink = match out {
            Output::Direct(sink) => {
                self.records(&mut recs, &mut n, sink, kernel_sink, obs, flush, None);
                self.finish(sink);
                flush(sink.take());
                sink
            }
            Output::Recorded(rec, enc) => {
                let mut ready: Option<EventBatch> = None;
                loop {
                    let mut kernel = Vec::new();
                    let (more, encoded) = rayon::join(
                        || {
                            let mut keep = |b: Vec<u8>| kernel.push(b);
                            let limit = Some(BATCH_EVENTS);
                            self.records(&mut recs, &mut n, rec, kernel_sink, obs, &mut keep, limit)
                        },
                        || ready.take().map(|b| (enc.encode_blocks(&b), b)),
                    );
                    kernel.into_iter().for_each(&mut *flush);
                    if let Some((blocks, batch)) = encoded {
                        blocks.into_iter().for_each(&mut *flush);
                        rec.give_back(batch);
                    }
                    if !more {
                        break;
                    }
                    ready = Some(rec.take_batch());
                }
                self.finish(rec);
                // The last batch goes back too: the next process's recorder (pooled) records
                // into lists that have their capacity already.
                let last = rec.take_batch();
                enc.encode_blocks(&last).into_iter().for_each(&mut *flush);
                rec.give_back(last);
                enc.take_blocks().into_iter().for_each(&mut *flush);
                rec
            }
        };
        let _ = sink;
        if let Some(p) = self.progress {
            p.fetch_add((n % (1 << 16)) as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.totals.slices += self.observed.slices;
        self.totals.inferred += self.observed.inferred;
        self.totals.observed_late += self.observed.late;
        self.totals.kernels_malformed += self.observed.kernels_malformed;
        self.totals.poll_runs += self.polls.runs;
        self.totals.empty_polls += self.polls.polls;
        self.totals.empty_poll_ns += self.polls.ns;
        self.totals.poll_runs_malformed += self.polls.malformed;
        self.totals.slices += self.polls.drawn;
        flush(kernel_sink.take());
        std::mem::take(&mut recs.issues)
    }

    /// Models records until the end (false) or, with `batch`, until the recorder holds at
    /// least that many events (true: more to come). Direct sinks hand their ready blocks to
    /// `flush` as they fill.
    #[allow(clippy::too_many_arguments)]
    fn records<S: TraceSink + ?Sized>(
        &mut self,
        recs: &mut crate::read::input::MergedRecords<'_>,
        n: &mut u32,
        sink: &mut S,
        kernel_sink: &mut dyn TraceSink,
        obs: &mut dyn Observer,
        flush: &mut dyn FnMut(Vec<u8>),
        batch: Option<usize>,
    ) -> bool {
        while let Some((ts, r)) = recs.next() {
            let t = self.clock.map(ts);
            self.last_t = self.last_t.max(t);
            match Hot::of(r) {
                Some(Hot::PostSend(ps)) => {
                    if ps.opcode == verbs::wr::ATOMIC_FETCH_AND_ADD
                        || ps.opcode == verbs::wr::ATOMIC_CMP_AND_SWP
                    {
                        obs.record(self.p, t, &Record::PostSend(ps));
                    }
                    self.post_send(sink, t, ts, ps);
                }
                Some(Hot::PostRecv(pr)) => {
                    self.post_recv(sink, t, ts, pr);
                }
                Some(Hot::Completion(wc)) => {
                    let qi = self
                        .p
                        .completion_qp(&mut self.qp_cache, wc.qpn, ts, r.offset);
                    self.completion(sink, obs, t, qi, wc)
                }
                None if Hot::is_hot_kind(r.kind) => continue,
                None => self.other(sink.as_dyn(), kernel_sink, obs, t, r),
            }
            *n = n.wrapping_add(1);
            if n.is_multiple_of(1 << 16) {
                if let Some(p) = self.progress {
                    p.fetch_add(1 << 16, std::sync::atomic::Ordering::Relaxed);
                }
            }
            if n.is_multiple_of(256) {
                if kernel_sink.pending_bytes() >= self.opts.block_bytes {
                    flush(kernel_sink.take());
                }
                match batch {
                    Some(events) if sink.recorded() >= events => return true,
                    Some(_) => {}
                    None => {
                        let b = sink.take_ready(self.opts.block_bytes);
                        if !b.is_empty() {
                            flush(b);
                        }
                    }
                }
            }
        }
        false
    }

    #[cold]
    fn other(
        &mut self,
        sink: &mut dyn TraceSink,
        kernel_sink: &mut dyn TraceSink,
        obs: &mut dyn Observer,
        t: i64,
        r: &sigmatrace_schemas::reader::RawRecord<'_>,
    ) {
        let Ok(rec) = r.decode() else { return };
        sink.group(0);
        if let Record::Dropped(d) = rec {
            let track = (self.uuids, self.p.track, &mut self.loss_track);
            return crate::model::emit::loss_marker(sink, track, t as u64, d);
        }
        if let Record::EmptyPolls(e) = rec {
            let (detail, window) = (self.opts.detail, self.opts.window);
            let p = self.p;
            if self
                .polls
                .record(p, kernel_sink, self.uuids, detail, window, e)
                .is_some()
            {
                obs.record(p, t, &rec);
            }
            return;
        }
        if matches!(rec, Record::WqeObserved(_) | Record::ObserveOverrun(_)) {
            obs.record(self.p, t, &rec);
        }
        if matches!(
            rec,
            Record::WqeObserved(_)
                | Record::CqeObserved(_)
                | Record::QueueDiscovered(_)
                | Record::KernelLaunch(_)
                | Record::KernelExec(_)
                | Record::StringDef(_)
        ) {
            let ctx = crate::model::observed::Ctx {
                topo: self.topo,
                p: self.p,
                uuids: self.uuids,
                detail: self.opts.detail,
                window: self.opts.window,
            };
            self.observed
                .record(&ctx, sink, kernel_sink, &mut self.names, t, &rec);
        }
    }

    fn post_send<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        t: i64,
        ts: u64,
        ps: &sigmatrace_schemas::records::PostSend,
    ) {
        let Some(qi) = self.p.qp_at(&mut self.qp_cache, ps.qpn, ts) else {
            return;
        };
        let drawn = self.drawn(t);
        // Counts the send (nothing is drawn there).
        let flow = self.send_flow(qi, ps, drawn);
        // The QP and its state are looked up once, the rest of the model borrowed beside them.
        let p = self.p;
        let q = &p.qps[qi];
        let st = &mut self.qps[qi];
        sink.group(st.group);
        let (lane, inferred_lane) = if drawn {
            let mut ctx = wr::SendCtx {
                p,
                uuids: self.uuids,
                names: &mut self.names,
                keys: &self.keys,
                totals: &mut self.totals,
                detail: self.opts.detail,
            };
            ctx.begin_send(sink, t, q, st, ps, flow)
        } else {
            (None, None)
        };
        st.send.push(OpenWr {
            wr_id: ps.wr_id,
            post: t,
            opcode: ps.opcode,
            bytes: ps.bytes,
            lane: lane.unwrap_or(NO_LANE),
            inferred_lane: inferred_lane.unwrap_or(NO_LANE),
            signaled: ps.hdr.aux & verbs::SEND_SIGNALED != 0,
        });
        st.inflight_bytes += ps.bytes as i64;
        if drawn {
            let n = st.send.len() as i64;
            st.outstanding.set(sink, q.outstanding_track, t, n);
            st.inflight
                .set(sink, q.inflight_bytes_track, t, st.inflight_bytes);
        }
    }

    fn post_recv<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        t: i64,
        ts: u64,
        pr: &sigmatrace_schemas::records::PostRecv,
    ) {
        let (wr_id, qpn, srq, bytes) = (pr.wr_id, pr.qpn, pr.srq, pr.bytes);
        let drawn = self.drawn(t) && self.opts.detail >= Detail::Normal;
        if qpn == 0 && srq != 0 {
            sink.group(0);
            let entry = self
                .srq_lanes
                .entry(srq)
                .or_insert_with(|| (0, Lanes::default(), VecDeque::new()));
            if drawn && entry.0 == 0 {
                let uuid = self
                    .uuids
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                sink.track(&sigmatrace_timeline::TrackDef::slices(
                    uuid,
                    Some(self.p.track),
                    format!("SRQ {srq:#x}"),
                ));
                entry.0 = uuid;
            }
            let recv = wr::RecvSlice {
                track: (entry.0, "posted receives"),
                t,
                bytes,
            };
            let lane = if drawn {
                recv.begin(
                    sink,
                    self.uuids,
                    &mut self.names,
                    &mut entry.1,
                    &mut self.totals,
                )
            } else {
                None
            };
            entry.2.push_back(OpenRecv {
                wr_id,
                bytes,
                lane,
                srq: true,
            });
            return;
        }
        let Some(qi) = self.p.qp_at(&mut self.qp_cache, qpn, ts) else {
            return;
        };
        let q = &self.p.qps[qi];
        let st = &mut self.qps[qi];
        sink.group(st.group);
        let recv = wr::RecvSlice {
            track: (q.track, "recv"),
            t,
            bytes,
        };
        let lane = if drawn {
            recv.begin(
                sink,
                self.uuids,
                &mut self.names,
                &mut st.recv_lanes,
                &mut self.totals,
            )
        } else {
            None
        };
        st.recv.push_back(OpenRecv {
            wr_id,
            bytes,
            lane,
            srq: false,
        });
    }

    fn completion<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        obs: &mut dyn Observer,
        t: i64,
        qi: Option<usize>,
        wc: &sigmatrace_schemas::records::WorkCompletion,
    ) {
        let Some(qi) = qi else {
            self.totals.orphan_completions += 1;
            return;
        };
        // Completed bytes: a receive's `byte_len`; for a send-side completion the posted bytes
        // of every WR it completes (the unsignaled ones before it included) — its own
        // `byte_len` is defined for reads and atomics only (`ibv_poll_cq(3)`; mlx5 leaves it
        // as the caller's array held it for writes and sends).
        let on_recv = if wc.status == 0 {
            wc.opcode >= verbs::wc::RECV
        } else {
            self.failed_on_recv(qi, wc)
        };
        let bytes = if on_recv {
            self.recv_completion(sink, obs, t, qi, wc);
            wc.byte_len as i64
        } else {
            sink.group(self.qps[qi].group);
            self.send_completion(sink, obs, t, qi, wc)
        };
        self.account_throughput(sink, t, if wc.status == 0 { bytes } else { 0 });
    }

    fn account_throughput<S: TraceSink + ?Sized>(&mut self, sink: &mut S, t: i64, bytes: i64) {
        let bucket = t.div_euclid(THROUGHPUT_BUCKET);
        if bucket != self.throughput.0 {
            self.emit_throughput(sink, t, Some(bucket));
            self.throughput = (bucket, 0);
        }
        self.throughput.1 += bytes;
    }

    /// Writes the throughput bucket in progress (its rate at its end), when there is one and
    /// `t` is drawn; then a zero one bucket later unless `next` (the bucket of the completion
    /// at `t`; `None`: the log's end) directly follows it.
    fn emit_throughput<S: TraceSink + ?Sized>(&mut self, sink: &mut S, t: i64, next: Option<i64>) {
        let (bucket, bytes) = self.throughput;
        if bucket == i64::MIN || !self.drawn(t) {
            return;
        }
        sink.group(0);
        let end = (bucket + 1) * THROUGHPUT_BUCKET;
        let rate = bytes * (1_000_000_000 / THROUGHPUT_BUCKET);
        sink.counter(end as u64, self.p.throughput_track, rate);
        if next.is_none_or(|n| n > bucket + 1) {
            sink.counter((end + THROUGHPUT_BUCKET) as u64, self.p.throughput_track, 0);
        }
    }

    fn recv_completion<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        obs: &mut dyn Observer,
        t: i64,
        qi: usize,
        wc: &sigmatrace_schemas::records::WorkCompletion,
    ) {
        let q = &self.p.qps[qi];
        let found = self.take_recv(qi, wc.wr_id);
        let ok = wc.status == 0;
        let drawn = self.drawn(t);
        let term = if ok {
            self.recv_flow(qi, wc, drawn)
        } else {
            None
        };
        let imm = wc.opcode == verbs::wc::RECV_RDMA_WITH_IMM || (wc.hdr.aux & 2) != 0;
        let full = self.opts.detail == Detail::Full;
        let status_str = verbs::status_name(wc.status);
        let args = [
            (self.keys.bytes, ArgValue::U64(wc.byte_len as u64)),
            (self.keys.imm, ArgValue::Hex(wc.imm as u64)),
            (self.keys.status, ArgValue::Str(status_str)),
        ];
        let args_used: &[(ArgKey, ArgValue)] = if full {
            if imm {
                &args[..]
            } else {
                &[args[0], args[2]][..]
            }
        } else if !ok {
            &args[2..]
        } else {
            &[]
        };
        // Receives posted to an SRQ are drawn on its lanes (group 0), the others on the QP's.
        let srq_recv = found.as_ref().is_some_and(|f| f.0.srq);
        sink.group(if srq_recv { 0 } else { self.qps[qi].group });
        if drawn {
            let name = if ok {
                self.names.recv(sink, wc.byte_len, imm, true)
            } else {
                self.names.error(sink, wc.status)
            };
            let extra = Extra {
                args: args_used,
                flows: &[],
                terminating: term.as_slice(),
            };
            // The arrival marker sits on the receive WR's lane (inside its slice) or, when
            // receive slices are not drawn, on the QP's arrivals track.
            let track = match found.as_ref().and_then(|f| f.1) {
                Some(u) => u,
                None => self.arrivals_track(sink, qi),
            };
            sink.instant(t as u64, track, name, &extra);
        }
        if let Some((r, uuid)) = found {
            self.end_recv(sink, t, qi, r, uuid);
        }
        self.totals.recv_completed += 1;
        obs.observe(
            self.p,
            &ModelEvent::RecvDone {
                qp: q,
                bytes: wc.byte_len,
                done: t,
                status: wc.status,
            },
        );
    }

    /// Closes what is still open at the end of the log.
    fn finish<S: TraceSink + ?Sized>(&mut self, sink: &mut S) {
        let t = self.last_t;
        let args = [(self.keys.incomplete, ArgValue::Bool(true))];
        let extra = Extra {
            args: &args,
            ..Extra::NONE
        };
        for (qi, st) in self.qps.iter_mut().enumerate() {
            let q = &self.p.qps[qi];
            // The most send lanes a QP used: they are only ever added, by drawn sends.
            self.totals.max_lanes = self.totals.max_lanes.max(st.send_lanes.count() as u64);
            sink.group(st.group);
            for w in st.send.take_all() {
                self.totals.incomplete_wrs += 1;
                if let Some(l) = w.lane() {
                    sink.end(t as u64, st.send_lanes.uuid(l), &extra);
                }
                if let Some(l) = w.inferred_lane() {
                    sink.end(t as u64, st.inferred_lanes.uuid(l), &extra);
                }
            }
            while let Some(r) = st.recv.pop_front() {
                if let Some(l) = r.lane {
                    sink.end(t as u64, st.recv_lanes.uuid(l), &extra);
                }
            }
            st.outstanding.flush(sink, q.outstanding_track, t);
            st.inflight.flush(sink, q.inflight_bytes_track, t);
        }
        sink.group(0);
        for (_, lanes, open) in self.srq_lanes.values_mut() {
            while let Some(r) = open.pop_front() {
                if let Some(l) = r.lane {
                    sink.end(t as u64, lanes.uuid(l), &extra);
                }
            }
        }
        self.observed.finish(sink.as_dyn(), t);
        // The last bucket's bytes (and the end of the traffic).
        self.emit_throughput(sink, t, None);
    }
}

//! GPU-side records: WQEs/CQEs observed in queue memory (GPU-initiated RDMA, or verbs bypassed
//! by UCX-style libraries) and kernel launches/executions.
//!
//! Observed WQEs are drawn on per-QP tracks — under a "GPU-initiated queues" track when the ring
//! lives in GPU memory, else under the process — from the time the WQE was seen to the CQE that
//! retires it. A CQE's `wqe_counter` retires every earlier WQE of the ring (selective
//! signalling). Kernels go to "GPU n / stream s" tracks on the process's second sequence, which
//! uses absolute timestamps (executions are reported after they end, out of time order);
//! `%globaltimer` times are mapped through the device's `GpuClockPair` fit. A CUDA graph
//! launch is one slice there too, named after its executable graph ("CUDA graph 0x…").

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use sigmatrace_mlx5::cqe::opcode as cqe_op;
use sigmatrace_schemas::records::{
    launch_api, mem_kind, queue_kind, string_ns, CqeObserved, KernelExec, Record, WqeObserved,
};

use crate::align::topology::{Process, Topology};
use crate::model::emit::{Detail, Lanes, NameCache};
use crate::read::verbs;
use sigmatrace_timeline::{ArgValue, Extra, TraceSink, TrackDef, TrackKind};

/// What the model of observed records needs from its process.
pub struct Ctx<'a> {
    pub topo: &'a Topology,
    pub p: &'a Process,
    pub uuids: &'a AtomicU64,
    pub detail: Detail,
    pub window: Option<(i64, i64)>,
}

#[derive(Default)]
struct ObservedQp {
    track: u64,
    lanes: Lanes,
    /// Lanes this process draws on the peer QP's track (inferred arrivals).
    inferred: Lanes,
    /// Open WQEs: index, lane, inferred-arrival lane.
    open: VecDeque<(u16, Option<u32>, Option<u32>)>,
    /// The `wqe_counter` of the last send-side CQE: WQEs up to it have completed.
    retired_to: Option<u16>,
}

/// One process's observed WQEs/CQEs (queue memory) and GPU kernels, bounded by the open WQEs
/// and the kernels in flight.
#[derive(Default)]
pub struct ObservedState {
    gpu_queues_track: Option<u64>,
    qps: std::collections::BTreeMap<u32, ObservedQp>,
    /// Launches waiting for their execution, by correlation: function (an executable graph
    /// for [`launch_api::CU_GRAPH_LAUNCH`]), stream, device, launch API.
    launches: HashMap<u64, (u64, u64, u16, u32)>,
    kernel_names: HashMap<u64, String>,
    devices: HashMap<u32, u64>,
    /// Per (device, stream): its lane tracks and the end of each lane's last kernel.
    streams: HashMap<(u32, u64), Vec<(u64, i64)>>,
    pub slices: u64,
    /// Inferred arrivals of one-sided WQEs drawn on their target QPs.
    pub inferred: u64,
    /// WQEs first seen after the CQE that retires them (drawn as instants).
    pub late: u64,
    /// Kernel executions whose end maps before their start (damaged): not drawn.
    pub kernels_malformed: u64,
}

/// The track of the QP an observed WQE acts on, when its arrival there is drawn: a one-sided
/// op ([`verbs::mlx5_one_sided`]) at normal detail or more, on a QP whose traced peer has a
/// track, and none of whose WRs were posted through verbs (those are drawn from their posts;
/// a ring the tracer watches shows them again).
fn inferred_target(ctx: &Ctx<'_>, w: &WqeObserved) -> Option<u64> {
    if ctx.detail < Detail::Normal || !verbs::mlx5_one_sided(w.opcode) {
        return None;
    }
    let q = ctx.p.qp(w.qpn)?;
    (q.peer.is_some() && q.peer_track != 0 && q.counts.posts == 0).then_some(q.peer_track)
}

fn new_uuid(u: &AtomicU64) -> u64 {
    u.fetch_add(1, Ordering::Relaxed)
}

impl ObservedState {
    /// Handles one GPU-related record at output time `t`.
    pub fn record(
        &mut self,
        ctx: &Ctx<'_>,
        sink: &mut dyn TraceSink,
        kernel_sink: &mut dyn TraceSink,
        names: &mut NameCache,
        t: i64,
        rec: &Record<'_>,
    ) {
        let drawn = ctx.window.is_none_or(|(a, b)| t >= a && t < b);
        match rec {
            Record::StringDef(m) if m.aux == string_ns::FUNCTION => {
                self.kernel_names.insert(m.key, m.text().into_owned());
            }
            Record::WqeObserved(w) => self.wqe(ctx, sink, names, t, drawn, w),
            // A send ring registered again (its QP made anew under the same number, say):
            // its WQE indices start over.
            Record::QueueDiscovered(d) if d.hdr.aux & 0xff == queue_kind::SEND => {
                if let Some(q) = self.qps.get_mut(&d.number) {
                    q.retired_to = None;
                }
            }
            Record::CqeObserved(c) => self.cqe(sink, names, t, drawn, c),
            Record::KernelLaunch(k) => {
                self.launches
                    .insert(k.correlation, (k.function, k.stream, k.device, k.hdr.aux));
            }
            Record::KernelExec(k) => self.kernel_exec(ctx, kernel_sink, k),
            _ => {}
        }
    }

    /// A WQE seen in queue memory: opens its slice on the QP's observed track (created on first
    /// use, under "GPU-initiated queues" for rings in GPU memory).
    fn wqe(
        &mut self,
        ctx: &Ctx<'_>,
        sink: &mut dyn TraceSink,
        names: &mut NameCache,
        t: i64,
        drawn: bool,
        w: &WqeObserved,
    ) {
        let on_gpu = w.memory == mem_kind::GPU;
        let parent = if on_gpu {
            *self.gpu_queues_track.get_or_insert_with(|| {
                let u = new_uuid(ctx.uuids);
                sink.track(&TrackDef::slices(
                    u,
                    Some(ctx.p.track),
                    "GPU-initiated queues",
                ));
                u
            })
        } else {
            ctx.p.track
        };
        let q = self.qps.entry(w.qpn).or_insert_with(|| {
            let u = new_uuid(ctx.uuids);
            let label = match ctx.p.qp(w.qpn).and_then(|q| q.peer) {
                Some((pp, pq)) => format!(
                    "QP {:#x} observed → {} QP {pq:#x}",
                    w.qpn,
                    ctx.topo.procs[pp].label()
                ),
                None => format!("QP {:#x} observed", w.qpn),
            };
            sink.track(&TrackDef::slices(u, Some(parent), label));
            ObservedQp {
                track: u,
                ..Default::default()
            }
        });
        if q.retired_to
            .is_some_and(|c| c.wrapping_sub(w.wqe_index) < 0x8000)
        {
            self.late += 1;
            if drawn {
                let peer_track = inferred_target(ctx, w);
                let wn = names.wqe(sink, w.opcode, w.bytes);
                let inn = peer_track.map(|_| names.inferred_wqe(sink, w.opcode, w.bytes));
                let k = sink.arg_key("seen after its completion");
                let args = [(k, ArgValue::Bool(true))];
                let extra = Extra {
                    args: &args,
                    ..Extra::NONE
                };
                sink.instant(t as u64, q.track, wn, &extra);
                if let (Some(track), Some(name)) = (peer_track, inn) {
                    sink.instant(t as u64, track, name, &extra);
                    self.inferred += 1;
                }
            }
            return;
        }
        let mut lane = None;
        let mut inferred = None;
        if drawn {
            let name = names.wqe(sink, w.opcode, w.bytes);
            let (l, uuid) = q.lanes.acquire(sink, ctx.uuids, q.track, "WQEs");
            lane = Some(l);
            sink.begin(t as u64, uuid, name, &Extra::NONE);
            self.slices += 1;
            if let Some(peer_track) = inferred_target(ctx, w) {
                let name = names.inferred_wqe(sink, w.opcode, w.bytes);
                let (l, uuid) =
                    q.inferred
                        .acquire(sink, ctx.uuids, peer_track, "inferred arrivals");
                inferred = Some(l);
                sink.begin(t as u64, uuid, name, &Extra::NONE);
                self.slices += 1;
                self.inferred += 1;
            }
        }
        q.open.push_back((w.wqe_index, lane, inferred));
    }

    /// A CQE seen in queue memory: retires every WQE up to its `wqe_counter`, marks errors.
    fn cqe(
        &mut self,
        sink: &mut dyn TraceSink,
        names: &mut NameCache,
        t: i64,
        drawn: bool,
        c: &CqeObserved,
    ) {
        let Some(q) = self.qps.get_mut(&c.qpn) else {
            return;
        };
        let failed = c.opcode == cqe_op::REQ_ERR || c.opcode == cqe_op::RESP_ERR;
        // Only a send-side CQE retires send WQEs: a responder's `wqe_counter` counts its
        // receive queue.
        let requester = c.opcode == cqe_op::REQ || c.opcode == cqe_op::REQ_ERR;
        if requester {
            q.retired_to = Some(c.wqe_counter);
        }
        while let Some(&(idx, lane, inferred)) = q.open.front().filter(|_| requester) {
            if c.wqe_counter.wrapping_sub(idx) >= 0x8000 {
                break;
            }
            q.open.pop_front();
            if let Some(l) = lane {
                sink.end(t as u64, q.lanes.uuid(l), &Extra::NONE);
                q.lanes.release(l);
            }
            if let Some(l) = inferred {
                sink.end(t as u64, q.inferred.uuid(l), &Extra::NONE);
                q.inferred.release(l);
            }
        }
        if failed && drawn {
            let name = names.other(sink, 10, "✗ CQE error");
            let k = sink.arg_key("syndrome");
            let args = [(k, ArgValue::Hex(c.syndrome as u64))];
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

    /// A kernel execution: its slice on the launch's "GPU n / stream s" track, in output time.
    fn kernel_exec(&mut self, ctx: &Ctx<'_>, kernel_sink: &mut dyn TraceSink, k: &KernelExec) {
        let Some((func, stream, dev, api)) = self.launches.remove(&k.correlation) else {
            return;
        };
        let map = |v: u64| -> i64 {
            if k.hdr.aux == 1 {
                match ctx.p.gpu.device(k.device) {
                    Some(m) => ctx.p.time(m.map(v).max(0) as u64),
                    None => ctx.p.time(v),
                }
            } else {
                ctx.p.time(v)
            }
        };
        let (s, e) = (map(k.start), map(k.end));
        if !ctx.window.is_none_or(|(a, b)| s >= a && s < b) {
            return;
        }
        if e < s {
            self.kernels_malformed += 1;
            return;
        }
        let dev = dev as u32;
        let dev_track = *self.devices.entry(dev).or_insert_with(|| {
            let u = new_uuid(ctx.uuids);
            kernel_sink.track(&TrackDef::slices(
                u,
                Some(ctx.p.track),
                format!("GPU {dev}"),
            ));
            u
        });
        // A stream's kernels are drawn at the times reported, never moved: one that starts
        // before the last one on a lane ended (programmatic dependent launch lets a stream's
        // kernels overlap) goes to the first lane free by then, a new one if none is; the
        // lanes of a stream share its name and merge key (one track in the UI).
        let lanes = self.streams.entry((dev, stream)).or_default();
        let lane = match lanes.iter().position(|l| l.1 <= s) {
            Some(i) => i,
            None => {
                let u = new_uuid(ctx.uuids);
                let name = format!("stream {stream:#x}");
                kernel_sink.track(&TrackDef {
                    kind: TrackKind::Slices {
                        merge_key: Some(name.clone()),
                    },
                    ..TrackDef::slices(u, Some(dev_track), name)
                });
                lanes.push((u, i64::MIN));
                lanes.len() - 1
            }
        };
        lanes[lane].1 = e;
        let track = lanes[lane].0;
        let fname = if api == launch_api::CU_GRAPH_LAUNCH {
            format!("CUDA graph {func:#x}")
        } else {
            self.kernel_names
                .get(&func)
                .cloned()
                .unwrap_or_else(|| format!("kernel {func:#x}"))
        };
        let name = kernel_sink.name(&fname);
        kernel_sink.begin(s as u64, track, name, &Extra::NONE);
        kernel_sink.end(e as u64, track, &Extra::NONE);
        self.slices += 1;
    }

    /// Closes WQE slices still open at the end.
    pub fn finish(&mut self, sink: &mut dyn TraceSink, t: i64) {
        for q in self.qps.values_mut() {
            while let Some((_, lane, inferred)) = q.open.pop_front() {
                if let Some(l) = lane {
                    sink.end(t as u64, q.lanes.uuid(l), &Extra::NONE);
                }
                if let Some(l) = inferred {
                    sink.end(t as u64, q.inferred.uuid(l), &Extra::NONE);
                }
            }
        }
    }
}

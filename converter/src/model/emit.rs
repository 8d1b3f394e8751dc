//! Emit: turns model decisions into timeline calls on a [`TraceSink`] — the static track tree
//! (processes, QPs, counters), lanes for overlapping work requests, interned names, sampled
//! counters. Knows SigmaTrace types; the sink does not.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::align::topology::{Process, Qp, Topology};
use crate::read::verbs;
use sigmatrace_timeline::batch::Recorder;
use sigmatrace_timeline::groups::PerfettoGroups;
use sigmatrace_timeline::perfetto::PerfettoSeq;
use sigmatrace_timeline::{CounterUnit, Extra, Name, TraceSink, TrackDef, TrackKind};

/// Most packet sequences of one process's events: group 0 for the process's own tracks
/// (throughput, SRQs, observed queues, losses), the others for its QPs ([`qp_group`]).
pub const MAX_GROUPS: usize = 16;

/// Pending bytes after which a group's block goes out (each group keeps one block in memory).
const GROUP_BLOCK: usize = 512 << 10;

/// The group of the process's QP `qi` (its WR lanes, inferred arrivals and counters): QPs
/// are spread over groups 1.. so that each group's bursts repeat within the compressor's
/// reach (`sigmatrace_timeline::groups`).
#[inline]
pub fn qp_group(qi: usize) -> u32 {
    1 + (qi % (MAX_GROUPS - 1)) as u32
}

/// The Perfetto sequences of process `p`'s events (not its GPU kernels): one sequence per group,
/// group 0 with the process's own sequence id, the others with ids after the processes'
/// and GPU sequences (`2n + 1 + index × 15 + g − 1`), incremental timestamps from `t_start`;
/// compressed while encoding with `fast`.
pub fn process_groups(
    topo: &Topology,
    p: &Process,
    t_start: u64,
    fast: bool,
    pool: &SeqPool,
) -> PerfettoGroups {
    let n = topo.procs.len() as u32;
    let groups = 1 + p.qps.len().min(MAX_GROUPS - 1);
    let seqs = (0..groups)
        .map(|g| {
            let id = if g == 0 {
                p.seq
            } else {
                2 * n + 1 + p.index as u32 * (MAX_GROUPS as u32 - 1) + g as u32 - 1
            };
            pool.take(id, t_start, fast)
        })
        .collect();
    PerfettoGroups::new(seqs, GROUP_BLOCK)
}

/// Packet sequences of processes already modelled, renewed for the next ones
/// ([`PerfettoSeq::renew`]: the same bytes as new sequences), so that their buffers stay
/// allocated and resident instead of being freed and faulted in again for every process.
#[derive(Default)]
pub struct SeqPool {
    seqs: std::sync::Mutex<Vec<PerfettoSeq>>,
    recorders: std::sync::Mutex<Vec<Recorder>>,
}

/// Most sequences a pool keeps (each holds up to a block and its tables, about 1 MiB).
const POOL_SEQS: usize = 64;

impl SeqPool {
    /// A new incremental sequence `id` from `t_start`, compressed while written with `fast`.
    fn take(&self, id: u32, t_start: u64, fast: bool) -> PerfettoSeq {
        let old = self.seqs.lock().ok().and_then(|mut v| {
            let i = v.iter().rposition(|s| s.is_compressed() == fast)?;
            Some(v.swap_remove(i))
        });
        match old {
            Some(s) => s.renew(id, true, t_start),
            None if fast => PerfettoSeq::new(id, true, t_start).compressed(),
            None => PerfettoSeq::new(id, true, t_start),
        }
    }

    /// A recorder of `groups` groups.
    pub fn recorder(&self, groups: usize) -> Recorder {
        match self.recorders.lock().ok().and_then(|mut v| v.pop()) {
            Some(r) => r.renew(groups),
            None => Recorder::new(groups),
        }
    }

    /// Keeps a process's recorder and sequences, done, for the next processes.
    pub fn put(&self, recorder: Recorder, groups: PerfettoGroups) {
        if let Ok(mut v) = self.seqs.lock() {
            for s in groups.into_seqs() {
                if v.len() < POOL_SEQS {
                    v.push(s);
                }
            }
        }
        if let Ok(mut v) = self.recorders.lock() {
            if v.len() < POOL_SEQS / 8 {
                v.push(recorder);
            }
        }
    }
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Format {
    /// Perfetto protobuf trace (open in ui.perfetto.dev).
    #[default]
    Perfetto,
    /// Chrome JSON trace event format.
    ChromeJson,
}

/// How much per-WR detail the trace carries (see README "Detail levels").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize,
)]
pub enum Detail {
    /// Send-side WR slices, receive completions with flows, sparse counters.
    Compact,
    /// Plus receive WR slices, inferred arrivals on target QPs, denser counters.
    #[default]
    Normal,
    /// Plus per-WR arguments (wr_id, addresses, keys, status), exact counters and empty-poll runs.
    Full,
}

impl Detail {
    /// Minimum spacing of QP counter samples (ns).
    pub fn counter_interval(self) -> i64 {
        match self {
            Detail::Compact => 100_000,
            Detail::Normal => 10_000,
            Detail::Full => 0,
        }
    }
}

/// Slice tracks used one open slice at a time, grown on demand: overlapping WRs on one QP go to
/// different lanes, all merged in the UI by one sibling merge key.
#[derive(Default)]
pub struct Lanes {
    /// The lanes, 64 to a word: lane `i` is bit and track `i % 64` of word `i / 64`.
    words: Vec<LaneWord>,
    /// Lanes created.
    count: usize,
    /// Words below this one have no free lane.
    first_free_word: usize,
}

/// 64 lanes of [`Lanes`]: which are free (a bit each, the lowest is taken first) and their
/// tracks (0 past the lanes created), side by side so that a lane's bit and track are found
/// with one look-up.
struct LaneWord {
    free: u64,
    tracks: [u64; 64],
}

impl Lanes {
    /// Takes the lowest free lane (creating its track if needed); returns (lane, uuid).
    #[inline]
    pub fn acquire<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        uuids: &AtomicU64,
        parent: u64,
        key: &'static str,
    ) -> (u32, u64) {
        match self.take_free() {
            Some(l) => l,
            None => self.new_lane(sink, uuids, parent, key),
        }
    }

    /// The lowest free lane, taken (lane, uuid); `None` when a new one is needed.
    #[inline(always)]
    pub fn take_free(&mut self) -> Option<(u32, u64)> {
        // Nearly always the word remembered has one: taken without a loop.
        if let Some(w) = self.words.get_mut(self.first_free_word) {
            if w.free != 0 {
                return Some(w.take_lowest(self.first_free_word));
            }
        }
        self.take_free_after()
    }

    /// [`Lanes::take_free`] when the word remembered has no free lane: the words after it.
    #[inline(never)]
    fn take_free_after(&mut self) -> Option<(u32, u64)> {
        while let Some(w) = self.words.get_mut(self.first_free_word) {
            if w.free != 0 {
                return Some(w.take_lowest(self.first_free_word));
            }
            self.first_free_word += 1;
        }
        None
    }

    /// [`acquire`](Self::acquire), but a new lane only while there are fewer than `max`;
    /// `None` when all `max` are taken.
    #[inline]
    pub fn acquire_within<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        uuids: &AtomicU64,
        (parent, key): (u64, &'static str),
        max: usize,
    ) -> Option<(u32, u64)> {
        self.take_free()
            .or_else(|| (self.count < max).then(|| self.new_lane(sink, uuids, parent, key)))
    }

    #[cold]
    fn new_lane<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        uuids: &AtomicU64,
        parent: u64,
        key: &'static str,
    ) -> (u32, u64) {
        let uuid = uuids.fetch_add(1, Ordering::Relaxed);
        sink.lane(uuid, parent, key);
        let lane = self.count;
        if lane == self.words.len() * 64 {
            self.words.push(LaneWord {
                free: 0,
                tracks: [0; 64],
            });
        }
        self.words[lane / 64].tracks[lane % 64] = uuid;
        self.count += 1;
        (lane as u32, uuid)
    }

    #[inline]
    pub fn release(&mut self, lane: u32) {
        self.release_track(lane);
    }

    /// Frees `lane` and returns its track.
    #[inline]
    pub fn release_track(&mut self, lane: u32) -> u64 {
        let w = lane as usize / 64;
        let word = &mut self.words[w];
        word.free |= 1 << (lane % 64);
        self.first_free_word = self.first_free_word.min(w);
        word.tracks[lane as usize % 64]
    }

    #[inline]
    pub fn uuid(&self, lane: u32) -> u64 {
        self.words[lane as usize / 64].tracks[lane as usize % 64]
    }

    /// Lanes ever created (peak concurrency).
    pub fn count(&self) -> usize {
        self.count
    }
}

impl LaneWord {
    /// Takes the lowest free lane of this word (it has one), word `w` of its [`Lanes`].
    #[inline(always)]
    fn take_lowest(&mut self, w: usize) -> (u32, u64) {
        let b = self.free.trailing_zeros() as usize % 64;
        self.free &= self.free - 1;
        ((w * 64 + b) as u32, self.tracks[b])
    }
}

/// A counter sampled at most once per interval (and always when it returns to zero).
pub struct SampledCounter {
    pub value: i64,
    last_emitted: i64,
    /// The time from which the next sample may be written: the last one's plus the interval
    /// (the interval from 0 before any; `i64::MIN` when the interval is 0: every change).
    next_t: i64,
    interval: i64,
    dirty: bool,
}

impl SampledCounter {
    /// A counter sampled at most once per `interval` (ns; 0: at every change).
    pub fn new(interval: i64) -> SampledCounter {
        SampledCounter {
            value: 0,
            last_emitted: 0,
            next_t: Self::after(0, interval),
            interval,
            dirty: false,
        }
    }

    /// [`SampledCounter::next_t`] after a sample at `t`.
    #[inline]
    fn after(t: i64, interval: i64) -> i64 {
        if interval == 0 {
            i64::MIN
        } else {
            t.saturating_add(interval)
        }
    }

    #[inline]
    pub fn set<S: TraceSink + ?Sized>(&mut self, sink: &mut S, track: u64, t: i64, v: i64) {
        self.value = v;
        if v == self.last_emitted && !self.dirty {
            return;
        }
        if t >= self.next_t || v == 0 {
            sink.counter(t as u64, track, v);
            self.last_emitted = v;
            self.next_t = Self::after(t, self.interval);
            self.dirty = false;
        } else {
            self.dirty = true;
        }
    }

    pub fn flush<S: TraceSink + ?Sized>(&mut self, sink: &mut S, track: u64, t: i64) {
        if self.dirty {
            sink.counter(t as u64, track, self.value);
            self.last_emitted = self.value;
            self.dirty = false;
        }
    }
}

/// A `Dropped` record as an instant on the process's "tracer losses" track (`track`: the uuid
/// counter, the process track, and the losses track once made): where recording stopped
/// (the loss marker, count 0: the size cap or a full disk — the counts per kind are in the
/// report) or how many events a thread's re-entries or an observer's overruns lost.
pub fn loss_marker(
    sink: &mut dyn TraceSink,
    track: (&AtomicU64, u64, &mut Option<u64>),
    t: u64,
    d: &sigmatrace_schemas::records::Dropped,
) {
    let (uuids, parent, slot) = track;
    let uuid = *slot.get_or_insert_with(|| {
        let uuid = uuids.fetch_add(1, Ordering::Relaxed);
        sink.track(&TrackDef::slices(uuid, Some(parent), "tracer losses"));
        uuid
    });
    use sigmatrace_schemas::records::drop_reason as why;
    let text = match (d.hdr.aux, d.count) {
        (why::SIZE_CAP, 0) => "recording stopped: log size cap (later events only counted)",
        (why::WRITE_ERROR, 0) => "recording stopped: disk full (later events only counted)",
        (why::INTERNAL_ERROR, _) => "events refused (signal handler inside the tracer)",
        (why::OBSERVER_OVERRUN, _) => "observer overrun",
        _ => "events dropped",
    };
    let name = sink.name(text);
    let key = sink.arg_key("dropped");
    let args = [(key, sigmatrace_timeline::ArgValue::U64(d.count))];
    let extra = Extra {
        args: if d.count == 0 { &[] } else { &args },
        ..Extra::NONE
    };
    sink.instant(t, uuid, name, &extra);
}

/// Label of a QP's track: "QP 0x1a2 RC → rank 5 QP 0x33".
pub fn qp_label(topo: &Topology, q: &Qp) -> String {
    let peer = match q.peer {
        Some((pp, pq)) => format!(" → {} QP {:#x}", topo.procs[pp].label(), pq),
        None if q.qp_type == verbs::qp_type::UD => String::new(),
        None => match q.dest_qpn {
            Some(d) => format!(" → untraced QP {d:#x}"),
            None => String::new(),
        },
    };
    format!("QP {:#x} {}{}", q.qpn, q.type_name(), peer)
}

/// Label of a process track: "rank 3 · host-a · pid 1234".
pub fn process_label(p: &Process) -> String {
    match p.rank {
        Some(r) => format!("rank {r} · {} · pid {}", p.hostname, p.pid),
        None => format!("pid {} · {}", p.pid, p.hostname),
    }
}

/// The static track tree of the whole run (written once, before any event).
pub fn static_tracks(topo: &Topology) -> Vec<TrackDef> {
    let mut out = Vec::new();
    for p in &topo.procs {
        let mut labels = vec![format!("host {}", p.hostname)];
        if !p.exe.is_empty() {
            labels.push(p.exe.clone());
        }
        out.push(TrackDef {
            uuid: p.track,
            parent: None,
            name: process_label(p),
            description: Some(format!("log {}", p.path.display())),
            order: None,
            explicit_child_order: false,
            kind: TrackKind::Process {
                // Synthetic pids keep processes of different hosts apart (real pids collide).
                pid: 100_000 + p.index as i32,
                labels,
            },
        });
        let dev = p.devices.first().map(|d| d.1.as_str()).unwrap_or("RDMA");
        out.push(TrackDef {
            uuid: p.throughput_track,
            parent: Some(p.track),
            name: format!("{dev} completed bytes/s"),
            description: None,
            order: None,
            explicit_child_order: false,
            kind: TrackKind::Counter {
                unit: CounterUnit::Custom("B/s"),
            },
        });
        for q in &p.qps {
            if q.counts.posts == 0 && q.counts.completions == 0 && q.peer.is_none() {
                continue;
            }
            let mut def = TrackDef::slices(q.track, Some(p.track), qp_label(topo, q));
            def.description = Some(format!(
                "{} posts, {} completions",
                q.counts.posts, q.counts.completions
            ));
            out.push(def);
            for (uuid, name, unit) in [
                (q.outstanding_track, "outstanding WRs", CounterUnit::Count),
                (
                    q.inflight_bytes_track,
                    "bytes in flight",
                    CounterUnit::Bytes,
                ),
            ] {
                out.push(TrackDef {
                    uuid,
                    parent: Some(q.track),
                    name: format!("QP {:#x} {name}", q.qpn),
                    description: None,
                    order: None,
                    explicit_child_order: false,
                    kind: TrackKind::Counter { unit },
                });
            }
        }
    }
    out
}

/// Cache of interned WR names per (kind, opcode, size, flags), with the last send-WR and
/// inferred names remembered (consecutive WRs mostly have the same opcode and size).
pub struct NameCache {
    map: crate::fastmap::FastMap<(u8, u8, u32, u8), Name>,
    /// The last (opcode, bytes) ([`last_key`]; 0: none) and name of kind 0 (send WRs) and of
    /// kind 2 (inferred).
    last: [(u64, Name); 2],
    /// A few of the map's entries, direct-mapped by their key ([`hot_key`]; 0: empty), so
    /// that the names of a handful of alternating sizes are not hashed every time.
    hot: [(u64, Name); HOT_NAMES],
}

impl Default for NameCache {
    fn default() -> Self {
        NameCache {
            map: Default::default(),
            last: [(0, Name(0)); 2],
            hot: [(0, Name(0)); HOT_NAMES],
        }
    }
}

/// A [`NameCache::last`] key: (opcode, bytes) as one non-zero word, compared at once.
#[inline(always)]
fn last_key(opcode: u8, bytes: u32) -> u64 {
    1 << 40 | (opcode as u64) << 32 | bytes as u64
}

/// Slots of [`NameCache::hot`]: enough that the names of a run's message sizes (MPI programs
/// use dozens) rarely share one.
const HOT_NAMES: usize = 256;

/// A [`NameCache`] key as one non-zero word.
#[inline(always)]
fn hot_key((kind, a, bytes, b): (u8, u8, u32, u8)) -> u64 {
    1 << 63 | (kind as u64) << 48 | (a as u64) << 40 | (b as u64) << 32 | bytes as u64
}

impl NameCache {
    /// Name of a send-queue WR slice: "WRITE 4 KiB".
    #[inline]
    pub fn wr<S: TraceSink + ?Sized>(&mut self, sink: &mut S, opcode: u8, bytes: u32) -> Name {
        self.remembered(sink, 0, opcode, bytes)
    }

    /// Name of kind 0 ("WRITE 4 KiB") or 2 ("inferred WRITE 4 KiB") for (opcode, bytes): the
    /// last one of the kind, else the map's (interned on first use).
    #[inline(always)]
    fn remembered<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        kind: u8,
        opcode: u8,
        bytes: u32,
    ) -> Name {
        match self.last[kind as usize / 2] {
            (k, n) if k == last_key(opcode, bytes) => n,
            _ => self.look_up(sink, kind, opcode, bytes),
        }
    }

    #[inline(never)]
    fn look_up<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        kind: u8,
        opcode: u8,
        bytes: u32,
    ) -> Name {
        let n = self.cached((kind, opcode, bytes, 0), || {
            sink.name(&format!(
                "{}{} {}",
                if kind == 0 { "" } else { "inferred " },
                verbs::wr_name(opcode),
                verbs::size_label(bytes as u64)
            ))
        });
        self.last[kind as usize / 2] = (last_key(opcode, bytes), n);
        n
    }

    /// The name of `key`: from the hot slots, else the map's (made by `make` and interned on
    /// first use, as without the slots).
    #[inline(always)]
    fn cached(&mut self, key: (u8, u8, u32, u8), make: impl FnOnce() -> Name) -> Name {
        let k = hot_key(key);
        let slot = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % HOT_NAMES;
        if self.hot[slot].0 == k {
            return self.hot[slot].1;
        }
        let n = *self.map.entry(key).or_insert_with(make);
        self.hot[slot] = (k, n);
        n
    }

    /// Name of a receive slice / receive completion.
    pub fn recv<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        bytes: u32,
        imm: bool,
        completion: bool,
    ) -> Name {
        self.cached((1, imm as u8, bytes, completion as u8), || {
            let what = if imm { "RECV_IMM" } else { "RECV" };
            if completion {
                sink.name(&format!(
                    "{what} {} arrived",
                    verbs::size_label(bytes as u64)
                ))
            } else {
                sink.name(&format!(
                    "{what} posted {}",
                    verbs::size_label(bytes as u64)
                ))
            }
        })
    }

    /// Name of an inferred arrival on a target QP.
    #[inline]
    pub fn inferred<S: TraceSink + ?Sized>(
        &mut self,
        sink: &mut S,
        opcode: u8,
        bytes: u32,
    ) -> Name {
        self.remembered(sink, 2, opcode, bytes)
    }

    /// Name of a failed completion marker.
    pub fn error<S: TraceSink + ?Sized>(&mut self, sink: &mut S, status: u8) -> Name {
        *self
            .map
            .entry((3, status, 0, 0))
            .or_insert_with(|| sink.name(&format!("✗ {}", verbs::status_name(status))))
    }

    /// Name of the inferred arrival of an observed WQE on its target QP.
    pub fn inferred_wqe(&mut self, sink: &mut dyn TraceSink, opcode: u8, bytes: u32) -> Name {
        *self.map.entry((6, opcode, bytes, 0)).or_insert_with(|| {
            sink.name(&format!(
                "inferred {} {}",
                verbs::mlx5_name(opcode),
                verbs::size_label(bytes as u64)
            ))
        })
    }

    /// Name of an observed (GPU/host-poller) WQE.
    pub fn wqe(&mut self, sink: &mut dyn TraceSink, opcode: u8, bytes: u32) -> Name {
        *self.map.entry((4, opcode, bytes, 0)).or_insert_with(|| {
            sink.name(&format!(
                "{} {}",
                verbs::mlx5_name(opcode),
                verbs::size_label(bytes as u64)
            ))
        })
    }

    /// Any other fixed name.
    pub fn other(&mut self, sink: &mut dyn TraceSink, id: u8, s: &str) -> Name {
        *self
            .map
            .entry((5, id, 0, 0))
            .or_insert_with(|| sink.name(s))
    }
}

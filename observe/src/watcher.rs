//! Ring watchers: each `poll()` reads a queue's doorbell record and ring through a
//! [`QueueMemory`] — never writing to the program's memory — and reports what is new.
//!
//! **Send ring**: the DBR SQ word is the producer index (PI, 16 bits, in WQEBBs). WQEBBs in
//! `[next, PI)` hold new WQEs; each is decoded from its ctrl segment and spans ⌈ds/4⌉ WQEBBs
//! (wrapping at the ring end). Lost WQEBBs are counted, never skipped silently:
//! * PI advanced more than the depth since the last poll → the oldest `PI − next − depth`
//!   WQEBBs were overwritten;
//! * after copying a WQE the DBR is read again (seqlock style): if PI has since moved more
//!   than the depth past the WQE, its slot was reused while being read;
//! * the ctrl's `wqe_index` must equal the expected index (a lapped slot carries a later
//!   index; after an overrun this also finds the next WQE boundary);
//! * a ctrl re-read after the copy must be unchanged (torn read).
//!
//! Limits (documented in README): PI is 16 bits, so a gap of ≥ 65536 − depth WQEBBs between
//! two polls is indistinguishable from a smaller one; a producer that has reserved but not
//! yet published slot `i + depth` can tear a read of WQE `i` in ways the ctrl re-check misses
//! only if it rewrites the body but not the ctrl.
//!
//! **CQ**: the entry at free-running index `n` is valid when its owner bit matches
//! `!!(n & cqe_cnt)` and the opcode is not INVALID. Laps are detected (a) from the DBR
//! consumer index when the program maintains it — the hardware may overwrite entry `n` only
//! after the consumer passed `n`, so entries `< ci − cqe_cnt` are gone — and (b) from a
//! per-slot signature of the last entry seen: a slot in the "old" phase whose content
//! changed was rewritten a lap later.

use sigmatrace_schemas::{queue_kind, CqeObserved, ObserveOverrun, RecordHeader, WqeObserved};

use crate::mem::{MemError, QueueMemory};

/// Why a watcher could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    #[error("cannot read the queue: {0}")]
    Mem(#[from] MemError),
    #[error("bad queue geometry: {0}")]
    Geometry(String),
}
use crate::queue::{CqDesc, SendQueueDesc};
use sigmatrace_mlx5::cqe::{self, TsFormat};
use sigmatrace_mlx5::dbr::{CQ_DBR_CI_OFFSET, QP_DBR_SQ_OFFSET};
use sigmatrace_mlx5::wqe::{self, Wqe};
use sigmatrace_mlx5::{wqebbs_for_ds, MAX_WQE_BYTES, WQEBB};

/// One observation produced by a poll. (Large WQE variant kept inline on purpose: the poll
/// path must not allocate per WQE; observations are consumed right away.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A WQE, with the full decode.
    Wqe(WqeObserved, Wqe),
    Cqe(CqeObserved),
    Overrun(ObserveOverrun),
}

/// Per-watcher counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    pub polls: u64,
    pub wqes: u64,
    pub cqes: u64,
    /// WQEBBs overwritten before they were seen.
    pub wqebbs_lost: u64,
    /// WQEBBs whose ctrl did not decode (counted in `wqebbs_lost` too).
    pub wqebbs_malformed: u64,
    pub cqes_lost: u64,
    pub mem_errors: u64,
    /// Of `wqebbs_lost`: whole 65536-WQEBB PI laps estimated from the queue's post rate
    /// when a poll gap was long enough for the 16-bit PI to alias (an estimate, see
    /// `SendWatcher::poll_at`).
    pub wqebbs_lost_estimated: u64,
    /// Polls whose gap could have hidden a PI alias although no overrun was visible (not
    /// counted as lost: the producer may have been idle).
    pub alias_suspected_polls: u64,
}

fn overrun(ts: u64, kind: u32, number: u32, observer: u8, lost: u64) -> Observation {
    Observation::Overrun(ObserveOverrun {
        hdr: RecordHeader::of::<ObserveOverrun>(kind),
        ts,
        lost,
        number,
        observer,
        _pad: [0; 3],
    })
}

/// Watches one send ring.
pub struct SendWatcher {
    q: SendQueueDesc,
    observer: u8,
    next: u16,
    pub stats: WatchStats,
    buf: Box<[u8; MAX_WQE_BYTES]>,
    rate: RateTracker,
}

/// Peak post rate of a queue, from PI advances over windows of at least 1 ms.
#[derive(Clone, Copy, Debug, Default)]
struct RateTracker {
    last_ns: u64,
    last_pi: u16,
    window_start_ns: u64,
    window_bbs: u64,
    /// Recent post rate, WQEBBs per ns: EWMA (α = 1/4) of ≥ 1 ms windows.
    peak: f64,
}

const RATE_WINDOW_NS: u64 = 1_000_000;

fn monotonic_ns() -> u64 {
    sigmatrace_schemas::clock::clock_ns(libc::CLOCK_MONOTONIC)
}

impl SendWatcher {
    /// A watcher that treats WQEBBs from `start_pi` on as new; `None` reads the current PI
    /// (WQEs posted before registration are not reported).
    pub fn new(
        q: SendQueueDesc,
        observer: u8,
        start_pi: Option<u16>,
        mem: &dyn QueueMemory,
    ) -> Result<SendWatcher, WatchError> {
        if !q.wqebbs.is_power_of_two() || q.wqebbs > 32768 {
            return Err(WatchError::Geometry(format!(
                "SQ depth {} is not a power of two ≤ 32768",
                q.wqebbs
            )));
        }
        let next = match start_pi {
            Some(p) => p,
            None => read_pi(&q, mem)?,
        };
        Ok(SendWatcher {
            q,
            observer,
            next,
            stats: WatchStats::default(),
            buf: Box::new([0; MAX_WQE_BYTES]),
            rate: RateTracker {
                last_pi: next,
                ..Default::default()
            },
        })
    }

    pub fn desc(&self) -> &SendQueueDesc {
        &self.q
    }

    /// The next WQE index this watcher expects.
    pub fn next_index(&self) -> u16 {
        self.next
    }

    fn copy_wqe(&mut self, mem: &dyn QueueMemory, idx: u16, nbb: u16) -> Result<(), MemError> {
        let depth = self.q.wqebbs;
        let slot = (idx as u32) & (depth - 1);
        let first = (nbb as u32).min(depth - slot);
        let a = self.q.base + slot as u64 * WQEBB as u64;
        mem.read(a, &mut self.buf[..first as usize * WQEBB])?;
        if first < nbb as u32 {
            let rest = (nbb as u32 - first) as usize * WQEBB;
            mem.read(
                self.q.base,
                &mut self.buf[first as usize * WQEBB..first as usize * WQEBB + rest],
            )?;
        }
        Ok(())
    }

    /// Polls once; `ts` stamps the records; observations go to `out`.
    pub fn poll(
        &mut self,
        mem: &dyn QueueMemory,
        ts: u64,
        out: &mut dyn FnMut(Observation),
    ) -> Result<usize, MemError> {
        self.poll_at(mem, ts, monotonic_ns(), out)
    }

    /// [`Self::poll`] with an explicit CLOCK_MONOTONIC time `now_ns` (tests inject time).
    ///
    /// PI aliasing: the PI is 16 bits, so a poll gap in which the producer posts ≥ 65536
    /// WQEBBs looks like a small advance. The watcher tracks the queue's recent post rate
    /// (EWMA of ≥ 1 ms windows); when `rate × gap` exceeds the 16-bit window *and* the visible
    /// advance already overran the ring (evidence the producer was busy), the hidden laps
    /// `⌊(rate × gap − visible) / 65536⌋` are counted as lost (`wqebbs_lost_estimated`).
    /// Without a visible overrun the poll is only counted in `alias_suspected_polls`.
    pub fn poll_at(
        &mut self,
        mem: &dyn QueueMemory,
        ts: u64,
        now_ns: u64,
        out: &mut dyn FnMut(Observation),
    ) -> Result<usize, MemError> {
        self.stats.polls += 1;
        let depth = self.q.wqebbs;
        let mut pi = match read_pi(&self.q, mem) {
            Ok(p) => p,
            Err(e) => {
                self.stats.mem_errors += 1;
                return Err(e);
            }
        };
        let mut seen = 0usize;
        let mut lost_run = 0u64;
        let mut resync = false;
        let visible = pi.wrapping_sub(self.rate.last_pi) as u64;
        self.count_hidden_laps(pi, visible, (ts, now_ns), out);
        self.track_rate(pi, visible, now_ns);
        while self.next != pi {
            let avail = pi.wrapping_sub(self.next) as u32;
            if avail > depth {
                lost_run += (avail - depth) as u64;
                self.next = pi.wrapping_sub(depth as u16);
                resync = true;
                continue;
            }
            let idx = self.next;
            let slot_addr = self.q.base + ((idx as u32 & (depth - 1)) as u64) * WQEBB as u64;
            let mut ctrl_bytes = [0u8; 16];
            mem.read(slot_addr, &mut ctrl_bytes)?;
            let ctrl = wqe::Ctrl::parse(&ctrl_bytes);
            let nbb = wqebbs_for_ds(ctrl.ds);
            if ctrl.ds == 0 || ctrl.wqe_index != idx || nbb as u32 > avail {
                // Not a WQE start for this index: overwritten (lapped, or we resync after an
                // overrun and landed inside a multi-WQEBB WQE) or malformed. Count one WQEBB.
                mem.fence();
                let pi2 = read_pi(&self.q, mem)?;
                if !resync && pi2.wrapping_sub(idx) as u32 <= depth {
                    self.stats.wqebbs_malformed += 1;
                }
                lost_run += 1;
                self.next = idx.wrapping_add(1);
                pi = pi2;
                continue;
            }
            self.copy_wqe(mem, idx, nbb)?;
            mem.fence();
            let pi2 = read_pi(&self.q, mem)?;
            let mut again = [0u8; 16];
            mem.read(slot_addr, &mut again)?;
            let reused = pi2.wrapping_sub(idx) as u32 > depth;
            if reused || again[..8] != ctrl_bytes[..8] {
                lost_run += nbb as u64;
                self.next = idx.wrapping_add(nbb);
                pi = pi2;
                continue;
            }
            resync = false;
            let decoded = match wqe::decode(&self.buf[..nbb as usize * WQEBB], self.q.transport) {
                Ok(w) => w,
                Err(_) => {
                    self.stats.wqebbs_malformed += 1;
                    lost_run += nbb as u64;
                    self.next = idx.wrapping_add(nbb);
                    continue;
                }
            };
            self.report_lost(ts, lost_run, out);
            lost_run = 0;
            out(Observation::Wqe(self.record(&decoded, ts), decoded));
            self.stats.wqes += 1;
            seen += 1;
            self.next = idx.wrapping_add(nbb);
        }
        self.report_lost(ts, lost_run, out);
        Ok(seen)
    }

    /// PI aliasing (see [`Self::poll_at`]): when the recent post rate over the gap since the
    /// last poll exceeds the 16-bit window and the visible advance overran the ring, reports
    /// the hidden laps as lost in a record of their own (`k × 65536`, separate from exact
    /// losses); without the overrun only counts the poll as suspect.
    fn count_hidden_laps(
        &mut self,
        pi: u16,
        visible: u64,
        (ts, now_ns): (u64, u64),
        out: &mut dyn FnMut(Observation),
    ) {
        let measured = self.rate.last_ns != 0 && self.rate.peak > 0.0;
        if !measured {
            return;
        }
        let depth = self.q.wqebbs;
        let gap = now_ns.saturating_sub(self.rate.last_ns);
        let expected = self.rate.peak * gap as f64;
        let may_alias = expected > (65536 - depth) as f64;
        if !may_alias {
            return;
        }
        let behind = pi.wrapping_sub(self.next) as u32;
        let laps = ((expected - visible as f64) / 65536.0).floor();
        if behind > depth && laps >= 1.0 {
            let hidden = laps as u64 * 65536;
            self.stats.wqebbs_lost_estimated += hidden;
            self.report_lost(ts, hidden, out);
        } else {
            self.stats.alias_suspected_polls += 1;
        }
    }

    /// Counts `lost` WQEBBs and reports them in one overrun record (nothing when 0).
    fn report_lost(&mut self, ts: u64, lost: u64, out: &mut dyn FnMut(Observation)) {
        if lost == 0 {
            return;
        }
        self.stats.wqebbs_lost += lost;
        out(overrun(
            ts,
            queue_kind::SEND,
            self.q.qpn,
            self.observer,
            lost,
        ));
    }

    fn track_rate(&mut self, pi: u16, visible: u64, now_ns: u64) {
        let r = &mut self.rate;
        if r.window_start_ns == 0 {
            r.window_start_ns = now_ns;
        } else {
            r.window_bbs += visible;
            let span = now_ns.saturating_sub(r.window_start_ns);
            if span >= RATE_WINDOW_NS {
                let sample = r.window_bbs as f64 / span as f64;
                r.peak = if r.peak == 0.0 {
                    sample
                } else {
                    0.75 * r.peak + 0.25 * sample
                };
                r.window_start_ns = now_ns;
                r.window_bbs = 0;
            }
        }
        r.last_ns = now_ns;
        r.last_pi = pi;
    }

    fn record(&self, w: &Wqe, ts: u64) -> WqeObserved {
        wqe_record(w, ts, &self.q, self.observer)
    }
}

/// The record of WQE `w` seen in send ring `q` by `observer` at `ts` (the ring's QPN when the
/// control segment carries none).
pub(crate) fn wqe_record(w: &Wqe, ts: u64, q: &SendQueueDesc, observer: u8) -> WqeObserved {
    WqeObserved {
        hdr: RecordHeader::of::<WqeObserved>(0),
        ts,
        remote_addr: w.remote_addr,
        compare_add: w.compare_add,
        qpn: if w.ctrl.qpn != 0 { w.ctrl.qpn } else { q.qpn },
        bytes: w.bytes.min(u32::MAX as u64) as u32,
        rkey: w.rkey,
        imm: w.ctrl.imm,
        wqe_index: w.ctrl.wqe_index,
        opcode: w.ctrl.opcode,
        ds: w.ctrl.ds,
        fm_ce_se: w.ctrl.fm_ce_se,
        observer,
        memory: q.memory,
        _pad: 0,
    }
}

fn read_pi(q: &SendQueueDesc, mem: &dyn QueueMemory) -> Result<u16, MemError> {
    let raw = mem.load_u32_acquire(q.dbrec + QP_DBR_SQ_OFFSET)?;
    Ok(u32::from_be(raw) as u16)
}

/// Watches one completion queue.
pub struct CqWatcher {
    q: CqDesc,
    observer: u8,
    next: u32,
    /// Signature of the last entry accepted in each slot (0 = none).
    shadow: Vec<u64>,
    pub stats: WatchStats,
}

const CI_MASK: u32 = 0x00ff_ffff;
/// Shadow value: slot content unknown (never checked for laps).
const SHADOW_UNKNOWN: u64 = 0;
/// Shadow value: slot held INVALID when the watcher started (signatures are odd).
const SHADOW_EMPTY: u64 = 2;

fn signature(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | 1
}

impl CqWatcher {
    /// A watcher starting at free-running index `start` (`None`: the DBR consumer index when
    /// `ci_valid`, else 0).
    pub fn new(
        q: CqDesc,
        observer: u8,
        start: Option<u32>,
        mem: &dyn QueueMemory,
    ) -> Result<CqWatcher, WatchError> {
        if !q.cqe_cnt.is_power_of_two()
            || q.cqe_cnt > 1 << 22
            || !(q.cqe_size == 64 || q.cqe_size == 128)
        {
            return Err(WatchError::Geometry(format!(
                "CQ of {} entries of {} bytes",
                q.cqe_cnt, q.cqe_size
            )));
        }
        let next = match start {
            Some(s) => s,
            None if q.ci_valid => read_ci(&q, mem)?,
            None => 0,
        };
        let mut w = CqWatcher {
            q,
            observer,
            next,
            shadow: vec![SHADOW_UNKNOWN; q.cqe_cnt as usize],
            stats: WatchStats::default(),
        };
        // Remember what every slot holds now: INVALID (fresh ring) or an entry from before
        // the start. A later old-phase slot whose content differs was rewritten a lap on.
        for i in 0..q.cqe_cnt {
            let b = w.read_cqe(mem, i)?;
            w.shadow[i as usize] = if b[63] >> 4 == cqe::opcode::INVALID {
                SHADOW_EMPTY
            } else {
                signature(&b)
            };
        }
        Ok(w)
    }

    pub fn desc(&self) -> &CqDesc {
        &self.q
    }

    /// The next free-running index this watcher expects.
    pub fn next_index(&self) -> u32 {
        self.next
    }

    fn slot_addr(&self, n: u32) -> u64 {
        self.q.base
            + ((n & (self.q.cqe_cnt - 1)) as u64) * self.q.cqe_size as u64
            + cqe::cqe64_offset(self.q.cqe_size) as u64
    }

    fn read_cqe(&self, mem: &dyn QueueMemory, n: u32) -> Result<[u8; 64], MemError> {
        let mut b = [0u8; 64];
        mem.read(self.slot_addr(n), &mut b)?;
        Ok(b)
    }

    /// Entries the consumer index proves overwritten: `[next, ci − cqe_cnt)`.
    fn lost_by_ci(&self, mem: &dyn QueueMemory) -> Result<u32, MemError> {
        if !self.q.ci_valid {
            return Ok(0);
        }
        let ci = read_ci(&self.q, mem)?;
        let ahead = ci.wrapping_sub(self.next) & CI_MASK;
        Ok(if ahead < (1 << 23) && ahead > self.q.cqe_cnt {
            ahead - self.q.cqe_cnt
        } else {
            0
        })
    }

    /// Polls once (at most one ring's worth of entries).
    pub fn poll(
        &mut self,
        mem: &dyn QueueMemory,
        ts: u64,
        out: &mut dyn FnMut(Observation),
    ) -> Result<usize, MemError> {
        self.stats.polls += 1;
        let cnt = self.q.cqe_cnt;
        let mut seen = 0usize;
        let mut lost = 0u64;
        // At most one ring's worth of entries, plus one resync.
        for _ in 0..=cnt {
            let gone = self.lost_by_ci(mem)?;
            if gone > 0 {
                lost += gone as u64;
                self.next = self.next.wrapping_add(gone);
            }
            let n = self.next;
            let b = self.read_cqe(mem, n)?;
            let op_own = b[63];
            let slot = (n & (cnt - 1)) as usize;
            if !cqe::is_valid(op_own, n, cnt) {
                let shadow = self.shadow[slot];
                if op_own >> 4 != cqe::opcode::INVALID
                    && shadow != SHADOW_UNKNOWN
                    && self.ci_allows_lap(mem, n)?
                    && signature(&b) != shadow
                    && self.lap_possible(mem, n, &b)?
                {
                    // Old-phase slot with new content: rewritten one lap later.
                    let skipped = self.resync_after_lap(mem, n)?;
                    lost += skipped as u64;
                    continue;
                }
                break;
            }
            // `b` only proves the entry valid: its body words were loaded before `op_own`, so
            // they may predate the producer's release. After the acquire fence, read it again
            // until two reads agree (a producer rewriting the slot for a later lap changes it).
            mem.fence();
            let mut stable = None;
            for _ in 0..4 {
                let x = self.read_cqe(mem, n)?;
                mem.fence();
                let y = self.read_cqe(mem, n)?;
                if !cqe::is_valid(y[63], n, cnt) {
                    break;
                }
                if x == y {
                    stable = Some(y);
                    break;
                }
            }
            let b = match stable {
                Some(b) if self.lost_by_ci(mem)? == 0 => b,
                _ => {
                    // Rewritten under us, or the consumer index shows it may have been
                    // overwritten during the read: count it lost.
                    lost += 1;
                    self.shadow[slot] = SHADOW_UNKNOWN;
                    self.next = n.wrapping_add(1);
                    continue;
                }
            };
            self.shadow[slot] = signature(&b);
            if lost > 0 {
                self.stats.cqes_lost += lost;
                out(overrun(ts, queue_kind::CQ, self.q.cqn, self.observer, lost));
                lost = 0;
            }
            let c = cqe::decode(&b);
            out(Observation::Cqe(self.record(&c, n, ts)));
            self.stats.cqes += 1;
            seen += 1;
            self.next = n.wrapping_add(1);
        }
        if lost > 0 {
            self.stats.cqes_lost += lost;
            out(overrun(ts, queue_kind::CQ, self.q.cqn, self.observer, lost));
        }
        Ok(seen)
    }

    /// Whether old-phase slot `n` whose content changed (`b`) can hold a later lap, rather
    /// than entry `n` being written right now (producers write the body before `op_own`, so a
    /// write in progress also shows new bytes under the old owner bit). A later lap needs the
    /// producer past `n + cnt`, hence the consumer past `n`: with a maintained consumer index,
    /// `ci <= n` rules it out. Without one, the slot must read the same again after a fence
    /// and still not be valid for `n` (a write in progress completes or keeps changing).
    fn lap_possible(&self, mem: &dyn QueueMemory, n: u32, b: &[u8; 64]) -> Result<bool, MemError> {
        if !self.ci_allows_lap(mem, n)? {
            return Ok(false);
        }
        mem.fence();
        let again = self.read_cqe(mem, n)?;
        Ok(!cqe::is_valid(again[63], n, self.q.cqe_cnt) && again == *b)
    }

    /// False when a maintained consumer index shows the consumer has not passed `n` (then the
    /// producer cannot be a lap ahead of it). Checked before hashing the slot: on an idle
    /// ring every poll meets an old-phase slot.
    fn ci_allows_lap(&self, mem: &dyn QueueMemory, n: u32) -> Result<bool, MemError> {
        if !self.q.ci_valid {
            return Ok(true);
        }
        let past = read_ci(&self.q, mem)?.wrapping_sub(n) & CI_MASK;
        Ok(past != 0 && past < 1 << 23)
    }

    /// Slot `n` holds an entry of index ≥ n + cnt: find the hardware head `h` (the first index
    /// past n + cnt whose slot is not valid for it); the ring then holds `[h − cnt, h)`.
    fn resync_after_lap(&mut self, mem: &dyn QueueMemory, n: u32) -> Result<u32, MemError> {
        let cnt = self.q.cqe_cnt;
        let mut h = n.wrapping_add(cnt);
        for _ in 0..cnt {
            let b = self.read_cqe(mem, h)?;
            if !cqe::is_valid(b[63], h, cnt) {
                break;
            }
            h = h.wrapping_add(1);
        }
        let start = h.wrapping_sub(cnt);
        let skipped = start.wrapping_sub(n);
        self.next = start;
        Ok(skipped)
    }

    fn record(&self, c: &cqe::Cqe, n: u32, ts: u64) -> CqeObserved {
        let hw_ts = match self.q.ts_format {
            TsFormat::RealTime => cqe::real_time_to_ns(c.timestamp),
            TsFormat::FreeRunning => c.timestamp,
        };
        CqeObserved {
            hdr: RecordHeader::of::<CqeObserved>(0),
            ts,
            hw_ts,
            cqn: self.q.cqn,
            index: n,
            qpn: c.qpn,
            byte_cnt: c.byte_cnt,
            wqe_counter: c.wqe_counter,
            opcode: c.opcode,
            syndrome: c.syndrome,
            vendor_syndrome: c.vendor_syndrome,
            observer: self.observer,
            _pad: 0,
        }
    }
}

fn read_ci(q: &CqDesc, mem: &dyn QueueMemory) -> Result<u32, MemError> {
    Ok(u32::from_be(mem.load_u32_acquire(q.dbrec + CQ_DBR_CI_OFFSET)?) & CI_MASK)
}

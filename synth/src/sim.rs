//! The true time line of every message, as closed-form functions of (direction, message index)
//! and a seed: any rank computes the events it takes part in without seeing the others', so
//! the ranks are written independently, one record at a time.

use sigmatrace_schemas::records::{ClockSnapshot, RecordHeader};

use crate::ibv;
use crate::{Pattern, Scenario, T_START};

/// After a ping-pong receive completes, the reply is posted this many ns after the arrival
/// (after the completion at +50 ns and the receive's repost at +120 ns).
const REPLY_AFTER_NS: u64 = 300;

/// SplitMix64's finaliser: the generator's only source of "randomness".
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One direction of a link.
#[derive(Clone, Debug)]
pub(crate) struct Dir {
    pub src: usize,
    pub dst: usize,
    pub qpn_src: u32,
    pub qpn_dst: u32,
    pub pattern: Pattern,
    pub messages: u64,
    pub bytes: u32,
    pub phase: u64,
    pub seed: u64,
    pub fail_at: Option<u64>,
    /// Added to every one-way latency of this direction.
    pub extra_ns: u64,
    /// Ping-pong reply: the direction whose k-th message this direction's k-th message answers.
    pub reply_to: Option<usize>,
}

impl Dir {
    pub fn opcode(&self, k: u64) -> u8 {
        match self.pattern {
            Pattern::SendRecv | Pattern::PingPong | Pattern::Ud => ibv::wr::SEND,
            Pattern::Write { .. } if k % 8 == 7 => ibv::wr::RDMA_WRITE_WITH_IMM,
            Pattern::Write { .. } | Pattern::Bulk { .. } => ibv::wr::RDMA_WRITE,
            Pattern::Mixed => [
                ibv::wr::RDMA_WRITE,
                ibv::wr::SEND,
                ibv::wr::RDMA_READ,
                ibv::wr::RDMA_WRITE_WITH_IMM,
                ibv::wr::ATOMIC_FETCH_AND_ADD,
            ][(k % 5) as usize],
        }
    }
    pub fn signaled(&self, k: u64) -> bool {
        let last = self.count() - 1;
        match self.pattern {
            Pattern::Write { signal_every } | Pattern::Bulk { signal_every } => {
                let every = signal_every.max(1) as u64;
                k == last
                    || k % every == every - 1
                    || ibv::consumes_recv(self.opcode(k))
                    || Some(k) == self.fail_at
            }
            _ => true,
        }
    }
    /// Messages of this direction (a failed WR is the last: the QP goes to the error state).
    pub fn count(&self) -> u64 {
        self.fail_at.map_or(self.messages, |f| f + 1)
    }
    pub fn bytes_of(&self, k: u64) -> u32 {
        if self.opcode(k) == ibv::wr::ATOMIC_FETCH_AND_ADD {
            8
        } else {
            self.bytes
        }
    }
    /// Whether message k consumes a receive on the peer (and so has a receive completion).
    pub fn is_received(&self, k: u64) -> bool {
        ibv::consumes_recv(self.opcode(k)) && Some(k) != self.fail_at
    }
}

/// What happens to one message on one side.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Ev {
    /// The sender posts it.
    Post,
    /// The sender's completion (signaled WRs only).
    Complete,
    /// The receiver's receive completion.
    RecvDone,
    /// The receiver posts a new receive.
    Repost,
}

/// A time-ordered stream of one kind of event of one direction.
#[derive(Debug)]
pub(crate) struct Stream {
    pub t: u64,
    pub ev: Ev,
    pub dir: usize,
    /// Index of the next message (the current event's message is `k - 1`).
    pub k: u64,
    /// Running arrival time (monotone).
    arrival: u64,
    /// Ping-pong replies: running arrival time of the message being answered.
    cause: u64,
}

impl Stream {
    pub fn new(ev: Ev, dir: usize) -> Stream {
        Stream {
            t: 0,
            ev,
            dir,
            k: 0,
            arrival: 0,
            cause: 0,
        }
    }
}

impl PartialEq for Stream {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.ev, self.dir) == (o.t, o.ev, o.dir)
    }
}
impl Eq for Stream {}
impl PartialOrd for Stream {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Stream {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on time.
        (o.t, o.ev, o.dir).cmp(&(self.t, self.ev, self.dir))
    }
}

/// The scenario's directions and their timing.
pub(crate) struct Sim<'a> {
    pub sc: &'a Scenario,
    pub dirs: Vec<Dir>,
}

impl Sim<'_> {
    /// True post time of message k; `cause` is the arrival of the message a reply answers.
    fn post_time(&self, d: &Dir, k: u64, cause: u64) -> u64 {
        if d.reply_to.is_some() {
            return cause + REPLY_AFTER_NS;
        }
        T_START
            + d.phase
            + k * self.sc.interval_ns
            + mix(d.seed ^ k) % (self.sc.interval_ns / 4).max(1)
    }
    fn next_arrival(&self, d: &Dir, k: u64, prev: u64, cause: u64) -> u64 {
        let (lo, hi) = self.sc.latency_ns;
        let ow = lo + d.extra_ns + mix(d.seed.wrapping_mul(31) ^ k) % (hi - lo).max(1);
        (self.post_time(d, k, cause) + ow).max(prev + 1)
    }
    /// Advances a stream to its next event of its kind; false when exhausted.
    pub fn advance(&self, s: &mut Stream) -> bool {
        let d = &self.dirs[s.dir];
        let n = d.count();
        loop {
            if s.k >= n {
                return false;
            }
            let k = s.k;
            if let Some(p) = d.reply_to {
                // The answered direction is a ping (no cause of its own).
                s.cause = self.next_arrival(&self.dirs[p], k, s.cause, 0);
            }
            s.arrival = self.next_arrival(d, k, s.arrival, s.cause);
            s.k += 1;
            match s.ev {
                Ev::Post => {
                    s.t = self.post_time(d, k, s.cause);
                    return true;
                }
                Ev::Complete if d.signaled(k) => {
                    s.t = s.arrival + self.sc.latency_ns.0 / 2 + 100;
                    return true;
                }
                Ev::RecvDone if d.is_received(k) => {
                    s.t = s.arrival + 50;
                    return true;
                }
                Ev::Repost if d.is_received(k) => {
                    s.t = s.arrival + 120;
                    return true;
                }
                _ => {}
            }
        }
    }
}

/// A host's clocks: REALTIME = true time + offset + drift, MONOTONIC a fixed distance below,
/// the TSC a scaled MONOTONIC.
pub(crate) struct Clk {
    pub offset: i64,
    pub drift: f64,
    pub rt_minus_mono: i64,
    pub tsc0: u64,
    pub hz: f64,
}

impl Clk {
    pub fn realtime(&self, t: u64) -> u64 {
        (t as i64 + self.offset + (self.drift * 1e-6 * (t + 10_000_000 - T_START) as f64) as i64)
            as u64
    }
    pub fn mono(&self, t: u64) -> u64 {
        (self.realtime(t) as i64 - self.rt_minus_mono) as u64
    }
    pub fn ts(&self, t: u64) -> u64 {
        let m0 = self.mono(T_START - 10_000_000);
        self.tsc0 + ((self.mono(t) - m0) as f64 * self.hz / 1e9) as u64
    }
    pub fn snapshot(&self, t: u64) -> ClockSnapshot {
        let ts = self.ts(t);
        let m = self.mono(t);
        ClockSnapshot {
            hdr: RecordHeader::of::<ClockSnapshot>(0),
            ts: ts - 15,
            monotonic: m,
            monotonic_raw: m,
            boottime: m,
            realtime: self.realtime(t),
            ts_after: ts + 15,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkSpec, Scenario};

    /// Every event of direction `di` of kind `ev`, in order: (message, time).
    fn times(sim: &Sim, di: usize, ev: Ev) -> Vec<(u64, u64)> {
        let mut s = Stream::new(ev, di);
        let mut out = Vec::new();
        while sim.advance(&mut s) {
            out.push((s.k - 1, s.t));
        }
        out
    }

    #[test]
    fn ping_pong_replies_follow_their_ping_and_precede_the_next() {
        let mut sc = Scenario::ring(2, 1, Pattern::PingPong, 500);
        sc.interval_ns = 8_000;
        sc.links = vec![LinkSpec {
            a: 0,
            b: 1,
            pattern: Pattern::PingPong,
            messages: 500,
            bytes: 64,
        }];
        let sim = Sim {
            dirs: crate::directions(&sc),
            sc: &sc,
        };
        assert_eq!(sim.dirs[1].reply_to, Some(0));
        let ping_recv = times(&sim, 0, Ev::RecvDone);
        let reply_post = times(&sim, 1, Ev::Post);
        let reply_recv = times(&sim, 1, Ev::RecvDone);
        let ping_post = times(&sim, 0, Ev::Post);
        assert_eq!((ping_recv.len(), reply_post.len()), (500, 500));
        for k in 0..500 {
            assert!(
                reply_post[k].1 > ping_recv[k].1,
                "reply {k} before its ping arrived"
            );
            if k + 1 < 500 {
                assert!(
                    ping_post[k + 1].1 > reply_recv[k].1,
                    "ping {} too early",
                    k + 1
                );
            }
        }
    }

    #[test]
    fn bulk_writes_signal_every_nth_and_the_last() {
        let mut sc = Scenario::ring(2, 1, Pattern::Bulk { signal_every: 100 }, 1050);
        sc.links.truncate(1);
        let sim = Sim {
            dirs: crate::directions(&sc),
            sc: &sc,
        };
        let done: Vec<u64> = times(&sim, 0, Ev::Complete).iter().map(|c| c.0).collect();
        let want: Vec<u64> = (0..1050).filter(|k| k % 100 == 99 || *k == 1049).collect();
        assert_eq!(done, want);
        assert!(
            times(&sim, 0, Ev::RecvDone).is_empty(),
            "plain writes consume no receive"
        );
        assert!((0..1050).all(|k| sim.dirs[0].opcode(k) == ibv::wr::RDMA_WRITE));
    }
}

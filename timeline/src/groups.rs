//! Several Perfetto packet sequences behind one [`TraceSink`]: the caller says which group the
//! events that follow belong to ([`TraceSink::group`]) and each group is its own sequence,
//! with its own incremental clock, interning and compressor.
//!
//! Why: a compressor sees its sequence's recent past (deflate: 32 KiB). When one sequence
//! interleaves many independent activities (queue pairs, each posting bursts of work requests
//! on its own lanes), what repeats in one of them — the same lanes in the same order, burst
//! after burst — lies too far back. Kept apart, each group's bursts repeat within reach and
//! compress to long matches (a real `ib_write_bw -q 16` log: 17 → about 8 bytes per work
//! request). The events are the same; only their packet sequences differ.

use crate::perfetto::PerfettoSeq;
use crate::{ArgKey, Extra, Name, TraceSink, TrackDef};

/// Several sequences, one per group (see the module documentation).
pub struct PerfettoGroups {
    seqs: Vec<PerfettoSeq>,
    cur: usize,
    /// Pending bytes after which a group's block is ready ([`TraceSink::take_ready`]).
    group_block: usize,
}

impl PerfettoGroups {
    /// One sequence per entry of `seqs` (group `g` writes into `seqs[g]`; group 0 is the
    /// default, groups past the last go to the last). A group's block is ready at
    /// `group_block` bytes (or the `min` of [`TraceSink::take_ready`] if smaller).
    pub fn new(seqs: Vec<PerfettoSeq>, group_block: usize) -> Self {
        assert!(!seqs.is_empty(), "at least one sequence");
        PerfettoGroups {
            seqs,
            cur: 0,
            group_block,
        }
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.seqs.len()
    }

    /// The sequences (for [`PerfettoSeq::renew`] once the groups are done).
    pub fn into_seqs(self) -> Vec<PerfettoSeq> {
        self.seqs
    }

    /// Pending bytes at which a group's block is ready.
    pub(crate) fn group_block(&self) -> usize {
        self.group_block
    }

    pub(crate) fn seqs_mut(&mut self) -> &mut [PerfettoSeq] {
        &mut self.seqs
    }

    /// [`TraceSink::take`], each group's pending bytes apart (empty for a group with none),
    /// in group order: the caller writes them in turn, not joined into one copy first.
    pub fn take_blocks(&mut self) -> Vec<Vec<u8>> {
        self.seqs.iter_mut().map(|q| q.take()).collect()
    }
}

impl TraceSink for PerfettoGroups {
    fn as_dyn(&mut self) -> &mut dyn TraceSink {
        self
    }

    fn name(&mut self, s: &str) -> Name {
        // Every sequence interns the same names in the same order: one id for all.
        let ids: Vec<Name> = self.seqs.iter_mut().map(|q| q.name(s)).collect();
        debug_assert!(ids.iter().all(|&i| i == ids[0]));
        ids[0]
    }

    fn arg_key(&mut self, s: &str) -> ArgKey {
        let ids: Vec<ArgKey> = self.seqs.iter_mut().map(|q| q.arg_key(s)).collect();
        debug_assert!(ids.iter().all(|&i| i == ids[0]));
        ids[0]
    }

    fn track(&mut self, def: &TrackDef) {
        self.seqs[self.cur].track(def);
    }

    #[inline]
    fn begin(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.seqs[self.cur].begin(ts, track, name, extra);
    }

    #[inline]
    fn end(&mut self, ts: u64, track: u64, extra: &Extra<'_>) {
        self.seqs[self.cur].end(ts, track, extra);
    }

    #[inline]
    fn instant(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        self.seqs[self.cur].instant(ts, track, name, extra);
    }

    #[inline]
    fn counter(&mut self, ts: u64, track: u64, value: i64) {
        self.seqs[self.cur].counter(ts, track, value);
    }

    fn pending_bytes(&self) -> usize {
        self.seqs.iter().map(|q| q.pending_bytes()).sum()
    }

    /// Every group's pending bytes, in group order.
    fn take(&mut self) -> Vec<u8> {
        join(self.take_blocks())
    }

    #[inline]
    fn group(&mut self, g: u32) {
        self.cur = (g as usize).min(self.seqs.len() - 1);
    }

    /// The pending bytes of the groups holding at least `min` (at most the group block).
    fn take_ready(&mut self, min: usize) -> Vec<u8> {
        let min = min.min(self.group_block);
        let ready = self.seqs.iter_mut().filter(|q| q.pending_bytes() >= min);
        join(ready.map(|q| q.take()).collect())
    }
}

/// The sequences' outputs one after another: the only one that is not empty as it is, else
/// copied once into a buffer of their total length (not grown output by output).
pub(crate) fn join(outs: Vec<Vec<u8>>) -> Vec<u8> {
    if outs.iter().filter(|o| !o.is_empty()).count() <= 1 {
        return outs.into_iter().find(|o| !o.is_empty()).unwrap_or_default();
    }
    outs.concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;
    use prost::Message;

    fn inflate(z: &[u8]) -> Vec<u8> {
        let mut d = flate2::read::ZlibDecoder::new(z);
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut d, &mut out).expect("valid zlib stream");
        out
    }

    /// (sequence id, absolute timestamp, track, type) of every event, compressed blocks
    /// inflated and incremental timestamps added up per sequence.
    fn events(bytes: &[u8]) -> Vec<(u32, u64, u64, i32)> {
        let mut out = Vec::new();
        let mut clock = std::collections::HashMap::new();
        let mut packets = Vec::new();
        for p in proto::Trace::decode(bytes).expect("trace").packet {
            match &p.compressed_packets {
                Some(z) => packets.extend(proto::Trace::decode(&inflate(z)[..]).unwrap().packet),
                None => packets.push(p),
            }
        }
        for p in packets {
            let seq = p.trusted_packet_sequence_id.unwrap_or(0);
            if let Some(cs) = &p.clock_snapshot {
                clock.insert(seq, cs.clocks[0].timestamp.unwrap());
            }
            if let Some(te) = &p.track_event {
                let t = clock.entry(seq).or_insert(0);
                *t += p.timestamp.unwrap_or(0);
                out.push((seq, *t, te.track_uuid.unwrap(), te.r#type.unwrap()));
            }
        }
        out
    }

    #[test]
    fn groups_write_their_own_sequences_with_the_same_events() {
        let feed = |s: &mut dyn TraceSink| {
            let n = s.name("WRITE 8 B");
            let mut out = Vec::new();
            for i in 0..5000u64 {
                let g = (i % 3) as u32;
                s.group(g);
                s.begin(1000 + 10 * i, 100 + g as u64, n, &Extra::NONE);
                s.end(1005 + 10 * i, 100 + g as u64, &Extra::NONE);
                s.group(0);
                s.counter(1005 + 10 * i, 7, i as i64);
                let b = s.take_ready(4096);
                out.extend_from_slice(&b);
            }
            out.extend_from_slice(&s.take());
            out
        };
        let one = feed(&mut PerfettoSeq::new(1, true, 1000).compressed());
        let seqs = (0..3)
            .map(|g| PerfettoSeq::new(1 + g * 10, true, 1000).compressed())
            .collect();
        let mut groups = PerfettoGroups::new(seqs, 8192);
        let three = feed(&mut groups);
        let (mut a, mut b) = (events(&one), events(&three));
        assert!(a.iter().all(|e| e.0 == 1));
        let seqs: std::collections::BTreeSet<u32> = b.iter().map(|e| e.0).collect();
        assert_eq!(seqs.into_iter().collect::<Vec<_>>(), vec![1, 11, 21]);
        // Group 1's events are in sequence 11 and nowhere else.
        assert!(b.iter().all(|e| (e.2 == 101) == (e.0 == 11)));
        let strip = |v: &mut Vec<(u32, u64, u64, i32)>| {
            v.iter_mut().for_each(|e| e.0 = 0);
            v.sort();
        };
        strip(&mut a);
        strip(&mut b);
        assert_eq!(a.len(), 15_000);
        assert_eq!(a, b);
    }
}

//! Flight recorder: per-thread rings that are never drained (`WriterOptions::flight_recorder`).
//!
//! A thread fills its ring's slots as in [`crate::ring`], but the background thread copies
//! nothing: the rings *are* the log (they lie inside the file, so the last `ring_chunks`
//! chunks of every thread are in it at exit, after a crash or a `SIGKILL`, with nothing to
//! copy). When a thread finds no FREE slot it reuses the slot of its oldest chunk
//! ([`Shared::reuse_oldest`]): the events among its records that no dump preserved are
//! counted per kind (compact records under their full kind; `TimeBase`/`SlotBind` are
//! context, not events), its magic is zeroed (the chunk reads as unused) and the counts are
//! added to the header's dropped counter and loss table, so records in the file + the loss
//! table = what the writer was given.
//! The background thread counts each FULL chunk's events ahead when it looks at it (below),
//! so the owner usually only adds them; it scans the chunk itself when it got there first.
//! Chunk indices are sequence numbers (their order), not file positions.
//!
//! Control records (devices, PDs, MRs, CQs, SRQs, QPs and their transitions, AHs, strings
//! and process attributes, discovered queues, GPU memory — every kind but the frequent data
//! kinds, see [`is_control`]) describe the objects the data records name; losing the ones
//! written at start-up would leave the end of a long run without its QPs and peers. So the
//! background thread looks at each FULL chunk once ([`Shared::keep_control_chunks`]) and
//! copies one that holds a control record into the log (as a dump does) before its slot is
//! reused: those records stay, up to the size cap; the chunk's data records stay with them.
//!
//! A dump ([`Shared::dump_rings`], e.g. on a signal, run by the background thread) copies
//! every ring chunk into fresh chunk positions of the log (within the size cap), oldest first,
//! with its index and the records committed at the copy; the slot remembers how many of its
//! bytes are preserved, so reusing it later counts only the records after them. A later dump
//! copies only what changed since: chunks not copied yet and the growth of a chunk copied
//! while being filled (a new copy with the same index and more records; readers keep the one
//! with more committed bytes).

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::{write_all, Ring, FILLING, FULL};
use crate::chunk::{ChunkHeader, CHUNK_HEADER_SIZE, CHUNK_MAGIC, COMMIT_OFFSET};
use crate::compact::event_kind;
use crate::header::{CHUNKS_OFFSET, DROPPED_OFFSET, HEADER_SIZE, LOSS_SLOTS, LOSS_TABLE_OFFSET};
use crate::records::RecordKind;
use crate::writer::Shared;

/// What one dump did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dumped {
    /// Chunks copied into the log.
    pub chunks: u32,
    /// Their committed record bytes.
    pub bytes: u64,
    /// Chunks not copied: the size cap left no position, or writing failed (disk full).
    pub refused: u32,
}

/// Holds a ring's `busy` flag (a dump, or a reuse of one of its slots) until dropped.
struct Busy<'a>(&'a AtomicBool);

impl<'a> Busy<'a> {
    fn take(flag: &'a AtomicBool) -> Busy<'a> {
        while flag
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        Busy(flag)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Whether records of `kind` are control records (kept, see the module documentation): all
/// but clock snapshots, completion-channel events, the data path (posts, completions, empty
/// polls, observed WQEs/CQEs, overruns), kernel launches/executions/clock pairs and the
/// compact records' context.
pub(crate) fn is_control(kind: u16) -> bool {
    use RecordKind as K;
    const FREQUENT: [RecordKind; 19] = [
        K::ClockSnapshot,
        K::CqEvent,
        K::PostSend,
        K::PostRecv,
        K::PostError,
        K::WorkCompletion,
        K::EmptyPolls,
        K::WqeObserved,
        K::CqeObserved,
        K::ObserveOverrun,
        K::KernelLaunch,
        K::KernelExec,
        K::GpuClockPair,
        K::TimeBase,
        K::SlotBind,
        K::PostSendCompact,
        K::PostRecvCompact,
        K::CompletionCompact,
        K::CompletionShort,
    ];
    !FREQUENT.iter().any(|&k| k as u16 == kind)
}

/// Whether `bytes` (whole records) hold a control record.
fn has_control(bytes: &[u8]) -> bool {
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        let kind = u16::from_ne_bytes([bytes[pos], bytes[pos + 1]]);
        let len = u16::from_ne_bytes([bytes[pos + 2], bytes[pos + 3]]) as usize;
        if len < 8 || !len.is_multiple_of(8) || pos + len > bytes.len() {
            return false;
        }
        if is_control(kind) {
            return true;
        }
        pos += len;
    }
    false
}

/// Counts the events among the records in `bytes` (whole records, from a record boundary),
/// per kind; stops at the first malformed length.
pub(crate) fn count_events(bytes: &[u8], per_kind: &mut [u64; LOSS_SLOTS]) -> u64 {
    let mut total = 0;
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        let kind = u16::from_ne_bytes([bytes[pos], bytes[pos + 1]]);
        let len = u16::from_ne_bytes([bytes[pos + 2], bytes[pos + 3]]) as usize;
        if len < 8 || !len.is_multiple_of(8) || pos + len > bytes.len() {
            break;
        }
        pos += len;
        if let Some(k) = event_kind(kind) {
            total += 1;
            if (k as usize) < LOSS_SLOTS && k != 0 {
                per_kind[k as usize] += 1;
            }
        }
    }
    total
}

impl Shared {
    /// The slot of the oldest chunk of `ring` (its owner's call, when no slot is FREE): the
    /// chunk is dropped — kept in the log first if it holds control records the background
    /// thread did not keep, else its events not preserved by a dump counted, its magic
    /// zeroed, the counts added to the loss table — and the slot is handed back FILLING.
    /// `None` when no slot is FULL.
    pub(crate) fn reuse_oldest(&self, ring: &Ring) -> Option<usize> {
        let _busy = Busy::take(&ring.busy);
        let base = self.map.as_mut_ptr();
        let index_of = |slot: usize| {
            // SAFETY: the index field (offset 4) of a chunk header inside the mapping; FULL
            // slots are written by nobody (their owner is the caller).
            unsafe { std::ptr::read(base.add(slot + 4) as *const u32) }
        };
        let i = (0..ring.slots.len())
            .filter(|&i| ring.state[i].load(Ordering::Acquire) == FULL)
            .min_by_key(|&i| index_of(ring.slots[i]))?;
        let slot = ring.slots[i];
        // The chunk's events are counted while it is still whole (FULL: nobody appends, the
        // busy flag keeps dumps out), so that between dropping it (its magic zeroed) and
        // counting it there are only the few stores of `add_dropped`: a SIGKILL there is the
        // one case where its records are neither in the file nor counted.
        // SAFETY: the commit word of a chunk header inside the mapping, accessed atomically.
        let commit = unsafe {
            (*(base.add(slot + COMMIT_OFFSET) as *const AtomicU64)).load(Ordering::Acquire)
        };
        let bytes = (commit as u32).min(self.chunk_size - CHUNK_HEADER_SIZE as u32);
        let mut from = ring.preserved[i].swap(0, Ordering::Relaxed).min(bytes);
        let precounted = ring.precounted[i].swap(false, Ordering::Relaxed) && from == 0;
        if !ring.checked[i].swap(false, Ordering::Relaxed) && from < bytes {
            // The background thread did not get to it: keep its control records here.
            // SAFETY: committed record bytes of the chunk, inside the slot; nobody writes them.
            let all = unsafe {
                std::slice::from_raw_parts(base.add(slot + CHUNK_HEADER_SIZE), bytes as usize)
            };
            if has_control(all) && self.copy_into_log(slot, commit) {
                from = bytes;
            }
        }
        // SAFETY: committed record bytes of the chunk, inside the slot; nobody writes them.
        let records = unsafe {
            std::slice::from_raw_parts(
                base.add(slot + CHUNK_HEADER_SIZE + from as usize),
                (bytes - from) as usize,
            )
        };
        let mut per_kind = [0u64; LOSS_SLOTS];
        let total = if precounted {
            // Counted by the background thread (the whole chunk; no dump preserved any):
            // the total in slot 0, which no kind uses.
            for (n, c) in per_kind.iter_mut().zip(ring.counts[i].iter()).skip(1) {
                *n = c.load(Ordering::Relaxed);
            }
            ring.counts[i][0].load(Ordering::Relaxed)
        } else {
            count_events(records, &mut per_kind)
        };
        // SAFETY: the chunk's magic, a 4-aligned u32 of our mapping, accessed atomically.
        let magic = unsafe { (*(base.add(slot) as *const AtomicU32)).swap(0, Ordering::AcqRel) };
        if magic == CHUNK_MAGIC {
            self.add_dropped(total, &per_kind);
        }
        ring.state[i].store(FILLING, Ordering::Relaxed);
        Some(i)
    }

    /// Adds `total` dropped events, `per_kind` of each kind, to the header's dropped counter
    /// and loss table (and, for the log's first loss, its time: now).
    fn add_dropped(&self, total: u64, per_kind: &[u64; LOSS_SLOTS]) {
        if total == 0 {
            return;
        }
        self.header_atomic_u64(DROPPED_OFFSET)
            .fetch_add(total, Ordering::Relaxed);
        for (k, &n) in per_kind.iter().enumerate().skip(1) {
            if n != 0 {
                self.header_atomic_u64(LOSS_TABLE_OFFSET + k * 8)
                    .fetch_add(n, Ordering::Relaxed);
            }
        }
        let first = self.header_atomic_u64(LOSS_TABLE_OFFSET);
        if first.load(Ordering::Relaxed) == 0 {
            let ts = self.now().max(1);
            let _ = first.compare_exchange(0, ts, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Copies each FULL chunk of `ring` not looked at yet that holds a control record into
    /// the log (see the module documentation); what it copied.
    pub(crate) fn keep_control_chunks(&self, ring: &Ring) -> Dumped {
        let mut done = Dumped::default();
        let unchecked = |i: usize| {
            ring.state[i].load(Ordering::Acquire) == FULL
                && !ring.checked[i].load(Ordering::Relaxed)
        };
        if !(0..ring.slots.len()).any(unchecked) {
            return done;
        }
        let _busy = Busy::take(&ring.busy);
        let base = self.map.as_mut_ptr();
        for i in (0..ring.slots.len()).filter(|&i| unchecked(i)) {
            ring.checked[i].store(true, Ordering::Relaxed);
            let slot = ring.slots[i];
            // SAFETY: the commit word of a chunk header inside the mapping, accessed atomically.
            let commit = unsafe {
                (*(base.add(slot + COMMIT_OFFSET) as *const AtomicU64)).load(Ordering::Acquire)
            };
            let bytes = commit as u32;
            let from = ring.preserved[i].load(Ordering::Relaxed);
            if bytes <= from || bytes > self.chunk_size - CHUNK_HEADER_SIZE as u32 {
                continue;
            }
            // SAFETY: committed record bytes of a FULL chunk (nobody writes them; the busy
            // flag keeps its owner from reusing the slot meanwhile).
            let records = unsafe {
                std::slice::from_raw_parts(base.add(slot + CHUNK_HEADER_SIZE), bytes as usize)
            };
            if !has_control(records) {
                if from == 0 {
                    // Count its events now, off the owner's thread (see `reuse_oldest`).
                    let mut per_kind = [0u64; LOSS_SLOTS];
                    per_kind[0] = count_events(records, &mut per_kind);
                    for (c, n) in ring.counts[i].iter().zip(per_kind) {
                        c.store(n, Ordering::Relaxed);
                    }
                    ring.precounted[i].store(true, Ordering::Relaxed);
                }
                continue;
            }
            if self.copy_into_log(slot, commit) {
                ring.preserved[i].store(bytes, Ordering::Relaxed);
                done.chunks += 1;
                done.bytes += bytes as u64;
            } else {
                done.refused += 1;
            }
        }
        done
    }

    /// Copies every ring's chunks (FULL and FILLING, oldest first) into fresh positions of
    /// the log, each with what it had committed and no dump copied yet (see the module
    /// documentation).
    pub(crate) fn dump_rings(&self) -> Dumped {
        let rings: Vec<Arc<Ring>> = self.rings.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut done = Dumped::default();
        for ring in &rings {
            let _busy = Busy::take(&ring.busy);
            let base = self.map.as_mut_ptr();
            let mut live: Vec<(u32, usize)> = (0..ring.slots.len())
                .filter(|&i| {
                    let st = ring.state[i].load(Ordering::Acquire);
                    st == FULL || st == FILLING
                })
                .map(|i| {
                    // SAFETY: the index field of a chunk header inside the mapping (stable
                    // while the slot holds this chunk; the busy flag keeps it from reuse).
                    let index =
                        unsafe { std::ptr::read(base.add(ring.slots[i] + 4) as *const u32) };
                    (index, i)
                })
                .collect();
            live.sort_unstable();
            for (_, i) in live {
                let slot = ring.slots[i];
                // SAFETY: the commit word of the chunk header, accessed atomically.
                let commit = unsafe {
                    (*(base.add(slot + COMMIT_OFFSET) as *const AtomicU64)).load(Ordering::Acquire)
                };
                let bytes = commit as u32;
                if bytes == 0
                    || bytes <= ring.preserved[i].load(Ordering::Relaxed)
                    || bytes > self.chunk_size - CHUNK_HEADER_SIZE as u32
                {
                    continue;
                }
                match self.copy_into_log(slot, commit) {
                    true => {
                        ring.preserved[i].store(bytes, Ordering::Relaxed);
                        done.chunks += 1;
                        done.bytes += bytes as u64;
                    }
                    false => done.refused += 1,
                }
            }
        }
        done
    }

    /// Writes the chunk in the ring slot at `slot`, as of `commit`, into the next free chunk
    /// position of the log: records first, then the header with that commit word and a zero
    /// magic, the magic last. False when the cap leaves no position or a write failed.
    fn copy_into_log(&self, slot: usize, commit: u64) -> bool {
        let dest = {
            let mut next = self.next_chunk.lock().unwrap_or_else(|p| p.into_inner());
            if *next >= self.max_chunks {
                return false;
            }
            let dest = HEADER_SIZE + *next as usize * self.chunk_size as usize;
            *next += 1;
            self.header_atomic_u32(CHUNKS_OFFSET)
                .store(*next, Ordering::Release);
            dest
        };
        let base = self.map.as_mut_ptr();
        // SAFETY: the header lies inside the mapping; its fields other than the commit word
        // (replaced below) do not change while the slot holds this chunk.
        let mut hdr: ChunkHeader = unsafe { std::ptr::read(base.add(slot) as *const ChunkHeader) };
        hdr.commit = commit;
        let magic = hdr.magic;
        hdr.magic = 0;
        let head = bytemuck::bytes_of(&hdr);
        let fd = self.file.as_raw_fd();
        let len = commit as u32 as usize;
        // SAFETY: the record range lies inside the slot (len <= capacity, checked by the
        // caller) and holds committed bytes nobody rewrites while the busy flag is held;
        // `head` and `magic` are local.
        let ok = unsafe {
            write_all(
                fd,
                base.add(slot + CHUNK_HEADER_SIZE),
                len,
                dest + CHUNK_HEADER_SIZE,
            ) && write_all(fd, head.as_ptr(), CHUNK_HEADER_SIZE, dest)
                && write_all(fd, (&magic as *const u32).cast(), 4, dest)
        };
        if ok {
            // SAFETY: plain advisory syscall on our own descriptor.
            unsafe {
                libc::sync_file_range(
                    fd,
                    dest as libc::off64_t,
                    (CHUNK_HEADER_SIZE + len) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: u16, len: u16) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        v[..2].copy_from_slice(&kind.to_ne_bytes());
        v[2..4].copy_from_slice(&len.to_ne_bytes());
        v
    }

    #[test]
    fn events_are_counted_under_their_full_kind_and_context_is_not_an_event() {
        let mut bytes = Vec::new();
        for (k, l) in [
            (54u16, 16u16),
            (55, 24),
            (56, 32),
            (56, 32),
            (58, 32),
            (30, 64),
            (1, 56),
        ] {
            bytes.extend(rec(k, l));
        }
        let mut per = [0u64; LOSS_SLOTS];
        assert_eq!(count_events(&bytes, &mut per), 5);
        assert_eq!(
            (per[30], per[33], per[1], per[54], per[55]),
            (3, 1, 1, 0, 0)
        );
        // A malformed length ends the count.
        bytes.extend(rec(30, 12));
        bytes.extend(rec(30, 64));
        assert_eq!(count_events(&bytes, &mut [0; LOSS_SLOTS]), 5);
    }

    use crate::{
        FileHeader, LogFile, LogWriter, PostSend, Record, RecordHeader, Timestamper,
        WorkCompletion, WriterOptions,
    };

    const CS: u32 = 1 << 12;

    fn flight_log(path: &std::path::Path, ring_chunks: u32) -> LogWriter {
        let ts = Timestamper::detect();
        let h = FileHeader::for_current_process(ts.source(), 1_000_000_000, ts.snapshot(), CS);
        let options = WriterOptions {
            chunk_size: CS,
            max_bytes: 1 << 24,
            ring_chunks,
            flight_recorder: true,
            ..Default::default()
        };
        LogWriter::create(path, &h, options).unwrap()
    }

    fn post(i: u64) -> PostSend {
        PostSend {
            hdr: RecordHeader::of::<PostSend>(2),
            ts: 1000 + i,
            wr_id: i,
            qpn: 7,
            bytes: 8,
            num_sge: 1,
            ..Default::default()
        }
    }

    fn wc(i: u64) -> WorkCompletion {
        WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts: 1000 + i,
            wr_id: i,
            qpn: 7,
            cq: 0x10,
            ..Default::default()
        }
    }

    /// (wr_ids of the posts, completions, losses per kind) read back.
    fn read(path: &std::path::Path) -> (Vec<u64>, u64, Vec<(u16, u64)>, usize) {
        let log = LogFile::open(path).unwrap();
        let mut chunks = log.chunks().to_vec();
        chunks.sort_by_key(|c| c.header.index);
        let (mut posts, mut wcs) = (Vec::new(), 0);
        for c in &chunks {
            for r in log.records(c) {
                match r.unwrap().decode().unwrap() {
                    Record::PostSend(p) => posts.push(p.wr_id),
                    Record::WorkCompletion(_) => wcs += 1,
                    _ => {}
                }
            }
        }
        (posts, wcs, log.losses().by_kind, chunks.len())
    }

    #[test]
    fn a_full_ring_reuses_its_oldest_chunk_and_counts_its_records_as_dropped() {
        // Counted by the owner when it reuses the slot, or ahead by the background thread.
        for drainer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.sigmalog");
            let log = flight_log(&path, 4);
            let mut w = log.thread_writer(1);
            const N: u64 = 20_000;
            for i in 0..N {
                assert!(w.append(&post(i)));
                if i % 4 == 0 {
                    assert!(w.append(&wc(i)));
                }
                if drainer && i % 30 == 0 {
                    log.drain();
                }
            }
            drop(w);
            let (posts, wcs, lost, chunks) = read(&path);
            assert_eq!(chunks, 4, "the ring's 4 chunks and nothing else");
            let first = posts[0];
            assert!(first > N / 2, "only the end is kept (first kept {first})");
            assert_eq!(
                posts,
                (first..N).collect::<Vec<_>>(),
                "the last posts, once"
            );
            let lost_of = |k: RecordKind| lost.iter().find(|l| l.0 == k as u16).map_or(0, |l| l.1);
            assert_eq!(posts.len() as u64 + lost_of(RecordKind::PostSend), N);
            assert_eq!(wcs + lost_of(RecordKind::WorkCompletion), N / 4);
            assert_eq!(lost.len(), 2, "{lost:?}");
            let l = LogFile::open(&path).unwrap().losses();
            assert_eq!(l.total, N - posts.len() as u64 + N / 4 - wcs);
            let size = std::fs::metadata(&path).unwrap().len();
            assert_eq!(
                size,
                (HEADER_SIZE + 4 * CS as usize) as u64,
                "the file is the ring"
            );
        }
    }

    #[test]
    fn a_dump_keeps_the_window_and_later_reuse_counts_only_what_it_did_not_keep() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.sigmalog");
        let log = flight_log(&path, 3);
        let mut w = log.thread_writer(1);
        let mut next = 0u64;
        let mut run = |w: &mut crate::ChunkWriter, n: u64| {
            for _ in 0..n {
                assert!(w.append(&post(next)));
                next += 1;
            }
        };
        run(&mut w, 1000);
        let d1 = log.dump_rings();
        assert_eq!(d1.chunks, 3, "{d1:?}");
        run(&mut w, 10); // the live chunk grows a little
        let d2 = log.dump_rings();
        assert_eq!(d2.chunks, 1, "only the chunk being filled changed: {d2:?}");
        run(&mut w, 2000);
        drop(w);
        let (posts, _, lost, _) = read(&path);
        let lost_posts = lost
            .iter()
            .find(|l| l.0 == RecordKind::PostSend as u16)
            .unwrap()
            .1;
        assert_eq!(
            posts.len() as u64 + lost_posts,
            3010,
            "each post kept once or counted"
        );
        let mut sorted = posts.clone();
        sorted.dedup();
        assert_eq!(sorted, posts, "no post twice");
        // The dumped window (ending at post 1009) and the final window, with a gap between.
        assert_eq!(*posts.last().unwrap(), 3009);
        assert!(posts.contains(&1009) && posts.contains(&(1009 - 100)));
        assert!(posts.windows(2).any(|p| p[1] > p[0] + 1), "a counted gap");
    }

    #[test]
    fn a_chunk_with_control_records_is_kept_not_dropped() {
        for drainer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.sigmalog");
            let log = flight_log(&path, 4);
            let mut w = log.thread_writer(1);
            assert!(w.append_meta(RecordKind::ThreadName, 0, 5, 1, b"main"));
            for i in 0..5_000 {
                assert!(w.append(&post(i)));
                if drainer && i % 50 == 0 {
                    log.drain(); // looks at each finished chunk before it is reused
                }
            }
            drop(w);
            let (posts, _, lost, chunks) = read(&path);
            let lost_posts = lost.iter().find(|l| l.0 == RecordKind::PostSend as u16);
            assert_eq!(
                posts.len() as u64 + lost_posts.unwrap().1,
                5_000,
                "{drainer}"
            );
            assert!(
                lost.iter().all(|l| l.0 == RecordKind::PostSend as u16),
                "{lost:?}"
            );
            assert_eq!(chunks, 5, "the ring and the kept first chunk ({drainer})");
            assert_eq!(posts[0], 0, "the first chunk's posts are kept with it");
            assert_eq!(*posts.last().unwrap(), 4_999);
            let log = LogFile::open(&path).unwrap();
            let names = log
                .chunks()
                .iter()
                .flat_map(|c| log.records(c))
                .filter(|r| matches!(r.as_ref().unwrap().decode(), Ok(Record::ThreadName(_))))
                .count();
            assert_eq!(names, 1);
        }
    }
}

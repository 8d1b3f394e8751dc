//! The messages of a run (message-consuming sends, successful receive completions: what the
//! causality join pairs), noted by the scan so that the join need not read every record of
//! every log again.
//!
//! The scan sees every record of every chunk; each chunk's messages go, in log order, to a
//! spill file ([`Spill`]: a temporary file in `TMPDIR`, unlinked once open, 32 bytes per
//! message, written and read with positioned I/O), and the chunk's pieces of it to its log
//! ([`LogInput::set_spilled`]). For a thread whose records are in time order the join reads
//! its messages from there ([`SpillCursor`]): the same messages in the order its record cursor
//! would hand them out (log order). Memory stays bounded: a chunk's messages are written in
//! pieces of at most [`PIECE`] as the scan goes, and a cursor holds one piece at a time. Without
//! the spill (it could not be made or written, or the run has more messages than
//! [`MAX_SPILL_BYTES`] hold) the join reads the records, as it always can.
//!
//! [`LogInput::set_spilled`]: crate::read::input::LogInput::set_spilled

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One message as the join needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Whether it is a send (else a receive completion).
    pub send: bool,
    pub ts: u64,
    pub qpn: u32,
    /// A send's `rkey` (a UD send's remote QPN), a receive's `src_qp`.
    pub a: u32,
    /// A send's `remote_addr` (a UD send's address handle), a receive's `slid`.
    pub b: u64,
    /// File offset of the record (a completion without a QPN is attributed by it).
    pub offset: u64,
}

/// Bytes of a spilled message.
pub const ENTRY: usize = 32;

/// Most bytes a spill takes in `TMPDIR` (32 M messages, about 200 M WR events of the benchmark's
/// mix): `TMPDIR` is often a tmpfs, whose pages are memory. A run with more messages is joined
/// from its records.
pub const MAX_SPILL_BYTES: u64 = 1 << 30;

/// Messages per piece: what a scan job collects before it writes, and what a cursor reads at
/// once (8 KiB).
pub const PIECE: usize = 256;

impl Message {
    fn to_bytes(self) -> [u8; ENTRY] {
        let mut e = [0u8; ENTRY];
        e[0..8].copy_from_slice(&self.ts.to_ne_bytes());
        // File offsets stay far below 2^63: the top bit says "send".
        let tagged = self.offset | (self.send as u64) << 63;
        e[8..16].copy_from_slice(&tagged.to_ne_bytes());
        e[16..24].copy_from_slice(&self.b.to_ne_bytes());
        e[24..28].copy_from_slice(&self.qpn.to_ne_bytes());
        e[28..32].copy_from_slice(&self.a.to_ne_bytes());
        e
    }

    fn from_bytes(e: &[u8]) -> Message {
        let u64_at = |at: usize| u64::from_ne_bytes(e[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_ne_bytes(e[at..at + 4].try_into().expect("4 bytes"));
        let tagged = u64_at(8);
        Message {
            send: tagged >> 63 != 0,
            ts: u64_at(0),
            qpn: u32_at(24),
            a: u32_at(28),
            b: u64_at(16),
            offset: tagged & !(1 << 63),
        }
    }
}

/// The spill file: messages appended in pieces by the scan's jobs (any order), read back by
/// position.
pub struct Spill {
    file: File,
    /// Messages written or reserved so far.
    len: AtomicU64,
    /// Most messages it takes.
    cap: u64,
    /// A write failed: the spill is not used.
    failed: AtomicBool,
}

impl Spill {
    /// A new, empty spill in the temporary directory (`None` when it cannot be made: the join
    /// then reads the records).
    pub fn create() -> Option<Spill> {
        let dir = std::env::temp_dir();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("sigmatrace-join-{}-{n}.spill", std::process::id()));
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path);
            match opened {
                Ok(file) => {
                    // Unlinked at once: nothing is left behind, however the process ends.
                    std::fs::remove_file(&path).ok()?;
                    return Some(Spill::on(file, MAX_SPILL_BYTES / ENTRY as u64));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// An empty spill in `file` of at most `cap` messages.
    fn on(file: File, cap: u64) -> Spill {
        Spill {
            file,
            len: AtomicU64::new(0),
            cap,
            failed: AtomicBool::new(false),
        }
    }

    /// Appends `msgs`; returns the index of the first (`None` after a failed write: the spill
    /// is then not used at all).
    pub fn append(&self, msgs: &[Message]) -> Option<u64> {
        if msgs.is_empty() || self.failed() {
            return None;
        }
        let first = self.len.fetch_add(msgs.len() as u64, Ordering::Relaxed);
        if first + msgs.len() as u64 > self.cap {
            // Full: the whole spill is dropped (the join reads the records) and its file
            // truncated now rather than when the scan ends.
            self.failed.store(true, Ordering::Relaxed);
            self.file.set_len(0).ok();
            return None;
        }
        let mut bytes = Vec::with_capacity(msgs.len() * ENTRY);
        for m in msgs {
            bytes.extend_from_slice(&m.to_bytes());
        }
        match self.file.write_all_at(&bytes, first * ENTRY as u64) {
            Ok(()) => Some(first),
            Err(_) => {
                self.failed.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether a write failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Messages `first..first + out.len()` into `out`.
    fn read(&self, first: u64, out: &mut Vec<Message>, n: usize, buf: &mut Vec<u8>) {
        buf.resize(n * ENTRY, 0);
        if let Err(e) = self.file.read_exact_at(buf, first * ENTRY as u64) {
            // As a log's mapping that can no longer be read: nothing to convert from.
            panic!("cannot read back the causality join's message spill: {e}");
        }
        out.clear();
        out.extend(buf.chunks_exact(ENTRY).map(Message::from_bytes));
    }
}

/// Per thread of a log, its pieces of the spill in log order: (first message, count).
pub type ThreadPieces = Vec<Vec<(u64, u32)>>;

/// Collects one chunk's messages for the spill, writing every [`PIECE`] of them.
pub struct SpillWriter<'a> {
    spill: Option<&'a Spill>,
    buf: Vec<Message>,
    /// The pieces written: (first message, count).
    pub pieces: Vec<(u64, u32)>,
    /// A piece could not be written.
    pub failed: bool,
}

impl<'a> SpillWriter<'a> {
    pub fn new(spill: Option<&'a Spill>) -> SpillWriter<'a> {
        SpillWriter {
            spill,
            buf: Vec::new(),
            pieces: Vec::new(),
            failed: spill.is_none(),
        }
    }

    /// Notes the next message of the chunk.
    #[inline]
    pub fn push(&mut self, m: Message) {
        if self.failed {
            return;
        }
        self.buf.push(m);
        if self.buf.len() == PIECE {
            self.write();
        }
    }

    /// Writes what is collected; returns the chunk's pieces (`None` when one failed).
    pub fn finish(mut self) -> Option<Vec<(u64, u32)>> {
        self.write();
        (!self.failed).then_some(self.pieces)
    }

    #[cold]
    fn write(&mut self) {
        if self.buf.is_empty() || self.failed {
            return;
        }
        match self.spill.and_then(|s| s.append(&self.buf)) {
            Some(first) => self.pieces.push((first, self.buf.len() as u32)),
            None => self.failed = true,
        }
        self.buf.clear();
    }
}

/// One thread's spilled messages in log order, read one piece at a time.
pub struct SpillCursor<'a> {
    spill: &'a Spill,
    pieces: &'a [(u64, u32)],
    next_piece: usize,
    msgs: Vec<Message>,
    pos: usize,
    bytes: Vec<u8>,
}

impl<'a> SpillCursor<'a> {
    pub fn new(spill: &'a Spill, pieces: &'a [(u64, u32)]) -> SpillCursor<'a> {
        let mut c = SpillCursor {
            spill,
            pieces,
            next_piece: 0,
            msgs: Vec::new(),
            pos: 0,
            bytes: Vec::new(),
        };
        c.refill();
        c
    }

    /// Timestamp of the next message.
    #[inline]
    pub fn head_ts(&self) -> Option<u64> {
        self.msgs.get(self.pos).map(|m| m.ts)
    }

    /// Takes the next message.
    #[inline]
    pub fn pop(&mut self) -> Option<Message> {
        let m = *self.msgs.get(self.pos)?;
        self.pos += 1;
        if self.pos == self.msgs.len() {
            self.refill();
        }
        Some(m)
    }

    /// Reads the next piece (or, at the end, frees the buffers).
    fn refill(&mut self) {
        self.pos = 0;
        match self.pieces.get(self.next_piece) {
            Some(&(first, n)) => {
                self.next_piece += 1;
                self.spill
                    .read(first, &mut self.msgs, n as usize, &mut self.bytes);
            }
            None => {
                self.msgs = Vec::new();
                self.bytes = Vec::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_messages_read_back_in_order_in_pieces() {
        let spill = Spill::create().expect("a temporary file");
        let msg = |i: u64| Message {
            send: i.is_multiple_of(3),
            ts: 1 << 40 | i,
            qpn: i as u32 * 7,
            a: !(i as u32),
            b: u64::MAX - i,
            offset: (1 << 62) + i * 32,
        };
        // Two chunks written interleaved, in pieces, as parallel scan jobs would.
        let (mut w1, mut w2) = (
            SpillWriter::new(Some(&spill)),
            SpillWriter::new(Some(&spill)),
        );
        for i in 0..1000 {
            w1.push(msg(i));
            w2.push(msg(10_000 + i));
        }
        let (p1, p2) = (w1.finish().unwrap(), w2.finish().unwrap());
        assert!(p1.len() > 3);
        for (pieces, base) in [(&p1, 0), (&p2, 10_000)] {
            let mut c = SpillCursor::new(&spill, pieces);
            let mut got = Vec::new();
            while let Some(ts) = c.head_ts() {
                let m = c.pop().unwrap();
                assert_eq!(m.ts, ts);
                got.push(m);
            }
            let want: Vec<Message> = (base..base + 1000).map(msg).collect();
            assert_eq!(got, want);
        }
        // A spill that cannot be written is not used: its writers report no pieces.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").unwrap();
        let ro = Spill::on(std::fs::File::open(&path).unwrap(), u64::MAX);
        let mut w = SpillWriter::new(Some(&ro));
        w.push(msg(1));
        assert_eq!(w.finish(), None);
        assert!(ro.failed());
        // A spill with more messages than its cap is not used either, and its file is emptied.
        let small = Spill::on(tempfile::tempfile().unwrap(), 2 * PIECE as u64);
        let mut w = SpillWriter::new(Some(&small));
        (0..2 * PIECE as u64).for_each(|i| w.push(msg(i)));
        assert!(!small.failed(), "two pieces fit");
        w.push(msg(0));
        assert_eq!(w.finish(), None);
        assert!(small.failed());
        assert_eq!(small.file.metadata().unwrap().len(), 0);
        // Without a spill nothing is collected.
        let mut none = SpillWriter::new(None);
        none.push(msg(1));
        assert_eq!(none.finish(), None);
    }
}

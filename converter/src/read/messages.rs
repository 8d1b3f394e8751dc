//! The messages of a run (message-consuming sends, successful receive completions: what the
//! causality join pairs), noted by the scan so that the join need not read every record of
//! every log again.
//!
//! The scan sees every record of every chunk; each chunk's messages go, in log order, to a
//! spill file ([`Spill`]: a temporary file in `TMPDIR`, unlinked once open, written and read
//! with positioned I/O), and the chunk's pieces of it to its log ([`LogInput::set_spilled`]).
//! A piece is up to [`PIECE`] messages, each coded against the one before it in the piece
//! ([`Coder`]: a flag byte, the time and file offset as varint differences, QPN and the two
//! peer fields only where they change) — 4 to 8 bytes a message where a fixed layout took
//! 32, so that writing and reading it back cost a quarter of the I/O and the spill's cap holds
//! four times the messages. For a thread whose records are in time order the join reads its
//! messages from there ([`SpillCursor`]): the same messages in the order its record cursor
//! would hand them out (log order). Memory stays bounded: a chunk's messages are written a
//! piece at a time as the scan goes, and a cursor holds one piece at a time. Without the spill
//! (it could not be made or written, or the run's messages take more than
//! [`MAX_SPILL_BYTES`]) the join reads the records, as it always can.
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

/// Most bytes a spill takes in `TMPDIR` (about 140 M messages of the benchmark's mix, some
/// 800 M WR events): `TMPDIR` is often a tmpfs, whose pages are memory. A run with more is
/// joined from its records.
pub const MAX_SPILL_BYTES: u64 = 1 << 30;

/// Most messages in a piece: what a scan job collects before it writes, and what a cursor
/// reads at once (4 to 8 KiB coded).
pub const PIECE: usize = 1024;

/// Most bytes of one coded message: the flag byte, the time and offset differences and `b`
/// (varints of at most 10 bytes), the QPN and `a` (at most 5).
const MAX_CODED: usize = 1 + 10 + 10 + 5 + 5 + 10;

/// Flags of a coded message's first byte.
const SEND: u8 = 1;
/// The time is below the one before it (the varint is the difference the other way).
const BACK: u8 = 2;
/// The QPN, `a` and `b` differ from the last message of the same direction (then each
/// follows as a varint).
const NEW_QPN: u8 = 4;
const NEW_A: u8 = 8;
const NEW_B: u8 = 16;

/// One piece's coding state: the time and offset of the message before, and the QPN, `a` and
/// `b` of the last send and of the last receive (a send's `a` and `b` are its `rkey` and
/// address, a receive's its source QP and LID: in a ping-pong they alternate, each
/// direction's stay the same). All zero at a piece's start, so that each piece decodes alone.
#[derive(Clone, Copy, Debug, Default)]
struct Coder {
    ts: u64,
    offset: u64,
    /// (QPN, a, b) of the last receive [0] and the last send [1].
    fields: [(u32, u32, u64); 2],
}

impl Coder {
    /// Appends `m`, coded against the messages before it, to `out`.
    #[inline]
    fn encode(&mut self, m: &Message, out: &mut Vec<u8>) {
        // Coded in a scratch array and appended whole, then cut to length: a copy of a fixed
        // size is a few moves, one of `n` bytes a call to `memcpy` (perf: 0.9 % of the 64-rank
        // conversion, the scan's spill).
        let mut code = [0u8; MAX_CODED];
        let (dt, back) = match m.ts.checked_sub(self.ts) {
            Some(d) => (d, 0),
            None => (self.ts - m.ts, BACK),
        };
        let mut flags = (m.send as u8 * SEND) | back;
        let mut n = 1;
        put_varint(&mut code, &mut n, dt);
        put_varint(&mut code, &mut n, m.offset.wrapping_sub(self.offset));
        let last = &mut self.fields[m.send as usize];
        if m.qpn != last.0 {
            flags |= NEW_QPN;
            put_varint(&mut code, &mut n, m.qpn as u64);
        }
        if m.a != last.1 {
            flags |= NEW_A;
            put_varint(&mut code, &mut n, m.a as u64);
        }
        if m.b != last.2 {
            flags |= NEW_B;
            put_varint(&mut code, &mut n, m.b);
        }
        code[0] = flags;
        let at = out.len();
        out.extend_from_slice(&code);
        out.truncate(at + n);
        *last = (m.qpn, m.a, m.b);
        self.ts = m.ts;
        self.offset = m.offset;
    }

    /// The message at `*pos` of `bytes` (`*pos` moved past it); `None` where the bytes do
    /// not hold one.
    #[inline]
    fn decode(&mut self, bytes: &[u8], pos: &mut usize) -> Option<Message> {
        let flags = *bytes.get(*pos)?;
        *pos += 1;
        let send = flags & SEND != 0;
        let dt = varint(bytes, pos)?;
        let ts = match flags & BACK {
            0 => self.ts.checked_add(dt)?,
            _ => self.ts.checked_sub(dt)?,
        };
        let offset = self.offset.wrapping_add(varint(bytes, pos)?);
        let last = &mut self.fields[send as usize];
        if flags & (NEW_QPN | NEW_A | NEW_B) != 0 {
            if flags & NEW_QPN != 0 {
                last.0 = u32::try_from(varint(bytes, pos)?).ok()?;
            }
            if flags & NEW_A != 0 {
                last.1 = u32::try_from(varint(bytes, pos)?).ok()?;
            }
            if flags & NEW_B != 0 {
                last.2 = varint(bytes, pos)?;
            }
        }
        let (qpn, a, b) = *last;
        (self.ts, self.offset) = (ts, offset);
        Some(Message {
            send,
            ts,
            qpn,
            a,
            b,
            offset,
        })
    }
}

/// Writes `v` as a LEB128 varint at `code[*n..]` (`*n` moved past it; a message's varints
/// fit [`MAX_CODED`]).
#[inline(always)]
fn put_varint(code: &mut [u8; MAX_CODED], n: &mut usize, mut v: u64) {
    while v >= 0x80 {
        code[*n] = v as u8 | 0x80;
        *n += 1;
        v >>= 7;
    }
    code[*n] = v as u8;
    *n += 1;
}

/// The LEB128 varint at `*pos` (moved past it); `None` when cut or longer than 10 bytes.
#[inline(always)]
fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    // One byte (a small difference) most often.
    let b = *bytes.get(*pos)?;
    *pos += 1;
    if b < 0x80 {
        return Some(b as u64);
    }
    let mut v = (b & 0x7f) as u64;
    let mut shift = 7;
    loop {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        // The tenth byte's bits above 2^64 are dropped (`shift` ≤ 63 here).
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Where one piece of the spill is: its first byte, its length and how many messages it
/// holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub at: u64,
    pub bytes: u32,
    pub count: u32,
}

/// The spill file: pieces appended by the scan's jobs (any order), read back by position.
pub struct Spill {
    file: File,
    /// Bytes written or reserved so far.
    len: AtomicU64,
    /// Most bytes it takes.
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
                    return Some(Spill::on(file, MAX_SPILL_BYTES));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// An empty spill in `file` of at most `cap` bytes.
    fn on(file: File, cap: u64) -> Spill {
        Spill {
            file,
            len: AtomicU64::new(0),
            cap,
            failed: AtomicBool::new(false),
        }
    }

    /// Appends one coded piece of `count` messages; returns where it went (`None` after a
    /// failed write: the spill is then not used at all).
    fn append(&self, bytes: &[u8], count: u32) -> Option<Piece> {
        if bytes.is_empty() || self.failed() {
            return None;
        }
        let at = self.len.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if at + bytes.len() as u64 > self.cap {
            // Full: the whole spill is dropped (the join reads the records) and its file
            // truncated now rather than when the scan ends.
            self.failed.store(true, Ordering::Relaxed);
            self.file.set_len(0).ok();
            return None;
        }
        match self.file.write_all_at(bytes, at) {
            Ok(()) => Some(Piece {
                at,
                bytes: bytes.len() as u32,
                count,
            }),
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

    /// The bytes of `piece` into `buf`.
    fn read(&self, piece: &Piece, buf: &mut Vec<u8>) {
        buf.resize(piece.bytes as usize, 0);
        if let Err(e) = self.file.read_exact_at(buf, piece.at) {
            // As a log's mapping that can no longer be read: nothing to convert from.
            panic!("cannot read back the causality join's message spill: {e}");
        }
    }
}

/// Per thread of a log, its pieces of the spill in log order.
pub type ThreadPieces = Vec<Vec<Piece>>;

/// Collects one chunk's messages for the spill, writing every [`PIECE`] of them.
pub struct SpillWriter<'a> {
    spill: Option<&'a Spill>,
    coded: Vec<u8>,
    coder: Coder,
    count: u32,
    /// The pieces written.
    pub pieces: Vec<Piece>,
    /// A piece could not be written.
    pub failed: bool,
}

impl<'a> SpillWriter<'a> {
    pub fn new(spill: Option<&'a Spill>) -> SpillWriter<'a> {
        SpillWriter {
            spill,
            coded: Vec::new(),
            coder: Coder::default(),
            count: 0,
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
        if self.coded.capacity() == 0 {
            self.coded.reserve(PIECE * MAX_CODED);
        }
        self.coder.encode(&m, &mut self.coded);
        self.count += 1;
        if self.count as usize == PIECE {
            self.write();
        }
    }

    /// Writes what is collected; returns the chunk's pieces (`None` when one failed).
    pub fn finish(mut self) -> Option<Vec<Piece>> {
        self.write();
        (!self.failed).then_some(self.pieces)
    }

    #[cold]
    fn write(&mut self) {
        if self.count == 0 || self.failed {
            return;
        }
        match self.spill.and_then(|s| s.append(&self.coded, self.count)) {
            Some(piece) => self.pieces.push(piece),
            None => self.failed = true,
        }
        self.coded.clear();
        self.coder = Coder::default();
        self.count = 0;
    }
}

/// One thread's spilled messages in log order, read one piece at a time.
pub struct SpillCursor<'a> {
    spill: &'a Spill,
    pieces: &'a [Piece],
    next_piece: usize,
    /// The current piece's bytes, where its next message starts, and how many are left
    /// after `next`.
    bytes: Vec<u8>,
    pos: usize,
    left: u32,
    coder: Coder,
    /// The next message (`None` at the end).
    next: Option<Message>,
}

impl<'a> SpillCursor<'a> {
    pub fn new(spill: &'a Spill, pieces: &'a [Piece]) -> SpillCursor<'a> {
        let mut c = SpillCursor {
            spill,
            pieces,
            next_piece: 0,
            bytes: Vec::new(),
            pos: 0,
            left: 0,
            coder: Coder::default(),
            next: None,
        };
        c.advance();
        c
    }

    /// Timestamp of the next message.
    #[inline]
    pub fn head_ts(&self) -> Option<u64> {
        self.next.map(|m| m.ts)
    }

    /// Takes the next message.
    #[inline]
    pub fn pop(&mut self) -> Option<Message> {
        let m = self.next?;
        self.advance();
        Some(m)
    }

    /// Decodes the message after `next` (reading the next piece where this one ends; at the
    /// end freeing the buffer).
    fn advance(&mut self) {
        while self.left == 0 {
            let Some(piece) = self.pieces.get(self.next_piece) else {
                self.next = None;
                self.bytes = Vec::new();
                return;
            };
            self.next_piece += 1;
            self.spill.read(piece, &mut self.bytes);
            self.pos = 0;
            self.left = piece.count;
            self.coder = Coder::default();
        }
        self.left -= 1;
        let m = self.coder.decode(&self.bytes, &mut self.pos);
        // The spill is this process's own file, written just before: a piece that does not
        // decode is a bug or the file changed under us, as a log that can no longer be read.
        self.next = Some(m.expect("the causality join's message spill holds what was written"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Message `i` of a test stream: every field changing, times going back now and then,
    /// values at their limits.
    fn msg(i: u64) -> Message {
        Message {
            send: i.is_multiple_of(3),
            ts: match i % 7 {
                0 => 0,
                5 => u64::MAX - i,
                _ => ((1 << 40) | (i * 1_000)) - (i % 4) * 5_000,
            },
            qpn: if i.is_multiple_of(5) {
                u32::MAX
            } else {
                i as u32 / 10
            },
            a: !(i as u32 / 3),
            b: if i.is_multiple_of(11) {
                u64::MAX
            } else {
                i / 100
            },
            offset: match i % 13 {
                0 => (1 << 63) - 1,
                _ => (1 << 40) + i * 32,
            },
        }
    }

    #[test]
    fn spilled_messages_read_back_in_order_in_pieces() {
        let spill = Spill::create().expect("a temporary file");
        // Two chunks written interleaved, in pieces, as parallel scan jobs would.
        let (mut w1, mut w2) = (
            SpillWriter::new(Some(&spill)),
            SpillWriter::new(Some(&spill)),
        );
        let n = 3 * PIECE as u64 + 17;
        for i in 0..n {
            w1.push(msg(i));
            w2.push(msg(100_000 + i));
        }
        let (p1, p2) = (w1.finish().unwrap(), w2.finish().unwrap());
        assert_eq!(p1.len(), 4);
        assert_eq!(p1.iter().map(|p| p.count as u64).sum::<u64>(), n);
        for (pieces, base) in [(&p1, 0), (&p2, 100_000)] {
            let mut c = SpillCursor::new(&spill, pieces);
            let mut got = Vec::new();
            while let Some(ts) = c.head_ts() {
                let m = c.pop().unwrap();
                assert_eq!(m.ts, ts);
                got.push(m);
            }
            assert_eq!(c.pop(), None);
            let want: Vec<Message> = (base..base + n).map(msg).collect();
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
        // A spill with more bytes than its cap is not used either, and its file is emptied:
        // room for exactly two pieces, then one more message.
        let two = Spill::on(tempfile::tempfile().unwrap(), u64::MAX);
        let mut w = SpillWriter::new(Some(&two));
        (0..2 * PIECE as u64).for_each(|i| w.push(msg(i)));
        let cap = w.finish().unwrap().iter().map(|p| p.bytes as u64).sum();
        let small = Spill::on(tempfile::tempfile().unwrap(), cap);
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

    /// A ping-pong's messages (one QP, sends and receives alternating a few microseconds
    /// apart, records 32 to 64 bytes apart in the log) take a few bytes each, not the 32 of
    /// a fixed layout; and cut or overlong bytes do not decode.
    #[test]
    fn a_ping_pongs_messages_take_a_few_bytes_each_and_cut_ones_do_not_decode() {
        let mut coder = Coder::default();
        let mut out = Vec::new();
        let mut want = Vec::new();
        let (mut ts, mut offset) = (7_000_000_000_000u64, 1u64 << 30);
        for i in 0..PIECE as u64 {
            ts += 2_500 + i % 700;
            offset += 32 + 32 * (i % 2);
            let send = i % 2 == 0;
            let m = Message {
                send,
                ts,
                qpn: 0x1a2b,
                a: if send { 0 } else { 0x3c4d },
                b: if send { 0 } else { 17 },
                offset,
            };
            coder.encode(&m, &mut out);
            want.push(m);
        }
        let per = out.len() as f64 / PIECE as f64;
        assert!(per <= 4.5, "{per} bytes per message");
        let mut dec = Coder::default();
        let mut pos = 0;
        let got: Vec<Message> = (0..PIECE)
            .map(|_| dec.decode(&out, &mut pos).unwrap())
            .collect();
        assert_eq!((got, pos), (want, out.len()));
        // Cut anywhere inside the first message: nothing decodes.
        let first = {
            let (mut d, mut p) = (Coder::default(), 0);
            d.decode(&out, &mut p).unwrap();
            p
        };
        for cut in 0..first {
            let (mut d, mut p) = (Coder::default(), 0);
            assert_eq!(d.decode(&out[..cut], &mut p), None, "cut at {cut}");
        }
        // A varint of 11 bytes, a QPN past u32, a time past u64: none decodes.
        for bad in [
            vec![
                0u8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0,
            ],
            vec![NEW_QPN, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10],
            vec![0u8, 1, 0],
        ] {
            let mut d = Coder {
                ts: if bad[1] == 1 { u64::MAX } else { 0 },
                ..Coder::default()
            };
            assert_eq!(d.decode(&bad, &mut 0), None, "{bad:?}");
        }
    }
}

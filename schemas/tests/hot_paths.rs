//! The writer's hot paths (`ChunkWriter::place_plain_send`, `append_bound_completion`,
//! `append_bound_recv`) next to the ordinary compact appends: what they write, when they
//! refuse, and that it all reads back as what the ordinary append writes.

use sigmatrace_schemas::compact::*;
use sigmatrace_schemas::{
    ChunkWriter, FileHeader, LogFile, LogWriter, Record, RecordKind, Timestamper, WriterOptions,
};

const T0: u64 = 1 << 40;

fn send(qpn: u32, remote_addr: u64, flags: u32) -> SendHead {
    SendHead {
        qpn,
        source: 0,
        remote_addr,
        flags,
        num_sge: 1,
        opcode: 0,
    }
}

fn sbody(wr_id: u64) -> impl FnOnce() -> SendBody {
    move || SendBody {
        wr_id,
        rkey: 7,
        bytes: 8,
    }
}

fn wc(cq: u64, qpn: u32, src_qp: u32, flags: u32) -> CompletionHead {
    CompletionHead {
        cq,
        qpn,
        src_qp,
        flags,
    }
}

/// Send-side (RDMA write) and receive completion opcodes.
const WRITE: u8 = 1;
const RECV: u8 = 128;

/// A completion's body; an RDMA write's without flags is short (whatever its `slid` and
/// source QP: receive-side fields).
fn cbody(wr_id: u64, slid: u16, opcode: u8) -> CompletionBody {
    CompletionBody {
        wr_id,
        byte_len: 8,
        imm: 0,
        slid,
        status: 0,
        opcode,
    }
}

/// A completion as the interposer's hot path hands it over.
struct Source(CompletionHead, CompletionBody);

impl CompletionSource for Source {
    fn qpn(&self) -> u32 {
        self.0.qpn
    }
    fn is_short(&self) -> bool {
        completion_is_short(&self.0, &self.1)
    }
    fn head(&self) -> Option<CompletionHead> {
        Some(self.0)
    }
    fn body(&self) -> CompletionBody {
        self.1
    }
}

/// What a completion's record says besides its id, time and QPN.
fn csig(h: &CompletionHead, slid: u16, opcode: u8) -> u64 {
    slid as u64 | (h.src_qp as u64) << 16 | (h.flags as u64) << 40 | (opcode as u64) << 48 | 1 << 63
}

/// [`csig`] of what is recorded of a completion: a send-side one without flags is short,
/// its source QP and LID not recorded (0).
fn recorded(h: &CompletionHead, slid: u16, opcode: u8) -> u64 {
    if opcode < RECV && h.flags == 0 {
        csig(&CompletionHead { src_qp: 0, ..*h }, 0, opcode)
    } else {
        csig(h, slid, opcode)
    }
}

/// What a send's record says besides its id, time and QPN.
fn sig(h: &SendHead) -> u64 {
    h.remote_addr ^ (h.flags as u64) << 48 ^ (h.opcode as u64) << 56
}

/// The records a test writes and expects back: (wr_id, ts, qpn, [`sig`] for a send,
/// [`csig`] for a completion).
struct Hot {
    w: ChunkWriter,
    want: Vec<(u64, u64, u32, u64)>,
}

impl Hot {
    fn place(&mut self, ts: u64, h: SendHead, wr_id: u64) -> bool {
        let placed = self.w.place_plain_send(ts, &h, sbody(wr_id));
        if placed {
            self.w.publish_placed_send();
            self.want.push((wr_id, ts, h.qpn, sig(&h)));
        }
        placed
    }

    fn append(&mut self, ts: u64, h: SendHead, wr_id: u64) {
        assert_eq!(
            self.w.try_append_plain_send(ts, &h, sbody(wr_id)),
            Some(true)
        );
        self.want.push((wr_id, ts, h.qpn, sig(&h)));
    }

    /// The hot completion path, with a receive completion of `slid` 3 (never short).
    fn bound(&mut self, ts: u64, h: CompletionHead, wr_id: u64) -> bool {
        self.bound_op(ts, h, wr_id, 3, RECV)
    }

    fn bound_op(&mut self, ts: u64, h: CompletionHead, wr_id: u64, slid: u16, op: u8) -> bool {
        let done = self
            .w
            .append_bound_completion(ts, h.cq, &Source(h, cbody(wr_id, slid, op)));
        if done {
            self.want.push((wr_id, ts, h.qpn, recorded(&h, slid, op)));
        }
        done
    }

    fn complete(&mut self, ts: u64, h: CompletionHead, wr_id: u64, slid: u16, op: u8) {
        let r = self
            .w
            .try_append_plain_completion(ts, &h, || cbody(wr_id, slid, op));
        assert_eq!(r, Some(true));
        self.want.push((wr_id, ts, h.qpn, recorded(&h, slid, op)));
    }
}

/// The hot paths (`place_plain_send`, `append_bound_completion`) write a record only when
/// it needs nothing else — a chunk with room, a bound slot (sends and completions of one
/// queue each keep theirs), a time within reach of the base and before the horizon, a
/// compact form — and what they write reads back as what the ordinary append writes.
#[test]
fn hot_paths_write_only_records_that_need_no_bookkeeping() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = small_chunk_log(dir.path());
    let mut h = Hot {
        w: log.thread_writer(9),
        want: Vec::new(),
    };
    let (q, cq) = (5, 0x9000);
    // No chunk yet, then a chunk but no slot: nothing.
    assert!(!h.place(T0, send(q, 0x1000, 2), 1));
    assert!(!h.bound(T0, wc(cq, q, 0, 0), 1));
    h.append(T0, send(q, 0x1000, 2), 2);
    assert!(!h.bound(T0, wc(cq, q, 0, 0), 1));
    h.complete(T0 + 1, wc(cq, q, 0, 0), 3, 3, RECV);
    // Both bound (one region each): hot.
    assert!(h.place(T0 + 2, send(q, 0x1000, 2), 4));
    // A send (opcode 2, no address) with every flag the compact form holds, and the
    // largest address it holds.
    let s = SendHead {
        opcode: 2,
        ..send(q, 0, 31)
    };
    assert!(h.place(T0 + 2, s, 40));
    assert!(h.place(T0 + 2, send(q, (1 << 48) - 1, 0), 41));
    assert!(h.bound(T0 + 3, wc(cq, q, 0x42, 2), 5));
    // RDMA writes' completions: short without flags, whatever their source QP (one the
    // compact form does not hold included) and LID (not recorded); compact with a flag. A
    // receive's of the same fields: compact, and none with that source QP.
    assert!(h.bound_op(T0 + 3, wc(cq, q, 0, 0), 50, 0, WRITE));
    assert!(h.bound_op(T0 + 3, wc(cq, q, 1, 0), 51, 0, WRITE));
    assert!(h.bound_op(T0 + 3, wc(cq, q, 0, 1), 52, 0, WRITE));
    assert!(h.bound_op(T0 + 3, wc(cq, q, 0, 0), 53, 1, WRITE));
    assert!(h.bound_op(T0 + 3, wc(cq, q, 1 << 24, 0), 54, 7, WRITE));
    assert!(h.bound_op(T0 + 3, wc(cq, q, 1, 0), 55, 1, RECV));
    assert!(!h.bound_op(T0 + 3, wc(cq, q, 1 << 24, 0), 56, 7, RECV));
    // Another queue, the same QP on another CQ, QP q + 64 (the same send slot): not bound.
    assert!(!h.place(T0 + 4, send(q + 1, 0x1000, 2), 6));
    assert!(!h.place(T0 + 4, send(q + 64, 0x1000, 2), 6));
    assert!(!h.bound(T0 + 4, wc(cq + 64, q, 0, 0), 6));
    // No compact form.
    assert!(!h.place(T0 + 4, send(q, 1 << 48, 2), 6));
    assert!(!h.place(T0 + 4, send(q, 0x1000, 32), 6));
    assert!(!h.bound(T0 + 4, wc(cq, q, 1 << 24, 0), 6));
    assert!(!h.bound(T0 + 4, wc(cq, q, 0, 256), 6));
    // The time: before the base, out of reach of it, at the last offset it reaches.
    assert!(!h.place(T0 - 1, send(q, 0x1000, 2), 6));
    assert!(!h.bound(T0 - 1, wc(cq, q, 0, 0), 6));
    assert!(!h.place(T0 + DTS_LIMIT, send(q, 0x1000, 2), 6));
    assert!(!h.bound(T0 + DTS_LIMIT, wc(cq, q, 0, 0), 6));
    assert!(h.place(T0 + DTS_LIMIT - 1, send(q, 0x1000, 2), 6));
    assert!(h.bound(T0 + DTS_LIMIT - 1, wc(cq, q, 0, 0), 7));
    // The horizon, and a new base beyond it.
    h.w.set_horizon(T0 + 100);
    assert!(!h.place(T0 + 100, send(q, 0x1000, 2), 8));
    assert!(!h.bound(T0 + 100, wc(cq, q, 0, 0), 8));
    assert!(h.place(T0 + 99, send(q, 0x1000, 2), 8));
    h.append(T0 + (1 << 30), send(q, 0x1000, 2), 9);
    assert!(!h.place(T0 + (1 << 30) + 1, send(q, 0x1000, 2), 10));
    h.w.set_horizon(u64::MAX);
    assert!(h.place(T0 + (1 << 30) + 1, send(q, 0x1000, 2), 10));
    // QP q + 64 takes the send slot: q is no longer hot, q + 64 is.
    h.append(T0 + (1 << 30) + 2, send(q + 64, 0x1000, 2), 11);
    assert!(!h.place(T0 + (1 << 30) + 3, send(q, 0x1000, 2), 12));
    assert!(h.place(T0 + (1 << 30) + 3, send(q + 64, 0x1000, 2), 12));
    // Until the chunk is full; then the ordinary append moves to a new chunk, where the
    // slot is bound again.
    let t = T0 + (1 << 30) + 4;
    let mut id = 100;
    while h.place(t, send(q + 64, 0x1000, 2), id) {
        id += 1;
    }
    assert!((50..128).contains(&(id - 100)), "{} placed", id - 100);
    let before = log.losses().total;
    h.append(t, send(q + 64, 0x1000, 2), id);
    assert!(!h.bound(t, wc(cq, q, 0, 0), id + 1));
    h.complete(t, wc(cq, q, 0, 0), id + 1, 0, WRITE);
    assert!(h.place(t, send(q + 64, 0x1000, 2), id + 2));
    assert!(h.bound(t, wc(cq, q, 0, 0), id + 3));
    assert_eq!(log.losses().total, before);
    drop(h.w);
    let file = LogFile::open(&path).unwrap();
    assert!(file.salvage().is_clean(), "{:?}", file.salvage());
    assert_eq!(read_back(&file, cq), h.want);
    assert_eq!(file.chunks().len(), 2);
    // The RDMA writes' completions without flags (ids 50, 51, 53, 54 and the ordinary one at
    // the new chunk) were written short, every other one compact.
    let kinds = |k: RecordKind| -> usize {
        let chunks = file.chunks();
        let raw = chunks.iter().flat_map(|c| file.raw_records(c));
        raw.filter(|r| r.as_ref().unwrap().kind == k as u16).count()
    };
    let completions = h.want.iter().filter(|w| w.3 >> 63 == 1).count();
    assert_eq!(kinds(RecordKind::CompletionShort), 5);
    assert_eq!(kinds(RecordKind::CompletionCompact), completions - 5);
}

/// A log in `dir` with 4 KiB chunks, for the hot-path tests.
fn small_chunk_log(dir: &std::path::Path) -> (std::path::PathBuf, LogWriter) {
    let path = dir.join("hot.sigmalog");
    let ts = Timestamper::detect();
    let header = FileHeader::for_current_process(ts.source(), 1 << 30, ts.snapshot(), 4096);
    let options = WriterOptions {
        chunk_size: 4096,
        max_bytes: 1 << 24,
        ..Default::default()
    };
    let log = LogWriter::create(&path, &header, options).unwrap();
    (path, log)
}

/// The posts and completions (of the CQ `cq`) of `file` as [`Hot`] records them.
fn read_back(file: &LogFile, cq: u64) -> Vec<(u64, u64, u32, u64)> {
    let mut got = Vec::new();
    for c in file.chunks() {
        for r in file.records(c) {
            match r.unwrap().decode().unwrap() {
                Record::PostSend(s) => {
                    assert_eq!((s.rkey, s.bytes, s.num_sge, s.imm), (7, 8, 1, 0));
                    let h = SendHead {
                        qpn: s.qpn,
                        source: s.source,
                        remote_addr: s.remote_addr,
                        flags: s.hdr.aux,
                        num_sge: s.num_sge,
                        opcode: s.opcode,
                    };
                    got.push((s.wr_id, s.ts, s.qpn, sig(&h)));
                }
                Record::WorkCompletion(w) => {
                    assert_eq!((w.cq, w.byte_len, w.status), (cq, 8, 0));
                    assert_eq!((w.imm, w.vendor_err, w.hw_ts), (0, 0, 0));
                    let h = wc(cq, w.qpn, w.src_qp, w.hdr.aux);
                    got.push((w.wr_id, w.ts, w.qpn, csig(&h, w.slid, w.opcode)));
                }
                other => panic!("{other:?}"),
            }
        }
    }
    got
}

/// The receive hot path (`append_bound_recv`) writes a one-SGE receive post only when its
/// queue's slot is bound in the chunk (an ordinary append binds it), the chunk has room and
/// the time is within reach of the base and before the horizon; what it writes reads back as
/// the `PostRecv` the ordinary append of the same post writes.
#[test]
fn the_receive_hot_path_writes_what_the_ordinary_append_writes() {
    use sigmatrace_schemas::records::{post_source, PostRecv, RecordHeader};
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = small_chunk_log(dir.path());
    let mut w = log.thread_writer(9);
    let full = |ts: u64, qpn: u32, srq: u64, wr_id: u64| PostRecv {
        hdr: RecordHeader::of::<PostRecv>(0),
        ts,
        wr_id,
        qpn,
        bytes: 4096 + wr_id as u32,
        srq,
        num_sge: 1,
        source: post_source::POST_RECV,
        _pad: [0; 5],
    };
    let mut want = Vec::new();
    let hot = |w: &mut ChunkWriter, r: PostRecv, want: &mut Vec<PostRecv>| {
        let done = w.append_bound_recv(r.ts, r.srq, (r.qpn, r.source), || (r.wr_id, r.bytes));
        if done {
            want.push(r);
        }
        done
    };
    // (The SRQ handle maps the queue to another slot than the QP alone.)
    let (q, srq) = (7, 0x5040);
    // No chunk, then no slot.
    assert!(!hot(&mut w, full(T0, q, 0, 1), &mut want));
    w.append(&full(T0, q, 0, 2));
    want.push(full(T0, q, 0, 2));
    assert!(hot(&mut w, full(T0 + 1, q, 0, 3), &mut want));
    // Another QP; the same QP's source with an SRQ handle: not bound. Bound by an append.
    assert!(!hot(&mut w, full(T0 + 2, q + 1, 0, 4), &mut want));
    assert!(!hot(&mut w, full(T0 + 2, q, srq, 4), &mut want));
    w.append(&full(T0 + 2, q, srq, 5));
    want.push(full(T0 + 2, q, srq, 5));
    assert!(hot(&mut w, full(T0 + 3, q, srq, 6), &mut want));
    assert!(hot(&mut w, full(T0 + 3, q, 0, 7), &mut want));
    // An SRQ handle whose slot is the QP's own (bits 6-11 zero): each binding evicts the
    // other, and the hot path takes neither for the other.
    let same_slot = 0x1000;
    w.append(&full(T0 + 3, q, same_slot, 10));
    want.push(full(T0 + 3, q, same_slot, 10));
    assert!(!hot(&mut w, full(T0 + 3, q, 0, 11), &mut want));
    assert!(hot(&mut w, full(T0 + 3, q, same_slot, 12), &mut want));
    w.append(&full(T0 + 3, q, 0, 13));
    want.push(full(T0 + 3, q, 0, 13));
    assert!(!hot(&mut w, full(T0 + 3, q, same_slot, 14), &mut want));
    assert!(hot(&mut w, full(T0 + 3, q, 0, 15), &mut want));
    // Time before the base, out of reach, the horizon.
    assert!(!hot(&mut w, full(T0 - 1, q, 0, 8), &mut want));
    assert!(!hot(&mut w, full(T0 + DTS_LIMIT, q, 0, 8), &mut want));
    w.set_horizon(T0 + 100);
    assert!(!hot(&mut w, full(T0 + 100, q, 0, 8), &mut want));
    assert!(hot(&mut w, full(T0 + 99, q, 0, 9), &mut want));
    w.set_horizon(u64::MAX);
    // Until the chunk is full: then refused, nothing lost.
    let mut id = 100;
    while hot(&mut w, full(T0 + 200, q, 0, id), &mut want) {
        id += 1;
    }
    assert!((100..200).contains(&(id - 100)), "{} written", id - 100);
    assert_eq!(log.losses().total, 0);
    drop(w);
    let file = LogFile::open(&path).unwrap();
    assert!(file.salvage().is_clean(), "{:?}", file.salvage());
    let got: Vec<PostRecv> = (file.chunks().iter())
        .flat_map(|c| file.records(c).map(Result::unwrap))
        .map(|r| match r.decode().unwrap() {
            Record::PostRecv(p) => *p,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, want);
}

/// `append_post_send_placed` (the `ibv_wr_*` path's write of a staged `PostSend`) writes a
/// send only when it has a compact form and needs no bookkeeping — its queue's slot bound in
/// the chunk, room, the time within reach of the base and before the horizon — and what it
/// writes reads back as the `PostSend` the ordinary append of the same record writes.
#[test]
fn the_staged_send_path_writes_what_the_ordinary_append_writes() {
    use sigmatrace_schemas::records::{post_source, PostSend, RecordHeader};
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = small_chunk_log(dir.path());
    let mut w = log.thread_writer(9);
    let full = |ts: u64, qpn: u32, wr_id: u64| PostSend {
        hdr: RecordHeader::of::<PostSend>(2),
        ts,
        wr_id,
        remote_addr: 0x7f00_1234_5678,
        compare_add: 0,
        qpn,
        bytes: 8 + wr_id as u32,
        rkey: 0x4321,
        imm: 0,
        num_sge: 1,
        opcode: 0,
        source: post_source::WR_API,
        _pad: 0,
    };
    let mut want = Vec::new();
    let hot = |w: &mut ChunkWriter, r: PostSend, want: &mut Vec<PostSend>| {
        let done = w.append_post_send_placed(&r);
        if done {
            want.push(r);
        }
        done
    };
    let q = 21;
    // No chunk, then no slot; bound by an ordinary append.
    assert!(!hot(&mut w, full(T0, q, 1), &mut want));
    w.append(&full(T0, q, 2));
    want.push(full(T0, q, 2));
    assert!(hot(&mut w, full(T0 + 1, q, 3), &mut want));
    assert!(!hot(&mut w, full(T0 + 1, q + 1, 4), &mut want));
    // No compact form: immediate data, an atomic operand, flags or SGEs out of its range.
    for r in [
        PostSend {
            imm: 5,
            ..full(T0 + 2, q, 5)
        },
        PostSend {
            compare_add: 1,
            ..full(T0 + 2, q, 5)
        },
        PostSend {
            hdr: RecordHeader::of::<PostSend>(1 << 5),
            ..full(T0 + 2, q, 5)
        },
        PostSend {
            num_sge: 8,
            ..full(T0 + 2, q, 5)
        },
        PostSend {
            remote_addr: 1 << 48,
            ..full(T0 + 2, q, 5)
        },
    ] {
        assert!(!hot(&mut w, r, &mut want), "{r:?}");
    }
    // Time before the base, out of reach, the horizon.
    assert!(!hot(&mut w, full(T0 - 1, q, 6), &mut want));
    assert!(!hot(&mut w, full(T0 + DTS_LIMIT, q, 6), &mut want));
    w.set_horizon(T0 + 100);
    assert!(!hot(&mut w, full(T0 + 100, q, 6), &mut want));
    assert!(hot(&mut w, full(T0 + 99, q, 7), &mut want));
    w.set_horizon(u64::MAX);
    // Until the chunk is full: then refused, nothing lost.
    let mut id = 100;
    while hot(&mut w, full(T0 + 200, q, id), &mut want) {
        id += 1;
    }
    assert!((50..200).contains(&(id - 100)), "{} written", id - 100);
    assert_eq!(log.losses().total, 0);
    drop(w);
    let file = LogFile::open(&path).unwrap();
    assert!(file.salvage().is_clean(), "{:?}", file.salvage());
    let got: Vec<PostSend> = (file.chunks().iter())
        .flat_map(|c| file.records(c).map(Result::unwrap))
        .map(|r| match r.decode().unwrap() {
            Record::PostSend(p) => *p,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, want);
}

/// Placed sends given their data afterwards (`set_placed_sge`, the `ibv_wr_*` setters'
/// path), alone or in runs placed one after the other (`place_plain_send_at`, a batch), and
/// read back before they are published (`placed_send`, for a writer that must write something
/// else first) are the `PostSend`s that the ordinary append of the same records writes, and
/// publishing them writes exactly those; with no data given they have none (`bytes` and the
/// SGE count 0). Without a chunk, or without room for the whole run, nothing is placed.
#[test]
fn placed_sends_take_their_data_later_and_read_back_as_the_ordinary_records() {
    use sigmatrace_schemas::records::{post_source, PostSend, RecordHeader};
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = small_chunk_log(dir.path());
    let mut w = log.thread_writer(9);
    let q = 0x33;
    let full = |wr_id: u64, flags: u32, bytes: u32, num_sge: u16| PostSend {
        hdr: RecordHeader::of::<PostSend>(flags),
        ts: T0 + wr_id,
        wr_id,
        remote_addr: 0x7f00_1234_5678 + wr_id,
        compare_add: 0,
        qpn: q,
        bytes,
        rkey: 0x4321,
        imm: 0,
        num_sge,
        opcode: 0,
        source: post_source::WR_API,
        _pad: 0,
    };
    // What an opcode builder places: no data.
    let place = |w: &mut ChunkWriter, k: u32, r: &PostSend| {
        let head = SendHead {
            qpn: r.qpn,
            source: r.source,
            remote_addr: r.remote_addr,
            flags: r.hdr.aux,
            num_sge: 0,
            opcode: r.opcode,
        };
        let body = || SendBody {
            wr_id: r.wr_id,
            rkey: r.rkey,
            bytes: 0,
        };
        w.place_plain_send_at(k, r.ts, &head, body)
    };
    assert!(place(&mut w, 0, &full(1, 2, 0, 0)).is_none());
    assert_eq!(w.placed_send(0), None);
    // Bound by an ordinary append.
    let mut want = vec![full(1, 2, 8, 1)];
    w.append(&want[0]);
    // Runs of 1 to 4: each its data given (twice: a setter may come again) or none.
    let mut id = 10;
    for n in 1..=4u32 {
        let run: Vec<PostSend> = (0..n)
            .map(|k| {
                id += 1;
                let (flags, bytes) = [(2, 64), (31, 0), (0, u32::MAX), (2, 7)][k as usize];
                full(id, flags, bytes, (k != 3) as u16)
            })
            .collect();
        for (k, r) in run.iter().enumerate() {
            let placed = place(&mut w, k as u32, r).unwrap();
            if r.num_sge == 1 {
                // SAFETY: placed just now, nothing written through `w` since.
                unsafe {
                    w.set_placed_sge(placed, r.bytes / 2);
                    w.set_placed_sge(placed, r.bytes);
                }
            } else {
                assert_eq!(r.bytes, 7, "no setter: no data");
                want.push(PostSend { bytes: 0, ..*r });
                continue;
            }
            want.push(*r);
        }
        for k in 0..n {
            assert_eq!(
                w.placed_send(k).as_ref(),
                Some(&want[want.len() - (n - k) as usize])
            );
        }
        w.publish_placed_sends(n);
    }
    // Placed, read back, then written over by an ordinary append of what was read back.
    let (a, b) = (full(40, 2, 8, 1), full(41, 2, 9, 1));
    for (k, r) in [a, b].iter().enumerate() {
        let placed = place(&mut w, k as u32, r).unwrap();
        // SAFETY: as above.
        unsafe { w.set_placed_sge(placed, r.bytes) };
    }
    let back = [w.placed_send(0).unwrap(), w.placed_send(1).unwrap()];
    w.append(&full(42, 0, 1, 1));
    w.append(&back[0]);
    w.append(&back[1]);
    want.extend([full(42, 0, 1, 1), a, b]);
    // A run does not go past the chunk's room: each placed, then published, as long as
    // there is room for the last.
    let mut k = 0;
    while place(&mut w, k, &full(100 + k as u64, 0, 0, 0)).is_some() {
        want.push(full(100 + k as u64, 0, 0, 0));
        k += 1;
    }
    assert!((20..200).contains(&k), "{k} placed");
    w.publish_placed_sends(k);
    drop(w);
    let file = LogFile::open(&path).unwrap();
    assert!(file.salvage().is_clean(), "{:?}", file.salvage());
    let got: Vec<PostSend> = (file.chunks().iter())
        .flat_map(|c| file.records(c).map(Result::unwrap))
        .map(|r| match r.decode().unwrap() {
            Record::PostSend(p) => *p,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, want);
    let compact = (file.chunks().iter())
        .flat_map(|c| file.records(c).map(Result::unwrap))
        .filter(|r| r.bytes.len() == 32)
        .count();
    assert_eq!(compact, want.len());
}

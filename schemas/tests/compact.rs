//! Compact records (format 2): what the writer is given is what readers get back, bit for bit,
//! in 24–32 bytes per hot record; every chunk decodes on its own.

mod common;

use common::*;
use sigmatrace_schemas::*;

const CS: u32 = 4096;

/// A mixed stream: compact-able and full sends, QP and SRQ receives, plain and unusual
/// completions, over 100 queues (more than the writer's 64 slots: collisions rebind), with
/// times that jump forward by more than 2^24 and step backwards.
fn stream(n: u64) -> Vec<Vec<u8>> {
    let mut ts = 5u64;
    let mut out = Vec::new();
    for i in 0..n {
        ts = match i % 97 {
            0 => ts + (1 << 25) + i, // past the 24-bit offset
            13 => ts - 40,           // earlier than the previous record
            _ => ts + 7,
        };
        let q = (i * 7 % 100) as u32;
        let on_srq = q.is_multiple_of(3);
        let rec: Vec<u8> = match i % 6 {
            0 | 1 => {
                let mut p = post(i, 0x100 + q);
                p.ts = ts;
                p.hdr.aux = (i % 32) as u32; // send flags
                p.opcode = (i % 9) as u8;
                p.num_sge = (i % 8) as u16;
                if i % 50 == 1 {
                    p.remote_addr = 1 << 50; // does not fit: full record
                }
                bytemuck::bytes_of(&p).to_vec()
            }
            2 => bytemuck::bytes_of(&PostRecv {
                hdr: RecordHeader::of::<PostRecv>(0),
                ts,
                wr_id: i,
                qpn: if on_srq { 0 } else { 0x100 + q },
                bytes: i as u32,
                srq: if on_srq { 0x7000 + q as u64 * 64 } else { 0 },
                num_sge: (i % 3) as u16,
                source: if on_srq { 4 } else { 3 },
                _pad: [0; 5],
            })
            .to_vec(),
            // Receives (opcode 128) with a source QP and LID; send-side ones (RDMA writes)
            // without (verbs defines them for receives only: a short one does not record
            // them).
            _ => bytemuck::bytes_of(&WorkCompletion {
                hdr: RecordHeader::of::<WorkCompletion>((i % 5) as u32),
                ts,
                wr_id: i,
                hw_ts: if i % 40 == 3 { ts * 3 } else { 0 },
                cq: 0x9000 + (q % 4) as u64 * 128,
                qpn: 0x100 + q,
                src_qp: if i % 2 == 0 { (i % 1000) as u32 } else { 0 },
                byte_len: (i * 3) as u32,
                imm: (i % 11) as u32,
                status: (i % 40 == 5) as u8 * 12,
                opcode: if i % 2 == 0 { 128 } else { 1 },
                slid: if i % 2 == 0 { (i % 17) as u16 } else { 0 },
                vendor_err: (i % 40 == 5) as u32 * 0x81,
            })
            .to_vec(),
        };
        out.push(rec);
    }
    out
}

fn append_bytes(tw: &mut ChunkWriter, b: &[u8]) -> bool {
    match RecordKind::from_id(u16::from_ne_bytes([b[0], b[1]])) {
        Some(RecordKind::PostSend) => tw.append(bytemuck::from_bytes::<PostSend>(b)),
        Some(RecordKind::PostRecv) => tw.append(bytemuck::from_bytes::<PostRecv>(b)),
        _ => tw.append(bytemuck::from_bytes::<WorkCompletion>(b)),
    }
}

#[test]
fn compact_records_read_back_bit_for_bit_in_fewer_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.sigmalog");
    let w = writer(&path, CS, 1 << 30);
    let mut tw = w.thread_writer(77);
    let recs = stream(20_000);
    for r in &recs {
        // Records are built as byte vectors: copy into aligned storage first.
        let mut words = vec![0u64; r.len() / 8];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words).copy_from_slice(r);
        assert!(append_bytes(&mut tw, bytemuck::cast_slice(&words)));
    }
    let log = LogFile::open(&path).unwrap();
    assert!(log.salvage().is_clean(), "{:?}", log.salvage());
    let mut got = Vec::new();
    let (mut file_bytes, mut kinds) = (0usize, std::collections::BTreeMap::new());
    for c in log.chunks() {
        for r in log.raw_records(c) {
            let r = r.unwrap();
            file_bytes += r.bytes.len();
            *kinds
                .entry(RecordKind::from_id(r.kind).unwrap().name())
                .or_insert(0) += 1;
        }
        for r in log.records(c) {
            got.push(r.unwrap().record_bytes().to_vec());
        }
    }
    assert_eq!(got.len(), recs.len());
    for (i, (g, want)) in got.iter().zip(&recs).enumerate() {
        assert_eq!(g, want, "record {i}");
    }
    // Most records are compact; the ones that do not fit stay full.
    let n = |k: &str| kinds.get(k).copied().unwrap_or(0);
    assert!(
        n("PostSendCompact") > 3000 && n("PostSend") >= 3334,
        "{kinds:?}"
    );
    assert!(
        n("PostRecvCompact") == 3333 && n("PostRecv") == 0,
        "{kinds:?}"
    );
    assert!(
        n("CompletionCompact") > 9000 && n("WorkCompletion") > 100,
        "{kinds:?}"
    );
    assert!(n("TimeBase") >= 20_000 / 97, "{kinds:?}");
    assert!(n("SlotBind") > 100, "{kinds:?}");
    // Even with a slot bound again for nearly every record (100 queues cycling through 64
    // slots in 4 KiB chunks), the file is smaller than the full records.
    let full_bytes: usize = recs.iter().map(Vec::len).sum();
    assert!(
        file_bytes < full_bytes,
        "{file_bytes} bytes in the file for {full_bytes} bytes of records"
    );
}

#[test]
fn each_chunk_decodes_alone_and_an_unbound_slot_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alone.sigmalog");
    let w = writer(&path, CS, 1 << 30);
    let mut tw = w.thread_writer(5);
    // One queue, records 32 bytes: 125 compact sends per chunk, one SlotBind each.
    let mut p = post(0, 0x42);
    for i in 0..1000u64 {
        p.wr_id = i;
        p.ts = 1_000_000_000 + i * 100;
        p.imm = 0;
        assert!(tw.append(&p));
    }
    drop(tw);
    let per_chunk = |bytes: &[u8]| -> Vec<Vec<u64>> {
        let log = LogView::parse(bytes, std::path::Path::new("x")).unwrap();
        log.chunks()
            .iter()
            .map(|c| {
                log.records(c)
                    .map(|r| match r.unwrap().decode().unwrap() {
                        Record::PostSend(s) => {
                            assert_eq!((s.qpn, s.ts), (0x42, 1_000_000_000 + s.wr_id * 100));
                            s.wr_id
                        }
                        other => panic!("{other:?}"),
                    })
                    .collect()
            })
            .collect()
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let whole = per_chunk(&bytes);
    assert!(whole.len() >= 8);
    // One queue: 32 bytes per send plus a TimeBase and a SlotBind per chunk.
    let log = LogView::parse(&bytes, std::path::Path::new("x")).unwrap();
    let in_file: u64 = log.chunks().iter().map(|c| c.readable as u64).sum();
    assert!(
        in_file <= 1000 * 32 + whole.len() as u64 * 40,
        "{in_file} bytes"
    );
    // Wipe the first chunk: every other chunk still reads the same records.
    let c0 = HEADER_SIZE;
    bytes[c0..c0 + CS as usize].fill(0);
    assert_eq!(per_chunk(&bytes), whole[1..].to_vec());
    // Turn chunk 1's SlotBind (its first record after the TimeBase) into an unknown kind:
    // its compact records no longer have their slot — damage, reported, not misread.
    let first = c0 + CS as usize + CHUNK_HEADER_SIZE;
    let mut at = first;
    loop {
        let kind = u16::from_ne_bytes([bytes[at], bytes[at + 1]]);
        let len = u16::from_ne_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        if kind == RecordKind::SlotBind as u16 {
            bytes[at..at + 2].copy_from_slice(&(RecordKind::NEXT_FREE_ID + 50).to_ne_bytes());
            break;
        }
        at += len;
    }
    let log = LogView::parse(&bytes, std::path::Path::new("x")).unwrap();
    let err = log
        .records(&log.chunks()[0])
        .find_map(|r| r.err())
        .expect("an error");
    assert!(err.what.contains("slot"), "{err}");
}

/// Format 2.1: a successful send-side completion (opcode below 128) without flags, immediate
/// data, hardware time or vendor error is a 24-byte `CompletionShort`, whatever its source QP
/// and LID — receive-side fields, which verbs leaves undefined for it: not recorded, they read
/// back 0. Every other completion is a `CompletionCompact` (or the full record) and reads back
/// bit for bit; a receive completion keeps its source QP and LID.
#[test]
fn short_completions_hold_exactly_the_plain_sends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.sigmalog");
    let w = writer(&path, CS, 1 << 30);
    let mut tw = w.thread_writer(3);
    // Three send-side opcodes (send, RDMA write, read), two receive-side ones (receive, and
    // the largest opcode a record holds).
    let plain = |i: u64| WorkCompletion {
        hdr: RecordHeader::of::<WorkCompletion>(0),
        ts: 1000 + i * 3,
        wr_id: i * 0x1_0001,
        cq: 0x7000 + (i % 3) * 0x100,
        qpn: 0x40 + (i % 5) as u32,
        byte_len: i as u32 * 7,
        opcode: [0, 1, 2, 128, 255][(i % 5) as usize],
        ..Default::default()
    };
    // Every 9th completion plain; the others with one field set, in turn.
    let (mut recs, mut want) = (Vec::new(), Vec::new());
    for i in 0..9000u64 {
        let mut c = plain(i);
        match i % 9 {
            0 => {}
            1 => c.status = 5,
            2 => c.hdr.aux = 1 << (i % 8), // one wc_flags bit
            3 => c.src_qp = 1 + i as u32 % 100,
            4 => c.slid = 1 + i as u16 % 7,
            5 => c.imm = 9,
            6 => c.hw_ts = i,
            7 => c.vendor_err = 0x81,
            _ => c.src_qp = 1 << 24, // no compact form for a receive
        }
        assert!(tw.append(&c));
        recs.push(c);
        let send_side = c.opcode < 128;
        let short_send = send_side && matches!(i % 9, 0 | 3 | 4 | 8);
        want.push(if short_send {
            WorkCompletion {
                src_qp: 0,
                slid: 0,
                ..c
            }
        } else {
            c
        });
    }
    let log = LogFile::open(&path).unwrap();
    assert!(log.salvage().is_clean(), "{:?}", log.salvage());
    let mut kinds = std::collections::BTreeMap::new();
    let mut got = Vec::new();
    for c in log.chunks() {
        for r in log.raw_records(c) {
            let r = r.unwrap();
            if r.kind == RecordKind::CompletionShort as u16 {
                assert_eq!(r.bytes.len(), 24);
            }
            *kinds.entry(r.kind).or_insert(0) += 1;
        }
        for r in log.records(c) {
            match r.unwrap().decode().unwrap() {
                Record::WorkCompletion(w) => got.push(*w),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "completion {i}");
    }
    // The receives' source QPs and LIDs were kept; the short sends' were not.
    assert!(got
        .iter()
        .any(|w| w.opcode >= 128 && w.src_qp != 0 && w.slid == 0));
    assert!(got.iter().any(|w| w.opcode >= 128 && w.slid != 0));
    assert!(recs
        .iter()
        .zip(&got)
        .any(|(r, g)| r.src_qp != 0 && g.src_qp == 0));
    let n = |k: RecordKind| kinds.get(&(k as u16)).copied().unwrap_or(0);
    // Short: the sends (3 of 5) of the plain ones, those with a source QP (both sizes) or a
    // LID: 3/5 of 4000.
    assert_eq!(n(RecordKind::CompletionShort), 2400, "{kinds:?}");
    // Compact: every status, flags and immediate one (3000), the receives with a source QP
    // below 2^24, a LID, or nothing (2/5 of 3000). Full: hardware time, vendor error (2000),
    // the receives with a source QP of 25 bits (400).
    assert_eq!(n(RecordKind::CompletionCompact), 4200, "{kinds:?}");
    assert_eq!(n(RecordKind::WorkCompletion), 2400, "{kinds:?}");
}

/// A glance at a record (without expanding a compact one) sees the fields of the record it
/// stands for, takes in context and finds damage exactly as reading it whole does.
#[test]
fn a_glance_sees_the_fields_of_the_full_record() {
    use sigmatrace_schemas::compact::{ChunkDecoder, Glimpse, Step};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.sigmalog");
    let w = writer(&path, CS, 1 << 30);
    let mut tw = w.thread_writer(3);
    for r in &stream(5_000) {
        let mut words = vec![0u64; r.len() / 8];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words).copy_from_slice(r);
        assert!(append_bytes(&mut tw, bytemuck::cast_slice(&words)));
    }
    // A receive WR with flags has no compact form.
    assert!(tw.append(&PostRecv {
        hdr: RecordHeader::of::<PostRecv>(1),
        ts: 1 << 45,
        wr_id: 9,
        qpn: 0x321,
        ..Default::default()
    }));
    let log = LogFile::open(&path).unwrap();
    let (mut hot, mut seen) = (0, std::collections::BTreeSet::new());
    for c in log.chunks() {
        let (mut whole, mut glancing) = (ChunkDecoder::new(), ChunkDecoder::new());
        for r in log.raw_records(c) {
            let r = r.unwrap();
            let mut out = RawRecord::new(0, 0, &[]);
            let step = whole.accept_into(r.offset, r.kind, r.bytes, &mut out);
            let glimpse = glancing.glance(r.kind, r.bytes);
            seen.insert(r.kind);
            match (step, glimpse) {
                (Step::Context, Glimpse::Context) => {}
                (Step::Record, Glimpse::Hot(g)) => {
                    hot += 1;
                    let want = match out.decode().unwrap() {
                        Record::PostSend(p) => (p.hdr.kind, p.ts, p.qpn, p.opcode, 0),
                        Record::PostRecv(p) => (p.hdr.kind, p.ts, p.qpn, 0, 0),
                        Record::WorkCompletion(c) => (c.hdr.kind, c.ts, c.qpn, c.opcode, c.status),
                        other => panic!("{other:?}"),
                    };
                    assert_eq!((g.kind, g.ts, g.qpn, g.opcode, g.status), want);
                    let mut again = RawRecord::new(0, 0, &[]);
                    glancing.expand_into(r.offset, r.kind, r.bytes, &mut again);
                    assert_eq!(again.record_bytes(), out.record_bytes());
                }
                other => panic!("{other:?} for kind {}", r.kind),
            }
        }
    }
    assert_eq!(hot, 5_001);
    // Every hot kind, full and compact, and both context kinds were seen.
    for k in [30u16, 31, 33, 54, 55, 56, 57, 58, 59] {
        assert!(seen.contains(&k), "kind {k} not in {seen:?}");
    }
    // An unbound slot is damage for both.
    let mut fresh = ChunkDecoder::new();
    let c = log.chunks().last().unwrap();
    let r = log
        .raw_records(c)
        .map(Result::unwrap)
        .find(|r| r.kind == RecordKind::PostSendCompact as u16)
        .unwrap();
    assert_eq!(fresh.glance(r.kind, r.bytes), Glimpse::Damaged);
    let mut out = RawRecord::new(0, 0, &[]);
    assert_eq!(
        fresh.accept_into(r.offset, r.kind, r.bytes, &mut out),
        Step::Damaged
    );
}

/// A `TimeBase` no time offset can be added to (a damaged log: a writer's bases are clock
/// readings) is damage, found by reading whole and at a glance alike, with a message naming
/// it; the largest base that leaves room for every offset is taken. (The fuzzer found
/// `base + dts` overflowing on such a log.)
#[test]
fn a_time_base_without_room_for_an_offset_is_damage() {
    use sigmatrace_schemas::compact::{ChunkDecoder, Decoded, Glimpse, Step, DTS_LIMIT};
    use sigmatrace_schemas::records::TimeBase;
    let at = |base: u64| TimeBase {
        hdr: RecordHeader::of::<TimeBase>(0),
        base,
    };
    let kind = RecordKind::TimeBase as u16;
    let largest = u64::MAX - (DTS_LIMIT - 1);
    for (base, ok) in [(largest, true), (largest + 1, false), (u64::MAX, false)] {
        let tb = at(base);
        let bytes = bytemuck::bytes_of(&tb);
        let (mut whole, mut glancing) = (ChunkDecoder::new(), ChunkDecoder::new());
        let mut out = RawRecord::new(0, 0, &[]);
        let step = whole.accept_into(64, kind, bytes, &mut out);
        let glimpse = glancing.glance(kind, bytes);
        if ok {
            assert_eq!(
                (step, glimpse),
                (Step::Context, Glimpse::Context),
                "{base:#x}"
            );
        } else {
            assert_eq!(
                (step, glimpse),
                (Step::Damaged, Glimpse::Damaged),
                "{base:#x}"
            );
            match ChunkDecoder::new().accept(64, kind, bytes) {
                Decoded::Damaged(what) => {
                    assert!(
                        what.contains(&format!("TimeBase sets base {base:#x}")),
                        "{what}"
                    )
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

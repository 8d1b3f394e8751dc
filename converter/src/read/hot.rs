//! The one typed view of the hot record kinds (`PostSend`, `PostRecv`, `WorkCompletion`: one or
//! two per work request, nearly all of a log's records).
//!
//! In a format-2 log these records are mostly compact (24–32 bytes, their time and per-queue
//! constants relative to context earlier in their chunk; schemas FORMAT.md, "Compact
//! records"). [`super::input::ChunkRecords`] reads each chunk in its context and hands a
//! compact record out as the full record it stands for ([`RawRecord::record_bytes`]); older
//! logs' records are the full ones already. The view casts those bytes in place: no per-field
//! decoding. Every pass that needs these records (the scan, UD stream pairing, the model) goes
//! through [`Hot::of`], so the layout is read in one place: the schemas crate's `#[repr(C)]`
//! structs. The bytes have the fixed length of their kind and are 8-byte aligned (inside a
//! page-aligned mapping, or the record's own expansion), so the cast cannot fail for them; a
//! record that does not fit its struct is treated as not hot. A view borrows the record it
//! was taken from.

#![forbid(unsafe_code)]

use sigmatrace_schemas::compact::Glance;
use sigmatrace_schemas::reader::RawRecord;
use sigmatrace_schemas::records::{PostRecv, PostSend, RecordKind, WorkCompletion};

use super::messages::Message;
use super::verbs;

/// A hot record, viewed in place.
#[derive(Clone, Copy, Debug)]
pub enum Hot<'a> {
    PostSend(&'a PostSend),
    PostRecv(&'a PostRecv),
    Completion(&'a WorkCompletion),
}

const POST_SEND: u16 = RecordKind::PostSend as u16;
const POST_RECV: u16 = RecordKind::PostRecv as u16;
const WORK_COMPLETION: u16 = RecordKind::WorkCompletion as u16;

// The hot records' sizes, 8 and 6 words: [`Hot::of`] views an expanded one in its words.
const _: () = assert!(
    size_of::<PostSend>() == 64 && size_of::<PostRecv>() == 48 && size_of::<WorkCompletion>() == 64
);

impl<'a> Hot<'a> {
    /// The typed view of `r`, or `None` when it is not one of the hot kinds.
    #[inline]
    pub fn of(r: &'a RawRecord<'_>) -> Option<Hot<'a>> {
        // A compact record expanded: its words hold the whole record of its kind, viewed
        // without checks (the sizes are asserted at compile time above).
        if let Some(w) = r.expanded_words() {
            return match r.kind {
                POST_SEND => Some(Hot::PostSend(bytemuck::cast_ref::<[u64; 8], _>(w))),
                POST_RECV => {
                    let w: &[u64; 6] = w.first_chunk()?;
                    Some(Hot::PostRecv(bytemuck::cast_ref(w)))
                }
                WORK_COMPLETION => Some(Hot::Completion(bytemuck::cast_ref::<[u64; 8], _>(w))),
                _ => None,
            };
        }
        let bytes = r.record_bytes();
        match r.kind {
            POST_SEND => bytemuck::try_from_bytes(bytes).ok().map(Hot::PostSend),
            POST_RECV => bytemuck::try_from_bytes(bytes).ok().map(Hot::PostRecv),
            WORK_COMPLETION => bytemuck::try_from_bytes(bytes).ok().map(Hot::Completion),
            _ => None,
        }
    }

    /// Whether `kind` is one of the hot kinds.
    #[inline]
    pub fn is_hot_kind(kind: u16) -> bool {
        matches!(kind, POST_SEND | POST_RECV | WORK_COMPLETION)
    }
}

/// Whether a hot record is a message: a message-consuming send, or a successful receive
/// completion ([`is_received_message`]) — the records the causality join pairs.
#[inline(always)]
pub fn is_message(g: &Glance) -> bool {
    match g.kind {
        POST_SEND => verbs::consumes_recv(g.opcode),
        WORK_COMPLETION => {
            g.status == 0
                && (g.opcode == verbs::wc::RECV || g.opcode == verbs::wc::RECV_RDMA_WITH_IMM)
        }
        _ => false,
    }
}

/// The message a record is ([`is_message`]) at its time `ts`, with what the causality join
/// needs of it; `None` for any other record.
#[inline]
pub fn message_of(r: &RawRecord<'_>, ts: u64) -> Option<Message> {
    let (send, qpn, a, b) = match Hot::of(r)? {
        Hot::PostSend(ps) if verbs::consumes_recv(ps.opcode) => {
            (true, ps.qpn, ps.rkey, ps.remote_addr)
        }
        Hot::Completion(wc) if is_received_message(wc) => {
            (false, wc.qpn, wc.src_qp, wc.slid as u64)
        }
        _ => return None,
    };
    Some(Message {
        send,
        ts,
        qpn,
        a,
        b,
        offset: r.offset,
    })
}

/// Whether a completion is a successful receive (a message that consumed a receive WR).
#[inline]
pub fn is_received_message(wc: &WorkCompletion) -> bool {
    wc.status == 0 && (wc.opcode == verbs::wc::RECV || wc.opcode == verbs::wc::RECV_RDMA_WITH_IMM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: RecordKind, bytes: &[u8]) -> RawRecord<'_> {
        RawRecord::new(0, kind as u16, bytes)
    }

    /// 8-byte aligned storage for a record.
    fn aligned(bytes: &[u8]) -> Vec<u64> {
        let mut v = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..bytes.len()].copy_from_slice(bytes);
        v
    }

    #[test]
    fn views_each_hot_kind_with_its_fields() {
        let ps = PostSend {
            qpn: 0x1234,
            opcode: verbs::wr::SEND,
            wr_id: 77,
            ..Default::default()
        };
        let buf = aligned(bytemuck::bytes_of(&ps));
        let bytes = &bytemuck::cast_slice::<u64, u8>(&buf)[..std::mem::size_of::<PostSend>()];
        match Hot::of(&raw(RecordKind::PostSend, bytes)) {
            Some(Hot::PostSend(v)) => assert_eq!((v.qpn, v.opcode, v.wr_id), (0x1234, 2, 77)),
            other => panic!("{other:?}"),
        }
        let wc = WorkCompletion {
            qpn: 9,
            status: 0,
            opcode: verbs::wc::RECV,
            ..Default::default()
        };
        let buf = aligned(bytemuck::bytes_of(&wc));
        let bytes = &bytemuck::cast_slice::<u64, u8>(&buf)[..std::mem::size_of::<WorkCompletion>()];
        match Hot::of(&raw(RecordKind::WorkCompletion, bytes)) {
            Some(Hot::Completion(v)) => {
                assert_eq!(v.qpn, 9);
                assert!(is_received_message(v));
            }
            other => panic!("{other:?}"),
        }
        let pr = PostRecv {
            qpn: 5,
            ..Default::default()
        };
        let buf = aligned(bytemuck::bytes_of(&pr));
        let bytes = &bytemuck::cast_slice::<u64, u8>(&buf)[..std::mem::size_of::<PostRecv>()];
        assert!(matches!(
            Hot::of(&raw(RecordKind::PostRecv, bytes)),
            Some(Hot::PostRecv(v)) if v.qpn == 5
        ));
    }

    /// Records written compact (format 2) are viewed as the full records they stand for.
    #[test]
    fn compact_records_are_viewed_as_their_full_kinds() {
        use sigmatrace_schemas::{FileHeader, LogFile, LogWriter, Timestamper, WriterOptions};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sigmalog");
        let ts = Timestamper::detect();
        let header =
            FileHeader::for_current_process(ts.source(), 1_000_000_000, ts.snapshot(), 4096);
        let w = LogWriter::create(&path, &header, WriterOptions::default()).unwrap();
        let mut tw = w.thread_writer(1);
        let ps = PostSend {
            hdr: sigmatrace_schemas::RecordHeader::of::<PostSend>(2),
            ts: 1 << 40,
            qpn: 0x1234,
            opcode: verbs::wr::SEND,
            wr_id: 77,
            bytes: 8,
            num_sge: 1,
            ..Default::default()
        };
        let pr = PostRecv {
            hdr: sigmatrace_schemas::RecordHeader::of::<PostRecv>(0),
            ts: (1 << 40) + 5,
            wr_id: 78,
            srq: 0x5000,
            source: 4,
            ..Default::default()
        };
        let wc = WorkCompletion {
            hdr: sigmatrace_schemas::RecordHeader::of::<WorkCompletion>(0),
            ts: (1 << 40) + 9,
            wr_id: 78,
            cq: 0x7000,
            qpn: 9,
            opcode: verbs::wc::RECV,
            byte_len: 8,
            ..Default::default()
        };
        assert!(tw.append(&ps) && tw.append(&pr) && tw.append(&wc));
        let log = LogFile::open(&path).unwrap();
        let c = &log.chunks()[0];
        assert!(
            log.raw_records(c).count() > 3,
            "written with context records"
        );
        let recs: Vec<RawRecord> = log.records(c).map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        assert!(recs.iter().all(|r| r.is_compact() && r.bytes.len() <= 32));
        match (Hot::of(&recs[0]), Hot::of(&recs[1]), Hot::of(&recs[2])) {
            (Some(Hot::PostSend(a)), Some(Hot::PostRecv(b)), Some(Hot::Completion(c))) => {
                assert_eq!((*a, *b, *c), (ps, pr, wc));
                assert!(is_received_message(c));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_kinds_and_wrong_lengths_are_not_hot() {
        let buf = aligned(&[0u8; 64]);
        let bytes = bytemuck::cast_slice::<u64, u8>(&buf);
        assert!(Hot::of(&raw(RecordKind::ClockSnapshot, bytes)).is_none());
        assert!(!Hot::is_hot_kind(RecordKind::ClockSnapshot as u16));
        assert!(Hot::is_hot_kind(RecordKind::PostSend as u16));
        // One byte short of a PostSend.
        let short = &bytes[..std::mem::size_of::<PostSend>().min(64) - 8];
        assert!(Hot::of(&raw(RecordKind::PostSend, short)).is_none());
    }

    #[test]
    fn failed_and_non_receive_completions_are_not_received_messages() {
        let mut wc = WorkCompletion {
            opcode: verbs::wc::RECV_RDMA_WITH_IMM,
            ..Default::default()
        };
        assert!(is_received_message(&wc));
        wc.status = 5;
        assert!(!is_received_message(&wc));
        wc.status = 0;
        wc.opcode = verbs::wr::SEND;
        assert!(!is_received_message(&wc));
    }
}

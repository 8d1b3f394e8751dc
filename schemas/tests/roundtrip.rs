//! Write → read round trips (property tests) and multi-thread appends.

mod common;

use common::*;
use proptest::prelude::*;
use sigmatrace_schemas::*;

#[derive(Clone, Debug)]
enum Op {
    Post(u64),
    Wc(u64, u8),
    Meta(u32, Vec<u8>),
    Modify(u32, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::Post),
        (any::<u64>(), any::<u8>()).prop_map(|(a, b)| Op::Wc(a, b)),
        (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300usize)
        )
            .prop_map(|(a, b)| Op::Meta(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Op::Modify(a, b)),
    ]
}

fn write_op(w: &mut ChunkWriter, op: &Op) -> bool {
    match op {
        Op::Post(s) => w.append(&post(*s, 7)),
        Op::Wc(s, st) => w.append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts: *s,
            wr_id: s.rotate_left(7),
            status: *st,
            qpn: 99,
            byte_len: 8,
            ..Default::default()
        }),
        Op::Meta(aux, bytes) => {
            w.append_meta(RecordKind::StringDef, *aux, 5, *aux as u64 * 3, bytes)
        }
        Op::Modify(q, d) => w.append(&QpModify {
            hdr: RecordHeader::of::<QpModify>(0x1f),
            qpn: *q,
            dest_qpn: *d,
            dgid: [7; 16],
            ..Default::default()
        }),
    }
}

fn check_op(rec: &Record, op: &Op) {
    match (rec, op) {
        (Record::PostSend(p), Op::Post(s)) => assert_eq!(**p, post(*s, 7)),
        (Record::WorkCompletion(c), Op::Wc(s, st)) => {
            assert_eq!(
                (c.ts, c.wr_id, c.status, c.qpn),
                (*s, s.rotate_left(7), *st, 99)
            )
        }
        (Record::StringDef(m), Op::Meta(aux, bytes)) => {
            assert_eq!(
                (m.aux, m.key, m.payload),
                (*aux, *aux as u64 * 3, bytes.as_slice())
            )
        }
        (Record::QpModify(m), Op::Modify(q, d)) => {
            assert_eq!(
                (m.qpn, m.dest_qpn, m.dgid, m.hdr.aux),
                (*q, *d, [7; 16], 0x1f)
            )
        }
        other => panic!("record/op mismatch: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_committed_record_reads_back(ops in proptest::collection::vec(op(), 0..2000), small in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sigmalog");
        let chunk = if small { 4096 } else { 1 << 16 };
        let w = writer(&path, chunk, 64 << 20);
        let mut tw = w.thread_writer(42);
        for o in &ops {
            prop_assert!(write_op(&mut tw, o));
        }
        let log = LogFile::open(&path).unwrap();
        prop_assert!(log.salvage().is_clean(), "{:?}", log.salvage());
        let mut n = 0;
        for c in log.chunks() {
            prop_assert_eq!(c.header.tid, 42);
            for r in log.records(c) {
                let r = r.unwrap();
                check_op(&r.decode().unwrap(), &ops[n]);
                n += 1;
            }
        }
        prop_assert_eq!(n, ops.len());
        prop_assert_eq!(log.header().dropped, 0);
    }
}

#[test]
fn eight_threads_append_concurrently_and_every_record_is_kept_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mt.sigmalog");
    let w = writer(&path, 1 << 14, 256 << 20);
    const PER: u64 = 50_000;
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let mut tw = w.thread_writer(1000 + t);
            s.spawn(move || {
                for i in 0..PER {
                    assert!(tw.append(&post(i, t)));
                }
            });
        }
    });
    let (log, chunks) = read_all(&path);
    assert!(log.salvage().is_clean());
    let mut next = [0u64; 8];
    for (tid, recs) in chunks {
        let t = (tid - 1000) as usize;
        for bytes in recs {
            let Record::PostSend(p) = Record::decode(&bytes).unwrap() else {
                panic!()
            };
            assert_eq!(p.qpn as usize, t);
            assert_eq!(
                p.wr_id, next[t],
                "thread {t} records out of order or missing"
            );
            next[t] += 1;
        }
    }
    assert_eq!(next, [PER; 8]);
    assert_eq!(log.header().chunks_allocated as usize, log.chunks().len());
}

#[test]
fn size_cap_stops_recording_and_counts_drops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.sigmalog");
    // Header + 2 chunks of 4 KiB: (4096-64-24)/64 = 62 records per chunk (24 bytes are kept
    // for the loss marker).
    let w = writer(&path, 4096, 4096 + 2 * 4096);
    let mut tw = w.thread_writer(1);
    let mut ok = 0;
    for i in 0..1000 {
        if tw.append(&post_full(i, 0)) {
            ok += 1;
        }
    }
    tw.append_meta(RecordKind::Annotation, 0, 5, 0, b"late");
    assert_eq!(ok, 124);
    assert!(tw.exhausted());
    assert_eq!(w.dropped(), 1000 - 124 + 1);
    let log = LogFile::open(&path).unwrap();
    assert_eq!(log.header().dropped, 1000 - 124 + 1);
    // Per kind: recorded + dropped = appended, exactly; the first loss has a time.
    let losses = log.losses();
    assert_eq!(losses.total, 1000 - 124 + 1);
    assert_eq!(
        losses.by_kind,
        vec![
            (RecordKind::Annotation as u16, 1),
            (RecordKind::PostSend as u16, 1000 - 124)
        ]
    );
    assert!(losses.first_ts.is_some());
    assert_eq!(w.losses(), losses);
    let raws: Vec<_> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c))
        .map(|r| r.unwrap())
        .collect();
    let recs: Vec<Record> = raws.iter().map(|r| r.decode().unwrap()).collect();
    assert_eq!(recs.len(), 124 + 1);
    // The marker: where this writer's losses began, after its last record.
    match recs.last().unwrap() {
        Record::Dropped(d) => {
            assert_eq!((d.hdr.aux, d.count), (drop_reason::SIZE_CAP, 0));
            assert_eq!(Some(d.ts), losses.first_ts);
        }
        r => panic!("expected the loss marker last, found {r:?}"),
    }
}

#[test]
fn header_fields_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sigmalog");
    let mut h = test_header();
    h.rank = RankInfo {
        rank: Some(5),
        local_rank: Some(1),
        world_size: Some(8),
        source: "RANK".into(),
    };
    h.attrs = vec!["k=v".into(), "node=3".into()];
    h.cmdline = vec!["prog".into(), "--flag".into(), "x y".into()];
    let _w = LogWriter::create(&path, &h, WriterOptions::default()).unwrap();
    let log = LogFile::open(&path).unwrap();
    let r = log.header();
    assert_eq!(r.rank, h.rank);
    assert_eq!(r.cmdline, h.cmdline);
    assert_eq!(r.attrs, h.attrs);
    assert_eq!(r.node(), Some("3"));
    assert_eq!(r.hostname, h.hostname);
    assert_eq!(r.pid, std::process::id());
    assert_eq!(r.start, h.start);
    assert_eq!(r.boot_id, h.boot_id);
    assert_eq!((r.major, r.minor), (FORMAT_MAJOR, FORMAT_MINOR));
    assert!(log.chunks().is_empty());
}

#[test]
fn log_is_created_0600_and_never_overwritten() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sigmalog");
    let _w = writer(&path, 4096, 1 << 20);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(matches!(
        LogWriter::create(&path, &test_header(), WriterOptions::default()),
        Err(WriteError::Create { .. })
    ));
    let link = dir.path().join("link.sigmalog");
    std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
    assert!(LogWriter::create(&link, &test_header(), WriterOptions::default()).is_err());
    assert!(
        !dir.path().join("target").exists(),
        "must not follow symlinks"
    );
}

#[test]
fn rank_detection_follows_launcher_variables() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let r = RankInfo::from_lookup(env(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "16"),
        ("RANK", "9"),
    ]));
    assert_eq!(
        (r.rank, r.local_rank, r.world_size, r.source.as_str()),
        (Some(3), Some(1), Some(16), "OMPI_COMM_WORLD_RANK")
    );
    let r = RankInfo::from_lookup(env(&[
        ("SLURM_PROCID", "7"),
        ("SLURM_LOCALID", "3"),
        ("SLURM_NTASKS", "8"),
    ]));
    assert_eq!(
        (r.rank, r.local_rank, r.world_size),
        (Some(7), Some(3), Some(8))
    );
    let r = RankInfo::from_lookup(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")]));
    assert_eq!(
        (r.rank, r.world_size, r.source.as_str()),
        (Some(2), Some(4), "PMI_RANK")
    );
    let r = RankInfo::from_lookup(env(&[("PMIX_RANK", "5"), ("SLURM_NTASKS", "6")]));
    assert_eq!((r.rank, r.world_size), (Some(5), Some(6)));
    let r = RankInfo::from_lookup(env(&[
        ("RANK", "1"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "2"),
    ]));
    assert_eq!(
        (r.rank, r.local_rank, r.world_size),
        (Some(1), Some(0), Some(2))
    );
    let r = RankInfo::from_lookup(env(&[("RANK", "not-a-number")]));
    assert_eq!(r, RankInfo::default());
}

#[test]
fn reserved_records_are_filled_in_place_and_visible_only_once_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sigmalog");
    // Header + 2 chunks of 4 KiB: 62 records of 64 bytes per chunk (and the loss marker).
    let w = writer(&path, 4096, 4096 + 2 * 4096);
    let mut tw = w.thread_writer(1);
    let mut committed = Vec::new();
    for i in 0..200u64 {
        if i % 3 == 0 {
            if tw.append(&post_full(i, 1)) {
                committed.push(i);
            }
            continue;
        }
        let Some(mut slot) = tw.reserve::<PostSend>() else {
            continue;
        };
        // Garbage header first: commit must set the kind and length itself.
        *slot = post_full(i, 1);
        slot.hdr.kind = 0xdead;
        slot.hdr.len = 7;
        // i % 3 == 2: abandoned (never committed): must not appear.
        if i % 3 == 1 {
            slot.commit();
            committed.push(i);
        }
    }
    // 124 slots in two chunks; abandoned reservations take none.
    assert_eq!(committed.len(), 124);
    assert!(tw.exhausted());
    let log = LogFile::open(&path).unwrap();
    let got: Vec<u64> = log
        .chunks()
        .iter()
        .flat_map(|c| log.records(c).map(|r| r.unwrap()).collect::<Vec<_>>())
        .filter_map(|r| match r.decode().unwrap() {
            Record::PostSend(p) => {
                assert_eq!(*p, post_full(p.wr_id, 1));
                Some(p.wr_id)
            }
            // The loss marker (count 0) where the writer met the cap.
            Record::Dropped(d) if d.count == 0 => None,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(got, committed);
    assert_eq!(log.header().dropped, w.dropped());
    assert!(w.dropped() > 0);
}

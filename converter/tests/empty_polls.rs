//! Empty-poll runs (`EmptyPolls`): counted in the summary and the waits section at every
//! detail, drawn as "empty polls" slices (arg `polls`) at their recorded times at full detail
//! only; runs of two threads overlapping on one CQ on two lanes of its track; a run whose last
//! poll is before its first counted apart and not drawn.

mod common;

use sigmatrace_convert::model::emit::Detail;
use sigmatrace_convert::report::Waits;
use sigmatrace_convert::{convert_with_report, ConvertOptions};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{LogWriter, WriterOptions};
use sigmatrace_timeline::proto;

const RT0: u64 = 1_700_000_000_000_000_000;
const CQ: u64 = 0x5a5a_0000;

/// (thread, first poll, last poll, polls) of each run, in log time (ns).
const RUNS: [(u32, u64, u64, u64); 4] = [
    (1, 1_100_000, 1_150_000, 40),
    (1, 1_200_000, 1_300_000, 90),
    (2, 1_250_000, 1_280_000, 7),
    (2, 1_400_000, 1_390_000, 3),
];

fn write_log(path: &std::path::Path) {
    let header = common::log_header(31, 0, common::snapshot(1_000_000, RT0));
    let opts = WriterOptions {
        chunk_size: 1 << 16,
        max_bytes: 1 << 30,
        ..Default::default()
    };
    let w = LogWriter::create(path, &header, opts).unwrap();
    for thread in [1u32, 2] {
        let mut t = w.thread_writer(thread);
        for &(_, first, last, count) in RUNS.iter().filter(|r| r.0 == thread) {
            t.append(&EmptyPolls {
                hdr: RecordHeader::of::<EmptyPolls>(0),
                ts: last,
                first_ts: first,
                cq: CQ,
                count,
            });
        }
        t.append(&common::snapshot(2_000_000, RT0));
    }
}

#[test]
fn empty_poll_runs_are_counted_and_drawn_at_full_detail() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("polls.sigmatrace");
    write_log(&log);
    let out = dir.path().join("polls.perfetto-trace");
    for detail in [Detail::Normal, Detail::Full] {
        let opts = ConvertOptions {
            detail,
            jobs: 1,
            ..Default::default()
        };
        let rep = convert_with_report(std::slice::from_ref(&log), &out, &opts).unwrap();
        let t = &rep.summary.totals;
        assert_eq!(
            (
                t.poll_runs,
                t.empty_polls,
                t.empty_poll_ns,
                t.poll_runs_malformed
            ),
            (3, 137, 50_000 + 100_000 + 30_000, 1)
        );
        let w = &rep.section::<Waits>().unwrap().cqs[&(0, CQ)];
        assert_eq!((w.runs, w.polls, w.ns), (3, 137, 180_000));
        // No completion followed: charged to no peer.
        assert_eq!(w.by_peer.get(&None), Some(&180_000));
        assert!(
            rep.text().contains("3 empty-poll runs: 137 polls"),
            "{}",
            rep.text()
        );
        assert!(rep.text().contains("1 empty-poll runs not counted"));
        let pkts = common::decode(&out);
        let slices = slices_named(&pkts, "empty polls");
        if detail == Detail::Normal {
            assert!(slices.is_empty());
            continue;
        }
        common::validate(&out, &["slices=3"]);
        // (start, end, polls, track) of each drawn run, in start order.
        let mut got: Vec<(u64, u64, u64, u64)> = slices;
        got.sort_unstable();
        let want: Vec<(u64, u64, u64)> = vec![
            (RT0 + 1_100_000, RT0 + 1_150_000, 40),
            (RT0 + 1_200_000, RT0 + 1_300_000, 90),
            (RT0 + 1_250_000, RT0 + 1_280_000, 7),
        ];
        let times: Vec<(u64, u64, u64)> = got.iter().map(|g| (g.0, g.1, g.2)).collect();
        assert_eq!(times, want, "recorded times, never moved");
        // Runs come in the order of their last polls: the overlapping ones of the two threads
        // on two lanes, never two at once on one.
        for a in &got {
            for b in got.iter().filter(|b| b.3 == a.3 && b.0 > a.0) {
                assert!(b.0 >= a.1, "overlap on one lane: {a:?} {b:?}");
            }
        }
        assert_eq!(
            got.iter()
                .map(|g| g.3)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            2
        );
        let lanes: Vec<_> = pkts
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .filter(|d| d.name.as_deref() == Some("CQ 0x5a5a0000 empty polls"))
            .collect();
        assert_eq!(lanes.len(), 2, "{lanes:?}");
    }
}

/// (begin, end, `polls` arg, track) of the slices named `name` (absolute timestamps: the
/// process's second sequence).
fn slices_named(pkts: &[proto::TracePacket], name: &str) -> Vec<(u64, u64, u64, u64)> {
    let names = common::event_names(pkts);
    let mut open: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    let mut out = Vec::new();
    for p in pkts {
        let Some(e) = p.track_event.as_ref() else {
            continue;
        };
        let seq = p.trusted_packet_sequence_id.unwrap_or(0);
        let track = e.track_uuid.unwrap_or(0);
        if e.r#type == Some(proto::TYPE_SLICE_BEGIN)
            && e.name_iid
                .is_some_and(|n| names.get(&(seq, n)).is_some_and(|s| s == name))
        {
            let polls = e
                .debug_annotations
                .first()
                .and_then(|a| a.uint_value)
                .unwrap_or(0);
            open.insert(track, (p.timestamp.unwrap(), polls));
        } else if e.r#type == Some(proto::TYPE_SLICE_END) {
            if let Some((b, polls)) = open.remove(&track) {
                out.push((b, p.timestamp.unwrap(), polls, track));
            }
        }
    }
    out
}

//! GPU-side records: observed WQEs/CQEs (selective signalling via wqe_counter) and kernels
//! with %globaltimer times mapped to host time through GpuClockPair records.

mod common;

use sigmatrace_convert::{convert_with_report, ConvertOptions};
use sigmatrace_schemas::header::FileHeader;
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{LogWriter, WriterOptions};
use sigmatrace_timeline::proto;

const RT0: u64 = 1_700_000_000_000_000_000;

fn snap(ns: u64) -> ClockSnapshot {
    common::snapshot(ns, RT0)
}

#[test]
fn observed_wqes_and_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.sigmatrace");
    let (ks, ke) = (1_500_000u64, 1_800_000u64);
    write_log(&path, &[(ks, ke, ALLREDUCE)]);
    let (out, rep) = convert_one(dir.path(), path);
    assert_eq!(rep.summary.totals.slices, 9, "8 WQEs + 1 kernel");
    common::validate(&out, &["slices=9", "instants=1"]);
    let pkts = common::decode(&out);
    // The kernel slice sits on the GPU sequence with absolute timestamps = host realtime.
    let kernel = slice_begins(&pkts, "allreduce_kernel");
    assert_eq!(kernel.len(), 1);
    let ts = kernel[0].timestamp.unwrap() as i64;
    assert!(
        (ts - (RT0 + ks) as i64).abs() <= 2,
        "kernel start {ts} vs {}",
        RT0 + ks
    );
    let tracks: Vec<String> = pkts
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .filter_map(|d| d.name.clone())
        .collect();
    for want in [
        "GPU 0",
        "stream 0x55",
        "GPU-initiated queues",
        "QP 0x42 observed",
    ] {
        assert!(
            tracks.iter().any(|t| t == want),
            "track {want} in {tracks:?}"
        );
    }
}

/// A CUDA graph launch (`cuGraphLaunch`: its "function" the executable graph, no kernel name
/// of its own) is one slice on its stream named after the graph, between the kernels around
/// it, at its mapped times; a kernel launched with the same handle as a function keeps the
/// kernel naming.
#[test]
fn graph_launches_are_slices_named_by_their_graph() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.sigmatrace");
    let graph = (launch_api::CU_GRAPH_LAUNCH, 0x7e57_0010);
    let kernels = [
        (1_500_000u64, 1_600_000u64, ALLREDUCE),
        (1_600_000, 1_750_000, graph),
        (1_750_000, 1_800_000, ALLREDUCE),
        (1_800_000, 1_950_000, graph),
        (
            1_950_000,
            1_960_000,
            (launch_api::CU_LAUNCH_KERNEL, 0x7e57_0010),
        ),
    ];
    write_log(&path, &kernels);
    let (out, rep) = convert_one(dir.path(), path);
    assert_eq!(rep.summary.totals.slices, 8 + 5, "8 WQEs + 5 launches");
    common::validate(&out, &["slices=13"]);
    let pkts = common::decode(&out);
    let starts = |name: &str| -> Vec<i64> {
        slice_begins(&pkts, name)
            .iter()
            .map(|p| p.timestamp.unwrap() as i64 - RT0 as i64)
            .collect()
    };
    let graphs = starts("CUDA graph 0x7e570010");
    assert_eq!(graphs.len(), 2, "{graphs:?}");
    for (got, want) in graphs.iter().zip([1_600_000i64, 1_800_000]) {
        assert!((got - want).abs() <= 2, "graph start {got} vs {want}");
    }
    assert_eq!(starts("allreduce_kernel").len(), 2);
    assert_eq!(starts("kernel 0x7e570010").len(), 1);
}

/// Kernels of one stream are drawn at their mapped times, never moved: one that overlaps the
/// one before (programmatic dependent launch) goes to a second lane of the stream (same name
/// and merge key), one that fits after a lane's last kernel goes back to it, and one whose
/// end is before its start is not drawn and is counted in the report.
#[test]
fn overlapping_kernels_keep_their_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.sigmatrace");
    let kernels = [
        (1_500_000u64, 1_800_000u64, ALLREDUCE),
        (1_700_000, 1_900_000, ALLREDUCE),
        (2_000_000, 1_950_000, ALLREDUCE),
        (1_850_000, 1_950_000, ALLREDUCE),
    ];
    write_log(&path, &kernels);
    let (out, rep) = convert_one(dir.path(), path);
    assert_eq!(rep.summary.totals.kernels_malformed, 1);
    assert_eq!(rep.summary.totals.slices, 8 + 3, "8 WQEs + 3 kernels");
    assert!(
        rep.text()
            .contains("1 GPU kernel executions not drawn: their end maps before their start"),
        "{}",
        rep.text()
    );
    common::validate(&out, &["slices=11"]);
    let pkts = common::decode(&out);
    let mut begins: Vec<(i64, u64)> = slice_begins(&pkts, "allreduce_kernel")
        .iter()
        .map(|p| {
            let e = p.track_event.as_ref().unwrap();
            (
                p.timestamp.unwrap() as i64 - RT0 as i64,
                e.track_uuid.unwrap(),
            )
        })
        .collect();
    begins.sort();
    let want = [1_500_000i64, 1_700_000, 1_850_000];
    assert_eq!(begins.len(), want.len(), "{begins:?}");
    for ((got, _), want) in begins.iter().zip(want) {
        assert!((got - want).abs() <= 2, "kernel start {got} vs {want}");
    }
    let (lane0, lane1) = (begins[0].1, begins[1].1);
    assert_ne!(
        lane0, lane1,
        "the overlapping kernel is on a lane of its own"
    );
    assert_eq!(
        begins[2].1, lane0,
        "the third fits after the first, on its lane"
    );
    let lanes: Vec<_> = pkts
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .filter(|d| d.name.as_deref() == Some("stream 0x55"))
        .collect();
    assert_eq!(lanes.len(), 2, "{lanes:?}");
    assert!(lanes
        .iter()
        .all(|d| d.sibling_merge_key.as_deref() == Some("stream 0x55")));
}

/// What a ring observer logs, in order: a WQE of index i, a CQE of (opcode, wqe_counter), or
/// the ring registered (again).
enum Seen {
    Wqe(u16),
    Cqe(u8, u16),
    Registered,
}

/// A WQE first seen after the CQE that retires it (a CQ polled before its send ring) is an
/// instant, not a slice left open until a later CQE; a responder CQE (its counter counts the
/// receive queue) retires no send WQE; a ring registered anew starts its indices over.
#[test]
fn wqes_seen_after_their_completion_are_instants() {
    use Seen::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.sigmatrace");
    let seen = [
        Registered,
        Wqe(0),
        Wqe(1),
        Cqe(0, 2),
        Wqe(2),
        Cqe(2, 0x7000),
        Wqe(3),
        Cqe(0, 3),
        Registered,
        Wqe(0),
        Cqe(0, 0),
    ];
    write_ring_log(&path, &seen);
    let (out, rep) = convert_one(dir.path(), path);
    assert_eq!(rep.summary.totals.observed_late, 1, "WQE 2");
    assert_eq!(
        rep.summary.totals.slices, 4,
        "WQEs 0, 1, 3 and the new ring's 0"
    );
    assert!(rep
        .text()
        .contains("1 observed WQEs first seen after the CQE that retires them"));
    common::validate(&out, &["slices=4", "instants=1"]);
    // Slice ends from a Chrome JSON conversion (absolute µs), against the first begin (WQE 0
    // at 1 000 100 ns): WQEs 0 and 1 end at the CQE of counter 2 (1 000 300), WQE 3 at counter
    // 3's (1 000 700, not at the responder CQE at 600), the new ring's 0 at its own (1 001 000).
    let json = dir.path().join("ring.json");
    let o = ConvertOptions {
        jobs: 1,
        format: sigmatrace_convert::Format::ChromeJson,
        ..Default::default()
    };
    convert_with_report(&[dir.path().join("ring.sigmatrace")], &json, &o).unwrap();
    // Times as written ("ts":µs.nnn), in integer ns: epoch µs do not fit an f64 to the ns.
    let text = std::fs::read_to_string(&json).unwrap();
    let at = |ph: &str| -> Vec<i64> {
        let mut v: Vec<i64> = text
            .lines()
            .filter(|l| l.contains(&format!("\"ph\":\"{ph}\"")))
            .filter_map(|l| {
                let ts = l.split("\"ts\":").nth(1)?;
                let ts: String = ts
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let (us, frac) = ts.split_once('.')?;
                Some(us.parse::<i64>().ok()? * 1000 + frac.parse::<i64>().ok()?)
            })
            .collect();
        v.sort_unstable();
        v
    };
    let first = at("B")[0];
    let ends: Vec<i64> = at("E").iter().map(|t| t - first).collect();
    assert_eq!(
        ends,
        [200, 200, 600, 900],
        "slice ends, ns after the first begin"
    );
}

/// One process's log of ring observations `seen`, 100 ns apart from 1 000 000 (QP 0x42).
fn write_ring_log(path: &std::path::Path, seen: &[Seen]) {
    let header = FileHeader {
        boot_id: [9; 16],
        hostname: "gpunode".into(),
        ..common::log_header(78, 0, snap(1_000_000))
    };
    let opts = WriterOptions {
        chunk_size: 1 << 16,
        max_bytes: 1 << 30,
        ..Default::default()
    };
    let w = LogWriter::create(path, &header, opts).unwrap();
    let mut t = w.thread_writer(1);
    for (i, s) in seen.iter().enumerate() {
        let ts = 1_000_000 + i as u64 * 100;
        match *s {
            Seen::Registered => t.append(&QueueDiscovered {
                hdr: RecordHeader::of::<QueueDiscovered>(1 | 1 << 16),
                ts,
                number: 0x42,
                depth: 64,
                stride: 64,
                ..Default::default()
            }),
            Seen::Wqe(idx) => t.append(&WqeObserved {
                hdr: RecordHeader::of::<WqeObserved>(0),
                ts,
                qpn: 0x42,
                bytes: 64,
                wqe_index: idx,
                opcode: 0x08,
                ds: 3,
                observer: 1,
                ..Default::default()
            }),
            Seen::Cqe(opcode, counter) => t.append(&CqeObserved {
                hdr: RecordHeader::of::<CqeObserved>(0),
                ts,
                qpn: 0x42,
                wqe_counter: counter,
                opcode,
                observer: 1,
                ..Default::default()
            }),
        };
    }
    t.append(&snap(2_000_000));
    drop(t);
    drop(w);
}

/// Converts one log into `dir`/gpu.perfetto-trace with one worker.
fn convert_one(
    dir: &std::path::Path,
    log: std::path::PathBuf,
) -> (std::path::PathBuf, sigmatrace_convert::Report) {
    let out = dir.join("gpu.perfetto-trace");
    let opts = ConvertOptions {
        jobs: 1,
        ..Default::default()
    };
    let rep = convert_with_report(&[log], &out, &opts).unwrap();
    (out, rep)
}

/// GPU globaltimer = host ns + 5 s, running 10 ppm fast.
fn gpu(host: u64) -> u64 {
    5_000_000_000 + host + host / 100_000
}

/// The launch of `allreduce_kernel` (function 0xf00d, `cuLaunchKernel`).
const ALLREDUCE: (u32, u64) = (launch_api::CU_LAUNCH_KERNEL, 0xf00d);

/// One process's log: three GPU clock pairs, a discovered QP with 8 observed WQEs (2 CQEs),
/// and launches (API, function) on one stream executed from host time start to end, in order.
fn write_log(path: &std::path::Path, kernels: &[(u64, u64, (u32, u64))]) {
    let header = FileHeader {
        boot_id: [9; 16],
        hostname: "gpunode".into(),
        ..common::log_header(77, 0, snap(1_000_000))
    };
    let w = LogWriter::create(
        path,
        &header,
        WriterOptions {
            chunk_size: 1 << 16,
            max_bytes: 1 << 30,
            ..Default::default()
        },
    )
    .unwrap();
    let mut t = w.thread_writer(1);
    for h in [1_000_000u64, 2_000_000, 3_000_000] {
        t.append(&GpuClockPair {
            hdr: RecordHeader::of::<GpuClockPair>(0),
            ts: h - 10,
            ts_after: h + 10,
            gpu_ns: gpu(h),
        });
    }
    t.append(&QueueDiscovered {
        hdr: RecordHeader::of::<QueueDiscovered>(1 | 1 << 8 | 2 << 16),
        ts: 1_000_100,
        number: 0x42,
        depth: 64,
        stride: 64,
        ..Default::default()
    });
    // 8 WQEs, CQE only for index 3 (retires 0..=3) and 7 (retires 4..=7), wrapping the 16-bit index.
    for i in 0..8u64 {
        let idx = (0xfffc + i) as u16;
        t.append(&WqeObserved {
            hdr: RecordHeader::of::<WqeObserved>(0),
            ts: 1_100_000 + i * 100,
            qpn: 0x42,
            bytes: 8192,
            wqe_index: idx,
            opcode: 0x08,
            ds: 3,
            observer: 1,
            memory: 1,
            ..Default::default()
        });
        if i == 3 || i == 7 {
            t.append(&CqeObserved {
                hdr: RecordHeader::of::<CqeObserved>(0),
                ts: 1_100_000 + i * 100 + 50,
                qpn: 0x42,
                wqe_counter: idx,
                opcode: if i == 7 { 13 } else { 0 },
                observer: 1,
                ..Default::default()
            });
        }
    }
    t.append_meta(
        RecordKind::StringDef,
        1,
        1_200_000,
        0xf00d,
        b"allreduce_kernel",
    );
    for (i, &(ks, ke, (api, function))) in kernels.iter().enumerate() {
        let correlation = 7 + i as u64;
        t.append(&KernelLaunch {
            hdr: RecordHeader::of::<KernelLaunch>(api),
            ts: 1_200_000 + i as u64,
            correlation,
            function,
            stream: 0x55,
            device: 0,
            ..Default::default()
        });
        t.append(&KernelExec {
            hdr: RecordHeader::of::<KernelExec>(1),
            ts: 1_900_000 + i as u64,
            correlation,
            start: gpu(ks),
            end: gpu(ke),
            device: 0,
            _pad: 0,
        });
    }
    t.append(&snap(2_000_000));
    drop(t);
    drop(w);
}

/// The SLICE_BEGIN packets named `name` (names interned per sequence).
fn slice_begins<'a>(pkts: &'a [proto::TracePacket], name: &str) -> Vec<&'a proto::TracePacket> {
    let names = common::event_names(pkts);
    pkts.iter()
        .filter(|p| {
            p.track_event.as_ref().is_some_and(|e| {
                e.r#type == Some(proto::TYPE_SLICE_BEGIN)
                    && e.name_iid
                        .and_then(|n| names.get(&(p.trusted_packet_sequence_id.unwrap_or(0), n)))
                        .is_some_and(|n| n == name)
            })
        })
        .collect()
}

//! The trace checker on hand-built traces: a valid one with exact statistics (plain, inside
//! `compressed_packets`, gzip), and one broken trace per check, each of which must fire.

use std::io::Write;

use prost::Message;
use sigmatrace_testkit::trace::proto::*;
use sigmatrace_testkit::trace::{check, check_bytes, Report};

const SEQ: u32 = 1;
const PROCESS: u64 = 10;
const SLICES: u64 = 11;
const COUNTER: u64 = 12;

fn frame(p: &TracePacket) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::message::encode(1, p, &mut out);
    out
}

fn trace(packets: &[TracePacket]) -> Vec<u8> {
    packets.iter().flat_map(frame).collect()
}

fn descriptor(uuid: u64, parent: Option<u64>, name: &str) -> TracePacket {
    TracePacket {
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: parent,
            name: Some(name.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn process(uuid: u64) -> TracePacket {
    let mut p = descriptor(uuid, None, "rank 0");
    p.track_descriptor.as_mut().unwrap().process = Some(ProcessDescriptor {
        pid: Some(42),
        ..Default::default()
    });
    p
}

fn counter_track(uuid: u64, parent: u64) -> TracePacket {
    let mut p = descriptor(uuid, Some(parent), "bytes");
    p.track_descriptor.as_mut().unwrap().counter = Some(CounterDescriptor {
        unit: Some(3),
        ..Default::default()
    });
    p
}

/// The first packet of sequence SEQ: clears incremental state and interns names 1 and 2.
fn start() -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQ),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        interned_data: Some(InternedData {
            event_names: vec![name(1, "post_send"), name(2, "wait")],
            debug_annotation_names: vec![name(1, "wr_id")],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn name(iid: u64, s: &str) -> InternedName {
    InternedName {
        iid: Some(iid),
        name: Some(s.into()),
    }
}

fn event(ts: u64, ty: i32, track: u64, name_iid: Option<u64>) -> TracePacket {
    TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(SEQ),
        track_event: Some(TrackEvent {
            r#type: Some(ty),
            track_uuid: Some(track),
            name_iid,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn begin(ts: u64, track: u64) -> TracePacket {
    event(ts, TYPE_SLICE_BEGIN, track, Some(1))
}

fn end(ts: u64, track: u64) -> TracePacket {
    event(ts, TYPE_SLICE_END, track, None)
}

fn counter(ts: u64, track: u64, v: i64) -> TracePacket {
    let mut p = event(ts, TYPE_COUNTER, track, None);
    p.track_event.as_mut().unwrap().counter_value = Some(v);
    p
}

fn with_flows(mut p: TracePacket, flows: &[u64], terminating: &[u64]) -> TracePacket {
    let te = p.track_event.as_mut().unwrap();
    te.flow_ids = flows.to_vec();
    te.terminating_flow_ids = terminating.to_vec();
    p
}

/// A valid trace: 3 tracks, 2 nested slices + 1 more, an instant, 2 counter samples, 1 flow.
fn valid() -> Vec<TracePacket> {
    let mut arg = begin(100, SLICES);
    arg.track_event.as_mut().unwrap().debug_annotations = vec![DebugAnnotation {
        name_iid: Some(1),
        uint_value: Some(7),
        ..Default::default()
    }];
    vec![
        process(PROCESS),
        descriptor(SLICES, Some(PROCESS), "QP 1"),
        counter_track(COUNTER, PROCESS),
        start(),
        with_flows(arg, &[5], &[]),
        event(150, TYPE_SLICE_BEGIN, SLICES, Some(2)),
        end(160, SLICES),
        end(200, SLICES),
        event(210, TYPE_INSTANT, SLICES, Some(2)),
        counter(220, COUNTER, 4096),
        counter(230, COUNTER, 0),
        with_flows(begin(300, SLICES), &[], &[5]),
        end(310, SLICES),
    ]
}

fn checked(packets: &[TracePacket]) -> Report {
    check_bytes(&trace(packets))
}

/// Asserts that `check` (and only `check`) fired, `n` times.
fn fires(r: &Report, check: &str, n: usize) {
    assert_eq!(r.fatal, None, "{:#}", r.json());
    assert_eq!(r.count(check), n, "{:#}", r.json());
    assert_eq!(r.error_count, n, "only {check} expected: {:#}", r.json());
    assert!(!r.ok);
}

#[test]
fn a_valid_trace_passes_with_exact_statistics() {
    let r = checked(&valid());
    assert!(r.ok, "{:#}", r.json());
    let s = &r.stats;
    assert_eq!(s.packets, 13);
    assert_eq!(
        (s.tracks, s.process_tracks, s.counter_tracks, s.other_tracks),
        (3, 1, 1, 1)
    );
    assert_eq!((s.track_events, s.slices, s.instants), (9, 3, 1));
    assert_eq!((s.counter_events, s.flows, s.backward_flows), (2, 1, 0));
    assert_eq!(s.sequences, 1);
    assert_eq!((s.min_timestamp, s.max_timestamp), (Some(100), Some(310)));
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

#[test]
fn compressed_packets_and_gzip_files_are_read() {
    let packets = valid();
    // The first four packets plain, the rest in two zlib blocks, as the converter writes.
    let mut bytes = trace(&packets[..4]);
    for part in [&packets[4..8], &packets[8..]] {
        bytes.extend(frame(&TracePacket {
            compressed_packets: Some(zlib(&trace(part))),
            ..Default::default()
        }));
    }
    let r = check_bytes(&bytes);
    assert!(r.ok, "{:#}", r.json());
    assert_eq!(r.stats.compressed_blocks, 2);
    assert_eq!(r.stats.packets, 13);
    assert_eq!(r.stats, {
        let mut s = checked(&packets).stats;
        s.compressed_blocks = 2;
        s
    });

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.perfetto-trace.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).unwrap();
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let r = check(&path);
    assert!(
        r.ok && r.stats.gzip && r.stats.slices == 3,
        "{:#}",
        r.json()
    );
}

#[test]
fn incremental_clock_deltas_convert_to_trace_time() {
    // As the converter writes a sequence: clock 64 incremental from 1000, BOOTTIME 1000.
    let mut first = start();
    first.trace_packet_defaults = Some(TracePacketDefaults {
        timestamp_clock_id: Some(64),
        track_event_defaults: None,
    });
    first.clock_snapshot = Some(ClockSnapshot {
        clocks: vec![
            Clock {
                clock_id: Some(64),
                timestamp: Some(1000),
                is_incremental: Some(true),
                unit_multiplier_ns: None,
            },
            Clock {
                clock_id: Some(CLOCK_BOOTTIME),
                timestamp: Some(1000),
                ..Default::default()
            },
        ],
        primary_trace_clock: None,
    });
    let r = checked(&[
        descriptor(SLICES, None, "t"),
        first,
        begin(5, SLICES),  // 1005
        begin(10, SLICES), // 1015
        end(0, SLICES),    // 1015
        end(20, SLICES),   // 1035
    ]);
    assert!(r.ok, "{:#}", r.json());
    assert_eq!(r.stats.slices, 2);
    assert_eq!(
        (r.stats.min_timestamp, r.stats.max_timestamp),
        (Some(1005), Some(1035))
    );
}

#[test]
fn unknown_fields_are_reported() {
    let mut bytes = trace(&valid()[..4]);
    // A packet with field 999 (varint) besides a known one.
    let mut payload = frame(&descriptor(20, None, "x"))[2..].to_vec();
    payload.extend([0xb8, 0x3e, 0x01]); // tag (999 << 3 | 0), value 1
    bytes.push(0x0a);
    bytes.push(payload.len() as u8);
    bytes.extend(&payload);
    // A TrackEvent with field 200 (length-delimited) inside.
    let mut ev = begin(100, SLICES).encode_to_vec();
    let te_at = ev.iter().position(|&b| b == 0x5a).unwrap(); // TracePacket.track_event
    let extra = [0xc2, 0x0c, 0x01, 0x00]; // tag (200 << 3 | 2), length 1, one byte
    ev[te_at + 1] += extra.len() as u8;
    ev.splice(te_at + 2..te_at + 2, extra);
    bytes.push(0x0a);
    bytes.push(ev.len() as u8);
    bytes.extend(&ev);
    bytes.extend(trace(&[end(110, SLICES)]));
    let r = check_bytes(&bytes);
    fires(&r, "unknown-field", 2);
    let text = r.json().to_string();
    assert!(text.contains("TracePacket: unknown field 999"), "{text}");
    assert!(
        text.contains("TracePacket.track_event: unknown field 200"),
        "{text}"
    );
}

#[test]
fn unknown_enum_values_are_reported() {
    let mut p = descriptor(20, None, "x");
    p.track_descriptor.as_mut().unwrap().sibling_merge_behavior = Some(9);
    fires(&checked(&[p]), "unknown-field", 1);
}

#[test]
fn track_uuids_must_be_nonzero_and_unique() {
    let mut t = valid();
    t.push(descriptor(0, None, "zero"));
    t.push(descriptor(SLICES, Some(PROCESS), "QP 1")); // identical re-emission
    t.push(descriptor(COUNTER, None, "other")); // conflicting
    fires(&checked(&t), "track-uuid", 3);
}

#[test]
fn parents_must_be_defined_and_acyclic() {
    let t = [
        descriptor(1, Some(99), "orphan"),
        descriptor(2, Some(2), "self"),
        descriptor(3, Some(4), "a"),
        descriptor(4, Some(3), "b"),
    ];
    let r = checked(&t);
    fires(&r, "track-parent", 3);
}

#[test]
fn every_event_needs_a_defined_track() {
    let mut t = valid();
    t.push(event(400, TYPE_INSTANT, 77, Some(1)));
    let mut no_track = event(410, TYPE_INSTANT, 0, Some(1));
    no_track.track_event.as_mut().unwrap().track_uuid = None;
    t.push(no_track);
    fires(&checked(&t), "track-ref", 2);
}

#[test]
fn slices_must_balance_and_nest() {
    let base = valid();
    // An END without a BEGIN.
    let mut t = base.clone();
    t.push(end(400, SLICES));
    fires(&checked(&t), "slice-nesting", 1);
    // A BEGIN never ended.
    let mut t = base.clone();
    t.push(begin(400, SLICES));
    fires(&checked(&t), "slice-nesting", 1);
    // Written BEGIN(500), END(450): the slice ends before it begins.
    let mut t = base.clone();
    t.extend([begin(500, SLICES), end(450, SLICES)]);
    fires(&checked(&t), "slice-nesting", 1);
    // [400, 600] and [500, 700] written one at a time: overlap without nesting (both slices
    // pair differently in timestamp order).
    let mut t = base.clone();
    t.extend([
        begin(400, SLICES),
        end(600, SLICES),
        begin(500, SLICES),
        end(700, SLICES),
    ]);
    fires(&checked(&t), "slice-nesting", 2);
    // A named END closing the outer slice while the inner one is open.
    let mut t = base;
    let mut named_end = end(460, SLICES);
    named_end.track_event.as_mut().unwrap().name_iid = Some(1);
    t.extend([
        begin(400, SLICES),
        event(450, TYPE_SLICE_BEGIN, SLICES, Some(2)),
        named_end,
        end(470, SLICES),
    ]);
    fires(&checked(&t), "slice-nesting", 1);
}

#[test]
fn counter_tracks_take_only_counter_events() {
    let mut t = valid();
    t.push(event(400, TYPE_INSTANT, COUNTER, Some(1)));
    t.push(counter(410, SLICES, 1));
    fires(&checked(&t), "counter-track", 2);
    let mut t = valid();
    t.push(event(400, TYPE_COUNTER, COUNTER, None)); // no value
    fires(&checked(&t), "track-event", 1);
}

/// Extra counter values are samples of their tracks: counted as counter events, checked as
/// counter values (a slice track takes none), one uuid per value.
#[test]
fn extra_counter_values_are_samples_of_their_tracks() {
    let with_extra = |mut p: TracePacket, uuids: Vec<u64>, values: Vec<i64>| {
        let te = p.track_event.as_mut().unwrap();
        te.extra_counter_track_uuids = uuids;
        te.extra_counter_values = values;
        p
    };
    let mut t = valid();
    t.push(with_extra(counter(400, COUNTER, 1), vec![COUNTER], vec![2]));
    t.push(with_extra(begin(410, SLICES), vec![COUNTER], vec![3]));
    t.push(end(420, SLICES));
    let r = checked(&t);
    assert!(r.ok, "{:#}", r.json());
    assert_eq!(r.stats.counter_events, 2 + 1 + 2);
    let mut t = valid();
    t.push(with_extra(counter(400, COUNTER, 1), vec![SLICES], vec![2]));
    fires(&checked(&t), "counter-track", 1);
    let mut t = valid();
    t.push(with_extra(
        counter(400, COUNTER, 1),
        vec![COUNTER],
        vec![2, 3],
    ));
    fires(&checked(&t), "track-event", 1);
}

#[test]
fn interned_names_must_be_defined_earlier_on_the_sequence() {
    let mut t = valid();
    t.push(event(400, TYPE_INSTANT, SLICES, Some(9)));
    fires(&checked(&t), "interning", 1);
    // Interned data on a sequence that was never cleared.
    let mut t = valid();
    let mut late = start();
    late.trusted_packet_sequence_id = Some(2);
    late.sequence_flags = None;
    t.push(late);
    fires(&checked(&t), "interning", 1);
    // A clear drops what was interned before it.
    let mut t = valid();
    let mut clear = start();
    clear.interned_data = None;
    t.push(clear);
    t.push(event(400, TYPE_INSTANT, SLICES, Some(1)));
    fires(&checked(&t), "interning", 1);
}

#[test]
fn needing_incremental_state_requires_a_clear_first() {
    let mut t = valid();
    let mut p = event(400, TYPE_INSTANT, SLICES, None);
    p.trusted_packet_sequence_id = Some(3);
    p.sequence_flags = Some(SEQ_NEEDS_INCREMENTAL_STATE);
    t.push(p);
    fires(&checked(&t), "incremental-state", 1);
}

#[test]
fn every_flow_needs_two_ends() {
    let mut t = valid();
    t.push(with_flows(
        event(400, TYPE_INSTANT, SLICES, Some(1)),
        &[8],
        &[],
    ));
    t.push(with_flows(
        event(410, TYPE_INSTANT, SLICES, Some(1)),
        &[],
        &[9],
    ));
    let r = checked(&t);
    fires(&r, "flow", 2);
    assert_eq!(r.stats.flows, 3);
}

#[test]
fn flows_that_end_before_they_start_are_counted() {
    let mut t = valid();
    // Flow 6 starts at 500 and is terminated by an event at 450 (later in the file).
    t.push(with_flows(
        event(500, TYPE_INSTANT, SLICES, Some(1)),
        &[6],
        &[],
    ));
    t.push(with_flows(
        event(450, TYPE_INSTANT, SLICES, Some(1)),
        &[],
        &[6],
    ));
    // Flow 7's terminating event comes first in the file, at 600, its start at 650.
    t.push(with_flows(
        event(600, TYPE_INSTANT, SLICES, Some(1)),
        &[],
        &[7],
    ));
    t.push(with_flows(
        event(650, TYPE_INSTANT, SLICES, Some(1)),
        &[7],
        &[],
    ));
    let r = checked(&t);
    assert!(r.ok, "{:#}", r.json());
    assert_eq!((r.stats.flows, r.stats.backward_flows), (3, 2));
    let mut r = r;
    r.expect_min(&["backward_flows=3"]).unwrap();
    assert!(!r.ok);
}

#[test]
fn clocks_must_not_go_backwards_and_must_convert() {
    let snap = |ts: u64| TracePacket {
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                Clock {
                    clock_id: Some(CLOCK_BOOTTIME),
                    timestamp: Some(ts),
                    ..Default::default()
                },
                Clock {
                    clock_id: Some(CLOCK_REALTIME),
                    timestamp: Some(ts),
                    ..Default::default()
                },
            ],
            primary_trace_clock: Some(CLOCK_BOOTTIME as i32),
        }),
        ..Default::default()
    };
    let mut t = valid();
    t.insert(0, snap(1000));
    t.push(snap(900));
    fires(&checked(&t), "clock", 2); // both clocks go backwards
    let mut t = valid();
    let mut p = event(400, TYPE_INSTANT, SLICES, Some(1));
    p.timestamp_clock_id = Some(64); // sequence-scoped clock without a snapshot
    t.push(p);
    fires(&checked(&t), "clock", 1);
}

#[test]
fn events_need_a_nonnegative_timestamp() {
    let mut t = valid();
    let mut p = event(0, TYPE_INSTANT, SLICES, Some(1));
    p.timestamp = None;
    t.push(p);
    t.push(event(u64::MAX - 5, TYPE_INSTANT, SLICES, Some(1)));
    fires(&checked(&t), "timestamp", 2);
}

#[test]
fn unknown_event_types_are_reported() {
    let mut t = valid();
    t.push(event(400, 5, SLICES, Some(1)));
    fires(&checked(&t), "track-event", 1);
}

#[test]
fn unreadable_input_is_fatal() {
    let good = trace(&valid());
    let fatal = |bytes: &[u8]| {
        let r = check_bytes(bytes);
        assert!(!r.ok, "{:#}", r.json());
        r.fatal
            .clone()
            .unwrap_or_else(|| panic!("not fatal: {:#}", r.json()))
    };
    assert!(fatal(&[]).contains("empty"));
    assert!(fatal(b"{\"traceEvents\": []}").contains("not a Perfetto trace"));
    assert!(fatal(&good[..good.len() - 3]).contains("remain"));
    // A packet whose bytes are not a TracePacket (field 8 with a length-delimited wire type).
    assert!(fatal(&[0x0a, 0x03, 0x42, 0x01, 0x00]).contains("not a valid TracePacket"));
    let bad_zlib = frame(&TracePacket {
        compressed_packets: Some(vec![0x78, 0x9c, 0xff, 0xff]),
        ..Default::default()
    });
    assert!(fatal(&bad_zlib).contains("cannot be inflated"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&good).unwrap();
    let gz = gz.finish().unwrap();
    std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
    let r = check(&path);
    assert!(r.fatal.is_some_and(|f| f.contains("gzip")));
    let r = check(&dir.path().join("missing"));
    assert!(r.fatal.is_some_and(|f| f.contains("cannot open")));
}

#[test]
fn the_binary_prints_json_and_exits_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.perfetto-trace");
    std::fs::write(&good, trace(&valid())).unwrap();
    let mut bad_packets = valid();
    bad_packets.push(end(400, SLICES));
    let bad = dir.path().join("bad.perfetto-trace");
    std::fs::write(&bad, trace(&bad_packets)).unwrap();
    let bin = env!("CARGO_BIN_EXE_sigmatrace-trace-check");
    let run =
        |args: &[&std::ffi::OsStr]| std::process::Command::new(bin).args(args).output().unwrap();
    let out = run(&[good.as_os_str(), "--json".as_ref()]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stats"]["slices"], 3);
    assert_eq!(v["ok"], true);
    let out = run(&[
        good.as_os_str(),
        "--expect-min".as_ref(),
        "slices=4".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let out = run(&[bad.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("[slice-nesting]"));
    let out = run(&[dir.path().join("none").as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
}

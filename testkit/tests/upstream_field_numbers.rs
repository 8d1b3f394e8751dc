//! The checker decodes with the timeline crate's messages — the same declarations the encoder is
//! tested byte-exact against — so a wrong field number there would pass both. This test is the
//! independent second source: every declared field, set and encoded, must carry upstream's
//! field number and wire type (`protos/perfetto/trace/**`, as listed in `testkit/README.md`),
//! and every enum constant upstream's value.

use prost::Message;
use sigmatrace_testkit::trace::proto::*;
use sigmatrace_testkit::trace::read::fields;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// The (field number, wire type) of every top-level field of `m`'s encoding, sorted.
fn layout(m: &impl Message) -> Vec<(u64, u8)> {
    let bytes = m.encode_to_vec();
    let mut out: Vec<(u64, u8)> = fields(&bytes)
        .map(|f| {
            let f = f.expect("prost output splits into fields");
            (f.number, f.wire)
        })
        .collect();
    out.sort_unstable();
    out
}

fn sorted(mut v: Vec<(u64, u8)>) -> Vec<(u64, u8)> {
    v.sort_unstable();
    v
}

#[test]
fn trace_packet_fields_are_upstreams() {
    let p = TracePacket {
        timestamp: Some(1),
        timestamp_clock_id: Some(1),
        trusted_packet_sequence_id: Some(1),
        interned_data: Some(InternedData::default()),
        sequence_flags: Some(1),
        incremental_state_cleared: Some(true),
        previous_packet_dropped: Some(true),
        trace_packet_defaults: Some(TracePacketDefaults::default()),
        clock_snapshot: Some(ClockSnapshot::default()),
        track_event: Some(TrackEvent::default()),
        track_descriptor: Some(TrackDescriptor::default()),
        compressed_packets: Some(vec![1]),
    };
    let expect = vec![
        (8, VARINT),
        (58, VARINT),
        (10, VARINT),
        (12, LEN),
        (13, VARINT),
        (41, VARINT),
        (42, VARINT),
        (59, LEN),
        (6, LEN),
        (11, LEN),
        (60, LEN),
        (50, LEN),
    ];
    assert_eq!(layout(&p), sorted(expect));
    let defaults = TracePacketDefaults {
        timestamp_clock_id: Some(1),
        track_event_defaults: Some(TrackEventDefaults {
            track_uuid: Some(1),
        }),
    };
    assert_eq!(layout(&defaults), vec![(11, LEN), (58, VARINT)]);
    let inner = defaults.track_event_defaults.unwrap();
    assert_eq!(layout(&inner), vec![(11, VARINT)]);
    let trace = Trace { packet: vec![p] };
    assert_eq!(layout(&trace), vec![(1, LEN)]);
}

#[test]
fn clock_and_interning_fields_are_upstreams() {
    let clock = Clock {
        clock_id: Some(1),
        timestamp: Some(1),
        is_incremental: Some(true),
        unit_multiplier_ns: Some(1),
    };
    let expect = vec![(1, VARINT), (2, VARINT), (3, VARINT), (4, VARINT)];
    assert_eq!(layout(&clock), expect);
    let snapshot = ClockSnapshot {
        clocks: vec![clock],
        primary_trace_clock: Some(6),
    };
    assert_eq!(layout(&snapshot), vec![(1, LEN), (2, VARINT)]);
    let name = InternedName {
        iid: Some(1),
        name: Some("n".into()),
    };
    assert_eq!(layout(&name), vec![(1, VARINT), (2, LEN)]);
    let interned = InternedData {
        event_categories: vec![name.clone()],
        event_names: vec![name.clone()],
        debug_annotation_names: vec![name],
    };
    assert_eq!(layout(&interned), vec![(1, LEN), (2, LEN), (3, LEN)]);
}

#[test]
fn track_event_fields_are_upstreams() {
    let annotation = DebugAnnotation {
        name_iid: Some(1),
        name: Some("a".into()),
        bool_value: Some(true),
        uint_value: Some(1),
        int_value: Some(-1),
        double_value: Some(0.5),
        string_value: Some("s".into()),
        pointer_value: Some(1),
    };
    let expect = vec![
        (1, VARINT),
        (10, LEN),
        (2, VARINT),
        (3, VARINT),
        (4, VARINT),
        (5, FIXED64),
        (6, LEN),
        (7, VARINT),
    ];
    assert_eq!(layout(&annotation), sorted(expect));
    let event = TrackEvent {
        r#type: Some(TYPE_COUNTER),
        track_uuid: Some(1),
        name_iid: Some(1),
        name: Some("e".into()),
        category_iids: vec![1],
        categories: vec!["c".into()],
        counter_value: Some(1),
        double_counter_value: Some(0.5),
        extra_counter_values: vec![3],
        extra_counter_track_uuids: vec![2],
        debug_annotations: vec![annotation],
        flow_ids: vec![1],
        terminating_flow_ids: vec![2],
    };
    let expect = vec![
        (9, VARINT),
        (11, VARINT),
        (10, VARINT),
        (23, LEN),
        (3, VARINT),
        (22, LEN),
        (30, VARINT),
        (44, FIXED64),
        (12, VARINT),
        (31, VARINT),
        (4, LEN),
        (47, FIXED64),
        (48, FIXED64),
    ];
    assert_eq!(layout(&event), sorted(expect));
}

#[test]
fn track_descriptor_fields_are_upstreams() {
    let process = ProcessDescriptor {
        pid: Some(1),
        cmdline: vec!["x".into()],
        process_name: Some("p".into()),
        process_labels: vec!["l".into()],
    };
    let expect = vec![(1, VARINT), (2, LEN), (6, LEN), (8, LEN)];
    assert_eq!(layout(&process), expect);
    let thread = ThreadDescriptor {
        pid: Some(1),
        tid: Some(2),
        thread_name: Some("t".into()),
    };
    assert_eq!(layout(&thread), vec![(1, VARINT), (2, VARINT), (5, LEN)]);
    let counter = CounterDescriptor {
        unit: Some(UNIT_COUNT),
        unit_name: Some("u".into()),
        unit_multiplier: Some(2),
        is_incremental: Some(true),
    };
    let expect = vec![(3, VARINT), (4, VARINT), (5, VARINT), (6, LEN)];
    assert_eq!(layout(&counter), expect);
    let descriptor = TrackDescriptor {
        uuid: Some(1),
        parent_uuid: Some(2),
        name: Some("n".into()),
        description: Some("d".into()),
        process: Some(process),
        thread: Some(thread),
        counter: Some(counter),
        child_ordering: Some(CHILD_ORDERING_EXPLICIT),
        sibling_order_rank: Some(1),
        sibling_merge_behavior: Some(MERGE_NONE),
        sibling_merge_key: Some("k".into()),
    };
    let expect = vec![
        (1, VARINT),
        (5, VARINT),
        (2, LEN),
        (14, LEN),
        (3, LEN),
        (4, LEN),
        (8, LEN),
        (11, VARINT),
        (12, VARINT),
        (15, VARINT),
        (16, LEN),
    ];
    assert_eq!(layout(&descriptor), sorted(expect));
}

#[test]
fn enum_values_are_upstreams() {
    let declared = [
        SEQ_INCREMENTAL_STATE_CLEARED as i64,
        SEQ_NEEDS_INCREMENTAL_STATE as i64,
        CLOCK_REALTIME as i64,
        CLOCK_BOOTTIME as i64,
        TYPE_SLICE_BEGIN as i64,
        TYPE_SLICE_END as i64,
        TYPE_INSTANT as i64,
        TYPE_COUNTER as i64,
        CHILD_ORDERING_EXPLICIT as i64,
        MERGE_NONE as i64,
        MERGE_BY_SIBLING_MERGE_KEY as i64,
        UNIT_COUNT as i64,
        UNIT_SIZE_BYTES as i64,
        MAX_CHILD_ORDERING as i64,
        MAX_SIBLING_MERGE_BEHAVIOR as i64,
        MAX_COUNTER_UNIT as i64,
    ];
    // Upstream, in the same order: SequenceFlags, BuiltinClock, TrackEvent.Type,
    // ChildTracksOrdering EXPLICIT, SiblingMergeBehavior NONE / BY_SIBLING_MERGE_KEY,
    // CounterDescriptor.Unit COUNT / SIZE_BYTES, and the largest value of the last three enums.
    assert_eq!(declared, [1, 2, 1, 6, 1, 2, 3, 4, 3, 2, 3, 2, 3, 3, 3, 3]);
}

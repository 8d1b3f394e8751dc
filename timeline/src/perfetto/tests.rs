//! Tests of the Perfetto encoder: hand-written packets against prost, incremental
//! timestamps, compressed blocks and repeats decoding to the plain packets.

use super::*;
use prost::Message;

fn decode(bytes: &[u8]) -> proto::Trace {
    proto::Trace::decode(bytes).expect("valid trace")
}

/// The packets of a trace, those of its `compressed_packets` blocks inflated in their place.
fn all_packets(bytes: &[u8]) -> Vec<TracePacket> {
    let mut packets = Vec::new();
    for p in decode(bytes).packet {
        match &p.compressed_packets {
            Some(z) => {
                let mut d = flate2::read::ZlibDecoder::new(&z[..]);
                let mut raw = Vec::new();
                std::io::Read::read_to_end(&mut d, &mut raw).unwrap();
                packets.extend(decode(&raw).packet);
            }
            None => packets.push(p),
        }
    }
    packets
}

#[test]
fn hand_encoded_events_match_prost() {
    let mut s = PerfettoSeq::new(7, false, 0);
    let n = s.name("RDMA_WRITE 4 KiB");
    let k = s.arg_key("wr_id");
    let k2 = s.arg_key("peer");
    let args = [(k, ArgValue::U64(300)), (k2, ArgValue::Str("rank 5"))];
    s.begin(
        1_700_000_000_123_456_789,
        4242,
        n,
        &Extra {
            args: &args,
            flows: &[0xdead_beef_0000_0001],
            terminating: &[],
        },
    );
    s.end(1_700_000_000_123_457_000, 4242, &Extra::NONE);
    s.counter(1_700_000_000_123_457_001, 99, -5);
    let bytes = s.take();
    let t = decode(&bytes);
    assert_eq!(t.packet.len(), 4); // sequence start + 3 events
    let p = &t.packet[1];
    let expect = TracePacket {
        timestamp: Some(1_700_000_000_123_456_789),
        trusted_packet_sequence_id: Some(7),
        track_event: Some(proto::TrackEvent {
            r#type: Some(proto::TYPE_SLICE_BEGIN),
            track_uuid: Some(4242),
            name_iid: Some(1),
            debug_annotations: vec![
                proto::DebugAnnotation {
                    name_iid: Some(1),
                    uint_value: Some(300),
                    ..Default::default()
                },
                proto::DebugAnnotation {
                    name_iid: Some(2),
                    string_value: Some("rank 5".into()),
                    ..Default::default()
                },
            ],
            flow_ids: vec![0xdead_beef_0000_0001],
            ..Default::default()
        }),
        interned_data: Some(proto::InternedData {
            event_names: vec![proto::InternedName {
                iid: Some(1),
                name: Some("RDMA_WRITE 4 KiB".into()),
            }],
            debug_annotation_names: vec![
                proto::InternedName {
                    iid: Some(1),
                    name: Some("wr_id".into()),
                },
                proto::InternedName {
                    iid: Some(2),
                    name: Some("peer".into()),
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(p, &expect);
    // Same fields as prost's encoding of the message (only their order differs): the
    // packets are exactly as long, so nothing is duplicated or left over.
    let mut framed = Vec::new();
    frame_packet(&mut framed, &expect);
    let start = {
        let mut f = Vec::new();
        frame_packet(&mut f, &t.packet[0]);
        f.len()
    };
    let mut ours = Vec::new();
    frame_packet(&mut ours, p);
    assert_eq!(ours, framed);
    let len = bytes[start + 1] as usize + 2;
    assert_eq!(len, framed.len());
    // Every packet (the small-packet path too) holds exactly the fields prost sees.
    let total: usize = t
        .packet
        .iter()
        .map(|p| {
            let mut f = Vec::new();
            frame_packet(&mut f, p);
            f.len()
        })
        .sum();
    assert_eq!(total, bytes.len());
    let end = t.packet[2].track_event.as_ref().unwrap();
    assert_eq!(end.r#type, Some(proto::TYPE_SLICE_END));
    assert_eq!(end.track_uuid, Some(4242));
    assert_eq!(t.packet[2].timestamp, Some(1_700_000_000_123_457_000));
    assert_eq!(
        t.packet[3].track_event.as_ref().unwrap().counter_value,
        Some(-5)
    );
}

#[test]
fn varint_words_match_the_loop() {
    let mut vs: Vec<u64> = (0..64)
        .flat_map(|b| [1u64 << b, (1u64 << b) - 1, (1u64 << b) + 1])
        .collect();
    vs.extend([0, 0x7f, 0x80, 0x3fff, 0x4000, 0x4000_0001, u64::MAX]);
    for v in vs {
        let mut want = Vec::new();
        put_varint(&mut want, v);
        match varint_word(v) {
            Some((w, n)) => {
                assert_eq!(n, want.len(), "{v:#x}");
                assert_eq!(&w.to_le_bytes()[..n], &want[..], "{v:#x}");
                assert!(v < 1 << 56);
            }
            None => assert!(v >= 1 << 56, "{v:#x}"),
        }
    }
}

/// Repeats of a track's packets (copied from the last one, compressed as a match at its
/// distance) decode to the same packets as the plain encoding: deltas of every varint
/// length (equal, partly equal, longer and shorter than the template's), names that change
/// on a track, counters and flows between them, blocks taken in between.
#[test]
fn repeated_packets_decode_to_the_plain_packets() {
    let run = |s: &mut PerfettoSeq| {
        let names = [s.name("WRITE 8 B"), s.name("inferred WRITE 8 B")];
        let mut out = Vec::new();
        let (mut ts, mut seed) = (1000u64, 0x5eed_u64);
        for i in 0..60_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly 0 or small deltas, now and then up to 2^50, twice 2^57 (9 varint
            // bytes: a repeat encodes them without the one-word copy).
            ts += match seed >> 61 {
                _ if i % 30_001 == 20 => 1 << 57,
                0..=3 => 0,
                4 | 5 => (seed >> 40) & 0x3fff,
                6 => (seed >> 20) & 0xff_ffff_ffff,
                _ => (seed >> 14) >> (seed & 63),
            };
            let track = (1 << 32) + (i % 300) * 7;
            let name = names[(i / 1000 % 2) as usize];
            match i % 4 {
                0 => s.begin(ts, track, name, &Extra::NONE),
                1 => s.end(ts, track, &Extra::NONE),
                2 if i % 40 == 2 => s.counter(ts, 9, (i % 5) as i64),
                2 if i % 40 == 6 => s.instant(
                    ts,
                    track,
                    name,
                    &Extra {
                        flows: &[i],
                        ..Extra::NONE
                    },
                ),
                _ => s.instant(ts, track, name, &Extra::NONE),
            }
            if i % 15_000 == 14_999 {
                out.push(s.take());
            }
        }
        out
    };
    same_packets(run);
}

#[test]
fn incremental_timestamps_are_deltas() {
    let mut s = PerfettoSeq::new(3, true, 1000);
    let n = s.name("x");
    s.begin(1500, 1, n, &Extra::NONE);
    s.end(1700, 1, &Extra::NONE);
    // An event earlier than the one before keeps its time: absolute, on BOOTTIME; the
    // deltas go on from the packet before it.
    s.instant(1600, 1, n, &Extra::NONE);
    s.instant(1750, 1, n, &Extra::NONE);
    assert_eq!(s.earlier_events(), 1);
    let t = decode(&s.take());
    let first = &t.packet[0];
    assert_eq!(
        first.sequence_flags,
        Some(proto::SEQ_INCREMENTAL_STATE_CLEARED)
    );
    let cs = first.clock_snapshot.as_ref().unwrap();
    assert_eq!(cs.clocks[0].is_incremental, Some(true));
    assert_eq!(cs.clocks[0].timestamp, Some(1000));
    let ts: Vec<_> = t.packet[1..]
        .iter()
        .map(|p| (p.timestamp.unwrap(), p.timestamp_clock_id))
        .collect();
    let boot = Some(proto::CLOCK_BOOTTIME);
    assert_eq!(ts, vec![(500, None), (200, None), (1600, boot), (50, None)]);
}

/// The same with compression (where packets are written from templates): an earlier event
/// is not written from its track's template, and the events after it still are.
#[test]
fn earlier_events_keep_their_time_in_compressed_sequences() {
    let mut s = PerfettoSeq::new(3, true, 1000).compressed();
    let n = s.name("x");
    let times = [1100u64, 1200, 1300, 1250, 1400, 1500, 1450, 1600];
    for &ts in &times {
        s.instant(ts, 1, n, &Extra::NONE);
    }
    assert_eq!(s.earlier_events(), 2);
    let packets = all_packets(&s.take());
    // Absolute times as a reader computes them: deltas add up, BOOTTIME packets are absolute.
    let mut clock = 1000u64;
    let mut got = Vec::new();
    for p in packets.iter().filter(|p| p.track_event.is_some()) {
        let ts = p.timestamp.unwrap();
        if p.timestamp_clock_id == Some(proto::CLOCK_BOOTTIME) {
            got.push(ts);
        } else {
            clock += ts;
            got.push(clock);
        }
    }
    assert_eq!(got, times);
}

#[test]
fn compressed_block_round_trips() {
    let mut s = PerfettoSeq::new(1, false, 0);
    let n = s.name("a");
    for i in 0..100 {
        s.instant(i, 5, n, &Extra::NONE);
    }
    let raw = s.take();
    let block = compress_block(&raw, 1);
    let outer = decode(&block);
    assert_eq!(outer.packet.len(), 1);
    let z = outer.packet[0].compressed_packets.as_ref().unwrap();
    let mut d = flate2::read::ZlibDecoder::new(&z[..]);
    let mut inner = Vec::new();
    std::io::Read::read_to_end(&mut d, &mut inner).unwrap();
    assert_eq!(inner, raw);
    assert!(block.len() < raw.len() / 3);
}

#[test]
fn compressed_sequences_decode_to_the_plain_packets() {
    let run = |s: &mut PerfettoSeq| {
        let n = s.name("WRITE 4 KiB");
        let k = s.arg_key("wr_id");
        let mut out = Vec::new();
        for i in 0..30_000u64 {
            let track = 100 + i % 5;
            s.begin(1000 + i * 37, track, n, &Extra::NONE);
            let args = [(k, ArgValue::U64(i))];
            let flows = [i << 3];
            s.instant(
                1010 + i * 37,
                track,
                n,
                &Extra {
                    args: &args,
                    flows: &flows,
                    terminating: &[],
                },
            );
            s.end(1020 + i * 37, track, &Extra::NONE);
            s.counter(1020 + i * 37, 7, (i % 9) as i64);
            if i % 10_000 == 9_999 {
                out.push(s.take());
            }
        }
        out
    };
    // Same packets (the compressed sequence orders small packets' fields differently).
    for (p, z) in same_packets(run) {
        assert!(z.len() * 4 < p.len(), "{} vs {}", z.len(), p.len());
    }
}

/// A lane's hand-written descriptor is the packet prost writes for its TrackDef.
#[test]
fn lane_descriptors_match_prost() {
    for (uuid, parent, key) in [
        (1u64, 2u64, "send"),
        (0x1_2345_6789, 0x7fff_ffff_ffff, "inferred arrivals"),
        (300, 1 << 40, "recv"),
    ] {
        let mut def = TrackDef::slices(uuid, Some(parent), key);
        def.kind = TrackKind::Slices {
            merge_key: Some(key.to_string()),
        };
        let mut want = Vec::new();
        frame_packet(&mut want, &descriptor_packet(&def));
        let mut got = Vec::new();
        lane_packet(&mut got, uuid, parent, key);
        assert_eq!(got, want, "{key}");
        let mut s = PerfettoSeq::new(3, false, 0);
        s.track(&def);
        s.lane(uuid, parent, key);
        let both = s.take();
        assert_eq!(
            both,
            [want.clone(), want].concat(),
            "track() and lane() write it"
        );
    }
}

/// Lanes of one parent and key declared one after another (copies of the last one's
/// descriptor with the new uuid) are the packets `lane_packet` writes, whatever their uuids'
/// lengths, with another key between them and blocks taken between them; compressed or not.
#[test]
fn lanes_copied_from_the_last_one_are_their_packets() {
    let uuids = [
        5u64,
        6,
        200,
        201,
        1 << 20,
        (1 << 20) + 1,
        7,
        u64::MAX,
        u64::MAX - 1,
        9,
    ];
    for compressed in [false, true] {
        let mut s = PerfettoSeq::new(3, false, 0);
        if compressed {
            s = s.compressed();
        }
        let (mut want, mut blocks) = (Vec::new(), Vec::new());
        for (i, &uuid) in uuids.iter().enumerate() {
            let key = if i == 6 { "recv" } else { "send" };
            s.lane(uuid, 77, key);
            lane_packet(&mut want, uuid, 77, key);
            if i == 3 {
                blocks.push(s.take());
            }
        }
        blocks.push(s.take());
        let got: Vec<u8> = if compressed {
            blocks.iter().flat_map(|b| inflated(b)).collect()
        } else {
            blocks.concat()
        };
        assert_eq!(got, want, "compressed: {compressed}");
    }
}

/// Packets written from templates — counters whose values change varint length, slices that
/// start or end flows on the same tracks as plain ones, on lanes whose uuids take 3 and 4
/// varint bytes, declared between them — decode to the plain packets.
#[test]
fn templated_packets_decode_to_the_plain_packets() {
    let run = |s: &mut PerfettoSeq| {
        let names = [s.name("WRITE 8 B"), s.name("inferred WRITE 8 B")];
        let mut out = Vec::new();
        let mut seed = 0x1234_u64;
        let mut ts = 1000u64;
        for i in 0..40_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ts += (seed >> 60) * (1 + (seed >> 40 & 0xfff));
            // Lanes 0..150 of two parents; every 500 events a new one (uuids below and above
            // 2^21: 3 and 4 varint bytes).
            let lane = (i / 500) % 150;
            let parent = 0x7000 + (i & 1);
            let track = if i % 3 == 0 { 0x1f_0000 } else { 0x20_0000 } + lane * 2 + (i & 1);
            if i % 500 < 2 {
                s.lane(track, parent, if i & 1 == 0 { "send" } else { "inferred" });
            }
            let name = names[(i & 1) as usize];
            let flow = [seed >> 8];
            let with_flow = Extra {
                flows: &flow,
                ..Extra::NONE
            };
            let ending = Extra {
                terminating: &flow,
                ..Extra::NONE
            };
            match seed >> 61 {
                0 | 1 => s.begin(ts, track, name, &Extra::NONE),
                2 => s.begin(ts, track, name, &with_flow),
                3 | 4 => s.end(ts, track, &Extra::NONE),
                5 => s.instant(ts, track, name, &ending),
                _ => {
                    // Values of 1 to 9 varint bytes, negative ones included.
                    let v = (seed >> (seed & 63)) as i64 - (i % 7 == 0) as i64 * (1 << 40);
                    s.counter(ts, 0x500 + i % 11, v);
                }
            }
            if i % 13_000 == 12_999 {
                out.push(s.take());
            }
        }
        out.push(s.take());
        out
    };
    same_packets(run);
}

/// Runs `run` on a plain and on a compressed sequence: each compressed block (one
/// `compressed_packets` packet) inflates to the plain block's packets, as many bytes.
/// Returns the (plain, compressed) blocks.
fn same_packets(run: impl Fn(&mut PerfettoSeq) -> Vec<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let plain = run(&mut PerfettoSeq::new(4, true, 1000));
    let packed = run(&mut PerfettoSeq::new(4, true, 1000).compressed());
    assert_eq!(plain.len(), packed.len());
    for (p, z) in plain.iter().zip(&packed) {
        assert_eq!(decode(z).packet.len(), 1);
        let inner = inflated(z);
        assert_eq!(decode(&inner), decode(p));
        assert_eq!(inner.len(), p.len());
    }
    plain.into_iter().zip(packed).collect()
}

/// A block fastz compresses poorly is written as zlib's stream when that is smaller: here a
/// counter whose (value, time step) pairs repeat in a cycle of 35 samples, longer than the
/// one earlier sample of its track fastz matches against (a match search finds whole cycles).
/// Dense blocks (the test above: every packet repeats its track's last) stay fastz's.
#[test]
fn poorly_compressed_blocks_fall_back_to_zlib() {
    let sparse = |s: &mut PerfettoSeq| {
        let mut ts = 1000u64;
        for i in 0..20_000usize {
            ts += [3, 17, 250, 9, 1000][i % 5];
            s.counter(ts, 7, [5, 0, 3, 0, 9, 1, 0][i % 7]);
        }
        vec![s.take()]
    };
    // zlib headers: fastz writes level "fastest" (0x78 0x01), flate2's level 3 "fast" (0x5e).
    for (p, z) in same_packets(sparse) {
        assert_eq!(zlib_header(&z), [0x78, 0x5e], "zlib's stream");
        assert!(z.len() * 40 < p.len(), "{} vs {}", z.len(), p.len());
    }
    let dense = |s: &mut PerfettoSeq| {
        let n = s.name("WRITE 8 B");
        for i in 0..20_000u64 {
            s.begin(1000 + i * 37, 100 + i % 4, n, &Extra::NONE);
            s.end(1020 + i * 37, 100 + i % 4, &Extra::NONE);
        }
        vec![s.take()]
    };
    for (p, z) in same_packets(dense) {
        let raw = inflated(&z);
        assert_eq!(zlib_header(&z), [0x78, 0x01], "fastz's stream");
        assert!(
            z.len() * super::FASTZ_POOR_RATIO < raw.len(),
            "{} vs {}",
            z.len(),
            p.len()
        );
    }
}

/// Blocks taken whole are retried with zlib below 6× (fastz's output more than a sixth of the
/// raw bytes), blocks of 64 KiB and more below 6.5×; a block slides from 5.5× on.
#[test]
fn zlib_retry_rule_takes_large_blocks_below_their_own_ratio() {
    use super::zlib::{dense_enough_to_slide, worth_zlib};
    use super::LARGE_BLOCK;
    let small = LARGE_BLOCK - 1;
    assert!(worth_zlib(small, small / 6 + 1));
    assert!(!worth_zlib(small, small / 6));
    assert!(worth_zlib(1000, 167));
    assert!(!worth_zlib(1000, 166));
    let large = 400 << 10;
    // HPC Challenge's whole blocks at 5.5-6.4×: retried; 6.6× and the 7× ones: kept.
    assert!(worth_zlib(large, large * 10 / 64));
    assert!(worth_zlib(large, large * 10 / 55));
    assert!(!worth_zlib(large, large * 10 / 65));
    assert!(!worth_zlib(large, large * 10 / 66));
    assert!(!worth_zlib(large, large / 7));
    assert!(worth_zlib(LARGE_BLOCK, LARGE_BLOCK * 10 / 64));
    assert!(!worth_zlib(LARGE_BLOCK, LARGE_BLOCK * 10 / 65));
    assert!(!worth_zlib(large, 0));
    // 5.8× (the synthetic sets' dense blocks) slides; 5.4× stays whole, to be retried.
    assert!(dense_enough_to_slide(large, large * 10 / 58));
    assert!(dense_enough_to_slide(large, large * 10 / 55));
    assert!(!dense_enough_to_slide(large, large * 10 / 54));
    assert!(dense_enough_to_slide(large, 0));
}

/// The first two bytes of the zlib stream in one framed `compressed_packets` packet.
fn zlib_header(block: &[u8]) -> [u8; 2] {
    let outer = decode(block);
    let data = outer.packet[0].compressed_packets.as_ref().unwrap();
    [data[0], data[1]]
}

/// The packets of one framed `compressed_packets` packet.
fn inflated(block: &[u8]) -> Vec<u8> {
    let outer = decode(block);
    let data = outer.packet[0].compressed_packets.as_ref().unwrap();
    let mut d = flate2::read::ZlibDecoder::new(&data[..]);
    let mut inner = Vec::new();
    std::io::Read::read_to_end(&mut d, &mut inner).unwrap();
    inner
}

/// Replayed batches whose plain repeats go on with the match in progress packet after packet
/// (slices on 300 tracks in turn, each at the time step of its track's last: written together,
/// `replay::run`) write the same bytes as the events fed to the sequence one by one — across
/// batch boundaries, blocks taken, runs broken by another time step, and deflate blocks that
/// fill in the middle of a run (runs make most of the 14 MB of packets).
#[test]
fn replayed_runs_encode_as_the_events_fed_directly() {
    use crate::groups::PerfettoGroups;
    let feed = |s: &mut dyn TraceSink, round: u64| {
        let name = s.name("WRITE 8 B");
        let mut ts = 1000 + round * 1_000_000_000;
        for cycle in 0..600u64 {
            for k in 0..300u64 {
                ts += 100 + (k == cycle % 300) as u64;
                s.begin(ts, (1 << 60) + k, name, &Extra::NONE);
                s.end(ts, (1 << 60) + k, &Extra::NONE);
            }
        }
    };
    let groups =
        || PerfettoGroups::new(vec![PerfettoSeq::new(1, true, 1000).compressed()], 1 << 26);
    let (want, got) = crate::batch::tests::direct_and_recorded(groups, 1, 2, feed, |_| {});
    assert!(want.len() > 1000);
    assert_eq!(got, want);
}

/// The blocks of `rounds` rounds of `feed` recorded and encoded batch by batch into one
/// compressed sequence whose group block is 512 KiB, and the plain packets of the same events
/// fed to a plain sequence; after each batch, the raw bytes the sequence holds are checked
/// against `max_held`. (blocks, plain packets).
fn recorded_blocks(
    rounds: u64,
    feed: impl Fn(&mut dyn TraceSink, u64),
    max_held: usize,
) -> (Vec<Vec<u8>>, Vec<u8>) {
    use crate::batch::Recorder;
    use crate::groups::PerfettoGroups;
    let mut plain = PerfettoSeq::new(4, true, 1000);
    for round in 0..rounds {
        feed(&mut plain, round);
    }
    let mut enc = PerfettoGroups::new(
        vec![PerfettoSeq::new(4, true, 1000).compressed()],
        512 << 10,
    );
    let mut rec = Recorder::new(1);
    let mut out = Vec::new();
    for round in 0..rounds {
        feed(&mut rec, round);
        let b = rec.take_batch();
        out.extend(enc.encode(&b));
        rec.give_back(b);
        let held = enc.seqs_mut()[0].buf.len();
        assert!(held <= max_held, "{held} raw bytes held");
    }
    out.extend(enc.take());
    let trace = decode(&out);
    let blocks = trace.packet.iter().map(|p| {
        let mut framed = Vec::new();
        p.encode(&mut framed).unwrap();
        let mut one = vec![TAG_PACKET];
        put_varint(&mut one, framed.len() as u64);
        one.extend(framed);
        one
    });
    (blocks.collect(), plain.take())
}

/// A dense sequence (slices on 128 lanes in turn, as a QP's WRs) slides: its blocks go on far
/// past the group block while the sequence holds less than it of raw bytes, and inflate to the
/// plain sequence's packets (the checksum of the bytes dropped on the way included); a sparse
/// one (a counter whose values repeat in a long cycle) does not, and its blocks are retried
/// with zlib as before.
#[test]
fn dense_blocks_slide_and_sparse_ones_stay_whole() {
    let dense = |s: &mut dyn TraceSink, round: u64| {
        let n = s.name("WRITE 8 B");
        let mut ts = 1000 + round * 1_000_000_000;
        for i in 0..20_000u64 {
            ts += 40 + (i % 97 == 0) as u64 * 13;
            s.end(ts, 1000 + (i + 64) % 128, &Extra::NONE);
            s.begin(ts, 1000 + i % 128, n, &Extra::NONE);
        }
    };
    // 30 rounds of 40 000 packets of ~14 bytes: ~17 MB raw.
    let (blocks, plain) = recorded_blocks(30, dense, small::SLIDE_AT + (1 << 20));
    let inflated_all: Vec<u8> = blocks.iter().flat_map(|b| inflated(b)).collect();
    assert_eq!(inflated_all.len(), plain.len());
    assert_eq!(decode(&inflated_all), decode(&plain));
    assert!(plain.len() > 16 << 20, "{}", plain.len());
    // Without sliding: a block per 512 KiB (32 or more).
    assert!(blocks.len() <= 8, "{} blocks", blocks.len());
    for b in &blocks {
        assert_eq!(zlib_header(b), [0x78, 0x01], "fastz's stream");
        assert!(inflated(b).len() <= small::SLID_BLOCK_RATIO * (512 << 10) + (1 << 20));
    }
    let sparse = |s: &mut dyn TraceSink, round: u64| {
        let mut ts = 1000 + round * 1_000_000_000;
        for i in 0..40_000usize {
            ts += [3, 17, 250, 9, 1000][i % 5];
            s.counter(ts, 7, [5, 0, 3, 0, 9, 1, 0][i % 7]);
        }
    };
    let (blocks, plain) = recorded_blocks(30, sparse, 2 << 20);
    let inflated_all: Vec<u8> = blocks.iter().flat_map(|b| inflated(b)).collect();
    assert_eq!(decode(&inflated_all), decode(&plain));
    assert!(
        blocks.len() >= plain.len() / (1 << 20),
        "{} blocks",
        blocks.len()
    );
    for b in &blocks[..blocks.len() - 1] {
        assert_eq!(zlib_header(b), [0x78, 0x5e], "zlib's stream");
        assert!(inflated(b).len() <= (512 << 10) + (1 << 20));
    }
}

/// The template table's layout ([`small::template_slot`]): a track's slice begin and end share
/// a cache line, a caller's consecutive tracks take consecutive lines (no two of 2 048 collide),
/// and tracks that differ in their high 32 bits only (two processes' lanes) do not share their
/// lines. Hashing each (track, type) alone met none of these (a cache miss per packet).
#[test]
fn template_slots_keep_a_tracks_slices_and_consecutive_tracks_together() {
    use small::{template_slot, TEMPLATE_SLOTS};
    let line = |track: u64, ty: i32| template_slot(track, ty) * 32 / 64;
    for base in [1u64, 0x7_0000_0000_0042, (5 << 36) + 17, u64::MAX - 4096] {
        let mut seen = std::collections::HashSet::new();
        for k in 0..2048u64 {
            let t = base.wrapping_add(k);
            let slots: Vec<usize> = (1..=4).map(|ty| template_slot(t, ty)).collect();
            assert!(slots.iter().all(|&s| s < TEMPLATE_SLOTS));
            assert_eq!(
                line(t, proto::TYPE_SLICE_BEGIN),
                line(t, proto::TYPE_SLICE_END)
            );
            for s in slots {
                assert!(seen.insert(s), "track {t:#x}: slot {s} taken twice");
            }
        }
    }
    // Lanes of processes 1 and 2 (uuid ranges 2^36 apart) with the same low bits.
    let (a, b) = ((1u64 << 36) + 40, (2u64 << 36) + 40);
    assert_ne!(
        line(a, proto::TYPE_SLICE_BEGIN),
        line(b, proto::TYPE_SLICE_BEGIN)
    );
}

/// The counter samples (time, track, value) of one incremental sequence's trace: counter
/// values and extra counter values, compressed blocks inflated, times resolved.
fn counter_samples(bytes: &[u8]) -> Vec<(u64, u64, i64)> {
    let mut now = 0;
    let mut samples = Vec::new();
    for p in all_packets(bytes) {
        if let Some(cs) = &p.clock_snapshot {
            now = cs.clocks[0].timestamp.unwrap();
            continue;
        }
        let ts = match (p.timestamp, p.timestamp_clock_id) {
            (Some(t), Some(proto::CLOCK_BOOTTIME)) => t,
            (Some(d), _) => {
                now += d;
                now
            }
            (None, _) => continue,
        };
        let Some(te) = &p.track_event else { continue };
        if te.r#type == Some(proto::TYPE_COUNTER) {
            samples.push((ts, te.track_uuid.unwrap(), te.counter_value.unwrap()));
        }
        assert_eq!(
            te.extra_counter_values.len(),
            te.extra_counter_track_uuids.len()
        );
        for (&u, &v) in te
            .extra_counter_track_uuids
            .iter()
            .zip(&te.extra_counter_values)
        {
            samples.push((ts, u, v));
        }
    }
    samples
}

/// Recorded counter samples on consecutive tracks at one time (a QP's outstanding WRs and
/// bytes in flight) are written as one COUNTER packet with an extra counter value: the trace
/// holds every sample of the events fed directly (which writes each on its own), in one packet
/// less per pair and fewer bytes than the same samples on tracks two apart (which never pair);
/// samples that do not pair (another time, the tracks the other way round, a value of 32 bits
/// or more, a negative one, a pair earlier than the packet before it) are written alone.
#[test]
fn recorded_counter_pairs_are_one_packet_with_the_same_samples() {
    use crate::groups::PerfettoGroups;
    let (lane, c) = (1u64 << 33, (1u64 << 32) + 10);
    let feed = |apart: u64| {
        move |s: &mut dyn TraceSink, round: u64| {
            let name = s.name("WRITE");
            let mut ts = 1_000 + round * 10_000_000;
            let mut r = 0x2545_f491_4f6c_dd1d_u64 ^ round;
            for i in 0..3_000i64 {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                ts += 1_000;
                s.begin(ts, lane, name, &Extra::NONE);
                s.counter(ts, c, (r % 64) as i64);
                s.counter(ts, c + apart, (r >> 8) as i64 % 100_000);
                ts += 300 + (i % 3) as u64;
                s.end(ts, lane, &Extra::NONE);
                match i % 50 {
                    0 => {
                        s.counter(ts, c, 0);
                        s.counter(ts + 1, c + apart, 5);
                    }
                    1 => {
                        s.counter(ts, c + apart, 1);
                        s.counter(ts, c, 2);
                    }
                    2 => {
                        s.counter(ts, c, 3);
                        s.counter(ts, c + apart, 1 << 32);
                    }
                    3 => {
                        s.counter(ts, c, -1);
                        s.counter(ts, c + apart, 4);
                    }
                    4 => {
                        // Earlier than the end before it: absolute times, two packets.
                        s.counter(ts - 100, c, 5);
                        s.counter(ts - 100, c + apart, 6);
                    }
                    _ => {}
                }
            }
        }
    };
    let groups =
        || PerfettoGroups::new(vec![PerfettoSeq::new(1, true, 1000).compressed()], 1 << 20);
    use crate::batch::tests::direct_and_recorded;
    let (want, got) = direct_and_recorded(groups, 1, 3, feed(1), |_| {});
    let (_, apart) = direct_and_recorded(groups, 1, 3, feed(2), |_| {});
    let (mut a, mut b) = (counter_samples(&want), counter_samples(&got));
    assert_eq!(a.len(), 3 * (3_000 * 2 + 5 * 60 * 2));
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    let packets = |bytes: &[u8]| all_packets(bytes).len();
    // Each round: 3 000 pairs become one packet each; 600 samples stay alone.
    assert_eq!(packets(&want) - packets(&got), 3 * 3_000);
    assert_eq!(packets(&apart), packets(&want));
    assert!(got.len() < apart.len(), "{} !< {}", got.len(), apart.len());
}

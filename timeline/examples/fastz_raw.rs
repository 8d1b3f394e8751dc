//! Compresses a file of framed trace packets (e.g. the inflated contents of a trace's
//! `compressed_packets`) with [`sigmatrace_timeline::fastz`], one packet at a time with the
//! same candidate keys the Perfetto encoder gives (track and event type), one compressor per
//! packet sequence, in 256 KiB streams;
//! prints raw and compressed bytes and the time taken. For tuning the compressor on real data:
//!
//!     cargo run --release -p sigmatrace-timeline --example fastz_raw -- packets.raw

#![forbid(unsafe_code)]

use sigmatrace_timeline::fastz::FastZ;

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut s) = (0u64, 0);
    while *i < b.len() {
        let c = b[*i];
        *i += 1;
        v |= ((c & 0x7f) as u64) << s;
        s += 7;
        if c < 0x80 {
            break;
        }
    }
    v
}

/// The packet's sequence id and (track uuid, event type) of its track event, if it has one.
fn key_of(p: &[u8]) -> (u64, Option<(u64, u64)>) {
    let (mut i, mut seq, mut key) = (0, 0, None);
    while i < p.len() {
        let tag = varint(p, &mut i);
        match tag & 7 {
            0 => {
                let v = varint(p, &mut i);
                if tag >> 3 == 10 {
                    seq = v;
                }
            }
            1 => i += 8,
            5 => i += 4,
            _ => {
                let l = varint(p, &mut i) as usize;
                if tag >> 3 == 11 {
                    let te = &p[i..i + l];
                    let (mut j, mut track, mut ty) = (0, 0, 0);
                    while j < te.len() {
                        let t = varint(te, &mut j);
                        match t & 7 {
                            0 => {
                                let v = varint(te, &mut j);
                                match t >> 3 {
                                    9 => ty = v,
                                    11 => track = v,
                                    _ => {}
                                }
                            }
                            1 => j += 8,
                            5 => j += 4,
                            _ => j += varint(te, &mut j) as usize,
                        }
                    }
                    key = Some((track, ty));
                }
                i += l;
            }
        }
    }
    (seq, key)
}

/// One sequence's compressor and its raw stream.
#[derive(Default)]
struct Stream {
    z: FastZ,
    buf: Vec<u8>,
}

/// One packet of the input: its sequence's stream index, its bytes and its candidate key.
struct Packet {
    stream: usize,
    start: usize,
    end: usize,
    key: u64,
    ty: usize,
}

/// Compresses the packets (the part to measure: `callgrind` its inclusive instruction count,
/// `compress_all`, divided by the packets). Returns the compressed bytes.
#[inline(never)]
fn compress_all(data: &[u8], packets: &[Packet], streams: &mut [Stream]) -> usize {
    let mut out = 0usize;
    for p in packets {
        let st = &mut streams[p.stream];
        let at = st.buf.len();
        st.buf.extend_from_slice(&data[p.start..p.end]);
        st.z.packet(&st.buf, at, p.key, p.ty);
        if st.buf.len() >= 256 << 10 {
            out += st.z.finish(&st.buf).len();
            st.buf.clear();
        }
    }
    for st in streams.iter_mut() {
        out += st.z.finish(&st.buf).len();
    }
    out
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: fastz_raw PACKETS");
    let data = std::fs::read(&path).expect("read");
    let mut ids: std::collections::BTreeMap<u64, usize> = Default::default();
    let mut packets = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let start = i;
        varint(&data, &mut i);
        let len = varint(&data, &mut i) as usize;
        let body = &data[i..i + len];
        i += len;
        let (seq, key) = key_of(body);
        let n = ids.len();
        let stream = *ids.entry(seq).or_insert(n);
        let (key, ty) = match key {
            Some((track, ty)) => ((track << 3 | ty) + 1, ty as usize),
            None => (0, 6),
        };
        packets.push(Packet {
            stream,
            start,
            end: i,
            key,
            ty,
        });
    }
    let mut streams: Vec<Stream> = (0..ids.len()).map(|_| Stream::default()).collect();
    let t0 = std::time::Instant::now();
    let out = compress_all(&data, &packets, &mut streams);
    let s = t0.elapsed().as_secs_f64();
    let n = packets.len();
    println!(
        "{n} packets, {} raw bytes -> {out} ({:.3} B/packet), {:.1} ns/packet",
        data.len(),
        out as f64 / n as f64,
        s * 1e9 / n as f64
    );
}

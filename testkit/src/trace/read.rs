//! Reading a trace file: gzip detection, the outer `Trace` framing (field 1, length-delimited,
//! one `TracePacket` each), inflating `compressed_packets` (zlib), and locating bytes the
//! declared messages do not understand (unknown fields).

use std::io::Read;
use std::path::Path;

use prost::Message;

use super::proto::{TracePacket, TrackDescriptor, TrackEvent};

/// Why a trace cannot be read at all (the checker's "fatal" outcome).
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("truncated or corrupt gzip input: {0}")]
    Gzip(std::io::Error),
    #[error("empty file: no TracePacket found")]
    Empty,
    #[error("not a Perfetto trace: the first byte is 0x{first:02x}, not a TracePacket tag (0x0a)")]
    NotATrace { first: u8 },
    #[error("corrupt Trace framing at byte offset {offset}: {what}")]
    Framing { offset: usize, what: String },
    #[error("packet {index} at byte offset {offset} is not a valid TracePacket ({reason})")]
    Packet {
        index: usize,
        offset: usize,
        reason: prost::DecodeError,
    },
    #[error("packet {index}: compressed_packets cannot be inflated ({reason})")]
    Inflate {
        index: usize,
        reason: std::io::Error,
    },
}

/// A trace file's bytes, inflated when the file is gzip-compressed.
pub fn load(path: &Path) -> Result<(Vec<u8>, bool), Unreadable> {
    let raw = std::fs::read(path).map_err(|source| Unreadable::Open {
        path: path.display().to_string(),
        source,
    })?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(Unreadable::Gzip)?;
        Ok((out, true))
    } else {
        Ok((raw, false))
    }
}

/// Inflates one `compressed_packets` payload (a zlib stream).
pub fn inflate(blob: &[u8], index: usize) -> Result<Vec<u8>, Unreadable> {
    let mut out = Vec::with_capacity(blob.len() * 4);
    flate2::read::ZlibDecoder::new(blob)
        .read_to_end(&mut out)
        .map_err(|reason| Unreadable::Inflate { index, reason })?;
    Ok(out)
}

/// One top-level field of a protobuf message.
pub struct Field<'a> {
    pub offset: usize,
    pub number: u64,
    pub wire: u8,
    /// The whole field, tag included.
    pub raw: &'a [u8],
    /// The payload of a length-delimited field.
    pub payload: Option<&'a [u8]>,
}

/// Splits `buf` into its top-level protobuf fields.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, pos: 0 }
}

fn varint(buf: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(pos)?;
        pos += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        if b < 0x80 {
            return Some((v, pos));
        }
    }
    None
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, Unreadable>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let start = self.pos;
        let fail = |what: &str| {
            Some(Err(Unreadable::Framing {
                offset: start,
                what: what.to_string(),
            }))
        };
        let Some((tag, p)) = varint(self.buf, start) else {
            return fail("the input ends inside a field tag");
        };
        let (number, wire) = (tag >> 3, (tag & 7) as u8);
        let (end, payload) = match wire {
            0 => match varint(self.buf, p) {
                Some((_, e)) => (e, None),
                None => return fail("the input ends inside a varint"),
            },
            1 => (p + 8, None),
            5 => (p + 4, None),
            2 => match varint(self.buf, p) {
                Some((len, q)) if (len as usize) <= self.buf.len() - q => {
                    (q + len as usize, Some(&self.buf[q..q + len as usize]))
                }
                Some((len, q)) => {
                    let have = self.buf.len() - q;
                    return fail(&format!(
                        "a field declares {len} bytes but only {have} remain"
                    ));
                }
                None => return fail("the input ends inside a length prefix"),
            },
            _ => {
                return fail(&format!(
                    "invalid tag 0x{tag:x} (field {number}, wire type {wire})"
                ))
            }
        };
        if number == 0 || end > self.buf.len() {
            return fail(&format!("invalid or truncated field (tag 0x{tag:x})"));
        }
        self.pos = end;
        Some(Ok(Field {
            offset: start,
            number,
            wire,
            raw: &self.buf[start..end],
            payload,
        }))
    }
}

/// A human name for a wire type.
pub fn wire_name(w: u8) -> &'static str {
    match w {
        0 => "varint",
        1 => "fixed64",
        2 => "length-delimited",
        5 => "fixed32",
        _ => "group",
    }
}

/// Describes the bytes of `payload` that `msg` (decoded from it) does not represent: prost skips
/// unknown fields, so a re-encoding shorter than the input means some were there. Fields are
/// tried one by one to name them; track events and descriptors are searched one level deeper.
pub fn not_understood(payload: &[u8], msg: &TracePacket) -> Vec<String> {
    if msg.encoded_len() == payload.len() {
        return Vec::new();
    }
    let mut out = locate::<TracePacket>(payload, "TracePacket");
    for f in fields(payload).flatten() {
        match (f.number, f.payload) {
            (11, Some(p)) => out.extend(locate::<TrackEvent>(p, "TracePacket.track_event")),
            (60, Some(p)) => {
                out.extend(locate::<TrackDescriptor>(p, "TracePacket.track_descriptor"))
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push(format!(
            "TracePacket re-encodes to {} bytes instead of {}: an unknown field nested deeper, \
             or a non-canonical encoding (packed repeated field, overlong varint, an optional \
             field written twice)",
            msg.encoded_len(),
            payload.len()
        ));
    }
    out
}

/// Fields of `bytes` (a message of type `M`) that `M` does not declare.
fn locate<M: Message + Default>(bytes: &[u8], path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields(bytes).flatten() {
        match M::decode(f.raw) {
            Ok(m) if m.encoded_len() == 0 => out.push(format!(
                "{path}: unknown field {} ({})",
                f.number,
                wire_name(f.wire)
            )),
            Ok(_) => {}
            Err(e) => out.push(format!("{path}: field {} does not decode: {e}", f.number)),
        }
    }
    out
}

//! Zero-copy reader with salvage of truncated or damaged logs.
//!
//! [`LogFile::open`] maps a file and validates its header; [`LogView`] does the same work on
//! any byte slice (used by the fuzzer). Chunks are independent and can be iterated in
//! parallel. Damage never aborts the whole read: a bad chunk or record is reported as a
//! [`ChunkIssue`] / [`RecordError`] naming the file offset, and everything valid is kept.

use std::path::{Path, PathBuf};

use crate::chunk::{ChunkHeader, CHUNK_HEADER_SIZE, CHUNK_MAGIC};
use crate::clock::TimestampSource;
use crate::compact::{ChunkDecoder, Decoded};
use crate::header::{
    tag, FileHeader, Losses, RankInfo, RawHeader, ENDIAN_MARKER, HEADER_SIZE, STRINGS_OFFSET,
};
use crate::records::{ClockSnapshot, DecodeError, FixedRecord, Record, RecordHeader, RecordKind};
use crate::writer::{MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};
use crate::{FORMAT_MAJOR, FORMAT_MINOR, MAGIC};

/// Fatal problems: the file cannot be read as a SigmaTrace log at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: file is {len} bytes, shorter than the {HEADER_SIZE}-byte header at offset 0 (not a SigmaTrace log, or truncated before the header was written)")]
    TooShort { path: PathBuf, len: u64 },
    #[error(
        "{path}: offset 0: expected magic \"SIGMATRC\", found {found:?} (not a SigmaTrace log)"
    )]
    BadMagic { path: PathBuf, found: String },
    #[error("{path}: offset 8: log format version {file_major}.{file_minor} is newer than this reader's {reader_major}.{reader_minor}; use a newer sigmatrace-convert")]
    NewerVersion {
        path: PathBuf,
        file_major: u16,
        file_minor: u16,
        reader_major: u16,
        reader_minor: u16,
    },
    #[error("{path}: offset {offset}: {what}")]
    BadHeader {
        path: PathBuf,
        offset: u64,
        what: String,
    },
}

/// A non-fatal problem found in one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkIssue {
    /// File offset of the chunk.
    pub offset: u64,
    pub message: String,
}

/// A record that could not be read; iteration of its chunk stops there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset}: {what}")]
pub struct RecordError {
    /// File offset of the bad record.
    pub offset: u64,
    pub what: String,
}

/// What salvage found while opening a log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SalvageReport {
    /// Corrupt or truncated chunks (their valid parts are still read).
    pub issues: Vec<ChunkIssue>,
    /// Committed bytes that are not in the file (it was truncated).
    pub lost_bytes: u64,
    /// Committed records that are not in the file.
    pub lost_records: u64,
    /// Chunks allocated but never initialised (normal when a process was killed).
    pub unused_chunks: u32,
    /// Whether the file ends inside a chunk.
    pub truncated: bool,
}

impl SalvageReport {
    /// True when nothing was lost or damaged.
    pub fn is_clean(&self) -> bool {
        self.issues.is_empty() && self.lost_bytes == 0 && self.lost_records == 0
    }
}

/// A readable chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// File offset of the chunk header.
    pub offset: u64,
    pub header: ChunkHeader,
    /// Record bytes that can be read (committed bytes, clamped to the file and capacity).
    pub readable: u32,
}

/// A parsed log over borrowed bytes.
#[derive(Debug)]
pub struct LogView<'a> {
    bytes: &'a [u8],
    path: PathBuf,
    header: FileHeader,
    chunks: Vec<ChunkInfo>,
    salvage: SalvageReport,
}

/// A record as handed to consumers: its file offset, kind id and bytes (header included).
///
/// A compact record (format 2, see [`crate::compact`]) is handed out as the full record it
/// stands for: `kind` is the full kind, [`RawRecord::record_bytes`] the full record's bytes
/// (expanded in its chunk's context), and `bytes` the compact bytes as they are in the file.
/// For every other record `record_bytes` is `bytes`.
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    pub offset: u64,
    pub kind: u16,
    /// The record's bytes in the file.
    pub bytes: &'a [u8],
    /// The full record of a compact one (`len` 0 otherwise).
    full: Full,
}

/// Storage for an expanded record (8-aligned, up to a cache line).
#[derive(Clone, Copy, Debug, Default)]
struct Full {
    len: u8,
    words: [u64; 8],
}

impl<'a> RawRecord<'a> {
    /// A record read as it is in the file.
    #[inline(always)]
    pub fn new(offset: u64, kind: u16, bytes: &'a [u8]) -> RawRecord<'a> {
        RawRecord {
            offset,
            kind,
            bytes,
            full: Full::default(),
        }
    }

    /// Makes this the record `bytes` at `offset` as it is in the file (the expanded storage
    /// is left as it is, marked unused): [`RawRecord::new`] without writing all of it.
    #[inline(always)]
    pub(crate) fn set_raw(&mut self, offset: u64, kind: u16, bytes: &'a [u8]) {
        self.offset = offset;
        self.kind = kind;
        self.bytes = bytes;
        self.full.len = 0;
    }

    /// Makes this the compact record at `offset` (its file `bytes`) expanded to `full` (the
    /// expanded storage past it is left as it is).
    #[inline(always)]
    pub(crate) fn set_expanded<R: FixedRecord>(&mut self, offset: u64, bytes: &'a [u8], full: &R) {
        self.offset = offset;
        self.kind = R::KIND as u16;
        self.bytes = bytes;
        self.full.len = size_of::<R>() as u8;
        bytemuck::cast_slice_mut::<u64, u8>(&mut self.full.words)[..size_of::<R>()]
            .copy_from_slice(bytemuck::bytes_of(full));
    }

    /// The bytes of the record of kind `kind` (the expanded full record of a compact one;
    /// 8-aligned when it is).
    #[inline(always)]
    pub fn record_bytes(&self) -> &[u8] {
        if self.full.len == 0 {
            self.bytes
        } else {
            &bytemuck::cast_slice::<u64, u8>(&self.full.words)[..self.full.len as usize]
        }
    }

    /// Whether the record was compact in the file.
    pub fn is_compact(&self) -> bool {
        self.full.len != 0
    }

    /// The record's `ts` (every full record has it at offset 8; an expanded one is whole, at
    /// least its header and time: its second word).
    #[inline(always)]
    pub fn ts(&self) -> Option<u64> {
        if self.full.len != 0 {
            debug_assert!(self.full.len >= 16);
            return Some(self.full.words[1]);
        }
        let b = self.bytes.get(8..16)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }

    /// The full record of a compact one as 8-byte words (its first [`RawRecord::record_bytes`]
    /// bytes are the record of kind `kind`), so that a reader can view it as its struct
    /// without a length or alignment check; `None` for a record as it is in the file.
    #[inline(always)]
    pub fn expanded_words(&self) -> Option<&[u64; 8]> {
        (self.full.len != 0).then_some(&self.full.words)
    }

    /// Decodes the record (zero-copy for records that are not compact in the file).
    pub fn decode(&self) -> Result<Record<'_>, DecodeError> {
        Record::decode(self.record_bytes())
    }
}

/// Iterator over one chunk's records, in append order, as consumers see them: compact
/// records expanded, their context records (`TimeBase`, `SlotBind`) consumed.
pub struct RecordIter<'a> {
    raw: RawIter<'a>,
    context: ChunkDecoder,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RawRecord<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let r = match self.raw.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            match self.context.accept(r.offset, r.kind, r.bytes) {
                Decoded::Record(r) => return Some(Ok(r)),
                Decoded::Context => continue,
                Decoded::Damaged(what) => {
                    self.raw.done = true;
                    return Some(Err(RecordError {
                        offset: r.offset,
                        what,
                    }));
                }
            }
        }
    }
}

/// Iterator over one chunk's records as they are in the file.
struct RawIter<'a> {
    bytes: &'a [u8],
    base: u64,
    pos: usize,
    done: bool,
}

impl<'a> Iterator for RawIter<'a> {
    type Item = Result<RawRecord<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        let offset = self.base + self.pos as u64;
        let rest = &self.bytes[self.pos..];
        let fail = |what: String, done: &mut bool| {
            *done = true;
            Some(Err(RecordError { offset, what }))
        };
        if rest.len() < 8 {
            return fail(
                format!(
                    "expected an 8-byte record header, {} bytes left",
                    rest.len()
                ),
                &mut self.done,
            );
        }
        let hdr: RecordHeader = bytemuck::pod_read_unaligned(&rest[..8]);
        let len = hdr.len as usize;
        if len < 8 || !len.is_multiple_of(8) || len > rest.len() {
            return fail(
                format!(
                    "record kind {} declares length {len} (expected a multiple of 8, at least 8, at most {})",
                    hdr.kind,
                    rest.len()
                ),
                &mut self.done,
            );
        }
        if let Some(fixed) = RecordKind::from_id(hdr.kind).and_then(|k| k.fixed_size()) {
            if fixed != len {
                return fail(
                    format!(
                        "record kind {} ({}) declares length {len}, expected {fixed}",
                        hdr.kind,
                        RecordKind::from_id(hdr.kind)
                            .map(|k| k.name())
                            .unwrap_or("?")
                    ),
                    &mut self.done,
                );
            }
        }
        self.pos += len;
        Some(Ok(RawRecord::new(offset, hdr.kind, &rest[..len])))
    }
}

impl<'a> LogView<'a> {
    /// Parses the header and chunk table of a log held in `bytes`; `path` names it in errors.
    pub fn parse(bytes: &'a [u8], path: &Path) -> Result<LogView<'a>, ReadError> {
        let header = parse_header(bytes, path)?;
        let (chunks, salvage) = scan_chunks(bytes, &header);
        Ok(LogView {
            bytes,
            path: path.to_owned(),
            header,
            chunks,
            salvage,
        })
    }

    /// The decoded file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// The readable chunks, in allocation-index order (one per index).
    pub fn chunks(&self) -> &[ChunkInfo] {
        &self.chunks
    }

    /// What the writer could not record: the header's dropped counter and, in logs of format
    /// ≥ 1.1, the count per record kind and the time of the first loss.
    pub fn losses(&self) -> Losses {
        Losses::from_page(&self.bytes[..HEADER_SIZE])
    }

    /// What salvage found.
    pub fn salvage(&self) -> &SalvageReport {
        &self.salvage
    }

    /// The path used in messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records of one chunk as they are in the file, compact and context records included
    /// (for dumps and for counting against the commit word; consumers want [`Self::records`]).
    pub fn raw_records(
        &self,
        chunk: &ChunkInfo,
    ) -> impl Iterator<Item = Result<RawRecord<'a>, RecordError>> {
        self.records(chunk).raw
    }

    /// Records of one chunk, in append order (compact records expanded, see [`RecordIter`]).
    pub fn records(&self, chunk: &ChunkInfo) -> RecordIter<'a> {
        let start = chunk.offset as usize + CHUNK_HEADER_SIZE;
        RecordIter {
            raw: RawIter {
                bytes: &self.bytes[start..start + chunk.readable as usize],
                base: start as u64,
                pos: 0,
                done: false,
            },
            context: ChunkDecoder::new(),
        }
    }
}

/// A memory-mapped log file.
pub struct LogFile {
    // `view` borrows from `map`; declared first so it drops first.
    view: LogView<'static>,
    _map: Option<memmap2::Mmap>,
}

impl LogFile {
    /// Maps and parses a log file. The file may still be growing; what was committed when it
    /// was mapped is read.
    pub fn open(path: &Path) -> Result<LogFile, ReadError> {
        let io = |source| ReadError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_SIZE as u64 {
            return Err(ReadError::TooShort {
                path: path.to_owned(),
                len,
            });
        }
        // SAFETY: the mapping is read-only; a writer still appending only grows committed
        // regions, which the reader reads through acquire-published lengths taken at parse
        // time. Truncation by another process could fault; logs are not truncated in place.
        let map =
            unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file) }.map_err(io)?;
        // SAFETY: the slice points into `map`, which is stored next to the view and outlives
        // it (the view is dropped first); the Mmap's memory does not move when moved.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) };
        let view = LogView::parse(bytes, path)?;
        Ok(LogFile {
            view,
            _map: Some(map),
        })
    }

    /// The parsed view.
    pub fn view(&self) -> &LogView<'_> {
        &self.view
    }
}

impl std::ops::Deref for LogFile {
    type Target = LogView<'static>;
    fn deref(&self) -> &Self::Target {
        &self.view
    }
}

/// The fixed part of the header page, checked: size, magic, byte order, version, header and
/// chunk size.
fn raw_header(bytes: &[u8], path: &Path) -> Result<RawHeader, ReadError> {
    let bad = |offset: u64, what: String| ReadError::BadHeader {
        path: path.to_owned(),
        offset,
        what,
    };
    if bytes.len() < HEADER_SIZE {
        if bytes.len() >= 8 && bytes[..8] != MAGIC {
            return Err(ReadError::BadMagic {
                path: path.to_owned(),
                found: String::from_utf8_lossy(&bytes[..8]).into_owned(),
            });
        }
        return Err(ReadError::TooShort {
            path: path.to_owned(),
            len: bytes.len() as u64,
        });
    }
    let raw: RawHeader = bytemuck::pod_read_unaligned(&bytes[..STRINGS_OFFSET]);
    if raw.magic != MAGIC {
        return Err(ReadError::BadMagic {
            path: path.to_owned(),
            found: String::from_utf8_lossy(&raw.magic).into_owned(),
        });
    }
    if raw.endian != ENDIAN_MARKER {
        return Err(bad(
            12,
            format!(
                "expected endianness marker {ENDIAN_MARKER:#010x}, found {:#010x} (log written on a machine of the other byte order)",
                raw.endian
            ),
        ));
    }
    if raw.major > FORMAT_MAJOR {
        return Err(ReadError::NewerVersion {
            path: path.to_owned(),
            file_major: raw.major,
            file_minor: raw.minor,
            reader_major: FORMAT_MAJOR,
            reader_minor: FORMAT_MINOR,
        });
    }
    if raw.major == 0 {
        return Err(bad(8, "expected format major version >= 1, found 0".into()));
    }
    if raw.header_size as usize != HEADER_SIZE {
        return Err(bad(
            16,
            format!(
                "expected header size {HEADER_SIZE}, found {}",
                raw.header_size
            ),
        ));
    }
    let cs = raw.chunk_size;
    if !cs.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&cs) {
        return Err(bad(
            20,
            format!("expected a power-of-two chunk size between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}, found {cs}"),
        ));
    }
    Ok(raw)
}

fn parse_header(bytes: &[u8], path: &Path) -> Result<FileHeader, ReadError> {
    let raw = raw_header(bytes, path)?;
    let bad = |offset: u64, what: String| ReadError::BadHeader {
        path: path.to_owned(),
        offset,
        what,
    };
    let cs = raw.chunk_size;
    let ts_source = TimestampSource::from_u8(raw.ts_source)
        .ok_or_else(|| bad(25, format!("unknown timestamp source {}", raw.ts_source)))?;
    let opt = |v: i32| (v >= 0).then_some(v as u32);
    let mut h = FileHeader {
        major: raw.major,
        minor: raw.minor,
        header_size: raw.header_size,
        chunk_size: cs,
        pointer_size: raw.pointer_size,
        ts_source,
        flags: raw.flags,
        pid: raw.pid,
        ppid: raw.ppid,
        rank: RankInfo {
            rank: opt(raw.rank),
            local_rank: opt(raw.local_rank),
            world_size: opt(raw.world_size),
            source: String::new(),
        },
        tsc_hz: raw.tsc_hz,
        start: ClockSnapshot {
            hdr: RecordHeader::of::<ClockSnapshot>(0),
            ts: raw.start[0],
            monotonic: raw.start[1],
            monotonic_raw: raw.start[2],
            boottime: raw.start[3],
            realtime: raw.start[4],
            ts_after: raw.start[5],
        },
        boot_id: raw.boot_id,
        hostname: String::new(),
        cmdline: Vec::new(),
        exe: String::new(),
        attrs: Vec::new(),
        dropped: raw.dropped,
        chunks_allocated: raw.chunks_allocated,
    };
    header_strings(bytes, path, &mut h)?;
    Ok(h)
}

/// The tagged strings after the fixed part (hostname, command line, executable, rank source,
/// attributes) into `h`; unknown tags (newer minor versions) are skipped.
fn header_strings(bytes: &[u8], path: &Path, h: &mut FileHeader) -> Result<(), ReadError> {
    let mut pos = STRINGS_OFFSET;
    while pos + 4 <= HEADER_SIZE {
        let t = u16::from_ne_bytes([bytes[pos], bytes[pos + 1]]);
        let n = u16::from_ne_bytes([bytes[pos + 2], bytes[pos + 3]]) as usize;
        if t == tag::END {
            break;
        }
        if pos + 4 + n > HEADER_SIZE {
            return Err(ReadError::BadHeader {
                path: path.to_owned(),
                offset: pos as u64,
                what: format!("header string (tag {t}) of {n} bytes runs past the header page"),
            });
        }
        let s = String::from_utf8_lossy(&bytes[pos + 4..pos + 4 + n]).into_owned();
        match t {
            tag::HOSTNAME => h.hostname = s,
            tag::CMDLINE => h.cmdline = s.split('\0').map(str::to_owned).collect(),
            tag::EXE => h.exe = s,
            tag::RANK_SOURCE => h.rank.source = s,
            tag::ATTR => h.attrs.push(s),
            _ => {} // newer minor versions may add tags
        }
        pos += 4 + n;
    }
    Ok(())
}

fn scan_chunks(bytes: &[u8], header: &FileHeader) -> (Vec<ChunkInfo>, SalvageReport) {
    let cs = header.chunk_size as usize;
    let mut chunks = Vec::new();
    let mut rep = SalvageReport::default();
    let mut offset = HEADER_SIZE;
    while offset < bytes.len() {
        let avail = bytes.len() - offset;
        if avail < CHUNK_HEADER_SIZE {
            if bytes[offset..].iter().any(|&b| b != 0) {
                rep.truncated = true;
                rep.issues.push(ChunkIssue {
                    offset: offset as u64,
                    message: format!(
                        "file ends {avail} bytes into a chunk header (expected {CHUNK_HEADER_SIZE}); its records are lost"
                    ),
                });
            }
            break;
        }
        let ch: ChunkHeader =
            bytemuck::pod_read_unaligned(&bytes[offset..offset + CHUNK_HEADER_SIZE]);
        let next = offset + cs;
        if ch.magic == 0 {
            rep.unused_chunks += 1;
            offset = next;
            continue;
        }
        if ch.magic != CHUNK_MAGIC {
            rep.issues.push(ChunkIssue {
                offset: offset as u64,
                message: format!(
                    "expected chunk magic \"CHNK\", found {:?}; chunk skipped",
                    String::from_utf8_lossy(&ch.magic.to_le_bytes())
                ),
            });
            offset = next;
            continue;
        }
        let capacity = (cs - CHUNK_HEADER_SIZE) as u32;
        let mut readable = ch.committed_bytes();
        if ch.capacity != capacity || readable > capacity {
            rep.issues.push(ChunkIssue {
                offset: offset as u64,
                message: format!(
                    "chunk header claims capacity {} and {} committed bytes, expected capacity {capacity}; reading at most {capacity} bytes",
                    ch.capacity, readable
                ),
            });
            readable = readable.min(capacity);
        }
        let in_file = (avail - CHUNK_HEADER_SIZE).min(u32::MAX as usize) as u32;
        let mut info = ChunkInfo {
            offset: offset as u64,
            header: ch,
            readable,
        };
        if readable > in_file {
            rep.truncated = true;
            // Keep whole records only; count what is gone.
            let start = offset + CHUNK_HEADER_SIZE;
            let mut iter = RawIter {
                bytes: &bytes[start..start + in_file as usize],
                base: start as u64,
                pos: 0,
                done: false,
            };
            let mut kept = 0u64;
            while let Some(Ok(_)) = iter.next() {
                kept += 1;
            }
            let good = if iter.done {
                iter.pos
            } else {
                iter.pos.min(in_file as usize)
            } as u32;
            rep.lost_bytes += (readable - good) as u64;
            rep.lost_records += (ch.committed_records() as u64).saturating_sub(kept);
            rep.issues.push(ChunkIssue {
                offset: offset as u64,
                message: format!(
                    "file truncated: chunk committed {readable} bytes ({} records) but only {good} bytes ({kept} records) are present",
                    ch.committed_records()
                ),
            });
            info.readable = good;
        }
        chunks.push(info);
        offset = next;
    }
    (one_copy_per_index(chunks, cs), rep)
}

/// The chunks in allocation-index order (a ring slot holds a chunk away from its final
/// position, FORMAT.md "Rings"), one per index: a chunk drained from a ring slot by a process
/// killed before the slot was reset is in the file twice — keep the copy with more readable
/// bytes, else the one at its final position.
fn one_copy_per_index(mut chunks: Vec<ChunkInfo>, cs: usize) -> Vec<ChunkInfo> {
    let at_home = |c: &ChunkInfo| c.offset == (HEADER_SIZE + c.header.index as usize * cs) as u64;
    chunks.sort_by_key(|c| (c.header.index, std::cmp::Reverse((c.readable, at_home(c)))));
    chunks.dedup_by_key(|c| c.header.index);
    chunks
}

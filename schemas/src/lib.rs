//! SigmaTrace's binary event-log format.
//!
//! A log is a 4096-byte header page followed by fixed-size chunks; each chunk belongs to one
//! writer thread and holds a sequence of records. See `schemas/FORMAT.md` for the byte-level
//! specification. This crate is the only definition of the format: the interposer writes
//! with [`writer`], the converter reads with [`reader`].

pub mod chunk;
pub mod clock;
pub mod compact;
pub mod header;
pub mod reader;
pub mod records;
pub mod reserve;
pub mod ring;
pub mod skew;
pub mod writer;

pub use chunk::{ChunkHeader, CHUNK_HEADER_SIZE};
pub use clock::{TimestampSource, Timestamper};
pub use header::{FileHeader, Losses, RankInfo, HEADER_SIZE};
pub use reader::{
    ChunkInfo, ChunkIssue, LogFile, LogView, RawRecord, ReadError, RecordError, SalvageReport,
};
pub use records::*;
pub use reserve::Reserved;
pub use ring::{Drained, Dumped};
pub use writer::{ChunkWriter, LogWriter, WriteError, WriterOptions, DEFAULT_CHUNK_SIZE};

/// File magic, at offset 0.
pub const MAGIC: [u8; 8] = *b"SIGMATRC";
/// Format major version: readers reject files with a larger major.
pub const FORMAT_MAJOR: u16 = 2;
/// Format minor version: additions only (new record kinds, new header tags).
pub const FORMAT_MINOR: u16 = 1;

//! Chunk header layout, shared by writer and reader.

use bytemuck::{Pod, Zeroable};

/// Bytes reserved at the start of every chunk.
pub const CHUNK_HEADER_SIZE: usize = 64;
/// "CHNK" as a little-endian u32; written last (release) when a chunk is initialised.
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"CHNK");
/// Offset of the commit word: low 32 bits = committed record bytes, high 32 bits = records.
pub const COMMIT_OFFSET: usize = 16;

/// The first 64 bytes of a chunk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ChunkHeader {
    pub magic: u32,
    /// Allocation order within the file.
    pub index: u32,
    /// Kernel thread id of the owning writer.
    pub tid: u32,
    pub pid: u32,
    /// Commit word, published with release ordering after each append.
    pub commit: u64,
    /// Bytes available for records after this header.
    pub capacity: u32,
    pub _reserved: [u32; 9],
}

const _: () = assert!(std::mem::size_of::<ChunkHeader>() == CHUNK_HEADER_SIZE);
const _: () = assert!(std::mem::offset_of!(ChunkHeader, commit) == COMMIT_OFFSET);

impl ChunkHeader {
    /// Committed record bytes.
    pub fn committed_bytes(&self) -> u32 {
        self.commit as u32
    }
    /// Committed record count.
    pub fn committed_records(&self) -> u32 {
        (self.commit >> 32) as u32
    }
}

//! In-place records: [`ChunkWriter::reserve`] hands out a slot of the chunk to fill, published
//! by [`Reserved::commit`] (the full record, never compacted).

use crate::chunk::CHUNK_HEADER_SIZE;
use crate::records::FixedRecord;
use crate::writer::{publish, ChunkWriter};

impl ChunkWriter {
    /// Reserves room for one fixed-size record at the end of the chunk, to be filled in place
    /// (no copy) and published with [`Reserved::commit`]. The slot's bytes are whatever the
    /// chunk held (zero, or a record of an earlier reservation that was never committed):
    /// every field must be written. Nothing is visible to readers before `commit`; dropping
    /// the slot uncommitted leaves the log unchanged. `None` (and one drop counted) when the
    /// size cap is reached or the log failed, as for [`ChunkWriter::append`].
    #[inline(always)]
    pub fn reserve<R: FixedRecord>(&mut self) -> Option<Reserved<'_, R>> {
        let size = std::mem::size_of::<R>() as u32;
        if self.pos() + size > self.cap && !self.roll(R::KIND as u16) {
            return None;
        }
        // SAFETY: as in `append`: the slot lies inside our exclusively owned chunk, is 8-aligned
        // (records are multiples of 8 bytes from an aligned chunk start) and R is Pod, so any
        // bytes it holds are a valid R.
        let rec =
            unsafe { &mut *(self.base.add(CHUNK_HEADER_SIZE + self.pos() as usize) as *mut R) };
        Some(Reserved {
            writer_commit: &mut self.commit,
            base: self.base,
            rec,
        })
    }
}

/// A record slot reserved by [`ChunkWriter::reserve`]: fill it through `Deref`/`DerefMut`,
/// then [`commit`](Reserved::commit) it. It borrows the writer, so nothing else can be
/// appended meanwhile.
pub struct Reserved<'a, R: FixedRecord> {
    writer_commit: &'a mut u64,
    base: *mut u8,
    rec: &'a mut R,
}

impl<R: FixedRecord> Reserved<'_, R> {
    /// Publishes the record: sets its header's kind and length (its `aux` is the caller's)
    /// and makes it visible to readers with one release store.
    #[inline(always)]
    pub fn commit(self) {
        let size = std::mem::size_of::<R>() as u32;
        // SAFETY: the record starts with its RecordHeader, whose first u32 is kind | len << 16.
        unsafe {
            std::ptr::write(
                self.rec as *mut R as *mut u32,
                (R::KIND as u32) | (size << 16),
            )
        };
        publish(self.writer_commit, self.base, size);
    }
}

impl<R: FixedRecord> std::ops::Deref for Reserved<'_, R> {
    type Target = R;
    #[inline(always)]
    fn deref(&self) -> &R {
        self.rec
    }
}

impl<R: FixedRecord> std::ops::DerefMut for Reserved<'_, R> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut R {
        self.rec
    }
}

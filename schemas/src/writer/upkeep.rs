//! The background thread's side of a [`LogWriter`]: draining the threads' rings, handing back
//! the memory of finished chunks and preparing chunks ahead (split out of `writer.rs`).

use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{LogWriter, MADV_POPULATE_WRITE};
use crate::header::{CHUNKS_OFFSET, HEADER_SIZE};
use crate::ring::{Drained, Ring};

impl LogWriter {
    /// Copies the finished chunks of every thread's ring to their final positions and frees
    /// their slots (see [`crate::ring`]); drops from the page cache what the previous call
    /// wrote (its writeback was started then). Meant for one background thread. A write
    /// error (disk full) marks the log failed: the chunk stays in its ring slot, readable,
    /// and the threads meet the failure at their next chunk.
    pub fn drain(&self) -> Drained {
        let s = &*self.shared;
        let rings: Vec<Arc<Ring>> = s.rings.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut written = s.written.lock().unwrap_or_else(|p| p.into_inner());
        for &(off, len) in written.iter() {
            // SAFETY: plain advisory syscall on our own descriptor.
            unsafe {
                libc::posix_fadvise(
                    s.file.as_raw_fd(),
                    off as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
        }
        written.clear();
        s.drain_rings(&rings, &mut written)
    }

    /// Whether the drainer copies ring chunks with direct I/O (asked with
    /// `WriterOptions::direct_io`, the file system has it, and no direct write was refused).
    pub fn drains_direct(&self) -> bool {
        self.shared.direct.as_ref().is_some_and(|d| d.is_on())
    }

    /// Hands back the memory of every chunk whose writer moved on since the last call: its
    /// pages leave the process's mapping (`MADV_DONTNEED`; the data stays in the file and the
    /// page cache, so readers and salvage after a kill see it unchanged), are written back
    /// (`sync_file_range`) and dropped from the page cache (`POSIX_FADV_DONTNEED`). So the
    /// process's resident memory does not grow with the log. Meant for a background thread
    /// (it waits for the writeback); returns how many chunks it released.
    pub fn release_retired(&self) -> u32 {
        let s = &*self.shared;
        let mut released = 0;
        for (w, word) in s.retired.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let index = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let offset = HEADER_SIZE + index * s.chunk_size as usize;
                let len = s.chunk_size as usize;
                // SAFETY: the range is a whole chunk inside the live mapping whose writer has
                // moved on (nobody writes it any more); dropping its page-table entries keeps
                // the data (shared file mapping). The file calls only name our descriptor.
                unsafe {
                    libc::madvise(
                        s.map.as_mut_ptr().add(offset) as *mut libc::c_void,
                        len,
                        libc::MADV_DONTNEED,
                    );
                    let fd = s.file.as_raw_fd();
                    let (off, n) = (offset as libc::off64_t, len as libc::off64_t);
                    libc::sync_file_range(
                        fd,
                        off,
                        n,
                        libc::SYNC_FILE_RANGE_WAIT_BEFORE
                            | libc::SYNC_FILE_RANGE_WRITE
                            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                    );
                    libc::posix_fadvise(fd, off, n, libc::POSIX_FADV_DONTNEED);
                }
                released += 1;
            }
        }
        released
    }

    /// Prepares up to `ahead` chunks past the last allocated one — file blocks
    /// (`posix_fallocate`) and page-table entries (`MADV_POPULATE_WRITE`) — so the appending
    /// thread that later rolls into them pays neither (populating a fresh page costs
    /// microseconds, i.e. tens of ns per record). Meant for a background thread; takes no
    /// lock, never initialises a chunk (an unused prepared chunk reads as allocated-but-unused,
    /// like after a kill) and stays within the size cap. Returns how many chunks past the
    /// allocated ones are prepared now; an I/O error (disk full) is returned and left for the
    /// allocating thread to meet and report.
    pub fn prefault_ahead(&self, ahead: u32) -> std::io::Result<u32> {
        let s = &*self.shared;
        let allocated = s.header_atomic_u32(CHUNKS_OFFSET).load(Ordering::Acquire);
        let end = allocated.saturating_add(ahead).min(s.max_chunks);
        let mut i = s.prepared.load(Ordering::Relaxed).max(allocated);
        while i < end {
            let offset = HEADER_SIZE as u64 + i as u64 * s.chunk_size as u64;
            // SAFETY: plain syscall on our own descriptor.
            let rc = unsafe {
                libc::posix_fallocate(
                    s.file.as_raw_fd(),
                    offset as libc::off_t,
                    s.chunk_size as libc::off_t,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            // SAFETY: the range is inside the reserved mapping (i < max_chunks) and now backed
            // by file blocks; populating page-table entries writes nothing.
            unsafe {
                libc::madvise(
                    s.map.as_mut_ptr().add(offset as usize) as *mut libc::c_void,
                    s.chunk_size as usize,
                    MADV_POPULATE_WRITE,
                )
            };
            i += 1;
            s.prepared.fetch_max(i, Ordering::Release);
        }
        Ok(end.saturating_sub(allocated))
    }
}

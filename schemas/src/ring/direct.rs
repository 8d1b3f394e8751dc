//! The drainer's copies with direct I/O (`O_DIRECT`, `WriterOptions::direct_io`).
//!
//! A buffered `pwrite` copies each drained chunk into fresh page-cache pages, and populating a
//! page costs far more than the copy (on the development VM ~0.85 ns per byte: about 27 ns per
//! WR event at 32 log bytes per WR, as much as the hooks themselves). A direct write hands the
//! ring slot's pages to the device instead (~0.1 ns per byte there, 1 MiB writes), leaves
//! nothing in the page cache to write back and drop, and needs no `sync_file_range`.
//!
//! Direct I/O wants block-aligned buffers, offsets and lengths: ring slots and final positions
//! are whole chunks (powers of two ≥ 4 KiB) after the 4 KiB header, so both are aligned; the
//! length is the chunk's committed bytes rounded up to a block, the slot's bytes past them
//! zeroed first (they would otherwise carry stale records of the slot's previous chunk). The
//! order of the buffered copy is kept at block granularity: the blocks after the first, then
//! the first (which holds the magic), so a copy cut short leaves no valid chunk at its final
//! position and the ring slot (still holding the chunk) is what a reader finds.
//!
//! The final positions are never mapped or cached by the writer (rings are on, so nothing is
//! written in place there), so direct and buffered I/O never meet on the same pages. Where
//! the file system refuses direct I/O (`EINVAL`: no support, or an unexpected alignment) the
//! drainer falls back to buffered copies for the rest of the log.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use super::write_all_io;

/// Direct I/O block: buffer addresses, file offsets and lengths are multiples of it.
pub(crate) const BLOCK: usize = 4096;

/// A second descriptor of the log, opened with `O_DIRECT`, for the drainer's copies.
pub(crate) struct DirectFile {
    file: File,
    /// Cleared when the file system refuses a direct write: buffered copies from then on.
    on: AtomicBool,
}

/// What [`DirectFile::copy`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direct {
    /// The chunk is at its final position.
    Copied,
    /// A write failed (disk full, I/O error): the log is to be marked failed.
    Failed,
    /// Direct I/O was refused (now off for this log): copy it buffered.
    Refused,
}

impl DirectFile {
    /// Opens the log `file` again with `O_DIRECT`, through `/proc/self/fd` (the same inode,
    /// whatever happened to its path since); `None` where that fails (no `/proc`, or a file
    /// system without direct I/O).
    pub(crate) fn reopen(file: &File) -> Option<DirectFile> {
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        Some(DirectFile {
            file,
            on: AtomicBool::new(true),
        })
    }

    /// Whether direct writes are still on (none was refused).
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Copies the chunk at `src` (`len` bytes: header and committed records) to file offset
    /// `dest`, as the module documentation says.
    ///
    /// # Safety
    /// `src` must be [`BLOCK`]-aligned and valid for reading and writing `len` rounded up to a
    /// block (a whole ring slot the caller owns); `dest` must be block-aligned.
    pub(crate) unsafe fn copy(&self, src: *mut u8, len: usize, dest: usize) -> Direct {
        if !self.on.load(Ordering::Relaxed)
            || !(src as usize).is_multiple_of(BLOCK)
            || !dest.is_multiple_of(BLOCK)
        {
            return Direct::Refused;
        }
        let padded = len.next_multiple_of(BLOCK);
        // SAFETY: [len, padded) lies inside the slot the caller owns (per the contract).
        unsafe { std::ptr::write_bytes(src.add(len), 0, padded - len) };
        let fd = self.file.as_raw_fd();
        // The final position's blocks first: a full disk fails here, before anything is
        // written, and the copy below cannot leave a hole before the blocks it wrote (on tmpfs
        // a mapped read of a hole in a full file system is a SIGBUS for the reader).
        // SAFETY: a plain syscall on our own descriptor.
        if unsafe { libc::fallocate(fd, 0, dest as libc::off_t, padded as libc::off_t) } != 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EOPNOTSUPP) => {}
                Some(libc::EINVAL) => {
                    self.on.store(false, Ordering::Relaxed);
                    return Direct::Refused;
                }
                _ => return Direct::Failed,
            }
        }
        // SAFETY: both ranges lie inside the slot (per the contract); pwrite only reads them.
        let r = unsafe {
            write_all_io(fd, src.add(BLOCK), padded - BLOCK, dest + BLOCK)
                .and_then(|()| write_all_io(fd, src, BLOCK, dest))
        };
        match r {
            Ok(()) => Direct::Copied,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.on.store(false, Ordering::Relaxed);
                Direct::Refused
            }
            Err(_) => Direct::Failed,
        }
    }
}

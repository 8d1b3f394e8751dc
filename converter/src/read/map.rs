//! The converter's view of one log file: a read-only mapping whose resident pages it controls.
//!
//! The whole file is mapped (address space only) and parsed by the schemas reader
//! ([`LogView::parse`], the one definition of the format), but no more of it stays resident than
//! the record window being read:
//! - holes of a sparse file (found with `SEEK_DATA`/`SEEK_HOLE`) are mapped as anonymous
//!   memory, which reads as zeros from the shared zero page and never counts in the resident
//!   set (an 8 GiB sparse log would otherwise fault 8 GiB of zero pages into the page cache and
//!   the mapping);
//! - the parse (chunk headers only) runs with `MADV_RANDOM` (no read-ahead around each header)
//!   and everything it touched is released right after;
//! - readers release what they consumed ([`MappedLog::release`], `MADV_DONTNEED`: on a shared
//!   file mapping the pages only leave this process; a later access faults them back in from
//!   the file with the same contents, so slices handed out stay valid).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;

use sigmatrace_schemas::reader::{LogView, ReadError};
use sigmatrace_schemas::HEADER_SIZE;

const PAGE: usize = 4096;

/// A mapped, parsed log.
pub struct MappedLog {
    // `view` borrows the mapping; it is declared first so that it is dropped first.
    view: LogView<'static>,
    map: Mapping,
}

/// A read-only mapping of a whole file, unmapped on drop. The address is kept as an integer so
/// that the type is `Send + Sync` (nothing writes through it).
struct Mapping {
    base: usize,
    len: usize,
    /// `MADV_DONTNEED` calls made so far (each may interrupt every other core running one of
    /// our threads, to flush its TLB).
    releases: std::sync::atomic::AtomicU64,
}

impl MappedLog {
    /// Maps and parses `path` (header and chunk table; records are read later, lazily).
    pub fn open(path: &Path) -> Result<MappedLog, ReadError> {
        let io = |source| ReadError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_SIZE as u64 {
            // Too short to map as a log: the reader's header check says why (too short, or
            // not a log at all) — unless the file has grown since.
            let mut b = Vec::with_capacity(HEADER_SIZE);
            std::io::Read::read_to_end(&mut (&file).take(HEADER_SIZE as u64), &mut b)
                .map_err(io)?;
            return match LogView::parse(&b, path) {
                Err(e) => Err(e),
                Ok(_) => MappedLog::open(path),
            };
        }
        let len = usize::try_from(len).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "file larger than the address space",
            ))
        })?;
        let fd = file.as_raw_fd();
        // SAFETY: a fresh read-only shared mapping of the whole file at an address the kernel
        // chooses; the result is checked. It is unmapped only when `Mapping` drops, after the
        // view that borrows it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        let map = Mapping {
            base: base as usize,
            len,
            releases: Default::default(),
        };
        map.map_holes_anonymous(fd);
        map.advise(0, len, libc::MADV_RANDOM);
        // SAFETY: `base..base + len` is the live read-only mapping owned by `map`, stored next to
        // the view and dropped after it; logs are not truncated in place while they are read (a
        // writer still appending only grows committed regions, read through lengths taken at
        // parse time).
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
        let view = LogView::parse(bytes, path)?;
        map.release(0, len as u64);
        map.advise(0, len, libc::MADV_NORMAL);
        Ok(MappedLog { view, map })
    }

    /// Drops the whole pages of file bytes `[from, to)` from this process's resident set (they
    /// stay in the page cache; a later access reads them again, unchanged).
    pub fn release(&self, from: u64, to: u64) {
        self.map.release(from, to);
    }

    /// How many times pages were released so far ([`MappedLog::release`] calls that found
    /// whole pages to release, the parse's included).
    pub fn releases(&self) -> u64 {
        self.map.releases.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// File length in bytes.
    pub fn len(&self) -> u64 {
        self.map.len as u64
    }

    /// Whether the file is empty (never: a log has at least its header).
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }
}

impl Mapping {
    /// Replaces every hole of a sparse file in the mapping by anonymous memory (reads as zero,
    /// never resident). Best effort: file systems without `SEEK_HOLE` report the whole file as
    /// data.
    fn map_holes_anonymous(&self, fd: i32) {
        let mut at: i64 = 0;
        let end = self.len as i64;
        while at < end {
            // SAFETY: plain syscalls on our own descriptor.
            let hole = unsafe { libc::lseek(fd, at, libc::SEEK_HOLE) };
            if hole < 0 || hole >= end {
                break;
            }
            // SAFETY: as above.
            let data = unsafe { libc::lseek(fd, hole, libc::SEEK_DATA) };
            let data = if data < 0 { end } else { data.min(end) };
            let a = (hole as usize).next_multiple_of(PAGE);
            let b = if data == end {
                self.len.next_multiple_of(PAGE)
            } else {
                data as usize / PAGE * PAGE
            };
            if b > a {
                // SAFETY: [a, b) lies inside our own mapping (page aligned, b at most the
                // mapping's page-rounded end); MAP_FIXED replaces those pages of it by private
                // anonymous zero pages, exactly what the file holds there. No slice into the
                // mapping exists yet (the view is parsed afterwards).
                unsafe {
                    libc::mmap(
                        (self.base + a) as *mut libc::c_void,
                        b - a,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    );
                }
            }
            at = data;
        }
    }

    fn advise(&self, from: usize, len: usize, advice: i32) {
        if len == 0 {
            return;
        }
        // SAFETY: the range lies inside our own live mapping; advice never changes contents.
        unsafe {
            libc::madvise((self.base + from) as *mut libc::c_void, len, advice);
        }
    }

    fn release(&self, from: u64, to: u64) {
        let to = (to as usize).min(self.len);
        let a = (from as usize).next_multiple_of(PAGE);
        let b = to / PAGE * PAGE;
        if b > a {
            self.releases
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.advise(a, b - a, libc::MADV_DONTNEED);
        }
    }
}

/// How far ahead of its reading position a reader of a mapped log prefetches
/// ([`prefetch_ahead`]).
pub const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU to fetch the cache line of `bytes[at]` (nothing when `at` is past the end): a
/// reader streaming through a mapped log prefetches [`PREFETCH_AHEAD`] bytes ahead, since
/// the hardware prefetcher stops at each 4 KiB page and the log's bytes come from the page
/// cache, not from a cache near the core (perf: a third of the scan's samples on the loads
/// of a record's header and fields).
#[inline(always)]
pub fn prefetch_ahead(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = bytes.get(at) {
        // SAFETY: a prefetch is a hint: it reads nothing into the program, never faults (a
        // line whose page is not mapped is dropped) and the address lies inside the slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (b as *const u8).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

impl std::ops::Deref for MappedLog {
    type Target = LogView<'static>;
    fn deref(&self) -> &Self::Target {
        &self.view
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `MappedLog::open`; the view borrowing it
        // was dropped before (field order of `MappedLog`).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

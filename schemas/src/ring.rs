//! Per-thread rings of reused chunks (`WriterOptions::ring_chunks` > 0).
//!
//! A thread's first chunk allocates its ring: `ring_chunks` consecutive chunk positions of the
//! file, given file blocks and faulted in once (`MADV_POPULATE_WRITE`). The thread then
//! appends into a ring slot exactly as into a plain chunk (the slot's chunk header carries the
//! chunk's allocation `index`, i.e. its final position, which differs from the slot's own).
//! When the slot is full the thread marks it FULL and moves to a FREE slot; the background
//! drainer ([`crate::LogWriter::drain`]) copies each FULL slot to its final position with
//! `pwrite` (header with a zero magic first, the magic last), then zeroes the slot's magic and
//! marks it FREE. So the program's threads only ever touch pages they faulted once, the copy
//! happens off the program's threads, and everything not yet drained is still in the file
//! (inside the ring slots) for salvage after a kill. A kill between the copy and the slot's
//! reset leaves the chunk twice; readers keep one copy per index (see FORMAT.md, "Rings").
//!
//! When no slot is FREE (the drainer is behind) the thread falls back to a plain chunk at its
//! final position (faulting its pages itself), then returns to the ring.
//!
//! Flight recorder (`WriterOptions::flight_recorder`, see [`flight`]): nothing is drained; a
//! thread whose ring has no FREE slot reuses the slot of its oldest chunk, and that chunk's
//! records count as dropped, per kind, in the header's loss table.

mod direct;
mod flight;
pub(crate) use direct::DirectFile;
pub use flight::Dumped;

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::chunk::{ChunkHeader, CHUNK_HEADER_SIZE, CHUNK_MAGIC, COMMIT_OFFSET};
use crate::header::HEADER_SIZE;
use crate::writer::Shared;

/// Slot states.
pub(crate) const FREE: u32 = 0;
pub(crate) const FILLING: u32 = 1;
pub(crate) const FULL: u32 = 2;

/// Drainer passes without a roll after which an idle ring's FREE slots are handed back.
const IDLE_PASSES: u32 = 64;

/// One thread's ring.
pub(crate) struct Ring {
    /// Byte offset (in file and mapping) of each slot.
    pub(crate) slots: Box<[usize]>,
    pub(crate) state: Box<[AtomicU32]>,
    /// Chunks the owner started (bumped once per chunk; the drainer's idle detection).
    pub(crate) rolls: AtomicU64,
    /// Drainer-only: `rolls` at its last pass, passes since it changed, and whether the FREE
    /// slots' pages were handed back since.
    seen_rolls: AtomicU64,
    idle_passes: AtomicU32,
    released: AtomicBool,
    /// Flight recorder: per slot, the committed bytes of its chunk already copied into the
    /// log by a dump (0: none); and the lock that keeps a dump and a reuse of a slot apart.
    preserved: Box<[AtomicU32]>,
    busy: AtomicBool,
    /// Flight recorder: per slot, whether the background thread looked at its (FULL) chunk
    /// for control records (reset when the slot is reused).
    checked: Box<[AtomicBool]>,
    /// Flight recorder: per slot, the events of its (FULL) chunk per kind, counted by the
    /// background thread when it looked at it (`precounted`), so that reusing the slot
    /// needs no scan on the owner's thread.
    precounted: Box<[AtomicBool]>,
    counts: Box<[[AtomicU64; crate::header::LOSS_SLOTS]]>,
}

impl Ring {
    pub(crate) fn new(first_offset: usize, n: u32, chunk_size: usize) -> Ring {
        Ring {
            slots: (0..n as usize)
                .map(|i| first_offset + i * chunk_size)
                .collect(),
            state: (0..n).map(|_| AtomicU32::new(FREE)).collect(),
            rolls: AtomicU64::new(0),
            seen_rolls: AtomicU64::new(0),
            idle_passes: AtomicU32::new(0),
            released: AtomicBool::new(false),
            preserved: (0..n).map(|_| AtomicU32::new(0)).collect(),
            busy: AtomicBool::new(false),
            checked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            precounted: (0..n).map(|_| AtomicBool::new(false)).collect(),
            counts: (0..n)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
        }
    }

    /// A FREE slot, if any (acquire: the drainer's reset of it is visible).
    pub(crate) fn free_slot(&self) -> Option<usize> {
        self.state
            .iter()
            .position(|s| s.load(Ordering::Acquire) == FREE)
    }
}

/// What one drain pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Chunks copied to their final position.
    pub chunks: u32,
    /// Bytes copied.
    pub bytes: u64,
}

impl Shared {
    /// Copies every FULL slot of every ring to its final position and frees the slot. On a
    /// write error (disk full) the log is marked failed and the slot stays FULL: its records
    /// stay readable in the ring, and the owner meets the failure at its next chunk.
    pub(crate) fn drain_rings(
        &self,
        rings: &[Arc<Ring>],
        written: &mut Vec<(usize, usize)>,
    ) -> Drained {
        let mut done = Drained::default();
        for ring in rings {
            if self.flight {
                // A flight recorder's rings are the log; chunks with control records are
                // kept before their slot is reused.
                let kept = self.keep_control_chunks(ring);
                done.chunks += kept.chunks;
                done.bytes += kept.bytes;
                self.release_if_idle(ring);
                continue;
            }
            for (i, state) in ring.state.iter().enumerate() {
                if state.load(Ordering::Acquire) != FULL || self.failed.load(Ordering::Relaxed) {
                    continue;
                }
                match self.copy_out(ring.slots[i]) {
                    Some((dest, len, buffered)) => {
                        state.store(FREE, Ordering::Release);
                        if buffered {
                            written.push((dest, len));
                        }
                        done.chunks += 1;
                        done.bytes += len as u64;
                    }
                    None => self.failed.store(true, Ordering::Relaxed),
                }
            }
            self.release_if_idle(ring);
        }
        done
    }

    /// Copies the finished chunk in the slot at `slot` to its final position (direct I/O where
    /// the log has it, see [`direct`]); returns where, the bytes and whether they went through
    /// the page cache. The slot's magic is zeroed afterwards (it reads as unused until
    /// reused).
    fn copy_out(&self, slot: usize) -> Option<(usize, usize, bool)> {
        let base = self.map.as_mut_ptr();
        // SAFETY: `slot` is a whole chunk of a ring inside the live mapping; its owner marked it
        // FULL (release) and never writes it again until we mark it FREE, so reading it races
        // with nothing. The header is read by value.
        let hdr: ChunkHeader = unsafe { std::ptr::read(base.add(slot) as *const ChunkHeader) };
        let len = CHUNK_HEADER_SIZE + hdr.committed_bytes() as usize;
        if hdr.magic != CHUNK_MAGIC || len > self.chunk_size as usize {
            return Some((0, 0, false)); // never initialised (nothing to copy)
        }
        let dest = HEADER_SIZE + hdr.index as usize * self.chunk_size as usize;
        let fd = self.file.as_raw_fd();
        // SAFETY: the slot is a whole chunk (block-aligned, len ≤ chunk size) that we own
        // while it is FULL; `dest` is a chunk position (block-aligned).
        let direct = self
            .direct
            .as_ref()
            .map(|d| unsafe { d.copy(base.add(slot), len, dest) });
        let buffered = match direct {
            Some(direct::Direct::Copied) => false,
            Some(direct::Direct::Failed) => return None,
            Some(direct::Direct::Refused) | None => {
                // SAFETY: the source ranges lie inside the slot (len ≤ chunk size); pwrite
                // only reads them; the descriptor is ours.
                let ok = unsafe {
                    write_all(fd, base.add(slot + 4), len - 4, dest + 4)
                        && write_all(fd, base.add(slot), 4, dest)
                };
                if !ok {
                    return None;
                }
                true
            }
        };
        // SAFETY: the slot's magic is a 4-aligned u32 in our mapping, written only atomically
        // while the slot is FULL; the file calls name our descriptor.
        unsafe {
            (*(base.add(slot) as *const AtomicU32)).store(0, Ordering::Release);
            (*(base.add(slot + COMMIT_OFFSET) as *const AtomicU64)).store(0, Ordering::Relaxed);
            if buffered {
                libc::sync_file_range(
                    fd,
                    dest as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        Some((dest, len, buffered))
    }

    /// Hands back the FREE slots' pages of a ring whose owner started no chunk for
    /// [`IDLE_PASSES`] passes (an idle or exited thread); its next chunk faults them again.
    fn release_if_idle(&self, ring: &Ring) {
        let rolls = ring.rolls.load(Ordering::Relaxed);
        if ring.seen_rolls.swap(rolls, Ordering::Relaxed) != rolls {
            ring.idle_passes.store(0, Ordering::Relaxed);
            ring.released.store(false, Ordering::Relaxed);
            return;
        }
        let idle = ring.idle_passes.fetch_add(1, Ordering::Relaxed) + 1;
        if idle < IDLE_PASSES || ring.released.swap(true, Ordering::Relaxed) {
            return;
        }
        for (i, state) in ring.state.iter().enumerate() {
            // A flight recorder's FULL chunks stay in the file too: their pages can go.
            let st = state.load(Ordering::Acquire);
            if st != FREE && !(self.flight && st == FULL) {
                continue;
            }
            // SAFETY: a FREE slot is written by nobody until its owner takes it again, and
            // dropping page-table entries of a shared file mapping keeps its data.
            unsafe {
                libc::madvise(
                    self.map.as_mut_ptr().add(ring.slots[i]) as *mut libc::c_void,
                    self.chunk_size as usize,
                    libc::MADV_DONTNEED,
                );
            }
        }
    }
}

/// `pwrite` of all `len` bytes at `src` to `offset`, retrying short writes and EINTR.
///
/// # Safety
/// `src` must be valid for reading `len` bytes.
pub(crate) unsafe fn write_all(fd: libc::c_int, src: *const u8, len: usize, offset: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe { write_all_io(fd, src, len, offset) }.is_ok()
}

/// [`write_all`], with the error (a write of 0 bytes reads as `ENOSPC`). On a direct I/O
/// descriptor a short write leaves an unaligned rest, whose retry fails with `EINVAL`.
///
/// # Safety
/// `src` must be valid for reading `len` bytes.
pub(crate) unsafe fn write_all_io(
    fd: libc::c_int,
    src: *const u8,
    len: usize,
    offset: usize,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: src+done .. src+len is readable (the caller's contract).
        let n = unsafe {
            libc::pwrite(
                fd,
                src.add(done) as *const libc::c_void,
                len - done,
                (offset + done) as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        done += n as usize;
    }
    Ok(())
}

//! Lock-free per-thread log writer.
//!
//! A [`LogWriter`] owns the file and a shared mapping that reserves the whole size cap of
//! address space up front. Each writer thread holds a [`ChunkWriter`]: appends copy the record
//! into the thread's own chunk and publish the new committed length with one release store —
//! no locks, no allocation, no system calls. Only allocating the next chunk takes a mutex and
//! calls `posix_fallocate` (so a full disk is detected there, never as a SIGBUS later).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use memmap2::{MmapOptions, MmapRaw};

use crate::chunk::{ChunkHeader, CHUNK_HEADER_SIZE, CHUNK_MAGIC, COMMIT_OFFSET};
use crate::clock::{TimestampSource, Timestamper};
use crate::compact::SlotTable;
use crate::header::{
    FileHeader, Losses, CHUNKS_OFFSET, DROPPED_OFFSET, HEADER_SIZE, LOSS_SLOTS, LOSS_TABLE_OFFSET,
};
use crate::records::{
    drop_reason, Dropped, FixedRecord, MetaHeader, RecordHeader, RecordKind, MAX_META_PAYLOAD,
};
use crate::ring::{Ring, FILLING, FULL};

mod upkeep;

/// Bytes every chunk keeps free at its end for the loss marker: the `Dropped` record
/// (count 0) a writer appends where its losses begin (see FORMAT.md, "Losses").
const MARKER_ROOM: u32 = std::mem::size_of::<Dropped>() as u32;

/// Smallest and largest allowed chunk sizes.
pub const MIN_CHUNK_SIZE: u32 = 4096;
pub const MAX_CHUNK_SIZE: u32 = 1 << 30;
/// Default chunk size: 1 MiB.
pub const DEFAULT_CHUNK_SIZE: u32 = 1 << 20;

/// Writer configuration.
#[derive(Clone, Copy, Debug)]
pub struct WriterOptions {
    /// Bytes per chunk (power of two, 4 KiB – 1 GiB).
    pub chunk_size: u32,
    /// Size cap of the whole file; chunks beyond it are not allocated and appends are dropped
    /// (and counted).
    pub max_bytes: u64,
    /// Pre-fault each chunk's pages when it is allocated (`MADV_POPULATE_WRITE`), so appends
    /// take no page faults.
    pub prefault: bool,
    /// Chunks in each thread's ring (0 = no rings: every chunk is written in place at its
    /// final position). See [`crate::ring`].
    pub ring_chunks: u32,
    /// Write `PostSend`, `PostRecv` and `WorkCompletion` in their compact forms when they fit
    /// (see [`crate::compact`]); `false`: always the full records.
    pub compact: bool,
    /// Flight recorder (needs `ring_chunks` >= 2): rings are never drained; a thread whose
    /// ring is full reuses its oldest chunk, counting its records as dropped (see
    /// [`crate::ring`], FORMAT.md "Flight recorder").
    pub flight_recorder: bool,
    /// Drain ring chunks with direct I/O where the file system has it (see `ring::direct`):
    /// far less CPU per byte than copying into the page cache.
    pub direct_io: bool,
}

/// `MADV_POPULATE_WRITE` (Linux 5.14); not yet in every libc crate version.
const MADV_POPULATE_WRITE: libc::c_int = 23;

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_bytes: 4 << 30,
            prefault: true,
            ring_chunks: 0,
            compact: true,
            flight_recorder: false,
            direct_io: false,
        }
    }
}

/// Errors creating a log.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot create log {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the header of {path}: {source}")]
    Header {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot map {path}: {source}")]
    Map {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid writer options: {0}")]
    Options(String),
}

pub(crate) struct Shared {
    pub(crate) file: File,
    pub(crate) map: MmapRaw,
    pub(crate) chunk_size: u32,
    pub(crate) max_chunks: u32,
    pid: u32,
    prefault: bool,
    compact: bool,
    pub(crate) next_chunk: Mutex<u32>,
    pub(crate) failed: AtomicBool,
    /// Flight recorder: rings are not drained, a full ring reuses its oldest chunk; chunk
    /// indices are then sequence numbers (`flight_seq`), not positions.
    pub(crate) flight: bool,
    flight_seq: AtomicU32,
    /// Chunks per thread ring (0 = none) and the rings handed out so far (the drainer's list).
    ring_chunks: u32,
    pub(crate) rings: Mutex<Vec<Arc<Ring>>>,
    /// The log opened again with `O_DIRECT`, for the drainer's copies (`direct_io` with rings,
    /// where it could be opened).
    pub(crate) direct: Option<crate::ring::DirectFile>,
    /// Final ranges drained through the page cache by the previous `drain` call: dropped from
    /// it by the next one, once their writeback had time to finish.
    written: Mutex<Vec<(usize, usize)>>,
    /// Chunks [0, prepared) have file blocks and populated pages (see `prefault_ahead`).
    prepared: AtomicU32,
    /// The timestamp source of the log's records (for the time of the first loss).
    ts_source: TimestampSource,
    /// The caller's clock, when it is not the plain timestamp source (`set_clock`).
    clock: OnceLock<fn() -> u64>,
    /// Called when a thread hands a finished ring chunk to the drainer (`set_drain_waker`).
    drain_waker: OnceLock<fn()>,
    /// One bit per chunk (the first [`MAX_RELEASABLE`]): set when its writer moved on to
    /// another chunk, cleared when `release_retired` gave its pages back.
    retired: Box<[AtomicU64]>,
}

/// Chunks whose pages `release_retired` can hand back (a bit each); later ones stay mapped.
const MAX_RELEASABLE: u32 = 1 << 20;

// SAFETY: the mapping is only written through disjoint chunks owned by single ChunkWriters
// and through atomics in the header page; MmapRaw is a plain pointer + length.
unsafe impl Sync for Shared {}
// SAFETY: see above; nothing in Shared is tied to a thread.
unsafe impl Send for Shared {}

impl Shared {
    pub(crate) fn header_atomic_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offset is 8-aligned inside the mapped, fallocated header page; the field is
        // only accessed atomically while the writer lives.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    pub(crate) fn header_atomic_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as above, for a 4-aligned u32 field.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU32) }
    }

    /// Marks the chunk at `base` as finished: its writer will never touch it again.
    fn retire(&self, base: *mut u8) {
        let offset = base as usize - self.map.as_mut_ptr() as usize - HEADER_SIZE;
        let index = offset / self.chunk_size as usize;
        if let Some(w) = self.retired.get(index / 64) {
            w.fetch_or(1 << (index % 64), Ordering::Release);
        }
    }

    /// The log's current time, as its records take it.
    pub(crate) fn now(&self) -> u64 {
        match self.clock.get() {
            Some(f) => f(),
            None => Timestamper::with_source(self.ts_source).now(),
        }
    }

    /// Counts one dropped event of `kind`: the total, the kind's slot of the loss table and,
    /// for the first loss of the log, its time (`ts`, or the clock read now).
    fn count_dropped(&self, kind: u16, ts: Option<u64>) {
        self.header_atomic_u64(DROPPED_OFFSET)
            .fetch_add(1, Ordering::Relaxed);
        if (kind as usize) < LOSS_SLOTS && kind != 0 {
            self.header_atomic_u64(LOSS_TABLE_OFFSET + kind as usize * 8)
                .fetch_add(1, Ordering::Relaxed);
        }
        let first = self.header_atomic_u64(LOSS_TABLE_OFFSET);
        if first.load(Ordering::Relaxed) == 0 {
            let ts = ts.unwrap_or_else(|| self.now()).max(1);
            let _ = first.compare_exchange(0, ts, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Allocates a fresh chunk for `tid`; the only synchronised step of the writer.
    fn alloc_chunk(&self, tid: u32) -> Option<*mut u8> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let mut next = self.next_chunk.lock().unwrap_or_else(|p| p.into_inner());
        if *next >= self.max_chunks {
            return None;
        }
        let index = *next;
        let offset = HEADER_SIZE as u64 + index as u64 * self.chunk_size as u64;
        // A chunk prefault_ahead() prepared already has its blocks and pages.
        let prepared = index < self.prepared.load(Ordering::Acquire);
        // SAFETY: plain syscall on our own descriptor.
        let rc = if prepared {
            0
        } else {
            unsafe {
                libc::posix_fallocate(
                    self.file.as_raw_fd(),
                    offset as libc::off_t,
                    self.chunk_size as libc::off_t,
                )
            }
        };
        if rc != 0 {
            self.failed.store(true, Ordering::Relaxed);
            return None;
        }
        *next += 1;
        // SAFETY: the chunk lies inside the reserved mapping (index < max_chunks) and is now
        // backed by allocated file blocks; nobody else owns it.
        let base = unsafe { self.map.as_mut_ptr().add(offset as usize) };
        if self.prefault && !prepared {
            // Fault the whole chunk in now, in one call, instead of one page fault per 4 KiB
            // on the append path. Advisory: kernels before 5.14 answer EINVAL, which is fine.
            // SAFETY: the range is our own chunk inside the live mapping.
            unsafe {
                libc::madvise(
                    base as *mut libc::c_void,
                    self.chunk_size as usize,
                    MADV_POPULATE_WRITE,
                )
            };
        }
        self.init_chunk(base, index, tid);
        self.header_atomic_u32(CHUNKS_OFFSET)
            .store(index + 1, Ordering::Release);
        Some(base)
    }

    /// Writes the header of chunk `index` at `base` (magic last, with release ordering).
    fn init_chunk(&self, base: *mut u8, index: u32, tid: u32) {
        let hdr = ChunkHeader {
            magic: 0,
            index,
            tid,
            pid: self.pid,
            commit: 0,
            capacity: self.chunk_size - CHUNK_HEADER_SIZE as u32,
            _reserved: [0; 9],
        };
        // SAFETY: base points to CHUNK_HEADER_SIZE writable bytes of a chunk owned by the
        // caller (fresh, or a ring slot it holds).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytemuck::bytes_of(&hdr).as_ptr(),
                base,
                CHUNK_HEADER_SIZE,
            );
            (*(base as *const AtomicU32)).store(CHUNK_MAGIC, Ordering::Release);
        }
    }

    /// Allocates `ring_chunks` consecutive positions for a thread's ring: file blocks and
    /// pages made ready once, here. `None` when the cap leaves no room or the disk is full.
    fn alloc_ring(&self) -> Option<Arc<Ring>> {
        let n = self.ring_chunks;
        if n == 0 || self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let mut next = self.next_chunk.lock().unwrap_or_else(|p| p.into_inner());
        if self.max_chunks.saturating_sub(*next) < n + 1 {
            return None;
        }
        let cs = self.chunk_size as usize;
        let offset = HEADER_SIZE + *next as usize * cs;
        // SAFETY: plain syscall on our own descriptor.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                (n as usize * cs) as libc::off_t,
            )
        };
        if rc != 0 {
            self.failed.store(true, Ordering::Relaxed);
            return None;
        }
        *next += n;
        self.header_atomic_u32(CHUNKS_OFFSET)
            .store(*next, Ordering::Release);
        // SAFETY: the range lies inside the reserved mapping and is backed by file blocks;
        // populating page-table entries writes nothing (advisory; EINVAL before 5.14 is fine).
        unsafe {
            libc::madvise(
                self.map.as_mut_ptr().add(offset) as *mut libc::c_void,
                n as usize * cs,
                MADV_POPULATE_WRITE,
            )
        };
        let ring = Arc::new(Ring::new(offset, n, cs));
        drop(next);
        self.rings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ring.clone());
        Some(ring)
    }

    /// Starts a new chunk in the ring slot at `slot` (an offset): allocates its index (its
    /// final position; the drainer's `pwrite` gives it file blocks) and writes its header.
    fn start_in_slot(&self, slot: usize, tid: u32) -> Option<*mut u8> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        if self.flight {
            // A sequence number: the chunk never goes to a final position of its own.
            let index = self.flight_seq.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the slot is a whole chunk of the caller's ring inside the mapping.
            let base = unsafe { self.map.as_mut_ptr().add(slot) };
            self.init_chunk(base, index, tid);
            return Some(base);
        }
        let mut next = self.next_chunk.lock().unwrap_or_else(|p| p.into_inner());
        if *next >= self.max_chunks {
            return None;
        }
        let index = *next;
        *next += 1;
        self.header_atomic_u32(CHUNKS_OFFSET)
            .store(index + 1, Ordering::Release);
        drop(next);
        // SAFETY: the slot is a whole chunk of the caller's ring inside the mapping.
        let base = unsafe { self.map.as_mut_ptr().add(slot) };
        self.init_chunk(base, index, tid);
        Some(base)
    }
}

/// A log file being written.
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
    path: PathBuf,
}

impl LogWriter {
    /// Creates `path` (mode 0600, `O_EXCL | O_NOFOLLOW`), writes the header and reserves the
    /// address space for `options.max_bytes`.
    pub fn create(
        path: &Path,
        header: &FileHeader,
        options: WriterOptions,
    ) -> Result<LogWriter, WriteError> {
        let cs = options.chunk_size;
        if !cs.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&cs) {
            return Err(WriteError::Options(format!(
                "chunk size {cs} must be a power of two between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}"
            )));
        }
        if options.flight_recorder && options.ring_chunks < 2 {
            return Err(WriteError::Options(
                "a flight recorder needs rings of at least 2 chunks".into(),
            ));
        }
        let max_chunks = (options.max_bytes.saturating_sub(HEADER_SIZE as u64) / cs as u64)
            .min(u32::MAX as u64 / 2) as u32;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| WriteError::Create {
                path: path.to_owned(),
                source,
            })?;
        let mut h = header.clone();
        h.chunk_size = cs;
        let page = h.encode();
        use std::os::unix::fs::FileExt;
        file.write_all_at(&page, 0)
            .map_err(|source| WriteError::Header {
                path: path.to_owned(),
                source,
            })?;
        let len = HEADER_SIZE + max_chunks as usize * cs as usize;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|source| WriteError::Map {
                path: path.to_owned(),
                source,
            })?;
        let direct = (options.direct_io && options.ring_chunks > 0 && !options.flight_recorder)
            .then(|| crate::ring::DirectFile::reopen(&file))
            .flatten();
        Ok(LogWriter {
            shared: Arc::new(Shared {
                direct,
                file,
                map,
                chunk_size: cs,
                max_chunks,
                pid: h.pid,
                prefault: options.prefault,
                compact: options.compact,
                next_chunk: Mutex::new(0),
                failed: AtomicBool::new(false),
                flight: options.flight_recorder,
                flight_seq: AtomicU32::new(0),
                ring_chunks: options.ring_chunks,
                rings: Mutex::new(Vec::new()),
                written: Mutex::new(Vec::new()),
                prepared: AtomicU32::new(0),
                ts_source: h.ts_source,
                clock: OnceLock::new(),
                drain_waker: OnceLock::new(),
                retired: (0..max_chunks.min(MAX_RELEASABLE).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            }),
            path: path.to_owned(),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A writer for one thread. Its first chunk is allocated on the first append.
    pub fn thread_writer(&self, tid: u32) -> ChunkWriter {
        ChunkWriter {
            shared: self.shared.clone(),
            base: std::ptr::null_mut(),
            commit: 0,
            cap: 0,
            place_limit: 0,
            tid,
            exhausted: false,
            ring: None,
            slot: None,
            compact: self.shared.compact,
            slots: SlotTable::new(),
        }
    }

    /// Flight recorder: copies every thread's ring (what it holds now and was not copied by
    /// an earlier call) into the log (see [`crate::ring`]). Meant for one background thread.
    pub fn dump_rings(&self) -> crate::ring::Dumped {
        self.shared.dump_rings()
    }

    /// Whether threads write through rings (`WriterOptions::ring_chunks` > 0).
    pub fn has_rings(&self) -> bool {
        self.shared.ring_chunks > 0
    }

    /// Events dropped so far (size cap or allocation failure).
    pub fn dropped(&self) -> u64 {
        self.shared
            .header_atomic_u64(DROPPED_OFFSET)
            .load(Ordering::Relaxed)
    }

    /// The loss counters as they stand (total, per kind, time of the first loss).
    pub fn losses(&self) -> Losses {
        let mut page = vec![0u8; HEADER_SIZE];
        for (i, w) in page.chunks_exact_mut(8).enumerate() {
            let v = self.shared.header_atomic_u64(i * 8).load(Ordering::Relaxed);
            w.copy_from_slice(&v.to_ne_bytes());
        }
        Losses::from_page(&page)
    }

    /// Sets the clock that timestamps the first loss (default: the header's timestamp
    /// source read directly), for callers whose records take their time another way (e.g.
    /// with an injected skew). The first call wins.
    pub fn set_clock(&self, clock: fn() -> u64) {
        let _ = self.shared.clock.set(clock);
    }

    /// Sets what a thread calls right after it marks a ring chunk FULL, once per chunk: the
    /// caller's wake-up of its drainer, so that a drainer sleeping through an idle period
    /// starts copying at the first finished chunk of a burst instead of at its next poll
    /// (until then the ring fills and the thread writes in place, faulting pages). It runs
    /// on the program's threads, signal handlers included: it must not block, allocate or
    /// take a lock. The first call wins.
    pub fn set_drain_waker(&self, wake: fn()) {
        let _ = self.shared.drain_waker.set(wake);
    }

    /// Whether a chunk allocation failed (disk full, I/O error).
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Flushes mapped pages to the file (optional; the page cache already survives a kill).
    pub fn flush(&self) -> std::io::Result<()> {
        self.shared.map.flush()
    }
}

/// One thread's appender. Not shared between threads; cheap to create.
pub struct ChunkWriter {
    shared: Arc<Shared>,
    pub(crate) base: *mut u8,
    /// The chunk's commit word as last published: records << 32 | committed bytes (the
    /// append position). One word, so publishing is one add and two stores.
    pub(crate) commit: u64,
    pub(crate) cap: u32,
    /// Positions below it have room for a placed compact send and its bookkeeping (0 when
    /// the writer does not compact or has no chunk): `place_plain_send`'s one room check.
    pub(crate) place_limit: u32,
    tid: u32,
    exhausted: bool,
    /// This thread's ring (allocated with its first chunk, when the log has rings) and the
    /// slot being filled (`None`: the current chunk is a plain one, or there is none).
    ring: Option<Arc<Ring>>,
    slot: Option<usize>,
    /// Whether the hot kinds are written compact, and their context in the current chunk.
    pub(crate) compact: bool,
    pub(crate) slots: SlotTable,
}

// SAFETY: a ChunkWriter exclusively owns its current chunk; moving it to another thread is
// fine (it is never used from two threads at once since appends take &mut self).
unsafe impl Send for ChunkWriter {}

impl ChunkWriter {
    /// Appends a fixed-size record; its header's kind and length are set here. `PostSend`,
    /// `PostRecv` and `WorkCompletion` are written in their compact form when it holds them
    /// (see [`crate::compact`]). Returns false (and counts a drop) when the size cap is
    /// reached or the log failed.
    #[inline(always)]
    pub fn append<R: FixedRecord>(&mut self, rec: &R) -> bool {
        match R::KIND {
            RecordKind::PostSend => self.append_post_send(bytemuck::cast_ref(rec)),
            RecordKind::PostRecv => self.append_post_recv(bytemuck::cast_ref(rec)),
            RecordKind::WorkCompletion => self.append_completion(bytemuck::cast_ref(rec)),
            _ => self.append_full(rec),
        }
    }

    /// Appends a fixed-size record as it is (never compacted).
    #[inline]
    pub(crate) fn append_full<R: FixedRecord>(&mut self, rec: &R) -> bool {
        let size = std::mem::size_of::<R>() as u32;
        if self.pos() + size > self.cap && !self.roll(R::KIND as u16) {
            return false;
        }
        let hdr_word = (R::KIND as u32) | (size << 16);
        // SAFETY: base+HEADER+pos .. +size lies in our chunk (checked against cap above); the
        // chunk is exclusively ours; the record is Pod; the destination is 8-aligned.
        unsafe {
            let dst = self.base.add(CHUNK_HEADER_SIZE + self.pos() as usize);
            std::ptr::copy_nonoverlapping(rec as *const R as *const u8, dst, size as usize);
            std::ptr::write(dst as *mut u32, hdr_word);
        }
        self.publish(size);
        true
    }

    /// Appends a metadata record (`kind` must be a metadata kind). Payloads longer than
    /// [`MAX_META_PAYLOAD`] are truncated.
    pub fn append_meta(
        &mut self,
        kind: RecordKind,
        aux: u32,
        ts: u64,
        key: u64,
        payload: &[u8],
    ) -> bool {
        debug_assert!(kind.fixed_size().is_none());
        const H: usize = std::mem::size_of::<MetaHeader>();
        let room = self.shared.chunk_size as usize - CHUNK_HEADER_SIZE - MARKER_ROOM as usize - H;
        let payload = &payload[..payload.len().min(MAX_META_PAYLOAD).min(room)];
        let size = (H + payload.len()).next_multiple_of(8) as u32;
        if self.pos() + size > self.cap && !self.roll(kind as u16) {
            return false;
        }
        let mh = MetaHeader {
            hdr: RecordHeader {
                kind: kind as u16,
                len: size as u16,
                aux,
            },
            ts,
            key,
            len: payload.len() as u32,
            _pad: 0,
        };
        // SAFETY: as in `append`; H + payload + padding == size bytes fit in our chunk.
        unsafe {
            let dst = self.base.add(CHUNK_HEADER_SIZE + self.pos() as usize);
            std::ptr::copy_nonoverlapping(bytemuck::bytes_of(&mh).as_ptr(), dst, H);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), dst.add(H), payload.len());
            std::ptr::write_bytes(
                dst.add(H + payload.len()),
                0,
                size as usize - H - payload.len(),
            );
        }
        self.publish(size);
        true
    }

    /// The append position in the current chunk (bytes after the chunk header).
    #[inline(always)]
    pub(crate) fn pos(&self) -> u32 {
        // The commit word's low half, loaded by itself where it is first in memory: a 32-bit
        // load zero-extends, so the hot paths index the chunk with it directly.
        #[cfg(target_endian = "little")]
        // SAFETY: the first 4 bytes of our own, initialised `commit` field.
        return unsafe { std::ptr::addr_of!(self.commit).cast::<u32>().read() };
        #[cfg(not(target_endian = "little"))]
        return self.commit as u32;
    }

    /// The address of the append position.
    #[inline(always)]
    pub(crate) fn at_pos(&self) -> *mut u8 {
        // SAFETY: the position lies inside the current chunk (or at its end).
        unsafe { self.base.add(CHUNK_HEADER_SIZE + self.pos() as usize) }
    }

    #[inline(always)]
    pub(crate) fn publish(&mut self, size: u32) {
        publish(&mut self.commit, self.base, size);
    }

    /// Writes `rec` at the append position and counts it in the commit word without
    /// publishing it: the next `publish` makes it visible with the record that needs it. The
    /// caller checked the room.
    pub(crate) fn put_unpublished<R: FixedRecord>(&mut self, rec: &R) {
        let size = std::mem::size_of::<R>();
        // SAFETY: per caller, `size` bytes at the 8-aligned append position lie inside our
        // exclusively owned chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(bytemuck::bytes_of(rec).as_ptr(), self.at_pos(), size)
        };
        self.commit += (1u64 << 32) | size as u64;
    }

    /// Moves to a fresh chunk for a record of `kind` that does not fit; when none can be had
    /// (size cap, disk full), counts the record as dropped — and, the first time, marks in the
    /// current chunk where this writer's losses begin.
    #[cold]
    #[inline(never)]
    pub(crate) fn roll(&mut self, kind: u16) -> bool {
        if self.exhausted {
            self.shared.count_dropped(kind, None);
            return false;
        }
        match self.next_chunk() {
            Some((base, slot)) => {
                self.finish_current();
                self.base = base;
                self.slot = slot;
                self.commit = 0;
                self.slots.new_chunk();
                self.cap = self.shared.chunk_size - CHUNK_HEADER_SIZE as u32 - MARKER_ROOM;
                self.place_limit = crate::compact::place_limit(self.cap, self.compact);
                true
            }
            None => {
                self.exhausted = true;
                let ts = self.shared.now();
                self.shared.count_dropped(kind, Some(ts));
                if !self.base.is_null() {
                    self.mark_loss(ts);
                    self.finish_current();
                }
                self.base = std::ptr::null_mut();
                self.cap = 0;
                self.place_limit = 0;
                self.commit = 0;
                false
            }
        }
    }

    /// The next chunk: a FREE slot of this thread's ring (allocating the ring the first time),
    /// else a plain chunk at its final position; and the slot it is in.
    fn next_chunk(&mut self) -> Option<(*mut u8, Option<usize>)> {
        if self.ring.is_none() && self.shared.ring_chunks > 0 && self.base.is_null() {
            self.ring = self.shared.alloc_ring();
        }
        if let Some(ring) = &self.ring {
            ring.rolls.fetch_add(1, Ordering::Relaxed);
            let slot = match ring.free_slot() {
                None if self.shared.flight => self.shared.reuse_oldest(ring),
                free => free,
            };
            if let Some(i) = slot {
                let base = self.shared.start_in_slot(ring.slots[i], self.tid)?;
                ring.state[i].store(FILLING, Ordering::Relaxed);
                return Some((base, Some(i)));
            }
        }
        if self.shared.flight {
            return None; // no ring (the cap holds no more rings): nothing in place either
        }
        self.shared.alloc_chunk(self.tid).map(|b| (b, None))
    }

    /// Hands the current chunk over: a ring slot to the drainer (FULL), a plain chunk to
    /// `release_retired`. The writer never touches it again.
    fn finish_current(&mut self) {
        if self.base.is_null() {
            return;
        }
        match (&self.ring, self.slot.take()) {
            (Some(ring), Some(i)) => {
                ring.state[i].store(FULL, Ordering::Release);
                if let Some(wake) = self.shared.drain_waker.get() {
                    wake();
                }
            }
            _ => self.shared.retire(self.base),
        }
    }

    /// Appends the loss marker — a `Dropped` record with count 0 and the reason — into the
    /// room every chunk keeps for it (the counts are in the header's loss table).
    fn mark_loss(&mut self, ts: u64) {
        let reason = if self.shared.failed.load(Ordering::Relaxed) {
            drop_reason::WRITE_ERROR
        } else {
            drop_reason::SIZE_CAP
        };
        let rec = Dropped {
            hdr: RecordHeader::of::<Dropped>(reason),
            ts,
            count: 0,
        };
        // SAFETY: the chunk keeps MARKER_ROOM bytes past `cap` free, so the record fits in our
        // exclusively owned chunk at the (8-aligned) append position.
        unsafe {
            let dst = self.base.add(CHUNK_HEADER_SIZE + self.pos() as usize);
            std::ptr::copy_nonoverlapping(
                bytemuck::bytes_of(&rec).as_ptr(),
                dst,
                MARKER_ROOM as usize,
            );
        }
        self.publish(MARKER_ROOM);
    }

    /// Whether this writer can no longer append (cap reached or the log failed).
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Whether the current chunk is in a slot of this thread's ring (not yet at its final
    /// position; a drainer copies it there once it is finished).
    pub fn in_ring_slot(&self) -> bool {
        self.slot.is_some()
    }
}

/// Adds one record of `size` bytes to `commit` and publishes it in the chunk at `base`.
#[inline(always)]
pub(crate) fn publish(commit: &mut u64, base: *mut u8, size: u32) {
    *commit += opaque((1u64 << 32) | size as u64);
    // SAFETY: COMMIT_OFFSET is an 8-aligned u64 inside our chunk header, only ever accessed
    // atomically.
    unsafe { (*(base.add(COMMIT_OFFSET) as *const AtomicU64)).store(*commit, Ordering::Release) };
}

/// `v`, unchanged, through an empty `asm!`: a constant the compiler can no longer derive from
/// another. Each record size's commit increment (`1 << 32 | size`, a 64-bit immediate) is
/// then one `movabs` of its own; without, the compiler shares one and adds the difference
/// on the other paths (one more instruction on the hot completion path for receives).
#[inline(always)]
fn opaque(mut v: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty template: no instruction, no memory access, flags preserved.
    unsafe {
        std::arch::asm!("/* {v} */", v = inout(reg) v, options(pure, nomem, nostack, preserves_flags));
    }
    v
}

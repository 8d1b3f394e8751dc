//! Memory access for watchers. **This is the crate's unsafe module for queue memory**: the
//! only place that dereferences addresses taken from the traced program.
//!
//! Watchers only ever *read*. Loads are atomic (acquire for doorbell words, relaxed for ring
//! bodies), which is how Rust expresses reading memory another agent writes concurrently;
//! on x86_64 they compile to plain loads, like volatile reads, and never write to the line.

use std::any::Any;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Why a read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    #[error("address {addr:#x} (+{len}) is outside every region of this queue")]
    OutOfRange { addr: u64, len: usize },
    #[error("address {addr:#x} is not {align}-byte aligned")]
    Misaligned { addr: u64, align: usize },
}

/// Read-only access to the memory of watched queues.
pub trait QueueMemory: Send + Sync {
    /// Loads the 4 bytes at `addr` as stored (native order), with acquire ordering.
    fn load_u32_acquire(&self, addr: u64) -> Result<u32, MemError>;
    /// Copies `dst.len()` bytes from `addr` (relaxed loads).
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemError>;
    /// Orders the preceding reads before the following ones (seqlock-style re-checks).
    fn fence(&self) {
        fence(Ordering::Acquire);
    }
}

/// A host address range a watcher may read.
#[derive(Clone)]
pub struct HostRegion {
    start: u64,
    len: u64,
    _keep: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostRegion({:#x}+{:#x})", self.start, self.len)
    }
}

impl HostRegion {
    /// A region of the traced program's memory.
    ///
    /// # Safety
    /// `[start, start + len)` must be mapped and readable for as long as any watcher holding
    /// this region polls (the interposer unregisters a queue before its memory is freed, e.g.
    /// in the destroy / dereg hook before calling the real function).
    pub unsafe fn new(start: u64, len: u64) -> HostRegion {
        HostRegion {
            start,
            len,
            _keep: None,
        }
    }

    /// A region inside an owned buffer, which the region keeps alive (tests, simulations).
    pub fn of_buffer(buf: &Arc<AlignedBuf>) -> HostRegion {
        HostRegion {
            start: buf.addr(),
            len: buf.len() as u64,
            _keep: Some(buf.clone() as Arc<dyn Any + Send + Sync>),
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.start
            && addr
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.start + self.len)
    }
}

/// Reads host memory inside a fixed set of regions.
#[derive(Clone, Debug, Default)]
pub struct HostMemory {
    regions: Vec<HostRegion>,
}

impl HostMemory {
    pub fn new(regions: Vec<HostRegion>) -> HostMemory {
        HostMemory { regions }
    }

    fn check(&self, addr: u64, len: usize) -> Result<(), MemError> {
        if self.regions.iter().any(|r| r.contains(addr, len)) {
            Ok(())
        } else {
            Err(MemError::OutOfRange { addr, len })
        }
    }
}

impl QueueMemory for HostMemory {
    fn load_u32_acquire(&self, addr: u64) -> Result<u32, MemError> {
        self.check(addr, 4)?;
        if !addr.is_multiple_of(4) {
            return Err(MemError::Misaligned { addr, align: 4 });
        }
        // SAFETY: the 4 bytes lie inside a region whose creator guaranteed they stay mapped
        // while we poll (HostRegion::new's contract, or an owned buffer kept alive by the
        // region); the address is 4-aligned; the load is atomic, so a concurrent writer is
        // not a data race, and it never writes.
        Ok(unsafe { AtomicU32::from_ptr(addr as *mut u32) }.load(Ordering::Acquire))
    }

    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        self.check(addr, dst.len())?;
        let mut i = 0usize;
        while i < dst.len() {
            let a = addr + i as u64;
            if a.is_multiple_of(8) && dst.len() - i >= 8 {
                // SAFETY: inside a checked region (see load_u32_acquire), 8-aligned, atomic
                // relaxed load of memory another agent may be writing; read-only.
                let v = unsafe { AtomicU64::from_ptr(a as *mut u64) }.load(Ordering::Relaxed);
                dst[i..i + 8].copy_from_slice(&v.to_ne_bytes());
                i += 8;
            } else {
                // SAFETY: as above, one byte (no alignment requirement).
                dst[i] = unsafe { AtomicU8::from_ptr(a as *mut u8) }.load(Ordering::Relaxed);
                i += 1;
            }
        }
        Ok(())
    }
}

/// An owned, zeroed, 8-byte-aligned buffer that a simulated producer writes with atomic
/// stores and a watcher reads through a [`HostRegion`].
pub struct AlignedBuf {
    words: Box<[AtomicU64]>,
}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes (rounded up to 8).
    pub fn new(len: usize) -> Arc<AlignedBuf> {
        let n = len.div_ceil(8).max(1);
        Arc::new(AlignedBuf {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.words.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.words.len() * 8
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Stores `bytes` at byte offset `off` (relaxed 8-byte stores; `off` and the length must
    /// be multiples of 8).
    pub fn write(&self, off: usize, bytes: &[u8]) {
        assert!(
            off.is_multiple_of(8) && bytes.len().is_multiple_of(8),
            "unaligned AlignedBuf write"
        );
        for (k, chunk) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
            self.words[off / 8 + k].store(v, Ordering::Relaxed);
        }
    }

    /// Stores the 4 bytes `v` (already in the byte order wanted in memory) at `off` with
    /// release ordering: the doorbell-record update.
    pub fn store_u32_release(&self, off: usize, v: u32) {
        assert!(off.is_multiple_of(4), "unaligned u32 store");
        let w = &self.words[off / 8];
        let k = off % 8;
        // A CAS loop on the containing word keeps the other half intact.
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            let mut bytes = cur.to_ne_bytes();
            bytes[k..k + 4].copy_from_slice(&v.to_ne_bytes());
            let new = u64::from_ne_bytes(bytes);
            match w.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
    }

    /// Stores 8 bytes at `off` with release ordering: the 8-byte doorbell "ring".
    pub fn store_u64_release(&self, off: usize, bytes: [u8; 8]) {
        assert!(off.is_multiple_of(8), "unaligned u64 store");
        self.words[off / 8].store(u64::from_ne_bytes(bytes), Ordering::Release);
    }

    /// Reads bytes (relaxed), for producers and tests.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            let a = off + i;
            *d = self.words[a / 8].load(Ordering::Relaxed).to_ne_bytes()[a % 8];
        }
    }
}

/// A snapshot of (possibly GPU-resident) queue memory copied into host buffers, e.g. with
/// `cuMemcpyDtoH` or gdrcopy before each poll.
#[derive(Clone, Debug, Default)]
pub struct SnapshotMemory {
    segments: Vec<(u64, Vec<u8>)>,
}

impl SnapshotMemory {
    pub fn new() -> SnapshotMemory {
        SnapshotMemory::default()
    }

    /// Replaces (or adds) the copy of the range starting at `addr`.
    pub fn update(&mut self, addr: u64, bytes: &[u8]) {
        if let Some(seg) = self.segments.iter_mut().find(|(a, _)| *a == addr) {
            seg.1.clear();
            seg.1.extend_from_slice(bytes);
        } else {
            self.segments.push((addr, bytes.to_vec()));
        }
    }

    fn find(&self, addr: u64, len: usize) -> Result<&[u8], MemError> {
        for (a, b) in &self.segments {
            if addr >= *a && addr + len as u64 <= *a + b.len() as u64 {
                let o = (addr - a) as usize;
                return Ok(&b[o..o + len]);
            }
        }
        Err(MemError::OutOfRange { addr, len })
    }
}

impl QueueMemory for SnapshotMemory {
    fn load_u32_acquire(&self, addr: u64) -> Result<u32, MemError> {
        let b = self.find(addr, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        dst.copy_from_slice(self.find(addr, dst.len())?);
        Ok(())
    }
}

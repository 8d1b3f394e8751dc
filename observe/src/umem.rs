//! Registries that resolve addresses: devx umems (`umem_id → (addr, size)`) and the CUDA
//! memory map that tells where an address lives (GPU, pinned host, I/O, plain host).

use std::collections::BTreeMap;
use std::collections::HashMap;

use sigmatrace_schemas::mem_kind;

/// A registered devx umem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Umem {
    pub id: u32,
    pub addr: u64,
    pub size: u64,
    /// dmabuf fd for `mlx5dv_devx_umem_reg_ex` with a dmabuf, else None.
    pub dmabuf_fd: Option<i32>,
    /// Handle of the `mlx5dv_devx_umem` object (to match dereg calls).
    pub handle: u64,
}

/// Why a (umem, offset) pair could not be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UmemError {
    #[error("umem {0} is not registered")]
    Unknown(u32),
    #[error("offset {offset:#x} + {len} is outside umem {id} of {size} bytes")]
    OutOfRange {
        id: u32,
        offset: u64,
        len: u64,
        size: u64,
    },
}

/// `umem_id → Umem`.
#[derive(Debug, Default, Clone)]
pub struct UmemRegistry {
    by_id: HashMap<u32, Umem>,
}

impl UmemRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a registration (a re-used id replaces the old entry).
    pub fn register(&mut self, u: Umem) {
        self.by_id.insert(u.id, u);
    }

    /// Removes the umem with this object handle; returns it.
    pub fn deregister_handle(&mut self, handle: u64) -> Option<Umem> {
        let id = self.by_id.values().find(|u| u.handle == handle)?.id;
        self.by_id.remove(&id)
    }

    /// Removes by id.
    pub fn deregister(&mut self, id: u32) -> Option<Umem> {
        self.by_id.remove(&id)
    }

    pub fn get(&self, id: u32) -> Option<&Umem> {
        self.by_id.get(&id)
    }

    /// Resolves `offset` (and `len` bytes after it) inside umem `id` to an address.
    pub fn resolve(&self, id: u32, offset: u64, len: u64) -> Result<u64, UmemError> {
        let u = self.by_id.get(&id).ok_or(UmemError::Unknown(id))?;
        match offset.checked_add(len) {
            Some(end) if end <= u.size => Ok(u.addr + offset),
            _ => Err(UmemError::OutOfRange {
                id,
                offset,
                len,
                size: u.size,
            }),
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// A known memory range and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    pub start: u64,
    pub size: u64,
    /// A [`mem_kind`] value.
    pub kind: u8,
    /// For host memory with a GPU alias (`cuMemHostGetDevicePointer`): the device address.
    pub device_alias: Option<u64>,
}

/// Address ranges learned from CUDA calls; lookups find the range containing an address.
#[derive(Debug, Default, Clone)]
pub struct MemoryMap {
    ranges: BTreeMap<u64, MemRange>,
}

impl MemoryMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the range starting at `start`.
    pub fn insert(&mut self, r: MemRange) {
        self.ranges.insert(r.start, r);
    }

    /// Removes the range starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<MemRange> {
        self.ranges.remove(&start)
    }

    /// The range containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&MemRange> {
        let (_, r) = self.ranges.range(..=addr).next_back()?;
        (addr < r.start.saturating_add(r.size)).then_some(r)
    }

    /// Mutable access to the range containing `addr`.
    pub fn find_mut(&mut self, addr: u64) -> Option<&mut MemRange> {
        let (_, r) = self.ranges.range_mut(..=addr).next_back()?;
        (addr < r.start.saturating_add(r.size)).then_some(r)
    }

    /// Where `addr` lives: the kind of its range, else plain host memory (addresses the
    /// program passes that no CUDA call produced are ordinary process memory).
    pub fn kind_of(&self, addr: u64) -> u8 {
        self.find(addr).map_or(mem_kind::HOST, |r| r.kind)
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

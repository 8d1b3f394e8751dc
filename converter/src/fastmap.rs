//! Hash maps for small integer keys (QPNs, handles, tuples of them) on the hot path: a cheap
//! multiplicative hasher instead of SipHash, and a direct-mapped cache in front of `qpn → index`.

/// A fast, non-cryptographic hasher for small integer keys (QPNs, handles, tuples of them).
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// `BuildHasher` of [`FastHasher`].
pub type FastBuild = std::hash::BuildHasherDefault<FastHasher>;
/// HashMap with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;

/// A direct-mapped cache in front of a `qpn → index` map: the few hot QPs of a process resolve
/// without hashing.
#[derive(Clone)]
pub struct IndexCache {
    /// (qpn, index + 1); index 0 marks an empty slot.
    slots: [(u32, u32); 64],
}

impl Default for IndexCache {
    fn default() -> Self {
        IndexCache {
            slots: [(0, 0); 64],
        }
    }
}

impl IndexCache {
    #[inline]
    pub fn get(&mut self, map: &FastMap<u32, usize>, qpn: u32) -> Option<usize> {
        let s = &mut self.slots[(qpn.wrapping_mul(0x9e37_79b1) >> 26) as usize];
        if s.0 == qpn && s.1 != 0 {
            return Some(s.1 as usize - 1);
        }
        let i = *map.get(&qpn)?;
        *s = (qpn, i as u32 + 1);
        Some(i)
    }
}

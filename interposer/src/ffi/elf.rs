//! Symbol lookup in the dynamic symbol table of a loaded object, without `dlsym`.
//!
//! The interposer exports `dlsym` and `dlvsym` itself, so a plain call to either from inside
//! the library — even a versioned reference — binds back to our own export. The real ones are
//! found here instead: walk the loaded objects with `dl_iterate_phdr` (not interposed), find
//! libc's `PT_DYNAMIC`, and look the name up through its GNU (or SysV) hash table.

use std::ffi::{c_int, c_void, CStr};

use libc::{dl_phdr_info, size_t, Elf64_Sym};

/// `Elf64_Dyn` (not in the libc crate).
#[repr(C)]
struct Elf64_Dyn {
    d_tag: i64,
    d_val: u64,
}

const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const PT_DYNAMIC: u32 = 2;
const SHN_UNDEF: u16 = 0;

/// Looks `name` up in the first loaded object whose path contains `object`
/// (e.g. `"libc.so.6"`). Prefers the default (non-hidden) version of the symbol.
pub fn lookup(object: &CStr, name: &CStr) -> Option<usize> {
    let mut q = Query {
        object: object.to_bytes(),
        name: name.to_bytes(),
        found: None,
    };
    // SAFETY: the callback only reads the phdr info glibc passes and our Query through `data`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(callback), (&mut q as *mut Query).cast()) };
    q.found
}

struct Query<'a> {
    object: &'a [u8],
    name: &'a [u8],
    found: Option<usize>,
}

unsafe extern "C" fn callback(info: *mut dl_phdr_info, _size: size_t, data: *mut c_void) -> c_int {
    // SAFETY: glibc passes a valid dl_phdr_info; `data` is the &mut Query given to lookup().
    let (info, q) = unsafe { (&*info, &mut *(data as *mut Query)) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    if !contains(path, q.object) {
        return 0;
    }
    // SAFETY: the object is loaded (we are inside dl_iterate_phdr), so its program headers and
    // dynamic section are mapped and stay so for the duration of the callback.
    q.found = unsafe { lookup_in(info, q.name) };
    1
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The tables of one object, as absolute addresses.
struct Tables {
    base: usize,
    symtab: *const Elf64_Sym,
    strtab: *const u8,
    gnu_hash: *const u32,
    sysv_hash: *const u32,
    versym: *const u16,
}

/// # Safety
/// `info` must describe a loaded object whose headers are mapped.
unsafe fn lookup_in(info: &dl_phdr_info, name: &[u8]) -> Option<usize> {
    let base = info.dlpi_addr as usize;
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers of a loaded object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let dynamic = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC)?;
    let mut dynp = (base + dynamic.p_vaddr as usize) as *const Elf64_Dyn;
    // Dynamic entries hold link-time addresses unless the loader relocated them in place
    // (glibc does on x86_64); anything below the load base is still relative.
    let abs = |v: u64| -> usize {
        let v = v as usize;
        if v < base {
            v + base
        } else {
            v
        }
    };
    let mut t = Tables {
        base,
        symtab: std::ptr::null(),
        strtab: std::ptr::null(),
        gnu_hash: std::ptr::null(),
        sysv_hash: std::ptr::null(),
        versym: std::ptr::null(),
    };
    loop {
        // SAFETY: the dynamic section is an array terminated by DT_NULL.
        let d = unsafe { &*dynp };
        match d.d_tag {
            DT_NULL => break,
            DT_SYMTAB => t.symtab = abs(d.d_val) as *const Elf64_Sym,
            DT_STRTAB => t.strtab = abs(d.d_val) as *const u8,
            DT_GNU_HASH => t.gnu_hash = abs(d.d_val) as *const u32,
            DT_HASH => t.sysv_hash = abs(d.d_val) as *const u32,
            DT_VERSYM => t.versym = abs(d.d_val) as *const u16,
            _ => {}
        }
        // SAFETY: not past DT_NULL yet.
        dynp = unsafe { dynp.add(1) };
    }
    if t.symtab.is_null() || t.strtab.is_null() {
        return None;
    }
    let mut best: Option<usize> = None;
    let mut consider = |idx: u32| -> bool {
        // SAFETY: idx comes from the object's own hash table, so it indexes its symbol table.
        let sym = unsafe { &*t.symtab.add(idx as usize) };
        if sym.st_shndx == SHN_UNDEF || sym.st_value == 0 {
            return false;
        }
        // SAFETY: st_name is an offset into the string table of NUL-terminated names.
        let sname = unsafe { CStr::from_ptr(t.strtab.add(sym.st_name as usize).cast()) };
        if sname.to_bytes() != name {
            return false;
        }
        let addr = t.base + sym.st_value as usize;
        // SAFETY: DT_VERSYM, when present, has one entry per symbol table entry.
        let hidden = !t.versym.is_null() && unsafe { *t.versym.add(idx as usize) } & 0x8000 != 0;
        if !hidden {
            best = Some(addr);
            return true;
        }
        best.get_or_insert(addr);
        false
    };
    if !t.gnu_hash.is_null() {
        // SAFETY: a well-formed DT_GNU_HASH table of the loaded object.
        unsafe { gnu_walk(t.gnu_hash, name, &mut consider) };
    } else if !t.sysv_hash.is_null() {
        // SAFETY: a well-formed DT_HASH table of the loaded object.
        unsafe { sysv_walk(t.sysv_hash, name, &mut consider) };
    }
    best
}

/// The GNU hash function (djb2 variant).
pub fn gnu_hash(name: &[u8]) -> u32 {
    name.iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

/// The SysV ELF hash function.
pub fn sysv_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(c as u32);
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

/// Calls `f` for each symbol index in `name`'s hash chain until it returns true.
///
/// # Safety
/// `table` must point to a valid DT_GNU_HASH section.
unsafe fn gnu_walk(table: *const u32, name: &[u8], f: &mut impl FnMut(u32) -> bool) {
    // SAFETY (whole fn): offsets follow the DT_GNU_HASH layout: nbuckets, symoffset,
    // bloom_size, bloom_shift, bloom[bloom_size] (u64), buckets[nbuckets], chains[].
    unsafe {
        let nbuckets = *table;
        let symoffset = *table.add(1);
        let bloom_size = *table.add(2);
        if nbuckets == 0 {
            return;
        }
        let buckets = table.add(4 + bloom_size as usize * 2);
        let chains = buckets.add(nbuckets as usize);
        let h = gnu_hash(name);
        let mut idx = *buckets.add((h % nbuckets) as usize);
        if idx < symoffset {
            return;
        }
        loop {
            let ch = *chains.add((idx - symoffset) as usize);
            if (ch | 1) == (h | 1) && f(idx) {
                return;
            }
            if ch & 1 != 0 {
                return;
            }
            idx += 1;
        }
    }
}

/// Calls `f` for each symbol index in `name`'s SysV hash chain until it returns true.
///
/// # Safety
/// `table` must point to a valid DT_HASH section.
unsafe fn sysv_walk(table: *const u32, name: &[u8], f: &mut impl FnMut(u32) -> bool) {
    // SAFETY (whole fn): DT_HASH layout: nbucket, nchain, bucket[nbucket], chain[nchain].
    unsafe {
        let nbucket = *table;
        let nchain = *table.add(1);
        if nbucket == 0 {
            return;
        }
        let bucket = table.add(2);
        let chain = bucket.add(nbucket as usize);
        let mut idx = *bucket.add((sysv_hash(name) % nbucket) as usize);
        let mut guard = 0;
        while idx != 0 && idx < nchain && guard < nchain {
            if f(idx) {
                return;
            }
            idx = *chain.add(idx as usize);
            guard += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_functions_at_the_addresses_the_linker_bound() {
        let dlsym_addr = lookup(c"libc.so.6", c"dlsym").expect("dlsym in libc");
        assert_eq!(dlsym_addr, libc::dlsym as *const () as usize);
        let dlvsym_addr = lookup(c"libc.so.6", c"dlvsym").expect("dlvsym in libc");
        // SAFETY: plain dlsym lookup of a libc function (the test binary does not interpose).
        let via_dlsym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlvsym".as_ptr()) } as usize;
        assert_eq!(dlvsym_addr, via_dlsym);
    }

    #[test]
    fn missing_names_and_objects_are_none() {
        assert_eq!(lookup(c"libc.so.6", c"no_such_symbol_sigmatrace"), None);
        assert_eq!(lookup(c"libnot-loaded.so", c"dlsym"), None);
    }

    #[test]
    fn hash_functions_match_known_values() {
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(sysv_hash(b"printf"), 0x0779_05a6);
    }
}

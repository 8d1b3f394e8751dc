//! The file header: a 4096-byte page at offset 0 (see FORMAT.md).

use bytemuck::{Pod, Zeroable};

use crate::clock::TimestampSource;
use crate::records::ClockSnapshot;
use crate::{FORMAT_MAJOR, FORMAT_MINOR, MAGIC};

/// Size of the header page.
pub const HEADER_SIZE: usize = 4096;
/// Value of the endianness marker as the writer stores it natively.
pub const ENDIAN_MARKER: u32 = 0x0102_0304;
/// Offset of the live dropped-events counter (an aligned u64) inside the header.
pub const DROPPED_OFFSET: usize = 120;
/// Offset of the live allocated-chunks counter (an aligned u32) inside the header.
pub const CHUNKS_OFFSET: usize = 128;
/// Offset of the tag-length-value string area.
pub const STRINGS_OFFSET: usize = std::mem::size_of::<RawHeader>();
/// Offset of the loss table (format 1.1, header flag [`FLAG_LOSS_TABLE`]): [`LOSS_SLOTS`]
/// live u64 counters at the end of the header page; the string area ends before it.
pub const LOSS_TABLE_OFFSET: usize = HEADER_SIZE - LOSS_SLOTS * 8;
/// Slots of the loss table: slot 0 = timestamp of the first lost event (0 = none), slot k
/// (1 ≤ k < [`LOSS_SLOTS`]) = events of record kind k that were dropped.
pub const LOSS_SLOTS: usize = 64;

/// Fixed part of the header, exactly as stored.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RawHeader {
    pub magic: [u8; 8],
    pub major: u16,
    pub minor: u16,
    pub endian: u32,
    pub header_size: u32,
    pub chunk_size: u32,
    pub pointer_size: u8,
    pub ts_source: u8,
    pub flags: u16,
    pub pid: u32,
    pub ppid: u32,
    pub rank: i32,
    pub local_rank: i32,
    pub world_size: i32,
    pub tsc_hz: u64,
    pub start: [u64; 6],
    pub boot_id: [u8; 16],
    pub dropped: u64,
    pub chunks_allocated: u32,
    pub _reserved: u32,
}

const _: () = assert!(std::mem::size_of::<RawHeader>() == 136);
const _: () = assert!(std::mem::offset_of!(RawHeader, dropped) == DROPPED_OFFSET);
const _: () = assert!(std::mem::offset_of!(RawHeader, chunks_allocated) == CHUNKS_OFFSET);

/// Header flag: the command line string was truncated to fit the header page.
pub const FLAG_CMDLINE_TRUNCATED: u16 = 1;
/// Header flag: the page ends with the loss table at [`LOSS_TABLE_OFFSET`] (format ≥ 1.1).
pub const FLAG_LOSS_TABLE: u16 = 2;

/// What the writer could not record, from the header's live counters: the total and, for
/// logs with a loss table, the count per record kind and when the first loss happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Events dropped in all (header offset 120).
    pub total: u64,
    /// Timestamp (the log's timestamp source) of the first dropped event, if any was dropped
    /// and the log has a loss table.
    pub first_ts: Option<u64>,
    /// (record kind id, events dropped), ascending kind, non-zero counts only; empty without
    /// a loss table. Kinds with ids ≥ [`LOSS_SLOTS`] are counted in `total` only.
    pub by_kind: Vec<(u16, u64)>,
}

impl Losses {
    /// Reads the counters of a header page (`page` at least [`HEADER_SIZE`] bytes).
    pub fn from_page(page: &[u8]) -> Losses {
        let word = |off: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&page[off..off + 8]);
            u64::from_ne_bytes(b)
        };
        let flags = u16::from_ne_bytes([page[26], page[27]]);
        let mut l = Losses {
            total: word(DROPPED_OFFSET),
            ..Default::default()
        };
        if flags & FLAG_LOSS_TABLE != 0 {
            let first = word(LOSS_TABLE_OFFSET);
            l.first_ts = (first != 0).then_some(first);
            l.by_kind = (1..LOSS_SLOTS)
                .map(|k| (k as u16, word(LOSS_TABLE_OFFSET + k * 8)))
                .filter(|&(_, n)| n != 0)
                .collect();
        }
        l
    }

    /// Events of kind `kind` dropped (0 when the log has no loss table).
    pub fn of(&self, kind: u16) -> u64 {
        self.by_kind
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }
}

/// Tags of the string area.
pub mod tag {
    pub const END: u16 = 0;
    pub const HOSTNAME: u16 = 1;
    /// Arguments separated by NUL bytes.
    pub const CMDLINE: u16 = 2;
    pub const EXE: u16 = 3;
    /// Name of the environment variable the rank came from.
    pub const RANK_SOURCE: u16 = 4;
    /// Free-form `key=value` (repeatable).
    pub const ATTR: u16 = 5;
}

/// Rank / local rank / world size as the launcher's environment says (-1 = unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// Which variable the rank came from (e.g. `OMPI_COMM_WORLD_RANK`).
    pub source: String,
}

impl RankInfo {
    /// Reads the rank from MPI (Open MPI, MPICH/PMI), PMIx, Slurm or torchrun variables.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Same as [`RankInfo::from_env`] with an explicit variable lookup (testable).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
        // (rank var, local-rank vars, size vars) in priority order.
        const SCHEMES: &[(&str, &[&str], &[&str])] = &[
            (
                "OMPI_COMM_WORLD_RANK",
                &["OMPI_COMM_WORLD_LOCAL_RANK"],
                &["OMPI_COMM_WORLD_SIZE"],
            ),
            (
                "PMIX_RANK",
                &[
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "MPI_LOCALRANKID",
                    "SLURM_LOCALID",
                ],
                &[
                    "PMIX_SIZE",
                    "OMPI_COMM_WORLD_SIZE",
                    "PMI_SIZE",
                    "SLURM_NTASKS",
                ],
            ),
            (
                "PMI_RANK",
                &["MPI_LOCALRANKID", "PMI_LOCAL_RANK"],
                &["PMI_SIZE"],
            ),
            ("SLURM_PROCID", &["SLURM_LOCALID"], &["SLURM_NTASKS"]),
            ("RANK", &["LOCAL_RANK"], &["WORLD_SIZE"]),
        ];
        for (rank_var, locals, sizes) in SCHEMES {
            if let Some(rank) = num(rank_var) {
                return RankInfo {
                    rank: Some(rank),
                    local_rank: locals.iter().find_map(|k| num(k)),
                    world_size: sizes.iter().find_map(|k| num(k)),
                    source: (*rank_var).to_string(),
                };
            }
        }
        RankInfo::default()
    }
}

/// Everything the header says about the process, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub major: u16,
    pub minor: u16,
    pub header_size: u32,
    pub chunk_size: u32,
    pub pointer_size: u8,
    pub ts_source: TimestampSource,
    pub flags: u16,
    pub pid: u32,
    pub ppid: u32,
    pub rank: RankInfo,
    /// Estimated rate of the timestamp source in Hz.
    pub tsc_hz: u64,
    /// Clock snapshot taken when the log was created.
    pub start: ClockSnapshot,
    pub boot_id: [u8; 16],
    pub hostname: String,
    /// Command line arguments.
    pub cmdline: Vec<String>,
    pub exe: String,
    /// Extra `key=value` attributes.
    pub attrs: Vec<String>,
    /// Events dropped by the writer (size cap reached, write errors), as last published.
    pub dropped: u64,
    /// Chunks the writer had allocated, as last published.
    pub chunks_allocated: u32,
}

impl FileHeader {
    /// [`Self::for_current_process`] with the detected timestamp source
    /// ([`Timestamper::detect`](crate::Timestamper::detect)), a nominal 1 GHz rate and a clock
    /// snapshot taken now: for tests, benchmarks and tools whose timestamps need no calibration.
    pub fn uncalibrated(chunk_size: u32) -> Self {
        let ts = crate::Timestamper::detect();
        Self::for_current_process(ts.source(), 1_000_000_000, ts.snapshot(), chunk_size)
    }

    /// A header describing the current process. `tsc_hz` and `start` come from the caller.
    pub fn for_current_process(
        ts_source: TimestampSource,
        tsc_hz: u64,
        start: ClockSnapshot,
        chunk_size: u32,
    ) -> Self {
        let cmdline = std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let exe = std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        FileHeader {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            header_size: HEADER_SIZE as u32,
            chunk_size,
            pointer_size: std::mem::size_of::<usize>() as u8,
            ts_source,
            flags: 0,
            pid: std::process::id(),
            // SAFETY: getppid has no preconditions.
            ppid: unsafe { libc::getppid() } as u32,
            rank: RankInfo::from_env(),
            tsc_hz,
            start,
            boot_id: read_boot_id(),
            hostname: hostname(),
            cmdline,
            exe,
            attrs: node_from_env()
                .map(|n| format!("node={n}"))
                .into_iter()
                .collect(),
            dropped: 0,
            chunks_allocated: 0,
        }
    }

    /// The logical node of the process (attribute `node=`), for several simulated nodes on one
    /// machine (see [`node_from_env`]).
    pub fn node(&self) -> Option<&str> {
        self.attrs.iter().find_map(|a| a.strip_prefix("node="))
    }

    /// Encodes the header page.
    pub fn encode(&self) -> Vec<u8> {
        let opt = |v: Option<u32>| v.map(|x| x as i32).unwrap_or(-1);
        let s = &self.start;
        let mut flags = self.flags;
        let raw = RawHeader {
            magic: MAGIC,
            major: self.major,
            minor: self.minor,
            endian: ENDIAN_MARKER,
            header_size: HEADER_SIZE as u32,
            chunk_size: self.chunk_size,
            pointer_size: self.pointer_size,
            ts_source: self.ts_source as u8,
            flags: 0,
            pid: self.pid,
            ppid: self.ppid,
            rank: opt(self.rank.rank),
            local_rank: opt(self.rank.local_rank),
            world_size: opt(self.rank.world_size),
            tsc_hz: self.tsc_hz,
            start: [
                s.ts,
                s.monotonic,
                s.monotonic_raw,
                s.boottime,
                s.realtime,
                s.ts_after,
            ],
            boot_id: self.boot_id,
            dropped: self.dropped,
            chunks_allocated: self.chunks_allocated,
            _reserved: 0,
        };
        let mut page = vec![0u8; HEADER_SIZE];
        page[..STRINGS_OFFSET].copy_from_slice(bytemuck::bytes_of(&raw));
        let mut pos = STRINGS_OFFSET;
        // Keep room for the END tag; the loss table (zero) follows the strings.
        flags |= FLAG_LOSS_TABLE;
        let limit = LOSS_TABLE_OFFSET - 4;
        let mut put = |tag: u16, bytes: &[u8], page: &mut Vec<u8>| -> bool {
            let room = limit.saturating_sub(pos + 4);
            let n = bytes.len().min(room).min(u16::MAX as usize);
            page[pos..pos + 2].copy_from_slice(&tag.to_ne_bytes());
            page[pos + 2..pos + 4].copy_from_slice(&(n as u16).to_ne_bytes());
            page[pos + 4..pos + 4 + n].copy_from_slice(&bytes[..n]);
            pos += 4 + n;
            n == bytes.len()
        };
        put(tag::HOSTNAME, self.hostname.as_bytes(), &mut page);
        put(tag::EXE, self.exe.as_bytes(), &mut page);
        put(tag::RANK_SOURCE, self.rank.source.as_bytes(), &mut page);
        for a in &self.attrs {
            put(tag::ATTR, a.as_bytes(), &mut page);
        }
        let cmd = self.cmdline.join("\0");
        if !put(tag::CMDLINE, cmd.as_bytes(), &mut page) {
            flags |= FLAG_CMDLINE_TRUNCATED;
        }
        page[26..28].copy_from_slice(&flags.to_ne_bytes());
        page
    }
}

/// The logical node this process plays when several simulated nodes share one machine:
/// `SIGMATRACE_NODE`, else softnic's `SOFTNIC_NODE`. Real multi-host runs leave both unset.
pub fn node_from_env() -> Option<String> {
    ["SIGMATRACE_NODE", "SOFTNIC_NODE"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty() && v.len() <= 64)
}

/// The host name, or "unknown".
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// /proc/sys/kernel/random/boot_id as 16 bytes (zero if unreadable).
pub fn read_boot_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = text
            .bytes()
            .filter(|b| b.is_ascii_hexdigit())
            .map(|b| (b as char).to_digit(16).unwrap_or(0) as u8)
            .collect();
        for (i, pair) in hex.chunks(2).take(16).enumerate() {
            id[i] = pair[0] << 4 | pair.get(1).copied().unwrap_or(0);
        }
    }
    id
}

/// Formats a boot id as the kernel prints it.
pub fn format_boot_id(id: &[u8; 16]) -> String {
    let h: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

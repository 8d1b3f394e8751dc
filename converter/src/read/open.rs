//! Input hygiene: which files of the command line are logs, which can be read, and which are
//! copies of each other. Nothing is dropped without a word: every file or byte range that is
//! not converted becomes a warning naming the file (and the offset), which the caller prints
//! on stderr and puts into the stats report.
//!
//! Exit policy (decided here, mapped to codes only by `main()`): what is valid is converted;
//! a file that cannot be read (permission, damaged header or magic, too short) is skipped with
//! a warning; the conversion fails only when no log at all is usable (the first reason is the
//! error), or when a log is of a newer major format (a newer converter reads it; skipped with
//! `--skip-unreadable`).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sigmatrace_schemas::header::ENDIAN_MARKER;
use sigmatrace_schemas::reader::ReadError;
use sigmatrace_schemas::{HEADER_SIZE, MAGIC};

use crate::error::ConvertError;
use crate::read::input::LogInput;

/// The usable logs and what was said about the others.
pub struct Opened {
    /// Readable, selected logs, sorted by path, each process once (may be empty when the
    /// selection left none).
    pub inputs: Vec<LogInput>,
    /// Files found (logs and damaged logs).
    pub files: usize,
    pub warnings: Vec<String>,
}

/// What the first bytes of a file say.
enum Sniff {
    Log,
    /// Not the log magic, but the rest of the header's fixed fields are a log's: a log whose
    /// first bytes were damaged (reported, never skipped silently).
    DamagedLog,
    Other,
}

fn sniff(path: &Path) -> std::io::Result<Sniff> {
    let mut b = [0u8; 20];
    let mut f = std::fs::File::open(path)?;
    let n = f.read(&mut b)?;
    if n >= 8 && b[..8] == MAGIC {
        return Ok(Sniff::Log);
    }
    let endian = u32::from_ne_bytes(b[12..16].try_into().expect("4 bytes"));
    let header = u32::from_ne_bytes(b[16..20].try_into().expect("4 bytes"));
    Ok(
        if n == 20 && endian == ENDIAN_MARKER && header as usize == HEADER_SIZE {
            Sniff::DamagedLog
        } else {
            Sniff::Other
        },
    )
}

/// Files given on the command line are taken as given; directories are searched recursively
/// for logs (files with the log magic, or with a damaged magic but a log's header). Unreadable
/// files and directories met on the way are named in `warnings`.
fn expand(inputs: &[PathBuf], warnings: &mut Vec<String>) -> Result<Vec<PathBuf>, ConvertError> {
    let mut out = Vec::new();
    for p in inputs {
        let md = std::fs::metadata(p).map_err(|source| ConvertError::Io {
            path: p.clone(),
            source,
        })?;
        if md.is_dir() {
            walk(p, &mut out, warnings);
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, warnings: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).and_then(|rd| rd.collect::<Result<Vec<_>, _>>());
    let mut entries = match entries {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!(
                "{}: cannot read directory: {e}; logs in it are not converted",
                dir.display()
            ));
            return;
        }
    };
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        match e.file_type() {
            Ok(ft) if ft.is_dir() => walk(&path, out, warnings),
            Ok(ft) if ft.is_file() => match sniff(&path) {
                Ok(Sniff::Log | Sniff::DamagedLog) => out.push(path),
                Ok(Sniff::Other) => {}
                Err(e) => warnings.push(format!(
                    "{}: cannot read: {e}; skipped (if it is a log, its process is missing)",
                    path.display()
                )),
            },
            Ok(_) => {}
            Err(e) => warnings.push(format!("{}: {e}; skipped", path.display())),
        }
    }
}

/// Expands `paths`, opens every log (in parallel), reports damaged and missing parts and
/// drops duplicate copies of a log. See the module documentation for the exit policy.
/// Only logs whose header `select` accepts are kept (and reported on).
pub fn open_logs(
    paths: &[PathBuf],
    skip_unreadable: bool,
    select: impl Fn(&sigmatrace_schemas::FileHeader) -> bool,
) -> Result<Opened, ConvertError> {
    let mut warnings = Vec::new();
    let files = expand(paths, &mut warnings)?;
    if files.is_empty() {
        return Err(ConvertError::NoInputs(
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    let opened: Vec<Result<LogInput, ConvertError>> =
        files.par_iter().map(|p| LogInput::open(p)).collect();
    let mut inputs = Vec::new();
    let mut first_error = None;
    for r in opened {
        match r {
            Ok(i) => inputs.push(i),
            Err(ConvertError::Read(e @ ReadError::NewerVersion { .. })) if !skip_unreadable => {
                return Err(ConvertError::Read(e))
            }
            Err(e) => {
                warnings.push(format!("skipped: {e}"));
                first_error.get_or_insert(e);
            }
        }
    }
    if inputs.is_empty() {
        return Err(first_error.unwrap_or_else(|| ConvertError::NoInputs(String::new())));
    }
    drop_copies(&mut inputs, &mut warnings);
    inputs.retain(|i| select(i.file.header()));
    for i in &inputs {
        damage_warnings(i, &mut warnings);
    }
    Ok(Opened {
        inputs,
        files: files.len(),
        warnings,
    })
}

/// One log per process: files with the same host, pid and start time are copies (a log copied
/// into a subdirectory, a directory given twice under two names). The copy with the most
/// bytes is kept (the first path on a tie); each other one is a warning.
fn drop_copies(inputs: &mut Vec<LogInput>, warnings: &mut Vec<String>) {
    let key = |i: &LogInput| {
        let h = i.file.header();
        (h.hostname.clone(), h.pid, h.start.ts, h.start.realtime)
    };
    let mut best: HashMap<_, usize> = HashMap::new();
    for (n, i) in inputs.iter().enumerate() {
        let e = best.entry(key(i)).or_insert(n);
        if i.bytes > inputs[*e].bytes {
            *e = n;
        }
    }
    if best.len() == inputs.len() {
        return;
    }
    let keep: Vec<bool> = (0..inputs.len())
        .map(|n| best[&key(&inputs[n])] == n)
        .collect();
    for (n, i) in inputs.iter().enumerate() {
        if !keep[n] {
            let kept = &inputs[best[&key(i)]];
            warnings.push(format!(
                "{}: same host ({}), pid ({}) and start time as {}: a copy of one process's log, counted once (converting {})",
                i.path.display(),
                i.file.header().hostname,
                i.file.header().pid,
                kept.path.display(),
                kept.path.display()
            ));
        }
    }
    let mut n = 0;
    inputs.retain(|_| {
        n += 1;
        keep[n - 1]
    });
}

/// Salvage findings of one log: damaged or truncated chunks, chunks missing at the end, a
/// newer minor version.
fn damage_warnings(i: &LogInput, warnings: &mut Vec<String>) {
    let s = i.file.salvage();
    for issue in &s.issues {
        warnings.push(format!(
            "{}: offset {}: {}",
            i.path.display(),
            issue.offset,
            issue.message
        ));
    }
    if let Some(m) = i.missing_chunks {
        let cs = u64::from(i.file.header().chunk_size);
        let (which, within) = if m.at_end {
            (format!("the last {}", m.count), "")
        } else {
            (format!("{} positions", m.count), "within ")
        };
        warnings.push(format!(
            "{}: offset {}: file truncated: the header counts {} allocated chunks, {which} ({} bytes, {within}offsets {}..{}) are not in the file; their records are lost",
            i.path.display(),
            m.first,
            i.file.header().chunks_allocated,
            m.count * cs,
            m.first,
            m.end
        ));
    }
    let h = i.file.header();
    if (h.major, h.minor)
        > (
            sigmatrace_schemas::FORMAT_MAJOR,
            sigmatrace_schemas::FORMAT_MINOR,
        )
    {
        warnings.push(format!(
            "{}: format {}.{} is newer than this reader's {}.{}; unknown record kinds are skipped",
            i.path.display(),
            h.major,
            h.minor,
            sigmatrace_schemas::FORMAT_MAJOR,
            sigmatrace_schemas::FORMAT_MINOR
        ));
    }
}

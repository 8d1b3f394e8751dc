//! The output side: how finished blocks are compressed ([`Blocks`]) and the one writer thread
//! that puts them in the file in process order.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::ConvertError;
use crate::model::emit::{Detail, Format};
use crate::model::order::{Block, BlockOrder};
use crate::pipeline::options::ConvertOptions;
use sigmatrace_timeline::chrome;
use sigmatrace_timeline::perfetto;

/// The writer thread: `header`, every block from `rx` in process order
/// ([`crate::model::order`]: the same bytes whatever the number of workers), the Chrome JSON
/// footer. Returns the bytes written.
pub(super) fn spawn_writer(
    path: PathBuf,
    header: Vec<u8>,
    rx: std::sync::mpsc::Receiver<Block>,
    json: bool,
    processes: usize,
) -> std::thread::JoinHandle<Result<u64, ConvertError>> {
    std::thread::spawn(move || -> Result<u64, ConvertError> {
        let werr = |source| ConvertError::Output {
            path: path.clone(),
            source,
        };
        // Regular files are written under a temporary name and renamed when complete, so a
        // failed conversion never leaves a truncated trace behind; devices and pipes are
        // written directly.
        let special = std::fs::metadata(&path).is_ok_and(|m| !m.is_file());
        let tmp = if special {
            path.clone()
        } else {
            let mut t = path.clone().into_os_string();
            t.push(".partial");
            PathBuf::from(t)
        };
        let write = || -> Result<u64, ConvertError> {
            let f = std::fs::File::create(&tmp).map_err(werr)?;
            // Blocks (~0.3 MiB) are larger than the buffer and go straight to the file.
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            let mut n = header.len() as u64;
            w.write_all(&header).map_err(werr)?;
            let mut spill = tmp.clone().into_os_string();
            spill.push(".spill");
            let mut order = BlockOrder::new(processes, Path::new(&spill));
            for msg in rx {
                n += order.push(msg, &mut w).map_err(werr)?;
            }
            if json {
                w.write_all(chrome::FOOTER).map_err(werr)?;
                n += chrome::FOOTER.len() as u64;
            }
            w.flush().map_err(werr)?;
            Ok(n)
        };
        let r = write();
        if !special {
            match &r {
                Ok(_) => std::fs::rename(&tmp, &path).map_err(werr)?,
                Err(_) => {
                    let _ = std::fs::remove_file(&tmp);
                }
            }
        }
        r
    })
}

/// How output blocks are compressed.
#[derive(Clone, Copy)]
pub(super) struct Blocks {
    pub(super) compress: bool,
    pub(super) level: u32,
    /// The sinks compress while encoding (structured deflate).
    pub(super) fast: bool,
}

impl Blocks {
    pub(super) fn of(opts: &ConvertOptions) -> Blocks {
        let compress = opts.compress_level > 0 && opts.format == Format::Perfetto;
        let level = opts.compress_level.min(9);
        // Level 1: the sinks compress while encoding (structured deflate, `perfetto::fastz`),
        // except at full detail, whose per-WR args (ids, addresses) repeat at distances the
        // one-candidate matcher does not see: zlib compresses those smaller. Higher levels: zlib
        // over each finished block.
        let fast = compress && level == 1 && opts.detail != Detail::Full;
        Blocks {
            compress,
            level,
            fast,
        }
    }

    /// A finished block as it goes to the writer (zlib unless the sink compressed already).
    pub(super) fn finish(&self, b: Vec<u8>) -> Vec<u8> {
        if self.compress && !self.fast {
            perfetto::compress_block(&b, self.level)
        } else {
            b
        }
    }
}

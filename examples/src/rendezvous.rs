//! File-based rendezvous for ranks on one machine (or a shared file system): each rank
//! publishes a small text record atomically (write + rename) and waits for its peers'.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Rendezvous failures.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("rendezvous directory {dir}: {err}")]
    Io { dir: PathBuf, err: std::io::Error },
    #[error("rank {rank} did not publish {key} in {dir} within {secs} s")]
    Timeout {
        dir: PathBuf,
        rank: u32,
        key: String,
        secs: u64,
    },
}

/// Publishes `value` as `key` of `rank`.
pub fn publish(dir: &Path, rank: u32, key: &str, value: &str) -> Result<(), RendezvousError> {
    let io = |err| RendezvousError::Io {
        dir: dir.to_owned(),
        err,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(".{key}.{rank}.tmp"));
    std::fs::write(&tmp, value).map_err(io)?;
    std::fs::rename(&tmp, dir.join(format!("{key}.{rank}"))).map_err(io)
}

/// Waits for `key` of `rank`, up to `timeout`.
pub fn fetch(
    dir: &Path,
    rank: u32,
    key: &str,
    timeout: Duration,
) -> Result<String, RendezvousError> {
    let path = dir.join(format!("{key}.{rank}"));
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(&path) {
            return Ok(s);
        }
        if start.elapsed() > timeout {
            return Err(RendezvousError::Timeout {
                dir: dir.to_owned(),
                rank,
                key: key.to_owned(),
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

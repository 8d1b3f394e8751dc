//! Files in the shared output directory as the only channel between shards: no daemon, no MPI
//! library. Every shard writes its file of a round (`<round>.<k>`) under a temporary name and
//! renames it into place, so a file that exists is complete (rename is atomic, also on NFS,
//! whose close-to-open consistency makes the data visible to whoever opens it after the
//! rename). Waiting polls for the files of every shard, with a timeout whose error names the
//! shards that are missing; a shard that fails writes `failed.<k>` with its error, so the
//! others stop at once instead of waiting out the timeout.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::ConvertError;

/// Environment variable: seconds a shard waits for the others (default [`DEFAULT_TIMEOUT_S`]).
pub const TIMEOUT_ENV: &str = "SIGMATRACE_SHARD_TIMEOUT";
pub const DEFAULT_TIMEOUT_S: u64 = 600;

/// One shard's view of the exchange directory.
pub struct Exchange {
    pub dir: PathBuf,
    pub rank: usize,
    pub size: usize,
    timeout: Duration,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Output {
        path: path.to_owned(),
        source,
    }
}

impl Exchange {
    /// The exchange directory of this launch (`dir`), created if needed; this shard's files of
    /// an earlier, failed run under the same launch key are removed.
    pub fn open(dir: PathBuf, rank: usize, size: usize) -> Result<Exchange, ConvertError> {
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let secs = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(DEFAULT_TIMEOUT_S);
        let ex = Exchange {
            dir,
            rank,
            size,
            timeout: Duration::from_secs(secs),
        };
        for round in ["hosts", "meta", "result", "failed"] {
            let _ = std::fs::remove_file(ex.file(round, rank));
        }
        let _ = std::fs::remove_dir_all(ex.logs_dir(rank));
        Ok(ex)
    }

    /// `<dir>/<round>.<k>`.
    pub fn file(&self, round: &str, k: usize) -> PathBuf {
        self.dir.join(format!("{round}.{k}"))
    }

    /// Where shard `k` puts its logs' message extracts.
    pub fn logs_dir(&self, k: usize) -> PathBuf {
        self.dir.join(format!("logs.{k}"))
    }

    /// The encoded blocks of process `index` (written by the shard that models it).
    pub fn part(&self, index: usize) -> PathBuf {
        self.dir.join(format!("proc.{index}.part"))
    }

    /// Writes `path` under a temporary name, syncs it and renames it into place.
    pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ConvertError> {
        use std::io::Write;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io(path))
    }

    /// Publishes this shard's file of `round`.
    pub fn publish(&self, round: &str, bytes: &[u8]) -> Result<(), ConvertError> {
        Exchange::write_atomic(&self.file(round, self.rank), bytes)
    }

    /// Records this shard's failure for the others (best effort).
    pub fn fail(&self, e: &ConvertError) {
        let msg = format!("shard {} of {}: {e}", self.rank, self.size);
        let _ = Exchange::write_atomic(&self.file("failed", self.rank), msg.as_bytes());
    }

    /// Waits until every shard (`from` = all of them, or only some) has published `round`,
    /// and returns their files' contents in shard order.
    pub fn gather(&self, round: &str, from: &[usize]) -> Result<Vec<Vec<u8>>, ConvertError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut got: Vec<Option<Vec<u8>>> = vec![None; from.len()];
        loop {
            for (slot, &k) in got.iter_mut().zip(from) {
                if slot.is_none() {
                    if let Ok(b) = std::fs::read(self.file(round, k)) {
                        *slot = Some(b);
                    }
                }
            }
            if got.iter().all(Option::is_some) {
                return Ok(got.into_iter().map(|b| b.expect("all read")).collect());
            }
            for k in 0..self.size {
                if k != self.rank {
                    if let Ok(msg) = std::fs::read_to_string(self.file("failed", k)) {
                        return Err(ConvertError::Shard(format!(
                            "{msg} (seen by shard {})",
                            self.rank
                        )));
                    }
                }
            }
            if start.elapsed() >= self.timeout {
                let missing: Vec<String> = got
                    .iter()
                    .zip(from)
                    .filter(|(g, _)| g.is_none())
                    .map(|(_, k)| self.file(round, *k).display().to_string())
                    .collect();
                return Err(ConvertError::Shard(format!(
                    "shard {} waited {} s (${TIMEOUT_ENV}) for {} of {} shards: missing {} (did that rank start, see the same output directory, or fail?)",
                    self.rank,
                    self.timeout.as_secs(),
                    missing.len(),
                    from.len(),
                    missing.join(", ")
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Waits for `round` of every shard.
    pub fn gather_all(&self, round: &str) -> Result<Vec<Vec<u8>>, ConvertError> {
        let all: Vec<usize> = (0..self.size).collect();
        self.gather(round, &all)
    }
}

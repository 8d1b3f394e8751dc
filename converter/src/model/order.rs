//! One deterministic output order, whatever the number of workers.
//!
//! Every process is modelled by one worker into its own packet sequence, handed out in blocks.
//! Workers take processes in index order ([`map_in_order`]); the writer ([`BlockOrder`]) writes
//! the blocks of the lowest unfinished process as they come and holds the others until every
//! process before theirs has finished, so the file is always: process 0's blocks, process 1's,
//! …, then anything written after the processes (Nsight Systems). Held blocks beyond
//! [`HOLD_LIMIT`] bytes go to a spill file (unlinked at once), so memory stays bounded when an
//! early process is slow.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;

/// Bytes of held blocks kept in memory before they are spilled.
pub const HOLD_LIMIT: usize = 64 << 20;

/// Runs `f` on every item on the current rayon pool, items started in index order (the writer
/// then holds few blocks back); results in index order.
pub fn map_in_order<I: Sync, T: Send>(items: &[I], f: impl Fn(&I) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<T>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let workers = rayon::current_num_threads().clamp(1, items.len().max(1));
    (0..workers).into_par_iter().for_each(|_| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let r = f(item);
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item was run")
        })
        .collect()
}

/// What a worker sends to the writer.
pub enum Block {
    /// An encoded block of process `.0` (`.0` = the number of processes: after them).
    Data(usize, Vec<u8>),
    /// Encoded blocks of process `.0`, in order: a worker's blocks are sent a bundle at a time
    /// (each message may wake the writer's thread).
    Bundle(usize, Vec<Vec<u8>>),
    /// Process `.0` has sent all its blocks.
    Done(usize),
}

impl Block {
    /// The process and blocks of a `Data` or `Bundle` message; `Err(process)` for `Done`.
    pub fn into_blocks(self) -> Result<(usize, Vec<Vec<u8>>), usize> {
        match self {
            Block::Data(p, b) => Ok((p, vec![b])),
            Block::Bundle(p, blocks) => Ok((p, blocks)),
            Block::Done(p) => Err(p),
        }
    }
}

enum Held {
    Mem(Vec<u8>),
    /// (offset, length) in the spill file.
    Spilled(u64, usize),
}

/// Writes blocks in process order (see the module documentation).
pub struct BlockOrder {
    next: usize,
    done: Vec<bool>,
    held: Vec<Vec<Held>>,
    held_bytes: usize,
    spill: Option<(File, u64)>,
    spill_path: std::path::PathBuf,
}

impl BlockOrder {
    /// For `processes` sequences; a spill file, if needed, is created at `spill_path` and
    /// unlinked at once.
    pub fn new(processes: usize, spill_path: &Path) -> BlockOrder {
        BlockOrder {
            next: 0,
            done: vec![false; processes],
            held: (0..processes).map(|_| Vec::new()).collect(),
            held_bytes: 0,
            spill: None,
            spill_path: spill_path.to_owned(),
        }
    }

    /// Takes one message; returns the bytes written to `out`.
    pub fn push(&mut self, msg: Block, out: &mut dyn Write) -> io::Result<u64> {
        match msg {
            Block::Data(p, b) if p >= self.next => {
                if p == self.next || p >= self.done.len() {
                    out.write_all(&b)?;
                    return Ok(b.len() as u64);
                }
                self.held_bytes += b.len();
                self.held[p].push(Held::Mem(b));
                if self.held_bytes > HOLD_LIMIT {
                    self.spill_all()?;
                }
                Ok(0)
            }
            Block::Data(..) => Err(io::Error::other("a block after its process finished")),
            Block::Bundle(p, blocks) => {
                let mut n = 0;
                for b in blocks {
                    n += self.push(Block::Data(p, b), out)?;
                }
                Ok(n)
            }
            Block::Done(p) => {
                if let Some(d) = self.done.get_mut(p) {
                    *d = true;
                }
                let mut n = 0;
                while self.next < self.done.len() && self.done[self.next] {
                    self.next += 1;
                    if self.next < self.done.len() {
                        n += self.write_held(self.next, out)?;
                    }
                }
                Ok(n)
            }
        }
    }

    /// Whether every process has finished (nothing is held).
    pub fn complete(&self) -> bool {
        self.next >= self.done.len()
    }

    fn write_held(&mut self, p: usize, out: &mut dyn Write) -> io::Result<u64> {
        let mut n = 0u64;
        for h in std::mem::take(&mut self.held[p]) {
            match h {
                Held::Mem(b) => {
                    self.held_bytes -= b.len();
                    out.write_all(&b)?;
                    n += b.len() as u64;
                }
                Held::Spilled(at, len) => {
                    let mut buf = vec![0u8; len];
                    let (f, _) = self.spill.as_ref().expect("spilled blocks have a file");
                    f.read_exact_at(&mut buf, at)?;
                    out.write_all(&buf)?;
                    n += len as u64;
                }
            }
        }
        Ok(n)
    }

    fn spill_all(&mut self) -> io::Result<()> {
        if self.spill.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&self.spill_path)?;
            let _ = std::fs::remove_file(&self.spill_path);
            self.spill = Some((f, 0));
        }
        let (f, end) = self.spill.as_mut().expect("just created");
        for held in self.held.iter_mut() {
            for h in held.iter_mut() {
                if let Held::Mem(b) = h {
                    f.write_all_at(b, *end)?;
                    let spilled = Held::Spilled(*end, b.len());
                    *end += b.len() as u64;
                    self.held_bytes -= b.len();
                    *h = spilled;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(order: &[Block], limit_spill: bool) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!("sigmatrace-order-{}", std::process::id()));
        let mut o = BlockOrder::new(3, &dir);
        let mut out = Vec::new();
        for m in order {
            let m = match m {
                Block::Data(p, b) => Block::Data(*p, b.clone()),
                Block::Bundle(p, b) => Block::Bundle(*p, b.clone()),
                Block::Done(p) => Block::Done(*p),
            };
            o.push(m, &mut out).unwrap();
            if limit_spill {
                o.spill_all().unwrap();
            }
        }
        assert!(o.complete());
        out
    }

    #[test]
    fn blocks_come_out_in_process_order_whatever_the_arrival_order() {
        use Block::*;
        let a = [
            Data(2, b"c1".to_vec()),
            Data(0, b"a1".to_vec()),
            Data(1, b"b1".to_vec()),
            Data(2, b"c2".to_vec()),
            Done(2),
            Data(0, b"a2".to_vec()),
            Done(1),
            Done(0),
            Data(3, b"n".to_vec()),
        ];
        assert_eq!(run(&a, false), b"a1a2b1c1c2n");
        assert_eq!(run(&a, true), b"a1a2b1c1c2n");
    }

    #[test]
    fn map_in_order_keeps_index_order() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let v: Vec<usize> = (0..100).collect();
        let r = pool.install(|| map_in_order(&v, |x| x * 2));
        assert_eq!(r, (0..100).map(|x| x * 2).collect::<Vec<_>>());
    }
}

//! Multi-rank setup shared by the GPU-initiated-style workloads: one process per simulated node,
//! an RC QP from every rank to every other rank (plus an optional loopback pair for a rank's
//! RDMA to itself), connected through a file rendezvous; memory-region exchange; the workload's
//! own WQE bookkeeping written as JSON.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::dv::{self, Mode, Poster, QueueError};
use crate::mlx5::{PostedWqe, Sge};
use crate::rendezvous::{fetch, publish, RendezvousError};
use crate::verbs::{ffi::*, Device, PortAddress, VerbsError};

/// Setup failures.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    #[error("rendezvous record {key} of rank {rank}: {err}")]
    Record {
        key: String,
        rank: u32,
        err: serde_json::Error,
    },
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

/// How long a rank waits for its peers at a rendezvous.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(120);

/// A QP of this rank and who is on its other end.
pub struct Link {
    pub poster: Poster,
    pub peer_rank: u32,
    pub peer_qpn: u32,
    /// "peer" (to another rank) or "loopback" (to this rank's own loopback target QP).
    pub role: &'static str,
}

impl Link {
    pub fn qpn(&self) -> u32 {
        self.poster.qpn()
    }
}

#[derive(Serialize, Deserialize)]
struct Hello {
    lid: u16,
    gid: String,
    /// QPN of the QP towards each rank (own entry: loopback initiator or 0).
    qpns: Vec<u32>,
    /// Loopback target QPN (0 = none).
    loop_target: u32,
}

fn gid_hex(g: &[u8; 16]) -> String {
    g.iter().map(|b| format!("{b:02x}")).collect()
}

fn gid_parse(s: &str) -> [u8; 16] {
    let mut g = [0u8; 16];
    for (i, x) in g.iter_mut().enumerate() {
        *x = s
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    g
}

/// This rank's device, QPs and peers.
pub struct Cluster {
    pub rank: u32,
    pub ranks: u32,
    pub mode: Mode,
    pub dir: PathBuf,
    pub dev: Device,
    /// `links[p]`: the QP to rank p; `links[rank]` is the loopback initiator if requested.
    pub links: Vec<Option<Arc<Link>>>,
    /// The loopback pair's target side (never posted to; kept alive).
    _loop_target: Option<Poster>,
    /// `--gpu`: the WQEs each QP's GPU kernel recorded (by QPN), instead of the posters' logs.
    gpu_posted: std::sync::OnceLock<std::collections::HashMap<u32, Vec<PostedWqe>>>,
}

// SAFETY: the verbs context and PD are thread-safe objects (libibverbs serialises what needs
// it); the links are Send + Sync on their own.
unsafe impl Sync for Cluster {}
// SAFETY: see above.
unsafe impl Send for Cluster {}

impl Cluster {
    /// Opens the device, creates and connects the QPs. `loopback`: also connect a QP pair on
    /// this rank so it can issue RDMA (e.g. atomics) to its own memory, as NVSHMEM does for
    /// its own PE.
    pub fn setup(
        rank: u32,
        ranks: u32,
        dir: &Path,
        mode: Mode,
        depth: u32,
        loopback: bool,
    ) -> Result<Cluster, ClusterError> {
        let dev = Device::open()?;
        if let Some(o) = crate::selfobs::get() {
            // SAFETY: the context is open; its device pointer stays valid while it is.
            let guid = u64::from_be(unsafe { ibv_get_device_guid((*dev.ctx).device) });
            o.device_open(dev.ctx as u64, guid, &dev.name);
        }
        let mut pending: Vec<Option<dv::NewQp>> = Vec::new();
        for p in 0..ranks {
            pending.push(if p != rank || loopback {
                Some(dv::create_qp(&dev, mode, depth)?)
            } else {
                None
            });
        }
        let loop_target = if loopback {
            Some(dv::create_qp(&dev, mode, depth)?)
        } else {
            None
        };
        let hello = Hello {
            lid: dev.addr.lid,
            gid: gid_hex(&dev.addr.gid),
            qpns: pending
                .iter()
                .map(|q| q.as_ref().map_or(0, |q| q.qpn))
                .collect(),
            loop_target: loop_target.as_ref().map_or(0, |q| q.qpn),
        };
        let c = Cluster {
            rank,
            ranks,
            mode,
            dir: dir.to_owned(),
            dev,
            links: Vec::new(),
            _loop_target: None,
            gpu_posted: std::sync::OnceLock::new(),
        };
        let all: Vec<Hello> = c.exchange("hello", &hello)?;
        let mut links = Vec::new();
        for (p, q) in pending.into_iter().enumerate() {
            let Some(q) = q else {
                links.push(None);
                continue;
            };
            let h = &all[p];
            let addr = PortAddress {
                lid: h.lid,
                gid: gid_parse(&h.gid),
            };
            let (peer_qpn, role) = if p as u32 == rank {
                (hello.loop_target, "loopback")
            } else {
                (h.qpns[rank as usize], "peer")
            };
            let poster = dv::connect(&c.dev, q, addr, peer_qpn)?;
            links.push(Some(Arc::new(Link {
                poster,
                peer_rank: p as u32,
                peer_qpn,
                role,
            })));
        }
        let target = match loop_target {
            Some(t) => {
                let init = hello.qpns[rank as usize];
                Some(dv::connect(&c.dev, t, c.dev.addr, init)?)
            }
            None => None,
        };
        let mut c = c;
        c.links = links;
        c._loop_target = target;
        // Nobody posts before every QP of every rank is connected.
        c.exchange::<u32, u32>("connected", &1u32)?;
        Ok(c)
    }

    /// The QP to rank `p` (the loopback initiator for this rank).
    pub fn link(&self, p: u32) -> &Arc<Link> {
        self.links[p as usize]
            .as_ref()
            .expect("QP to that rank (loopback not set up?)")
    }

    /// Publishes `value` under `key` and returns every rank's value, in rank order.
    pub fn exchange<T: Serialize, R: DeserializeOwned>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<Vec<R>, ClusterError> {
        let s = serde_json::to_string(value).map_err(|err| ClusterError::Record {
            key: key.into(),
            rank: self.rank,
            err,
        })?;
        publish(&self.dir, self.rank, key, &s)?;
        (0..self.ranks)
            .map(|r| {
                let s = fetch(&self.dir, r, key, RENDEZVOUS_TIMEOUT)?;
                serde_json::from_str(&s).map_err(|err| ClusterError::Record {
                    key: key.into(),
                    rank: r,
                    err,
                })
            })
            .collect()
    }

    /// The device's node GUID as softnic numbers nodes (low 32 bits), for reports.
    pub fn node_label(&self) -> String {
        std::env::var("SOFTNIC_NODE").unwrap_or_else(|_| format!("lid{}", self.dev.addr.lid))
    }

    /// The WQEs posted on `l`: its poster's log, or what the GPU kernel recorded (`--gpu`).
    pub fn posted(&self, l: &Link) -> Vec<PostedWqe> {
        match self.gpu_posted.get() {
            Some(m) => m.get(&l.qpn()).cloned().unwrap_or_default(),
            None => l.poster.posted(),
        }
    }

    /// `--gpu`: the kernels posted, and recorded, these WQEs (by QPN); set once.
    pub fn set_gpu_posted(&self, m: std::collections::HashMap<u32, Vec<PostedWqe>>) {
        let _ = self.gpu_posted.set(m);
    }

    /// Writes the WQE bookkeeping of every QP of this rank to `path`.
    pub fn write_bookkeeping(&self, path: &Path, workload: &str) -> Result<u64, ClusterError> {
        let mut qps = Vec::new();
        let mut total = 0u64;
        for l in self.links.iter().flatten() {
            let wqes: Vec<PostedWqe> = self.posted(l);
            total += wqes.len() as u64;
            qps.push(QpBook {
                qpn: l.qpn(),
                peer_rank: l.peer_rank,
                peer_qpn: l.peer_qpn,
                role: l.role.into(),
                count: wqes.len() as u64,
                wqes,
            });
        }
        let b = Bookkeeping {
            workload: workload.into(),
            rank: self.rank,
            ranks: self.ranks,
            node: self.node_label(),
            pid: std::process::id(),
            mode: self.mode,
            gpu: self.gpu_posted.get().is_some(),
            total,
            qps,
        };
        write_json(path, &b)?;
        Ok(total)
    }
}

/// One QP's bookkeeping.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QpBook {
    pub qpn: u32,
    pub peer_rank: u32,
    pub peer_qpn: u32,
    pub role: String,
    pub count: u64,
    pub wqes: Vec<PostedWqe>,
}

/// A rank's bookkeeping file (`wqes.<rank>.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bookkeeping {
    pub workload: String,
    pub rank: u32,
    pub ranks: u32,
    pub node: String,
    pub pid: u32,
    pub mode: Mode,
    /// Posted by GPU kernels (`--gpu`) rather than CPU threads.
    #[serde(default)]
    pub gpu: bool,
    pub total: u64,
    pub qps: Vec<QpBook>,
}

/// Writes pretty JSON atomically (temp file + rename).
pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), ClusterError> {
    let io = |err| ClusterError::Io {
        path: path.to_owned(),
        err,
    };
    let s = serde_json::to_string_pretty(v).map_err(|e| io(std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, s).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// A registered buffer of `T`s that peers may read, write and update atomically.
pub struct Region<T> {
    buf: Box<[T]>,
    mr: *mut ibv_mr,
}

// SAFETY: the MR pointer is only read (keys); the buffer is Send/Sync by T's bounds.
unsafe impl<T: Send> Send for Region<T> {}
// SAFETY: see above.
unsafe impl<T: Sync> Sync for Region<T> {}

/// Where a peer's region lives (exchanged through the rendezvous).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteRegion {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl<T: Default> Region<T> {
    /// Allocates `n` elements and registers them for local and remote read/write/atomic access.
    pub fn new(dev: &Device, n: usize) -> Result<Region<T>, ClusterError> {
        let buf: Box<[T]> = (0..n.max(1)).map(|_| T::default()).collect();
        let access = IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC;
        // SAFETY: the buffer lives as long as the Region (the MR is never deregistered before
        // the buffer is dropped: the Region owns both and is kept until exit).
        let mr = unsafe {
            ibv_reg_mr(
                dev.pd,
                buf.as_ptr() as *mut std::ffi::c_void,
                std::mem::size_of_val(&*buf),
                access as i32,
            )
        };
        if mr.is_null() {
            return Err(ClusterError::Verbs(VerbsError::Call {
                call: "ibv_reg_mr",
                err: std::io::Error::last_os_error(),
            }));
        }
        Ok(Region { buf, mr })
    }
}

impl<T> Region<T> {
    pub fn as_slice(&self) -> &[T] {
        &self.buf
    }

    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr).lkey }
    }

    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr(),
            // SAFETY: the MR is live.
            rkey: unsafe { (*self.mr).rkey },
            len: std::mem::size_of_val(&*self.buf) as u64,
        }
    }

    /// A local data segment over elements `[from, from + n)`.
    pub fn sge(&self, from: usize, n: usize) -> Sge {
        let sz = std::mem::size_of::<T>();
        Sge {
            addr: self.addr() + (from * sz) as u64,
            lkey: self.lkey(),
            len: (n * sz) as u32,
        }
    }
}

/// CLOCK_REALTIME now, in ns.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A small deterministic PRNG (splitmix64) for graphs and routing.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

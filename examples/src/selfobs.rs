//! `--self-observe DIR`: the workload records itself the way the interposer does with its
//! mlx5dv/devx discovery hooks and host poller — the observation chain (queue discovery →
//! `sigmatrace-observe`'s host poller → log → `sigmatrace-convert`) without `LD_PRELOAD`,
//! e.g. to compare with an interposed run (`tests/observed_e2e.rs` runs the same checks under
//! the interposer).
//!
//! Record contract written here (and by the interposer):
//! * `DeviceOpen` (context, node GUID) for the device;
//! * `QpCreate` per QP — variant 0 (`ibv_create_qp`) or 3 (devx, with the context the devx
//!   call got) — and `QpModify` per transition: verbs ones as `ibv_modify_qp` records them;
//!   devx `RST2INIT`/`INIT2RTR`/`RTR2RTS` decoded into the same fields (state, destination QPN,
//!   DLID, GRH/DGID, port), `aux` = the equivalent `ibv_qp_attr_mask`;
//! * `QueueDiscovered` for every send ring, CQ and UAR found by `mlx5dv_init_obj` or devx;
//! * `WqeObserved` / `CqeObserved` / `ObserveOverrun` from the host poller watching every
//!   host-resident ring from its creation on.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use sigmatrace_observe::discover::{InitObjCq, InitObjQp, UarInfo};
use sigmatrace_observe::{
    Discovery, HostMemory, HostPoller, HostRegion, PollerConfig, PollerStats, QueueDesc,
};
use sigmatrace_schemas::clock::Timestamper;
use sigmatrace_schemas::header::FileHeader;
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{ChunkWriter, LogWriter, WriterOptions};

/// Self-observation failures (setup only; observation itself never fails the workload).
#[derive(Debug, thiserror::Error)]
pub enum SelfObsError {
    #[error("self-observation log in {dir}: {err}")]
    Log { dir: PathBuf, err: String },
    #[error("host poller: {0}")]
    Poller(std::io::Error),
    #[error("self-observation started twice")]
    Twice,
}

/// A clock snapshot whose reads were not interrupted: the tightest (`ts_after − ts`) of a
/// few attempts, so a preemption between the clock reads does not skew the log's time map.
pub fn tight_snapshot(ts: &Timestamper) -> ClockSnapshot {
    let mut best = ts.snapshot();
    for _ in 0..15 {
        let s = ts.snapshot();
        if s.ts_after.wrapping_sub(s.ts) < best.ts_after.wrapping_sub(best.ts) {
            best = s;
        }
    }
    best
}

/// Period of the clock snapshots (the interposer's default is 100 ms).
const SNAPSHOT_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);

/// The process's self-observer.
pub struct SelfObserver {
    ts: Timestamper,
    ticker: Mutex<Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>>,
    // Field order = drop order: writers before the log.
    ctl: Mutex<ChunkWriter>,
    poller: Mutex<Option<HostPoller>>,
    disc: Mutex<Discovery>,
    log: LogWriter,
}

static OBS: OnceLock<SelfObserver> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// ibv_qp_attr_mask bits used in `QpModify.aux`.
pub mod mask {
    pub const STATE: u32 = 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// Starts self-observation into `dir` (one log per process).
pub fn start(dir: &Path) -> Result<(), SelfObsError> {
    let err = |e: String| SelfObsError::Log {
        dir: dir.to_owned(),
        err: e,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let ts = Timestamper::detect();
    let hz = ts.estimate_hz(std::time::Duration::from_millis(20));
    let chunk = 1 << 20;
    let header = FileHeader::for_current_process(ts.source(), hz, tight_snapshot(&ts), chunk);
    let rank = header
        .rank
        .rank
        .map_or("norank".into(), |r| format!("r{r}"));
    let path = dir.join(format!(
        "{}-{}-{rank}-selfobs.sigmalog",
        header.hostname, header.pid
    ));
    let log = LogWriter::create(
        &path,
        &header,
        WriterOptions {
            chunk_size: chunk,
            max_bytes: 1 << 30,
            ..Default::default()
        },
    )
    .map_err(|e| err(e.to_string()))?;
    let mut ctl = log.thread_writer(1);
    ctl.append(&tight_snapshot(&ts));
    // Periodic snapshots: the converter fits each process's clock through them.
    let (stop, rx) = std::sync::mpsc::channel::<()>();
    let mut tw = log.thread_writer(3);
    let ticker = std::thread::Builder::new()
        .name("selfobs-clock".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(SNAPSHOT_PERIOD)
            {
                tw.append(&tight_snapshot(&ts));
            }
        })
        .map_err(SelfObsError::Poller)?;
    let poller = HostPoller::start(
        PollerConfig::default(),
        ts,
        Some(log.thread_writer(2)),
        None,
    )
    .map_err(SelfObsError::Poller)?;
    OBS.set(SelfObserver {
        ts,
        ticker: Mutex::new(Some((stop, ticker))),
        ctl: Mutex::new(ctl),
        poller: Mutex::new(Some(poller)),
        disc: Mutex::new(Discovery::new()),
        log,
    })
    .map_err(|_| SelfObsError::Twice)
}

/// The self-observer, when `--self-observe` is on.
pub fn get() -> Option<&'static SelfObserver> {
    OBS.get()
}

impl SelfObserver {
    fn append<R: FixedRecord>(&self, r: &R) {
        lock(&self.ctl).append(r);
    }

    pub fn now(&self) -> u64 {
        self.ts.now()
    }

    pub fn device_open(&self, context: u64, guid: u64, name: &str) {
        let mut n = [0u8; 32];
        for (d, s) in n.iter_mut().zip(name.bytes().take(31)) {
            *d = s;
        }
        self.append(&DeviceOpen {
            hdr: RecordHeader::of::<DeviceOpen>(0),
            ts: self.now(),
            context,
            guid,
            name: n,
        });
    }

    /// `QpCreate`: `variant` 0 = `ibv_create_qp`, 3 = devx (RC).
    pub fn qp_create(&self, qp: u64, context: u64, qpn: u32, variant: u32, depth: u32) {
        self.append(&QpCreate {
            hdr: RecordHeader::of::<QpCreate>(2 | variant << 8),
            ts: self.now(),
            qp,
            context,
            qpn,
            max_send_wr: depth,
            max_send_sge: 1,
            ..Default::default()
        });
    }

    /// `QpModify` with the fields `aux` names (others zero).
    pub fn qp_modify(&self, m: QpModify) {
        self.append(&QpModify {
            ts: self.now(),
            ..m
        });
    }

    /// Announces a discovered queue and, if host-resident, starts watching it.
    fn watch(&self, q: QueueDesc) {
        self.append(&q.to_record(self.now()));
        if !q.host_watchable() {
            return;
        }
        let regions = match q {
            // SAFETY (both arms): the rings and doorbell records stay mapped until the process
            // exits (the workloads never destroy a queue before `finish`).
            QueueDesc::Send(s) => unsafe {
                vec![
                    HostRegion::new(s.base, q.ring_bytes()),
                    HostRegion::new(s.dbrec, 8),
                ]
            },
            QueueDesc::Cq(c) => unsafe {
                vec![
                    HostRegion::new(c.base, q.ring_bytes()),
                    HostRegion::new(c.dbrec, 8),
                ]
            },
            QueueDesc::Uar(_) => return,
        };
        if let Some(p) = lock(&self.poller).as_ref() {
            if let Err(e) = p.register(q, HostMemory::new(regions)) {
                eprintln!("self-observe: cannot watch {q:?}: {e}");
            }
        }
    }

    /// What `mlx5dv_init_obj` returned for a QP and its CQ.
    pub fn on_init_obj(&self, qp: InitObjQp, cq: InitObjCq) {
        let (q, c) = {
            let mut d = lock(&self.disc);
            (d.on_init_obj_qp(&qp), d.on_init_obj_cq(&cq))
        };
        for x in [q, c].into_iter().flatten() {
            self.watch(x);
        }
    }

    pub fn on_umem_reg(&self, handle: u64, umem_id: u32, addr: u64, size: u64) {
        lock(&self.disc).on_devx_umem_reg(handle, umem_id, addr, size, None);
    }

    pub fn on_alloc_uar(&self, u: UarInfo) {
        let q = lock(&self.disc).on_alloc_uar(&u);
        self.watch(q);
    }

    /// A devx object was created (input and output as the program passed them).
    pub fn on_obj_create(&self, handle: u64, input: &[u8], output: &[u8]) {
        let r = lock(&self.disc).on_devx_obj_create(handle, input, output);
        match r {
            Ok(Some(q)) => self.watch(q),
            Ok(None) => {}
            Err(e) => eprintln!("self-observe: devx create not decoded: {e}"),
        }
    }

    /// A devx QP transition: decoded, then recorded as a `QpModify`.
    pub fn on_obj_modify(&self, handle: u64, input: &[u8], output: &[u8], port: u8) {
        let r = lock(&self.disc).on_devx_obj_modify(handle, input, output);
        let t = match r {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => {
                eprintln!("self-observe: devx modify not decoded: {e}");
                return;
            }
        };
        let c = &t.cmd;
        let mut m = QpModify {
            hdr: RecordHeader::of::<QpModify>(0),
            qpn: t.qpn,
            new_state: t.state,
            ..Default::default()
        };
        let mut aux = mask::STATE;
        match t.state {
            1 => {
                aux |= mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS;
                m.port = if c.path.vhca_port != 0 {
                    c.path.vhca_port
                } else {
                    port
                };
            }
            2 => {
                aux |= mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER;
                m.path_mtu = c.mtu;
                m.dest_qpn = c.remote_qpn;
                m.rq_psn = c.next_rcv_psn;
                m.dlid = c.path.rlid;
                m.sl = c.path.sl;
                m.is_global = c.path.grh as u8;
                m.sgid_index = c.path.src_addr_index;
                if c.path.grh {
                    m.dgid = c.path.rgid;
                }
                m.port = port;
            }
            3 => {
                aux |= mask::TIMEOUT
                    | mask::RETRY_CNT
                    | mask::RNR_RETRY
                    | mask::SQ_PSN
                    | mask::MAX_QP_RD_ATOMIC;
                m.sq_psn = c.next_send_psn;
            }
            _ => {}
        }
        m.hdr = RecordHeader::of::<QpModify>(aux);
        self.qp_modify(m);
    }

    /// Stops the poller after a final pass over every ring; writes a last clock snapshot.
    pub fn finish(&self) -> Option<PollerStats> {
        let p = lock(&self.poller).take()?;
        let (w, stats) = p.stop();
        drop(w);
        if let Some((stop, h)) = lock(&self.ticker).take() {
            drop(stop);
            let _ = h.join();
        }
        self.append(&tight_snapshot(&self.ts));
        let _ = self.log.flush();
        Some(stats)
    }
}

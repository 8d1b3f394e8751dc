//! SigmaTrace observation of GPU- and CPU-initiated RDMA that bypasses `ibv_post_send`.
//!
//! * [`umem`]: devx umem registry and the CUDA memory map.
//! * [`discover`]: the API the interposer's hooks call; turns `mlx5dv_init_obj`, devx and
//!   CUDA calls into queue descriptions ([`queue`]).
//! * [`watcher`]: per-queue ring watchers (host memory or snapshots) with overrun detection.
//! * [`poller`]: the host poller thread.
//! * [`device`]: the device-side poller's event format, host drain and PTX.
//! * [`cuda`]: driver entry points, used only when `libcuda.so.1` is already loaded.
//!
//! Unsafe code lives in [`mem`] (reading queue memory) and [`cuda`] (driver FFI) only.

pub mod cuda;
pub mod device;
pub mod discover;
pub mod mem;
pub mod poller;
pub mod queue;
pub mod sim;
pub mod umem;
pub mod watcher;

/// The mlx5 formats the queue descriptions and observations are expressed in (the
/// `sigmatrace-mlx5` codec), re-exported so that users of this crate name them through it.
pub use sigmatrace_mlx5 as mlx5;

pub use discover::Discovery;
pub use mem::{AlignedBuf, HostMemory, HostRegion, QueueMemory, SnapshotMemory};
pub use poller::{HostPoller, PollerConfig, PollerStats, QueueHandle};
pub use queue::{CqDesc, QueueDesc, SendQueueDesc, UarDesc};
pub use watcher::{CqWatcher, Observation, SendWatcher};

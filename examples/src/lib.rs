//! Workloads for SigmaTrace: real RDMA programs that run on any verbs device (softnic
//! included), check their own results and write their own ground truth. Besides the verbs
//! helpers, the GPU-initiated-style workloads use an IBGDA-style direct-posting library
//! ([`mlx5`]), two QP construction paths ([`dv`]: `mlx5dv_init_obj`, devx + umem with the PRM
//! commands of [`prm`]), the rank setup and WQE bookkeeping of [`cluster`], the skew metrics of
//! [`skew`], an optional self-observation ([`selfobs`]) and the run scaffolding of
//! [`workload`]. See `examples/README.md`.

pub mod cluster;
pub mod dv;
pub mod gpu;
pub mod kernels;
pub mod mlx5;
pub mod poster;
pub mod prm;
pub mod rendezvous;
pub mod selfobs;
pub mod skew;
pub mod verbs;
pub mod workload;

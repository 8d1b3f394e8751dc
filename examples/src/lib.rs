//! Workloads for SigmaTrace: real verbs programs that run on any verbs device (softnic
//! included) and check their own results.

pub mod cluster;
pub mod dv;
pub mod mlx5;
pub mod mlx5dv;
pub mod prm;
pub mod rendezvous;
pub mod selfobs;
pub mod skew;
pub mod verbs;

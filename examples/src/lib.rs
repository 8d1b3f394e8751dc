//! Workloads for SigmaTrace: real verbs programs that run on any verbs device (softnic
//! included) and check their own results.

pub mod rendezvous;
pub mod verbs;

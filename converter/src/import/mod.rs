//! Imports of other tools' traces merged into the timeline: Nsight Systems SQLite exports
//! ([`nsys`]).

pub mod nsys;

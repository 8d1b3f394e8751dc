//! Read: finding and memory-mapping the logs ([`input`]), iterating their records in time order
//! (one chunk's: [`chunk`]), the typed views of the hot record kinds ([`hot`]), the parallel first
//! pass that collects each log's metadata and per-QP counts ([`scan`]) and its messages for the
//! causality join ([`messages`]), and the verbs enum values the records carry
//! ([`verbs`]). Nothing here knows about other processes: that starts in [`crate::align`].

pub mod chunk;
pub mod hot;
pub mod input;
pub mod map;
pub mod messages;
pub mod open;
pub mod scan;
pub mod verbs;

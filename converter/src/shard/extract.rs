//! A log's messages extract: what the other shards need of a log to align the clocks and pair
//! UD datagrams exactly as if they read the whole log, written as a log of its own (the same
//! header, the schemas writer, one chunk sequence per writer thread of the original, records in
//! the order the original thread's cursor yields them). It holds only
//! - consuming sends (`PostSend` whose message consumes a receive on the peer),
//! - successful receive completions (`WorkCompletion` RECV / RECV_RDMA_WITH_IMM),
//! - address handles (`AhCreate`: UD destinations' LIDs),
//!
//! i.e. exactly the records the causality join ([`crate::align::join`]) and the UD stream
//! count (`model::ud`) look at, so those passes run unchanged over extracts of other shards'
//! logs and yield the same pairs. A completion without QPN (shared extended CQ) is written with
//! the QPN this shard attributed it to (`align::cq`, which needs the whole log), since record
//! offsets change in the extract; one that no QP (or a UD QP) takes is left out, as those
//! passes skip it too. No time is changed. Everything else (WRITEs, posted receives, send
//! completions) stays with the shard that models the process: typically a small fraction.

#![forbid(unsafe_code)]

use std::path::Path;

use sigmatrace_schemas::records::{AhCreate, RecordKind};
use sigmatrace_schemas::writer::{LogWriter, WriterOptions};

use crate::align::topology::Process;
use crate::error::ConvertError;
use crate::read::hot::{is_received_message, Hot};
use crate::read::input::LogInput;
use crate::read::verbs;

/// Chunk size of extracts (small: extracts of idle processes stay small).
const CHUNK: u32 = 64 << 10;

/// Writes the messages extract of `input` (process `p` of this shard's own topology) to
/// `path`; returns the number of records written.
pub fn write(input: &LogInput, p: &Process, path: &Path) -> Result<u64, ConvertError> {
    let fail = |what: String| ConvertError::Shard(format!("{}: {what}", path.display()));
    let options = WriterOptions {
        chunk_size: CHUNK,
        max_bytes: input.bytes.saturating_mul(2) + (64 << 20),
        prefault: false,
        ring_chunks: 0,
        compact: true,
        flight_recorder: false,
        direct_io: false,
    };
    let _ = std::fs::remove_file(path);
    let log = LogWriter::create(path, input.file.header(), options)
        .map_err(|e| fail(format!("cannot write the messages extract: {e}")))?;
    let mut written = 0u64;
    let mut issues = Vec::new();
    let mut cache = crate::fastmap::IndexCache::default();
    let ah_kind = RecordKind::AhCreate as u16;
    for ((tid, _), mut cur) in input.threads.iter().zip(input.thread_cursors()) {
        let mut w = log.thread_writer(*tid);
        while let Some((ts, r)) = cur.pop(&mut issues) {
            let ok = match Hot::of(r) {
                Some(Hot::PostSend(ps)) if verbs::consumes_recv(ps.opcode) => w.append(ps),
                Some(Hot::Completion(wc)) if is_received_message(wc) && wc.qpn != 0 => w.append(wc),
                Some(Hot::Completion(wc)) if is_received_message(wc) => {
                    match p.completion_qp(&mut cache, 0, ts, r.offset) {
                        Some(qi) if p.qps[qi].qp_type != verbs::qp_type::UD => {
                            let mut attributed = *wc;
                            attributed.qpn = p.qps[qi].qpn;
                            w.append(&attributed)
                        }
                        _ => continue,
                    }
                }
                Some(_) => continue,
                None if r.kind == ah_kind => match bytemuck::try_from_bytes::<AhCreate>(r.bytes) {
                    Ok(ah) => w.append(ah),
                    Err(_) => continue,
                },
                None => continue,
            };
            if !ok {
                return Err(fail(
                    "the messages extract reached its size cap or could not be written".into(),
                ));
            }
            written += 1;
        }
    }
    if log.failed() {
        return Err(fail("writing the messages extract failed".into()));
    }
    log.flush()
        .map_err(|e| fail(format!("cannot flush the messages extract: {e}")))?;
    Ok(written)
}

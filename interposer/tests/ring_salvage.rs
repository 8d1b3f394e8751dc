//! The per-thread rings of the log writer (`SIGMATRACE_PREFAULT_CHUNKS`, default 4) in a real
//! traced program (cprogs/fake_verbs.c `killed K`: K signaled sends, each polled, then
//! SIGKILL): every record is in the log exactly once, whether the background thread had
//! drained its chunk to its final position or it was still in the thread's ring.

mod common;
use common::*;

use std::time::Duration;

use sigmatrace_schemas::{LogFile, HEADER_SIZE};

const LIMIT: Duration = Duration::from_secs(120);
const POSTS: u64 = 50_000;

/// Runs `fake_verbs killed posts` traced with 64 KiB chunks; checks that every post and its
/// completion are in the log exactly once and in order; returns (chunks still in ring
/// slots, chunks at their final positions).
fn killed_run(posts: u64) -> (usize, usize) {
    let argv = [
        cprog("fake_verbs").display().to_string(),
        "killed".into(),
        posts.to_string(),
    ];
    let (out, t, _dir) = traced_run(&argv, &[("SIGMATRACE_CHUNK_BYTES", "64K")], LIMIT);
    assert_eq!(out.code, None, "killed by SIGKILL: {out:?}");
    assert!(t.clean, "nothing torn");
    assert_eq!(
        t.sends().iter().map(|s| s.wr_id).collect::<Vec<_>>(),
        (0..posts).collect::<Vec<u64>>(),
        "every post once, in order"
    );
    assert_eq!(t.wcs().len() as u64, posts);
    let log = LogFile::open(&t.path).unwrap();
    let cs = log.header().chunk_size as u64;
    let home = |c: &sigmatrace_schemas::ChunkInfo| HEADER_SIZE as u64 + c.header.index as u64 * cs;
    let in_ring = log.chunks().iter().filter(|c| c.offset != home(c)).count();
    (in_ring, log.chunks().len() - in_ring)
}

#[test]
fn a_killed_program_leaves_every_record_once_drained_or_in_its_ring() {
    // 50 000 compact sends (32 bytes) and short completions (24 bytes): 2.8 MB, about 43
    // chunks of 64 KiB. Where they were at the kill depends on the drainer: drained (or
    // written in place while the ring was full, as the format allows), or still in a ring
    // slot — at most the ring's 4; so at least 36 at their final positions.
    let (in_ring, home) = killed_run(POSTS);
    eprintln!("{in_ring} chunks in ring slots, {home} at their final positions");
    assert!(
        in_ring <= 4,
        "{in_ring} chunks in ring slots, at most the ring's 4"
    );
    assert!(
        in_ring + home >= 42,
        "{in_ring} + {home} chunks: 2.8 MB of records fill about 43"
    );
    // Fewer records than one chunk holds: the thread's only chunk is the one it was filling
    // in its first ring slot, which nothing drains — the records come from the ring alone.
    assert_eq!(
        killed_run(500),
        (1, 0),
        "(chunks in ring slots, at final positions)"
    );
}

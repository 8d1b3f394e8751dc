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

#[test]
fn a_killed_program_leaves_every_record_once_drained_or_in_its_ring() {
    let argv = [
        cprog("fake_verbs").display().to_string(),
        "killed".into(),
        POSTS.to_string(),
    ];
    let (out, t, _dir) = traced_run(&argv, &[("SIGMATRACE_CHUNK_BYTES", "64K")], LIMIT);
    assert_eq!(out.code, None, "killed by SIGKILL: {out:?}");
    assert!(t.clean, "nothing torn");
    assert_eq!(
        t.sends().iter().map(|s| s.wr_id).collect::<Vec<_>>(),
        (0..POSTS).collect::<Vec<u64>>(),
        "every post once, in order"
    );
    assert_eq!(t.wcs().len() as u64, POSTS);
    // Where the chunks were: drained to their final position, or still in a ring slot (the
    // thread's live chunk at least: nothing drains a chunk being filled).
    let log = LogFile::open(&t.path).unwrap();
    let cs = log.header().chunk_size as u64;
    let home = |c: &sigmatrace_schemas::ChunkInfo| HEADER_SIZE as u64 + c.header.index as u64 * cs;
    let in_ring = log.chunks().iter().filter(|c| c.offset != home(c)).count();
    let drained = log.chunks().len() - in_ring;
    assert!(
        (1..=4).contains(&in_ring),
        "{in_ring} chunks in ring slots: the live chunk at least, at most the ring's 4"
    );
    // 50 000 compact sends and completions: 3.2 MB, about 49 chunks of 64 KiB.
    assert!(drained >= 40, "{drained} chunks drained (about 49 written)");
}

//! Ring traffic over RC QPs on three and four simulated nodes, the shape of a ring all-reduce:
//! each process (cprogs/ring_test.c) has two RC QPs to two different peer processes sharing one
//! CQ, writes multi-packet chunks with RDMA_WRITE_WITH_IMM to its right neighbour (receives
//! posted up front, so a rank runs ahead of its right neighbour) and acknowledges each slot with
//! a SEND to its left neighbour. Rank 1 stays off the device until rank 0's first write to it
//! has completed (executed by rank 1's progress thread alone). Every completion is checked and
//! counted exactly once and every received word compared; a hang fails the program's own 60 s
//! deadline, and the test kills the process groups of ranks that outlive its limit.

mod common;
use common::*;
use std::time::{Duration, Instant};

fn ring(ranks: u32, steps: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let rz = dir.path().join("rz");
    std::fs::create_dir_all(&rz).expect("rendezvous dir");
    let prog = cprog("ring_test").display().to_string();
    let procs: Vec<Proc> = (0..ranks)
        .map(|r| {
            spawn(
                dir.path(),
                &format!("rank{r}"),
                r + 1,
                &os(&[
                    &prog,
                    &r.to_string(),
                    &ranks.to_string(),
                    rz.to_str().expect("utf-8 path"),
                    &steps.to_string(),
                ]),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let done: Vec<Done> = procs
        .into_iter()
        .map(|p| p.wait(deadline.saturating_duration_since(Instant::now())))
        .collect();
    let all: String = done
        .iter()
        .enumerate()
        .map(|(r, d)| {
            format!(
                "--- rank {r}: {:?} timed_out={}\n{}",
                d.code, d.timed_out, d.out
            )
        })
        .collect();
    for (r, d) in done.iter().enumerate() {
        assert!(d.ok(), "rank {r} failed\n{all}");
        assert!(d.out.contains(&format!("OK ring rank {r}")), "{all}");
    }
}

#[test]
fn ring_three_nodes_two_qps_shared_cq() {
    ring(3, 24);
}

#[test]
fn ring_four_nodes_two_qps_shared_cq() {
    ring(4, 16);
}

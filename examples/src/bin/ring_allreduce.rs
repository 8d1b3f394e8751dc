//! Ring all-reduce over RC queue pairs with RDMA_WRITE_WITH_IMM, one process per rank.
//!
//! ```text
//! ring-allreduce --rank R --ranks N --rendezvous DIR [--elems E] [--iters I]
//! ```
//! Each rank owns a vector of E u64 values; after every iteration each element equals the sum
//! over ranks, which the program checks. Rank r writes to rank r+1 (its QP "right") and
//! receives from rank r-1 (its QP "left"). Each step moves one chunk with a signalled
//! RDMA_WRITE_WITH_IMM into the right neighbour's staging slot; the immediate names the slot
//! and consumes a receive the neighbour posted. A 4-byte SEND "credit" from the receiver to
//! its left neighbour opens every iteration, so no write lands before its receives are posted.
//! Within an iteration the left neighbour may run several steps ahead (its writes need only our
//! posted receives), so every completion is recorded when polled, whichever step waits for it.

use sigmatrace_examples::rendezvous::{fetch, publish};
use sigmatrace_examples::verbs::{
    self, ffi::*, post_recv, post_send, wait_one, Cq, Device, PortAddress, Qp, SendOp,
};
use sigmatrace_examples::workload::{num, parse_options, rank_main};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Args {
    rank: u32,
    ranks: u32,
    dir: PathBuf,
    elems: usize,
    iters: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rank: u32::MAX,
        ranks: 0,
        dir: PathBuf::new(),
        elems: 1 << 14,
        iters: 10,
    };
    parse_options(|k, v| {
        match k {
            "--rank" => a.rank = num(k, v()?)?,
            "--ranks" => a.ranks = num(k, v()?)?,
            "--rendezvous" => a.dir = PathBuf::from(v()?),
            "--elems" => a.elems = num(k, v()?)?,
            "--iters" => a.iters = num(k, v()?)?,
            "-h" | "--help" => {
                println!("usage: ring-allreduce --rank R --ranks N --rendezvous DIR [--elems E] [--iters I]");
                std::process::exit(0);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if a.ranks < 2 || a.rank >= a.ranks || a.dir.as_os_str().is_empty() {
        return Err("need --ranks N (>= 2), --rank R (< N) and --rendezvous DIR".into());
    }
    if !a.elems.is_multiple_of(a.ranks as usize) || a.elems == 0 {
        return Err(format!(
            "--elems must be a positive multiple of --ranks ({})",
            a.ranks
        ));
    }
    Ok(a)
}

fn initial(rank: u32, iter: u32, i: usize) -> u64 {
    (rank as u64 + 1) * 1_000_000 + i as u64 * 3 + iter as u64
}

const CREDIT_WR: u64 = 1 << 62;
const CREDIT_RECV_WR: u64 = 1 << 61;

/// Completion bookkeeping shared by all steps: credits, finished writes and arrived slots are
/// recorded whenever they are polled, so no step loses a completion meant for a later one.
struct Events {
    cq: Cq,
    qp_right: Qp,
    qp_left_num: u32,
    credit: (u64, u32, u32),
    credits: u32,
    credit_sent: bool,
    /// wr_id of the newest completed write (writes on qp_right complete in order).
    write_done: u64,
    /// Incoming RDMA_WRITE_WITH_IMM completions of this iteration, by slot.
    arrived: Vec<Option<verbs::Completion>>,
}

impl Events {
    /// Waits for the next completion, accounting for credit traffic.
    fn next(&mut self) -> Result<verbs::Completion, Box<dyn std::error::Error>> {
        let c = wait_one(self.cq)?;
        if std::env::var_os("RING_DEBUG").is_some() {
            eprintln!("completion {c:?}");
        }
        if c.wr_id == CREDIT_RECV_WR {
            self.credits += 1;
            post_recv(self.qp_right, CREDIT_RECV_WR, self.credit)?;
        } else if c.wr_id == CREDIT_WR {
            self.credit_sent = true;
        } else if c.qp_num == self.qp_left_num {
            let slot = c
                .imm
                .filter(|&s| (s as usize) < self.arrived.len())
                .ok_or_else(|| format!("unexpected completion on the left QP: {c:?}"))?;
            if self.arrived[slot as usize].replace(c).is_some() {
                return Err(format!("slot {slot} written twice in one iteration").into());
            }
        } else {
            self.write_done = self.write_done.max(c.wr_id);
        }
        Ok(c)
    }
}

type BoxError = Box<dyn std::error::Error>;

/// A neighbour's published address line: port address, left and right QP numbers, staging
/// buffer address and rkey.
fn parse_peer(s: String) -> (PortAddress, u32, u32, u64, u32) {
    let f: Vec<&str> = s.split_whitespace().collect();
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&f[1][2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    (
        PortAddress {
            lid: f[0].parse().unwrap_or(0),
            gid,
        },
        f[2].parse().unwrap_or(0),
        f[3].parse().unwrap_or(0),
        f[4].parse().unwrap_or(0),
        f[5].parse().unwrap_or(0),
    )
}

const TIMEOUT: Duration = Duration::from_secs(60);

/// This rank's place in the ring: its QPs, the chunking of its vector and where its writes
/// go (the right neighbour's staging buffer).
struct Ring {
    n: usize,
    r: usize,
    chunk: usize,
    chunk_bytes: usize,
    qp_left: Qp,
    qp_right: Qp,
    data: (u64, u32),
    remote_staging: (u64, u32),
}

impl Ring {
    /// Publishes this rank's address, connects both QPs to the neighbours', posts the first
    /// credit receive and waits until every rank has; returns the right neighbour's staging
    /// buffer (address, rkey).
    fn connect(
        a: &Args,
        dev: &Device,
        (qp_left, qp_right): (Qp, Qp),
        (staging_addr, staging_rkey): (u64, u32),
        credit: (u64, u32, u32),
    ) -> Result<(u64, u32), BoxError> {
        let me = format!(
            "{} {} {} {} {}",
            dev.addr,
            verbs::qp_num(qp_left),
            verbs::qp_num(qp_right),
            staging_addr,
            staging_rkey
        );
        publish(&a.dir, a.rank, "addr", &me)?;
        let right = (a.rank + 1) % a.ranks;
        let left = (a.rank + a.ranks - 1) % a.ranks;
        let (raddr, r_qp_left, _, r_staging, r_rkey) =
            parse_peer(fetch(&a.dir, right, "addr", TIMEOUT)?);
        let (laddr, _, l_qp_right, _, _) = parse_peer(fetch(&a.dir, left, "addr", TIMEOUT)?);
        dev.connect_rc(qp_right, raddr, r_qp_left)?;
        dev.connect_rc(qp_left, laddr, l_qp_right)?;
        // Credits from the right neighbour arrive on qp_right: post the first receive (the QP
        // must be past RESET) before telling anyone we are ready, so it is in place before any
        // send.
        post_recv(qp_right, CREDIT_RECV_WR, credit)?;
        // Everyone connected before the first credit flows.
        publish(&a.dir, a.rank, "ready", "1")?;
        for r in 0..a.ranks {
            fetch(&a.dir, r, "ready", TIMEOUT)?;
        }
        Ok((r_staging, r_rkey))
    }

    /// One all-reduce of `data`: post this iteration's receives, grant the left neighbour a
    /// credit, wait for the right neighbour's, then the reduce-scatter and all-gather phases.
    fn iteration(
        &self,
        st: &mut Events,
        data: &mut [u8],
        staging: &[u8],
        wr_seq: &mut u64,
    ) -> Result<(), BoxError> {
        // Receives for this iteration's incoming writes, then grant the left neighbour a credit.
        // (No write of this iteration can arrive before that credit.)
        st.arrived.iter_mut().for_each(|a| *a = None);
        for s in 0..st.arrived.len() {
            post_recv(self.qp_left, s as u64, (0, 0, 0))?;
        }
        st.credit_sent = false;
        post_send(
            self.qp_left,
            SendOp {
                wr_id: CREDIT_WR,
                opcode: IBV_WR_SEND,
                local: st.credit,
                remote: (0, 0),
                imm: 0,
                signaled: true,
            },
        )?;
        // Our right neighbour's credit: its receives for this iteration are posted.
        while st.credits == 0 {
            st.next()?;
        }
        st.credits -= 1;
        for phase in 0..2 {
            for s in 0..self.n - 1 {
                self.step(st, data, staging, (phase, s), wr_seq)?;
            }
        }
        while !st.credit_sent {
            st.next()?;
        }
        Ok(())
    }

    /// Step `s` of `phase` (0: reduce-scatter, 1: all-gather): write one chunk into the right
    /// neighbour's slot, then add (or copy) the chunk the left neighbour wrote into ours.
    fn step(
        &self,
        st: &mut Events,
        data: &mut [u8],
        staging: &[u8],
        (phase, s): (usize, usize),
        wr_seq: &mut u64,
    ) -> Result<(), BoxError> {
        let (n, r, chunk, chunk_bytes) = (self.n, self.r, self.chunk, self.chunk_bytes);
        let (send_chunk, recv_chunk) = if phase == 0 {
            ((r + n - s) % n, (r + n - s - 1) % n)
        } else {
            ((r + 1 + n - s) % n, (r + n - s) % n)
        };
        let slot = phase * (n - 1) + s;
        *wr_seq += 1;
        post_send(
            self.qp_right,
            SendOp {
                wr_id: *wr_seq,
                opcode: IBV_WR_RDMA_WRITE_WITH_IMM,
                local: (
                    self.data.0 + (send_chunk * chunk_bytes) as u64,
                    chunk_bytes as u32,
                    self.data.1,
                ),
                remote: (
                    self.remote_staging.0 + (slot * chunk_bytes) as u64,
                    self.remote_staging.1,
                ),
                imm: slot as u32,
                signaled: true,
            },
        )?;
        // Our write completed (its source chunk may change) and the left neighbour's
        // write for this slot arrived, in either order (possibly during earlier steps).
        while st.write_done < *wr_seq || st.arrived[slot].is_none() {
            st.next()?;
        }
        let got = st.arrived[slot].expect("slot arrived");
        if got.byte_len as usize != chunk_bytes {
            return Err(format!(
                "slot {slot}: received {} bytes, expected {chunk_bytes}",
                got.byte_len
            )
            .into());
        }
        for k in 0..chunk {
            let at = (recv_chunk * chunk + k) * 8;
            let from = (slot * chunk + k) * 8;
            let inc = u64::from_ne_bytes(staging[from..from + 8].try_into().unwrap());
            let cur = u64::from_ne_bytes(data[at..at + 8].try_into().unwrap());
            let v = if phase == 0 { cur + inc } else { inc };
            data[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    }
}

fn run(a: &Args) -> Result<(), BoxError> {
    let n = a.ranks as usize;
    let chunk = a.elems / n;
    let chunk_bytes = chunk * 8;
    let slots = 2 * (n - 1);
    let dev = Device::open()?;
    let cq = dev.create_cq(4 * (slots as i32 + 8))?;
    let depth = (slots + 8) as u32;
    let qp_right = dev.create_rc_qp(cq, depth)?;
    let qp_left = dev.create_rc_qp(cq, depth)?;

    let mut data = vec![0u8; a.elems * 8];
    let mut staging = vec![0u8; slots * chunk_bytes];
    let mut credit = vec![0u8; 64];
    let data_mr = dev.register(&mut data)?;
    let staging_mr = dev.register(&mut staging)?;
    let credit_mr = dev.register(&mut credit)?;
    // SAFETY: the MRs were just returned by ibv_reg_mr and stay registered until exit.
    let (data_lkey, staging_rkey, credit_lkey) =
        unsafe { ((*data_mr).lkey, (*staging_mr).rkey, (*credit_mr).lkey) };
    let credit_sge = (credit.as_ptr() as u64, 4, credit_lkey);
    let staging_local = (staging.as_ptr() as u64, staging_rkey);
    let remote_staging = Ring::connect(a, &dev, (qp_left, qp_right), staging_local, credit_sge)?;
    let ring = Ring {
        n,
        r: a.rank as usize,
        chunk,
        chunk_bytes,
        qp_left,
        qp_right,
        data: (data.as_ptr() as u64, data_lkey),
        remote_staging,
    };
    let mut st = Events {
        cq,
        qp_right,
        qp_left_num: verbs::qp_num(qp_left),
        credit: credit_sge,
        credits: 0,
        credit_sent: false,
        write_done: 0,
        arrived: vec![None; slots],
    };
    let start = Instant::now();
    let mut wr_seq = 0u64;
    for iter in 0..a.iters {
        for i in 0..a.elems {
            data[i * 8..i * 8 + 8].copy_from_slice(&initial(a.rank, iter, i).to_ne_bytes());
        }
        ring.iteration(&mut st, &mut data, &staging, &mut wr_seq)?;
        for i in 0..a.elems {
            let want: u64 = (0..a.ranks).map(|q| initial(q, iter, i)).sum();
            let got = u64::from_ne_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
            if got != want {
                return Err(
                    format!("iteration {iter}: element {i} is {got}, expected {want}").into(),
                );
            }
        }
    }
    let el = start.elapsed();
    let checksum: u64 = data
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .fold(0u64, |a, b| a.wrapping_add(b));
    println!(
        "rank {}/{}: {} iterations of {} x u64 all-reduced on {} ({} RDMA writes), result verified, checksum {:#x}, {:.1} us/iteration",
        a.rank, a.ranks, a.iters, a.elems, dev.name, wr_seq, checksum, el.as_secs_f64() * 1e6 / a.iters.max(1) as f64
    );
    // Wait for the last credit so the neighbour's final send completes before we tear down.
    publish(&a.dir, a.rank, "done", "1")?;
    for q in 0..a.ranks {
        fetch(&a.dir, q, "done", TIMEOUT)?;
    }
    Ok(())
}

fn main() {
    rank_main("ring-allreduce", parse_args(), |a| a.rank, run);
}

//! The device's own count of what a program handed it and got back through verbs, as a NIC's
//! counters would be: send work requests accepted (`ibv_post_send`, `ibv_bind_mw`, `ibv_wr_*`
//! batches), receive work requests accepted (QP and SRQ), and completions delivered
//! (`ibv_poll_cq`, `ibv_cq_ex` polling), by queue side and by success. With `SOFTNIC_TALLY`
//! naming a file, each process appends one JSON line to it at exit
//! (`{"pid":…,"sends":…,"recvs":…,"send_ok":…,"send_err":…,"recv_ok":…,"recv_err":…}`);
//! otherwise counting costs one relaxed load per call. Tests compare it with what the tracer
//! logged: ground truth from the device, not from the tracer.

use crate::ffi::*;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();

/// What is counted.
#[derive(Clone, Copy)]
enum Counter {
    Sends,
    Recvs,
    SendOk,
    SendErr,
    RecvOk,
    RecvErr,
}

const NAMES: [&str; 6] = [
    "sends", "recvs", "send_ok", "send_err", "recv_ok", "recv_err",
];
static COUNTS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

#[inline]
fn on() -> bool {
    PATH.get_or_init(|| std::env::var_os("SOFTNIC_TALLY").map(Into::into))
        .is_some()
}

#[inline]
fn add(c: Counter, n: u64) {
    if n > 0 && on() {
        COUNTS[c as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// `n` send work requests accepted.
#[inline]
pub fn sends(n: u64) {
    add(Counter::Sends, n);
}

/// `n` receive work requests accepted.
#[inline]
pub fn recvs(n: u64) {
    add(Counter::Recvs, n);
}

/// A completion delivered to the program (`w` as the device made it: its opcode says the
/// queue, whatever the program's copy holds).
#[inline]
pub fn delivered(w: &ibv_wc) {
    if !on() {
        return;
    }
    let recv = w.opcode >= IBV_WC_RECV;
    let c = match (recv, w.status == IBV_WC_SUCCESS) {
        (false, true) => Counter::SendOk,
        (false, false) => Counter::SendErr,
        (true, true) => Counter::RecvOk,
        (true, false) => Counter::RecvErr,
    };
    add(c, 1);
}

/// Appends this process's line to the `SOFTNIC_TALLY` file (at exit).
pub fn write_out() {
    let Some(Some(path)) = PATH.get() else {
        return;
    };
    let fields: Vec<String> = NAMES
        .iter()
        .zip(&COUNTS)
        .map(|(n, c)| format!("\"{n}\":{}", c.load(Ordering::Relaxed)))
        .collect();
    let line = format!("{{\"pid\":{},{}}}\n", std::process::id(), fields.join(","));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write of one line: lines of processes exiting together do not interleave.
        let _ = f.write_all(line.as_bytes());
    }
}

//! fio's `rdma` I/O engine (Debian's fio, unmodified) on softnic's librdmacm: the server job
//! (`rw=read`, no hostname) on node 1, the client job (`hostname=127.0.1.1`) on node 2, each
//! pair untraced and then traced. Both runs must exit 0 and report, in fio's terse output, the
//! I/O the job was given; each traced log must hold exactly the work requests fio's engine
//! posts for it (engines/rdma.c):
//! - connect: the client SENDs its task request (a `struct rdma_info_blk`: the verb, its
//!   iodepth, its block size and 512 remote-buffer slots — 8 208 bytes), the server answers
//!   with the same block listing its own I/O buffers (address, rkey, size);
//! - `verb=write` / `verb=read`: the client RDMA WRITEs (READs) every block into (from) one of
//!   the server's buffers, then SENDs the block once more as the "finish" message; the server
//!   posts one receive for it and ends when it arrives — it moves no data itself;
//! - `verb=send`: the client SENDs every block; the server receives each into an I/O buffer
//!   (fio's own advice: the receiver's iodepth deeper than the sender's, since the client's
//!   QP has no RNR retries — the server here posts a receive for every block up front).
//!
//! Every WR is signaled; every posted receive completes.

mod common;
use common::{read_log, run_pair, Logged, Pair};
use sigmatrace_testkit::{free_port, system_bin};

const PS_TCP: &str = "106";
const WR_RDMA_WRITE: u8 = 0;
const WR_SEND: u8 = 2;
const WR_RDMA_READ: u8 = 4;

/// `sizeof(struct rdma_info_blk)`: mode, nr, max_bs, padding, 512 × {buf, rkey, size}.
const INFO_BLOCK: u32 = 4 * 4 + 512 * 16;
const BLOCK: u32 = 64 * 1024;

/// One job's terse (v3) line: `(error, read KiB, write KiB)`.
fn terse(out: &str, job: &str) -> (u64, u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("3;") && l.split(';').nth(2) == Some(job))
        .unwrap_or_else(|| panic!("no terse line of job {job}:\n{out}"));
    let f: Vec<&str> = line.split(';').collect();
    let num = |i: usize| -> u64 {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("field {} of {line}", i + 1))
    };
    // Fields 5, 6 and 47 (1-based): the error, the read status's and the write status's
    // total I/O.
    (num(4), num(5), num(46))
}

/// Runs the pair for `verb` moving `kib` KiB in 64 KiB blocks (server iodepth
/// `server_depth`, client 4), untraced and traced; checks both runs' terse lines and returns
/// the traced logs (server, client).
fn fio_pair(verb: &str, kib: u64, server_depth: u32) -> (Logged, Logged) {
    let port = free_port();
    let common = |name: &str| {
        vec![
            system_bin("fio"),
            format!("--name={name}"),
            "--ioengine=rdma".into(),
            format!("--port={port}"),
            format!("--bs={BLOCK}"),
            format!("--size={kib}k"),
            "--output-format=terse".into(),
        ]
    };
    let mut server = common("srv");
    server.extend(["--rw=read".into(), format!("--iodepth={server_depth}")]);
    let mut client = common("cli");
    client.extend([
        "--hostname=127.0.1.1".into(),
        format!("--verb={verb}"),
        "--rw=write".into(),
        "--iodepth=4".into(),
    ]);
    let check = |p: &Pair, what: &str| {
        p.assert_ok(&format!("fio verb={verb} {what}:"));
        // The client's job writes `kib`; the server's reads it only when it receives the
        // data (send), else it reads nothing.
        assert_eq!(terse(&p.client.stdout, "cli"), (0, 0, kib), "{what}");
        let server_read = if verb == "send" { kib } else { 0 };
        assert_eq!(
            terse(&p.server.stdout, "srv"),
            (0, server_read, 0),
            "{what}"
        );
    };
    let plain = run_pair(&server, &client, (PS_TCP, port), None);
    check(&plain, "untraced");
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let again = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|a| match a.strip_prefix("--port=") {
                Some(_) => format!("--port={port}"),
                None => a.clone(),
            })
            .collect()
    };
    let traced = run_pair(
        &again(&server),
        &again(&client),
        (PS_TCP, port),
        Some(logs.path()),
    );
    check(&traced, "traced");
    (
        read_log(&logs.path().join("server")),
        read_log(&logs.path().join("client")),
    )
}

/// Sends of each (opcode, bytes) kind, in order of first appearance.
fn kinds(l: &Logged) -> Vec<((u8, u32), usize)> {
    let mut v: Vec<((u8, u32), usize)> = Vec::new();
    for s in &l.sends {
        match v.iter_mut().find(|(k, _)| k == s) {
            Some((_, n)) => *n += 1,
            None => v.push((*s, 1)),
        }
    }
    v
}

/// A memory-semantics run: the client's task request, its `blocks` one-sided WRs and its
/// finish message; the server's one answer and two receives.
fn one_sided(verb: &str, opcode: u8) {
    let kib = 16 * 1024;
    let blocks = (kib * 1024 / BLOCK as u64) as usize;
    let (s, c) = fio_pair(verb, kib, 4);
    assert_eq!(
        kinds(&c),
        [((WR_SEND, INFO_BLOCK), 2), ((opcode, BLOCK), blocks)],
        "client"
    );
    // The task request first, the finish message last.
    assert_eq!(c.sends.first(), Some(&(WR_SEND, INFO_BLOCK)), "client");
    assert_eq!(c.sends.last(), Some(&(WR_SEND, INFO_BLOCK)), "client");
    assert_eq!(kinds(&s), [((WR_SEND, INFO_BLOCK), 1)], "server");
    assert_eq!((s.recvs, c.recvs), (2, 1), "posted receives");
    // Every WR signaled and every receive completed.
    assert_eq!(c.completions, blocks + 2 + 1, "client completions");
    assert_eq!(s.completions, 1 + 2, "server completions");
    assert_eq!((s.qps, c.qps), (1, 1));
}

#[test]
fn fio_rdma_write() {
    one_sided("write", WR_RDMA_WRITE);
}

#[test]
fn fio_rdma_read() {
    one_sided("read", WR_RDMA_READ);
}

#[test]
fn fio_rdma_send() {
    let kib = 4 * 1024;
    let blocks = (kib * 1024 / BLOCK as u64) as usize;
    let (s, c) = fio_pair("send", kib, blocks as u32);
    assert_eq!(
        kinds(&c),
        [((WR_SEND, INFO_BLOCK), 1), ((WR_SEND, BLOCK), blocks)],
        "client"
    );
    assert_eq!(kinds(&s), [((WR_SEND, INFO_BLOCK), 1)], "server");
    // The server's receive for the task request, then one per block; the client's for the
    // server's answer.
    assert_eq!((s.recvs, c.recvs), (1 + blocks, 1), "posted receives");
    assert_eq!(c.completions, blocks + 1 + 1, "client completions");
    assert_eq!(s.completions, 1 + 1 + blocks, "server completions");
}

//! softnic-bench: two-process small-message rate and latency on softnic (not a test).
//!
//! ```text
//! cargo build --release -p softnic -p softnic-mlx5 -p softnic-efa
//! cargo run --release -p softnic --bin softnic-bench [-- --writes N --pingpongs N]
//! ```
//!
//! Runs cprogs/sn_bench.c and cprogs/dv_test.c as server (node 1) and client (node 2) under
//! softnic-run for: 8-byte RDMA write rate through ibv_post_send (`rate`) and through direct
//! mlx5 posting with a doorbell per WQE (`bench1`) and per 16 WQEs (`bench16`), 8-byte SEND
//! ping-pong half round trip (CQ polling, `lat`), and 8-byte RDMA WRITE ping-pong half round
//! trip (memory polling as ib_write_lat, `wlat`).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(
        "usage: softnic-bench [--writes N] [--pingpongs N] [--mode rate|bench1|bench16|lat|wlat]"
    )]
    Usage,
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{mode} {role} failed ({status}): {out}")]
    Failed {
        mode: String,
        role: &'static str,
        status: String,
        out: String,
    },
}

fn free_port() -> Result<u16, BenchError> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| BenchError::Io("bind".into(), e))?;
    Ok(l.local_addr()
        .map_err(|e| BenchError::Io("addr".into(), e))?
        .port())
}

fn run_mode(mode: &str, iters: u64) -> Result<String, BenchError> {
    let dir = std::env::current_exe()
        .map_err(|e| BenchError::Io("current_exe".into(), e))?
        .parent()
        .map(PathBuf::from)
        .ok_or(BenchError::Usage)?;
    let run = dir.join("softnic-run");
    let prog = PathBuf::from(env!("SOFTNIC_CPROGS")).join(if mode.starts_with("bench") {
        "dv_test"
    } else {
        "sn_bench"
    });
    let fabric = std::env::temp_dir().join(format!("softnic-bench-{}", std::process::id()));
    let port = free_port()?.to_string();
    let it = iters.to_string();
    let spawn = |node: &str, role: &str| {
        Command::new(&run)
            .args(["--node", node, "--fabric"])
            .arg(&fabric)
            .arg("--")
            .arg(&prog)
            .args([mode, role, &port, &it])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::Io(run.display().to_string(), e))
    };
    let server = spawn("1", "server")?;
    let client = spawn("2", "client")?;
    let c = client
        .wait_with_output()
        .map_err(|e| BenchError::Io("client".into(), e))?;
    let s = server
        .wait_with_output()
        .map_err(|e| BenchError::Io("server".into(), e))?;
    let _ = std::fs::remove_dir_all(&fabric);
    for (o, role) in [(&s, "server"), (&c, "client")] {
        if !o.status.success() {
            return Err(BenchError::Failed {
                mode: mode.into(),
                role,
                status: o.status.to_string(),
                out: format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            });
        }
    }
    Ok(String::from_utf8_lossy(&c.stdout).trim().to_string())
}

fn run() -> Result<(), BenchError> {
    let mut writes: u64 = 2_000_000;
    let mut pingpongs: u64 = 100_000;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || -> Result<u64, BenchError> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(BenchError::Usage)
        };
        match a.as_str() {
            "--writes" => writes = num()?,
            "--pingpongs" => pingpongs = num()?,
            "--mode" => only = Some(args.next().ok_or(BenchError::Usage)?),
            _ => return Err(BenchError::Usage),
        }
    }
    for (mode, iters) in [
        ("rate", writes),
        ("bench1", writes),
        ("bench16", writes),
        ("lat", pingpongs),
        ("wlat", pingpongs / 10),
    ] {
        if only.as_deref().is_some_and(|o| o != mode) {
            continue;
        }
        println!("{}", run_mode(mode, iters)?);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softnic-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

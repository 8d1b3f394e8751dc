//! MPICH over softnic: Debian's MPICH 4.0 (the ch4 device over UCX, as Debian builds it) runs
//! Debian's NetPIPE for MPICH (`NPmpich2`, unmodified) between two ranks launched by its own
//! launcher (`mpirun.mpich`, Hydra, forking both ranks on this machine), each rank on its own
//! softnic node, with UCX's verbs transports alone (`UCX_TLS=rc_verbs,ud_verbs,self`: eager
//! sends from pre-posted receive rings, rendezvous RDMA reads for large messages, UD for UCX's
//! wire-up). The same MPI benchmark as over Open MPI (open_mpi.rs), through another MPI
//! library, launcher and rank environment (`PMI_RANK`): untraced, traced and traced with a
//! known clock error per rank, with open_mpi.rs's checks (mpi/checks.rs).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sigmatrace_integration::*;

#[path = "timelines/alignment.rs"]
mod alignment;
#[path = "mpi/checks.rs"]
mod checks;
#[path = "timelines/round_trips.rs"]
mod round_trips;

use checks::*;

/// `mpirun.mpich -np 2` of NetPIPE on softnic, traced into `dir/logs` as `tracing` says;
/// returns the log directory and the payload bytes each way that NetPIPE reports.
fn run_netpipe(dir: &Path, tracing: Tracing) -> (PathBuf, u64) {
    let (logs, out, fabric) = (dir.join("logs"), dir.join("np.out"), dir.join("fabric"));
    std::fs::create_dir_all(&fabric).unwrap();
    let mut c = Command::new("mpirun.mpich");
    c.args(["-launcher", "fork", "-np", "2"])
        .args(["-genv", "UCX_TLS", "rc_verbs,ud_verbs,self"])
        .args(["-genv", "UCX_NET_DEVICES", "softnic0:1"]);
    if tracing != Tracing::Off {
        c.args(["-genv", "LD_PRELOAD"])
            .arg(artifact("libsigmatrace.so"))
            .args(["-genv", "SIGMATRACE_DIR"])
            .arg(&logs)
            .args(["-genv", "SOFTNIC_TALLY"])
            .arg(tally_path(&logs));
    }
    if tracing == Tracing::Skewed {
        c.args(skew_wrap("PMI_RANK"));
    }
    c.arg(artifact("softnic-run"))
        .arg("--fabric")
        .arg(&fabric)
        .arg("--")
        .arg("NPmpich2")
        .args(NETPIPE_ARGS)
        .arg("-o")
        .arg(&out)
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (ok, text) =
        Guarded::spawn(&mut c).finish("mpirun.mpich NPmpich2", Duration::from_secs(120));
    assert!(ok, "mpirun.mpich -np 2 NPmpich2 failed:\n{text}");
    (logs, netpipe_payload(&out))
}

/// Untraced: MPICH's UCX netmod runs unmodified on softnic, and nothing of ours is written.
#[test]
fn netpipe_over_mpich_untraced() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, payload) = run_netpipe(tmp.path(), Tracing::Off);
    assert!(!logs.exists(), "nothing traced");
    assert!(payload > 0);
}

/// Traced: every message paired (UCX's wire-up datagrams too), no failed WR or orphan
/// completion, no backward flow, byte-identical with 1 and 2 workers, every payload byte on
/// the wire each way, the ranks named by MPICH's `PMI_RANK`.
#[test]
fn netpipe_over_mpich() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, payload) = run_netpipe(tmp.path(), Tracing::On);
    let report = check_run(tmp.path(), &logs, 2, payload);
    let ranks: Vec<_> = report.topology.procs.iter().map(|p| p.label()).collect();
    assert_eq!(ranks, ["rank 0", "rank 1"]);
}

/// With a known clock error per rank: no receive before its send after alignment, and each
/// recovered offset within its stated uncertainty of the injected one.
#[test]
fn netpipe_over_mpich_with_clock_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (logs, payload) = run_netpipe(tmp.path(), Tracing::Skewed);
    check_clock_errors(tmp.path(), &logs, payload, "NetPIPE over MPICH");
}

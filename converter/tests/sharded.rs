//! Sharded conversion under a launcher: 4 converter processes, each reading only its share of
//! the hosts, must write the same trace as one process converting everything — byte for byte,
//! and so the same slices, flows, counters and clock alignment (checked by the trace checker's
//! statistics too). Under Open MPI's `mpirun -np 4`, and with the launcher's variables set by
//! hand (so the logic is tested even where mpirun misbehaves), with one shared log directory
//! and with node-local directories (each process sees only its own hosts' logs).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sigmatrace_synth::{HostSpec, LinkSpec, Pattern, Scenario};

const EXE: &str = env!("CARGO_BIN_EXE_sigmatrace-convert");

/// Launcher variables a test must not inherit from whatever runs it.
const LAUNCHER_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "PMIX_NAMESPACE",
    "SIGMATRACE_SHARD",
];

/// 16 ranks on 8 hosts with clock offsets and drifts: a ping-pong ring, streaming SEND/RECV
/// and bulk WRITEs across hosts, and a UD ring; posts and completions on two threads.
fn scenario() -> Scenario {
    let mut sc = Scenario::ring(8, 2, Pattern::PingPong, 150);
    sc.hosts = (0..8)
        .map(|h| HostSpec {
            name: format!("node{h}"),
            offset_ns: (h as i64 - 3) * 37_000,
            drift_ppm: (h as f64 - 4.0) * 2.5,
        })
        .collect();
    for r in 0..16 {
        let (pattern, peer) = match r % 4 {
            0 => (Pattern::SendRecv, (r + 5) % 16),
            1 => (Pattern::Bulk { signal_every: 16 }, (r + 7) % 16),
            2 => (Pattern::Mixed, (r + 3) % 16),
            _ => (Pattern::Ud, (r + 6) % 16),
        };
        sc.links.push(LinkSpec {
            a: r,
            b: peer,
            pattern,
            messages: 120,
            bytes: 8192,
        });
    }
    sc
}

fn convert(dirs: &[PathBuf], out: &Path, env: &[(&str, String)], extra: &[&str]) -> Command {
    let mut c = Command::new(EXE);
    c.args(dirs)
        .arg("-o")
        .arg(out)
        .args(["-q", "--jobs", "1"])
        .args(extra);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("SIGMATRACE_SHARD_TIMEOUT", "120");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn ok(o: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{what} failed: {err}");
    err
}

/// The single-process conversion of `root` (no launcher).
fn reference(root: &Path, out: &Path) -> serde_json::Value {
    let o = convert(&[root.to_owned()], out, &[], &[]).output().unwrap();
    let err = ok(&o, "single-process conversion");
    assert!(!err.contains("shards"), "{err}");
    common::validate(out, &["slices=1000", "flows=500", "counter_events=1000"])
}

/// Four converters with the Open MPI variables set by hand; rank k reads `dirs[k]`.
fn simulated_launch(dirs: &[PathBuf], out: &Path, extra: &[&str]) -> Vec<String> {
    let children: Vec<_> = (0..4)
        .map(|k| {
            let env = [
                ("OMPI_COMM_WORLD_SIZE", "4".to_string()),
                ("OMPI_COMM_WORLD_RANK", k.to_string()),
                ("PMIX_NAMESPACE", format!("test-{}", std::process::id())),
            ];
            convert(&[dirs[k].clone()], out, &env, extra)
                .stderr(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .enumerate()
        .map(|(k, c)| ok(&c.wait_with_output().unwrap(), &format!("rank {k}")))
        .collect()
}

fn same_trace(single: &Path, sharded: &Path, single_stats: &serde_json::Value) {
    let a = std::fs::read(single).unwrap();
    let b = std::fs::read(sharded).unwrap();
    assert!(
        a == b,
        "sharded trace differs from the single-process one ({} vs {} bytes)",
        a.len(),
        b.len()
    );
    let v = common::validate(
        sharded,
        &["slices=1000", "flows=500", "counter_events=1000"],
    );
    assert_eq!(v["stats"], single_stats["stats"]);
    let dir = PathBuf::from(format!("{}.shards", sharded.display()));
    assert!(!dir.exists(), "rank 0 leaves no exchange files behind");
}

#[test]
fn four_shards_with_launcher_variables_write_the_single_process_trace() {
    let (logs, truth) = common::generate(&scenario());
    assert_eq!(truth.files.len(), 16);
    let out = tempfile::tempdir().unwrap();
    let single = out.path().join("single.perfetto-trace");
    let stats = reference(logs.path(), &single);
    let sharded = out.path().join("sharded.perfetto-trace");
    let dirs = vec![logs.path().to_owned(); 4];
    let errs = simulated_launch(&dirs, &sharded, &[]);
    assert!(errs[0].contains("converted in 4 shards"), "{}", errs[0]);
    for (k, e) in errs.iter().enumerate().skip(1) {
        assert!(e.contains(&format!("shard {k} of 4: 4 processes")), "{e}");
    }
    same_trace(&single, &sharded, &stats);

    // One trace per shard: each opens alone (its only findings are the flows whose other
    // end is on another shard), and the files opened together (concatenated: Perfetto traces
    // are packet streams) hold exactly the single trace's slices, flows and counters.
    let per = out.path().join("per.perfetto-trace");
    simulated_launch(&dirs, &per, &["--per-shard"]);
    let mut all = Vec::new();
    let mut slices = 0;
    for k in 0..4 {
        let f = out.path().join(format!("per.shard{k}.perfetto-trace"));
        let v = sigmatrace_testkit::trace::check(&f).json();
        let kinds: Vec<&String> = v["error_counts"].as_object().unwrap().keys().collect();
        assert!(kinds.iter().all(|k| *k == "flow"), "{v:#}");
        assert!(v["stats"]["slices"].as_u64().unwrap() > 100, "{v:#}");
        slices += v["stats"]["slices"].as_u64().unwrap();
        all.extend(std::fs::read(&f).unwrap());
    }
    assert_eq!(slices, stats["stats"]["slices"].as_u64().unwrap());
    assert!(!per.exists());
    let joined = out.path().join("joined.perfetto-trace");
    std::fs::write(&joined, all).unwrap();
    // Each file repeats the header (clock snapshot, track descriptors, alignment instant) so
    // that it opens alone: joined, those are identical re-emissions, nothing else.
    let v = sigmatrace_testkit::trace::check(&joined).json();
    let kinds: Vec<&String> = v["error_counts"].as_object().unwrap().keys().collect();
    assert_eq!(kinds, ["track-uuid"], "{v:#}");
    for e in v["errors"].as_array().unwrap() {
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("identical re-emission"),
            "{e}"
        );
    }
    for key in ["slices", "flows", "counter_events"] {
        assert_eq!(v["stats"][key], stats["stats"][key], "{key}");
    }
}

/// Moves the scenario's logs into four "node-local" directories under `root`, each holding
/// the logs of two hosts (rank k of a launch then sees only its own).
fn node_local_dirs(root: &Path, truth: &sigmatrace_synth::Truth) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = (0..4).map(|k| root.join(format!("local{k}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    for f in &truth.files {
        let log = sigmatrace_schemas::reader::LogFile::open(f).unwrap();
        let host = log.view().header().hostname.clone();
        let h: usize = host.trim_start_matches("node").parse().unwrap();
        std::fs::rename(f, dirs[h / 2].join(f.file_name().unwrap())).unwrap();
    }
    dirs
}

#[test]
fn node_local_directories_each_seen_by_one_shard() {
    let (logs, truth) = common::generate(&scenario());
    let dirs = node_local_dirs(logs.path(), &truth);
    let out = tempfile::tempdir().unwrap();
    let single = out.path().join("single.perfetto-trace");
    let stats = reference(logs.path(), &single);
    // Rank k gets directory 3 − k: hosts go to the shard that sees them, not by rank order.
    let reversed: Vec<PathBuf> = dirs.iter().rev().cloned().collect();
    let sharded = out.path().join("sharded.perfetto-trace");
    let errs = simulated_launch(&reversed, &sharded, &[]);
    assert!(errs[3].contains("hosts node0, node1"), "{}", errs[3]);
    same_trace(&single, &sharded, &stats);
}

#[test]
fn mpirun_np4_writes_the_single_process_trace() {
    let (logs, _) = common::generate(&scenario());
    let out = tempfile::tempdir().unwrap();
    let single = out.path().join("single.perfetto-trace");
    let stats = reference(logs.path(), &single);
    let sharded = out.path().join("mpi.perfetto-trace");
    let mut c = Command::new("mpirun");
    c.args(["-np", "4", "--oversubscribe", "--bind-to", "none", EXE])
        .arg(logs.path())
        .arg("-o")
        .arg(&sharded)
        .args(["-q", "--jobs", "1"]);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self")
        .env("SIGMATRACE_SHARD_TIMEOUT", "120");
    let o = c
        .output()
        .expect("mpirun (Open MPI; scripts/install-deps.sh installs openmpi-bin)");
    let err = ok(&o, "mpirun -np 4");
    assert!(
        err.contains("converted in 4 shards (OMPI_COMM_WORLD_SIZE"),
        "{err}"
    );
    same_trace(&single, &sharded, &stats);
}

/// A `--from/--to` window under a launcher, each shard seeing only its node-local logs: the
/// same trace as the single-process conversion with that window — the flows whose both ends
/// lie inside it (RC messages and UD datagrams; the ranges come from a join over every
/// shard's messages), nothing else.
#[test]
fn windowed_node_local_shards_write_the_single_process_trace() {
    let (logs, truth) = common::generate(&scenario());
    let dirs = node_local_dirs(logs.path(), &truth);
    let out = tempfile::tempdir().unwrap();
    let window = ["--from", "0.004", "--to", "0.008"];
    let single = out.path().join("single.perfetto-trace");
    let o = convert(&[logs.path().to_owned()], &single, &[], &window)
        .output()
        .unwrap();
    ok(&o, "single-process conversion");
    let v = common::validate(&single, &["slices=1000", "flows=1000"]);
    assert_eq!(v["stats"]["backward_flows"], 0);
    assert!(v["stats"]["flows"].as_u64().unwrap() < truth.flows, "{v:#}");
    let sharded = out.path().join("sharded.perfetto-trace");
    let errs = simulated_launch(&dirs, &sharded, &window);
    assert!(errs[0].contains("converted in 4 shards"), "{}", errs[0]);
    assert!(
        std::fs::read(&single).unwrap() == std::fs::read(&sharded).unwrap(),
        "the sharded windowed trace differs from the single-process one"
    );
}

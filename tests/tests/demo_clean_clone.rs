//! Issue "sigmatrace run / demo": the README's demo command, run in a clean clone of the
//! committed repository, produces a trace the repository's trace checker accepts.

use sigmatrace_integration::*;
use std::process::Command;

#[test]
fn readme_demo_command_works_in_a_clean_clone() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let demo_cmd = "bash scripts/install-deps.sh && bash scripts/demo.sh";
    assert!(
        readme.contains(demo_cmd),
        "README must give the demo command `{demo_cmd}`"
    );

    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("clone");
    let st = Command::new("git")
        .args(["clone", "-q", "--no-hardlinks"])
        .arg(&root)
        .arg(&clone)
        .status()
        .unwrap();
    assert!(st.success(), "git clone failed");
    // The clone builds into its own target directory: nothing is shared with this build.
    let out_dir = tmp.path().join("demo-out");
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("{demo_cmd} -o '{}' --iters 5", out_dir.display()))
        .current_dir(&clone)
        .env("CARGO_TARGET_DIR", build_dir().join("clean-clone-target"))
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let trace = out_dir.join("demo.perfetto-trace");
    assert!(
        stdout.contains(&trace.display().to_string()),
        "demo must print the trace path:\n{stdout}"
    );
    // Four ranks, each verified its own all-reduce result; then four MoE ranks theirs.
    assert_eq!(stderr.matches("result verified").count(), 4, "{stderr}");
    assert_eq!(stderr.matches("results verified").count(), 4, "{stderr}");
    let moe = out_dir.join("moe/moe.perfetto-trace");
    assert!(stdout.contains(&moe.display().to_string()), "{stdout}");
    // The MoE phase posts WQEs directly into mlx5 rings: they reach the trace only through
    // the tracer's ring watching.
    assert!(stdout.contains("observed WQEs"), "{stdout}");
    validate(&moe, &["tracks=4"]);
    let logs = std::fs::read_dir(&out_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sigmalog")
        })
        .count();
    assert_eq!(logs, 4);
    // 4 ranks x 5 iterations x 2*(4-1) writes = 120 RDMA writes at least, plus credits.
    let report = validate(&trace, &["slices=120", "flows=1", "tracks=8"]);
    assert!(
        report["stats"]["slices"].as_u64().unwrap() >= 120,
        "{report:#}"
    );
}

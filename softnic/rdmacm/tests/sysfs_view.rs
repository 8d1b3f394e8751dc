//! softnic-run's sysfs view: a program reading /sys/class/infiniband (or, where the kernel
//! refuses a private mount namespace, $SYSFS_PATH/class/infiniband) sees softnic's device,
//! its port ACTIVE, and the same LID/GUID/GID the verbs report (ibv_devinfo -v).

use sigmatrace_testkit::{softnic_run, system_bin, Cmd, Out};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const NOT_SHOWN: &str = "/sys/class/infiniband not shown";

fn on_node(node: &str, argv: &[&str]) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric").display().to_string();
    let mut v = vec![
        softnic_run().display().to_string(),
        "--node".into(),
        node.into(),
    ];
    v.extend(["--fabric".into(), fabric, "--".into()]);
    v.extend(argv.iter().map(|s| s.to_string()));
    Cmd::new(&v).run(LIMIT)
}

/// `name: value` from ibv_devinfo output.
fn devinfo_field(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
        .trim()
        .to_string()
}

#[test]
fn program_sees_the_device_in_sys_class_infiniband() {
    let script = r#"
        root=/sys
        [ -d /sys/class/infiniband ] || root=$SYSFS_PATH
        d=$root/class/infiniband
        ls $d
        cat $d/softnic0/ports/1/state $d/softnic0/ports/1/lid $d/softnic0/ports/1/link_layer
        cat $d/softnic0/ports/1/gids/0 $d/softnic0/node_guid $d/softnic0/node_type
        cat $d/softnic0/device/vendor $d/softnic0/device/device
        cat $root/class/infiniband_verbs/uverbs0/ibdev $root/class/infiniband_verbs/abi_version
        [ -d /sys/class/net ] && echo net-visible
    "#;
    let out = on_node("3", &["sh", "-c", script]);
    assert!(out.ok(), "{out:#?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "softnic0",
            "4: ACTIVE",
            "0x4",
            "InfiniBand",
            "fe80:0000:0000:0000:5346:4e00:0000:0003",
            "5346:4e00:0000:0003",
            "1: CA",
            "0x5346",
            "0x0001",
            "softnic0",
            "6",
            "net-visible"
        ],
        "{out:#?}"
    );
    // Running as root here: the private mount namespace must work (no fallback message);
    // elsewhere exactly one message explains the fallback.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!out.stderr.contains(NOT_SHOWN), "{}", out.stderr);
    } else {
        assert_eq!(out.stderr.matches(NOT_SHOWN).count(), 1, "{}", out.stderr);
    }
    // The view is private: this test's own /sys has no softnic device.
    assert!(!std::path::Path::new("/sys/class/infiniband/softnic0").exists());
}

#[test]
fn sysfs_agrees_with_the_verbs() {
    for node in ["5", "260"] {
        let info = on_node(node, &[&system_bin("ibv_devinfo"), "-v"]);
        assert!(info.ok(), "{info:#?}");
        let sys = on_node(
            node,
            &[
                "sh",
                "-c",
                "cd $SYSFS_PATH/class/infiniband/softnic0 && cat node_guid ports/1/lid fw_ver",
            ],
        );
        assert!(sys.ok(), "{sys:#?}");
        let got: Vec<&str> = sys.stdout.lines().collect();
        let lid = u32::from_str_radix(got[1].trim_start_matches("0x"), 16).unwrap();
        assert_eq!(
            got[0],
            devinfo_field(&info.stdout, "node_guid"),
            "node {node}"
        );
        assert_eq!(
            lid.to_string(),
            devinfo_field(&info.stdout, "port_lid"),
            "node {node}"
        );
        assert_eq!(got[2], devinfo_field(&info.stdout, "fw_ver"), "node {node}");
    }
}

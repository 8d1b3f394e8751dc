//! softnic-run's sysfs view: a program reading /sys/class/infiniband (or, where the kernel
//! refuses a private mount namespace, $SYSFS_PATH/class/infiniband) sees softnic's device
//! with its port ACTIVE, and every value agrees with what the verbs report on the same node
//! (`ibv_devinfo -v`).

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
fn devinfo(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
        .trim()
        .to_string()
}

/// Reads the device's files under `root` (`/sys` or `$SYSFS_PATH`) on `node`.
fn read_view(node: &str, root: &str) -> (Out, Vec<String>) {
    let script = format!(
        r#"
        root={root}
        d=$root/class/infiniband
        dev=$(ls $d)
        echo $dev
        cd $d/$dev
        cat ports/1/state ports/1/lid ports/1/link_layer ports/1/phys_state ports/1/gids/0
        cat node_guid fw_ver device/vendor device/device
        cat $root/class/infiniband_verbs/uverbs0/ibdev $root/class/infiniband_verbs/abi_version
        [ -d /sys/class/net ] && echo net-visible
        "#
    );
    let out = on_node(node, &["sh", "-c", &script]);
    assert!(out.ok(), "{out:#?}");
    let lines = out.stdout.lines().map(str::to_string).collect();
    (out, lines)
}

fn check_against_verbs(node: &str, v: &[String]) {
    let info = on_node(node, &[&system_bin("ibv_devinfo"), "-v"]);
    assert!(info.ok(), "{info:#?}");
    let i = |k: &str| devinfo(&info.stdout, k);
    let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(v.len(), 13, "{v:?}");
    assert_eq!(v[0], i("hca_id"));
    assert_eq!(
        (v[1].as_str(), i("state")),
        ("4: ACTIVE", "PORT_ACTIVE (4)".into())
    );
    assert_eq!(hex(&v[2]).to_string(), i("port_lid"));
    assert_eq!(v[3], i("link_layer"));
    assert_eq!(v[4], "5: LinkUp");
    assert_eq!(v[5], i("GID[  0]"));
    assert_eq!(v[6], i("node_guid"));
    assert_eq!(v[7], i("fw_ver"));
    assert_eq!(hex(&v[8]), hex(&i("vendor_id")));
    assert_eq!(hex(&v[9]).to_string(), i("vendor_part_id"));
    assert_eq!(v[10], v[0], "uverbs0/ibdev names the device");
    assert_eq!(v[11], "6");
    assert_eq!(
        v[12], "net-visible",
        "other /sys/class entries stay visible"
    );
}

#[test]
fn program_sees_the_device_in_sys_class_infiniband() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // As root (as here and in CI) the private mount namespace must work; elsewhere exactly
    // one message explains the fallback and the tree is read through SYSFS_PATH.
    let (out, lines) = read_view("3", if root { "/sys" } else { "$SYSFS_PATH" });
    let messages = out.stderr.matches(NOT_SHOWN).count();
    assert_eq!(messages, usize::from(!root), "{}", out.stderr);
    check_against_verbs("3", &lines);
    // The view is private to the program: this test's own /sys is unchanged.
    assert!(!std::path::Path::new("/sys/class/infiniband")
        .join(&lines[0])
        .exists());
}

#[test]
fn sysfs_path_names_the_same_tree() {
    for node in ["5", "260"] {
        let (_, lines) = read_view(node, "$SYSFS_PATH");
        check_against_verbs(node, &lines);
    }
}

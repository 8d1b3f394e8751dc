//! rdma-core's own test suite, unmodified, as a test of softnic and of the tracer: Debian's
//! `python3-pyverbs` ships the suite (`/usr/share/doc/rdma-core/tests`, its larger files
//! gzipped). [`Suite::prepare`] copies it into a directory (unzipped), [`Suite::command`]
//! runs it through a small driver of ours (`pyverbs/driver.py`: what the suite's
//! `run_tests.py` does, with Python's `random` seeded and each test's outcome written as a
//! JSON line), and [`Results`] reads the outcomes back.
//!
//! What softnic does not offer the suite skips, by its own checks (an `EOPNOTSUPP`, a missing
//! capability), with its own reason; [`UNSUPPORTED`] lists every reason a run may give and why.
//! [`Results::check`] fails on any error or failure and on a skip for any other reason.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where Debian's `python3-pyverbs` puts rdma-core's tests.
pub const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// The Python the `python3-pyverbs` module is built for.
pub const PYTHON: &str = "/usr/bin/python3";
/// The seed of the suite's random choices.
pub const SEED: u64 = 20_261_208;

const DRIVER: &str = include_str!("pyverbs/driver.py");

/// Skip reasons a run may give (the start of the suite's message) and why: a feature softnic
/// does not offer, hardware or setup this machine has not, or another vendor's device.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    // softnic's device model.
    (
        "Create Mlx5DV QP is not supported",
        "softnic: no mlx5dv_create_qp (DC, DCI, custom QPs)",
    ),
    (
        "Create Mlx5DV CQ is not supported",
        "softnic: no mlx5dv_create_cq (128-byte CQEs, compression)",
    ),
    ("Create DC QP is not supported", "softnic: no DC transport"),
    (
        "DCI caps is not supported by HW",
        "softnic: no DC transport",
    ),
    (
        "Extended CQ is not supported",
        "softnic: ibv_cq_ex without tag-matching fields",
    ),
    (
        "Create Extended CQ is not supported",
        "softnic: ibv_cq_ex without flow-tag fields",
    ),
    (
        "ODP implicit is not supported",
        "softnic: no implicit on-demand paging",
    ),
    (
        "Alloc reserved QP number is not supported",
        "softnic: no reserved QPNs",
    ),
    (
        "VAR allocation is not supported",
        "softnic: no virtio VAR pages",
    ),
    (
        "Packet pacing entry allocation is not supported",
        "softnic: no packet pacing",
    ),
    (
        "Creation or usage of schedule elements",
        "softnic: no scheduling elements",
    ),
    (
        "Create schedule elements is not supported",
        "softnic: no scheduling elements",
    ),
    (
        "Set LAG affinity is not supported",
        "softnic: one port, no LAG",
    ),
    (
        "Device caps doesn't support Support CQE 128B",
        "softnic: 64-byte CQEs only",
    ),
    (
        "NIC flow table does not support reformat",
        "softnic: no flow tables (devx caps page 0x7)",
    ),
    (
        "MEMIC atomic operations are not supported",
        "softnic: no MEMIC atomics (devx caps page 0xF)",
    ),
    (
        "All gid indices populated",
        "softnic: every GID index is set",
    ),
    // Needs a kernel RDMA device, Ethernet flow steering, or root.
    (
        "Device softnic0 doesn't have net interface",
        "a user-space device has no /sys/class/infiniband netdev",
    ),
    (
        "Must be run by root on Ethernet link layer",
        "raw Ethernet QPs: root and an Ethernet port",
    ),
    (
        "To Create RAW QP must be done by root on Ethernet link layer",
        "raw Ethernet QPs: root and an Ethernet port",
    ),
    ("Create Raw Packet QP", "softnic: no raw Ethernet QPs"),
    (
        "Create QP type 8 is not supported",
        "softnic: no raw Ethernet QPs (type 8)",
    ),
    (
        "Modifying a QP UDP sport is not supported",
        "softnic: RoCE v2 without UDP (mlx5dv_modify_qp_udp_sport)",
    ),
    (
        "Could not find the PCI device of",
        "a user-space device has no PCI function",
    ),
    (
        "Must be run on Ethernet link layer with Eswitch on",
        "an eswitch (switchdev) device",
    ),
    (
        "Link layer of port=1 is InfiniBand",
        "a RoCE-only test on the InfiniBand port",
    ),
    (
        "No supported port is up",
        "RoCE v2 GIDs only (the UDP source port test) on the InfiniBand port",
    ),
    (
        "PCI device must be passed by the user",
        "VFIO: a PCI function",
    ),
    // Other hardware or software this machine has not.
    (
        "Can not run the test over non EFA device",
        "an AWS EFA device",
    ),
    (
        "Crypto login details must be supplied",
        "mlx5 crypto credentials",
    ),
    ("Allocating dmabuf is not supported", "a GPU render node"),
    ("Device /dev/dri/renderD", "a GPU render node"),
    (
        "Lack of permission to access /dev/dri/renderD",
        "a GPU render node",
    ),
    ("cuda-python 12.0+ must be installed", "CUDA"),
    ("scapy package is needed", "scapy (raw Ethernet DevX tests)"),
    (
        "There are no huge pages of size 2M allocated",
        "huge pages reserved on the machine",
    ),
];

/// A prepared copy of the suite.
pub struct Suite {
    dir: PathBuf,
}

impl Suite {
    /// Copies the suite from [`SUITE`] into `dir/tests` (gzipped files unzipped) and writes the
    /// driver. Panics, naming the package, when the suite or its Python is missing.
    pub fn prepare(dir: &Path) -> Suite {
        let src = Path::new(SUITE);
        assert!(
            src.join("run_tests.py").exists() && Path::new(PYTHON).exists(),
            "{SUITE}/run_tests.py or {PYTHON} missing: run scripts/install-deps.sh (python3-pyverbs)"
        );
        let tests = dir.join("tests");
        std::fs::create_dir_all(&tests).expect("suite directory");
        for e in std::fs::read_dir(src).expect("read the suite") {
            let e = e.expect("suite entry");
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).expect("read a suite file");
            let (name, bytes) = match name.strip_suffix(".gz") {
                Some(plain) => {
                    let mut out = Vec::new();
                    flate2::read::GzDecoder::new(&bytes[..])
                        .read_to_end(&mut out)
                        .unwrap_or_else(|e| panic!("{}: {e}", e_path(src, &name)));
                    (plain.to_owned(), out)
                }
                None => (name, bytes),
            };
            std::fs::write(tests.join(name), bytes).expect("write a suite file");
        }
        std::fs::write(dir.join("driver.py"), DRIVER).expect("write the driver");
        Suite {
            dir: dir.to_owned(),
        }
    }

    /// The command that runs the whole suite (to be run on softnic), its outcomes written to
    /// [`Suite::results_path`].
    pub fn command(&self) -> Vec<OsString> {
        vec![
            PYTHON.into(),
            self.dir.join("driver.py").into(),
            self.dir.join("tests").into(),
            self.results_path().into(),
            SEED.to_string().into(),
        ]
    }

    /// Where a run's outcomes go (one JSON object per test).
    pub fn results_path(&self) -> PathBuf {
        self.dir.join("results.jsonl")
    }

    /// The outcomes of the last run.
    pub fn results(&self) -> Results {
        let text = std::fs::read_to_string(self.results_path()).unwrap_or_default();
        Results::parse(&text)
    }
}

fn e_path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// One test's outcome: `ok`, `skipped` (with the reason), `error` or `fail` (with the
/// traceback), `expected failure`, `unexpected success`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub id: String,
    pub outcome: String,
    pub detail: String,
}

/// The outcomes of a run, in the order the tests ran.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub tests: Vec<Outcome>,
}

impl Results {
    /// Reads the driver's JSON lines.
    pub fn parse(text: &str) -> Results {
        let tests = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("result line {l:?}: {e}"));
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                Outcome {
                    id: s("id"),
                    outcome: s("outcome"),
                    detail: s("detail"),
                }
            })
            .collect();
        Results { tests }
    }

    /// How many tests had `outcome`.
    pub fn count(&self, outcome: &str) -> usize {
        self.tests.iter().filter(|t| t.outcome == outcome).count()
    }

    /// The outcome of the test whose id ends with `name` (`test_mr.MRTest.test_mr_rereg_pd`).
    pub fn of(&self, name: &str) -> Option<&Outcome> {
        self.tests.iter().find(|t| t.id.ends_with(name))
    }

    /// Panics (naming `what` and each offending test) unless every test passed or was skipped
    /// for a reason [`UNSUPPORTED`] lists.
    pub fn check(&self, what: &str) {
        assert!(!self.tests.is_empty(), "{what}: no test ran");
        let bad: Vec<String> = self
            .tests
            .iter()
            .filter(|t| match t.outcome.as_str() {
                "ok" => false,
                "skipped" => !UNSUPPORTED.iter().any(|(r, _)| t.detail.starts_with(r)),
                _ => true,
            })
            .map(|t| format!("{} {}: {}", t.id, t.outcome, t.detail))
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {} of {} tests neither passed nor skipped for a listed reason:\n{}",
            bad.len(),
            self.tests.len(),
            bad.join("\n")
        );
    }
}

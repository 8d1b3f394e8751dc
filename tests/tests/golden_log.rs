//! The golden v1 logs in `fixtures/golden-v1/` (a traced `ibv_rc_pingpong -n 10` pair over
//! softnic; see the README there) read with today's reader: exact record counts per kind, so a
//! format change that breaks old logs fails here. They still convert into a valid trace with
//! one flow per message.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatrace_integration::{artifact, fixture, output_ok, validate};
use sigmatrace_schemas::{LogFile, RecordKind, FORMAT_MAJOR};

/// Decompresses `fixtures/golden-v1/<name>.sigmalog.gz` into `dir`.
fn unpack(dir: &Path, name: &str) -> PathBuf {
    let gz = std::fs::read(fixture(&format!("golden-v1/{name}.sigmalog.gz"))).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let path = dir.join(format!("{name}.sigmalog"));
    std::fs::write(&path, raw).unwrap();
    path
}

/// Records per kind name, and whether the log reads without salvage issues.
fn counts(path: &Path) -> (BTreeMap<String, usize>, bool, u16) {
    let log = LogFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut by_kind = BTreeMap::new();
    for c in log.chunks() {
        for raw in log.records(c) {
            let raw = raw.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            raw.decode()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = RecordKind::from_id(raw.kind)
                .map_or_else(|| format!("unknown kind {}", raw.kind), |k| k.name().into());
            *by_kind.entry(name).or_default() += 1;
        }
    }
    (by_kind, log.salvage().is_clean(), log.header().major)
}

/// The record counts of one side: [`PINGPONG`]'s and the side's own.
fn expect(side: &[(&str, usize)]) -> BTreeMap<String, usize> {
    PINGPONG
        .iter()
        .chain(side)
        .map(|&(k, n)| (k.to_string(), n))
        .collect()
}

#[test]
fn golden_v1_logs_read_with_exact_record_counts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, want) in [("server", SERVER), ("client", CLIENT)] {
        let (got, clean, major) = counts(&unpack(dir.path(), name));
        assert_eq!(major, 1, "{name}: the golden logs are format v1");
        assert_eq!(
            FORMAT_MAJOR, 2,
            "format 2 (compact records) reads v1 logs; a new major version must still read them"
        );
        assert!(clean, "{name}: salvage issues reading a golden log");
        assert_eq!(got, expect(want), "{name}: record counts changed");
    }
}

#[test]
fn golden_v1_logs_convert_to_a_valid_trace() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    unpack(&logs, "server");
    unpack(&logs, "client");
    let trace = dir.path().join("golden.perfetto-trace");
    output_ok(
        Command::new(artifact("sigmatrace-convert"))
            .arg(&logs)
            .arg("-o")
            .arg(&trace)
            .arg("--quiet"),
    );
    // 10 iterations each way: every send matched to the peer's receive.
    let v = validate(&trace, &[]);
    assert_eq!(v["stats"]["flows"], 20, "{v:#}");
    assert_eq!(v["stats"]["backward_flows"], 0, "{v:#}");
    assert_eq!(v["stats"]["process_tracks"], 2, "{v:#}");
}

/// ibv_rc_pingpong (`-n 10`), either side: one device, PD, MR, CQ and RC QP (3 state
/// changes: INIT, RTR, RTS); 500 receives posted up front (its rx depth), 10 sends, 20
/// completions (10 of each), one CQ event.
const PINGPONG: &[(&str, usize)] = &[
    ("CqCreate", 1),
    ("CqDestroy", 1),
    ("CqEvent", 1),
    ("DeviceClose", 1),
    ("DeviceOpen", 1),
    ("MrDereg", 1),
    ("MrReg", 1),
    ("PdAlloc", 1),
    ("PdDealloc", 1),
    ("PostRecv", 500),
    ("PostSend", 10),
    ("QpCreate", 1),
    ("QpDestroy", 1),
    ("QpModify", 3),
    ("StringDef", 1),
    ("WorkCompletion", 20),
];
/// The server side besides [`PINGPONG`]: two clock snapshots; empty polls aggregated into 10
/// records.
const SERVER: &[(&str, usize)] = &[("ClockSnapshot", 2), ("EmptyPolls", 10)];
/// The client side besides [`PINGPONG`]: one clock snapshot (a shorter run) and 9 empty-poll
/// records.
const CLIENT: &[(&str, usize)] = &[("ClockSnapshot", 1), ("EmptyPolls", 9)];

//! The golden logs in `fixtures/golden-v1/` (format 1: 64-byte records) and
//! `fixtures/golden-v2/` (format 2.1: compact records) — each a traced `ibv_rc_pingpong -n 10`
//! pair over softnic; see the READMEs there — read with today's reader: exact record counts
//! per kind, so a format change that breaks logs already written fails here. They still
//! convert into a valid trace with one flow per message.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatrace_integration::{artifact, fixture, output_ok, validate};
use sigmatrace_schemas::{LogFile, RecordKind, FORMAT_MAJOR};

/// Decompresses `fixtures/<set>/<name>.sigmalog.gz` into `dir`.
fn unpack(dir: &Path, set: &str, name: &str) -> PathBuf {
    let gz = std::fs::read(fixture(&format!("{set}/{name}.sigmalog.gz"))).unwrap();
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
            let name_of = |kind: u16| {
                RecordKind::from_id(kind)
                    .map_or_else(|| format!("unknown kind {kind}"), |k| k.name().to_string())
            };
            // A compact record is read as its full kind: counted as "<stored> as <full>".
            let stored = u16::from_le_bytes([raw.bytes[0], raw.bytes[1]]);
            let name = match stored == raw.kind {
                true => name_of(raw.kind),
                false => format!("{} as {}", name_of(stored), name_of(raw.kind)),
            };
            *by_kind.entry(name).or_default() += 1;
        }
    }
    (by_kind, log.salvage().is_clean(), log.header().major)
}

/// The record counts of one side: the control calls, the format's work requests and the
/// side's own.
fn expect(wrs: &[(&str, usize)], side: &[(&str, usize)]) -> BTreeMap<String, usize> {
    CONTROL
        .iter()
        .chain(wrs)
        .chain(side)
        .map(|&(k, n)| (k.to_string(), n))
        .collect()
}

#[test]
fn golden_v1_logs_read_with_exact_record_counts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, want) in [("server", SERVER), ("client", CLIENT)] {
        let (got, clean, major) = counts(&unpack(dir.path(), "golden-v1", name));
        assert_eq!(major, 1, "{name}: the golden v1 logs are format v1");
        assert_eq!(
            FORMAT_MAJOR, 2,
            "format 2 (compact records) reads v1 logs; a new major version must still read them"
        );
        assert!(clean, "{name}: salvage issues reading a golden log");
        assert_eq!(got, expect(PINGPONG, want), "{name}: record counts changed");
    }
}

#[test]
fn golden_v2_logs_read_with_exact_record_counts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, want) in [("server", SERVER_V2), ("client", CLIENT_V2)] {
        let (got, clean, major) = counts(&unpack(dir.path(), "golden-v2", name));
        assert_eq!(major, 2, "{name}: the golden v2 logs are format v2");
        assert!(clean, "{name}: salvage issues reading a golden log");
        assert_eq!(
            got,
            expect(PINGPONG_V2, want),
            "{name}: record counts changed"
        );
    }
}

/// Both sets convert: 10 iterations each way, every send matched to the peer's receive.
#[test]
fn golden_logs_convert_to_a_valid_trace() {
    for set in ["golden-v1", "golden-v2"] {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        unpack(&logs, set, "server");
        unpack(&logs, set, "client");
        let trace = dir.path().join("golden.perfetto-trace");
        output_ok(
            Command::new(artifact("sigmatrace-convert"))
                .arg(&logs)
                .arg("-o")
                .arg(&trace)
                .arg("--quiet"),
        );
        let v = validate(&trace, &[]);
        assert_eq!(v["stats"]["flows"], 20, "{set}: {v:#}");
        assert_eq!(v["stats"]["backward_flows"], 0, "{set}: {v:#}");
        assert_eq!(v["stats"]["process_tracks"], 2, "{set}: {v:#}");
    }
}

/// ibv_rc_pingpong (`-n 10`), either side, whatever the format: one device, PD, MR, CQ and
/// RC QP (3 state changes: INIT, RTR, RTS), one CQ event.
const CONTROL: &[(&str, usize)] = &[
    ("CqCreate", 1),
    ("CqDestroy", 1),
    ("CqEvent", 1),
    ("DeviceClose", 1),
    ("DeviceOpen", 1),
    ("MrDereg", 1),
    ("MrReg", 1),
    ("PdAlloc", 1),
    ("PdDealloc", 1),
    ("QpCreate", 1),
    ("QpDestroy", 1),
    ("QpModify", 3),
];
/// Its work requests in format 1, either side: 500 receives posted up front (its rx depth),
/// 10 sends, 20 completions (10 of each); one string.
const PINGPONG: &[(&str, usize)] = &[
    ("PostRecv", 500),
    ("PostSend", 10),
    ("StringDef", 1),
    ("WorkCompletion", 20),
];
/// The server side besides those: two clock snapshots; empty polls aggregated into 10
/// records.
const SERVER: &[(&str, usize)] = &[("ClockSnapshot", 2), ("EmptyPolls", 10)];
/// The client side: one clock snapshot (a shorter run) and 9 empty-poll records.
const CLIENT: &[(&str, usize)] = &[("ClockSnapshot", 1), ("EmptyPolls", 9)];

/// The same work requests written by the format 2.1 tracer, either side: every one compact —
/// the 500 receives and 10 sends as `PostRecvCompact` / `PostSendCompact`, the 10 receive
/// completions as `CompletionCompact`, the 10 send completions as `CompletionShort` (the
/// context records `TimeBase` and `SlotBind` are consumed by the reader, not counted) — and
/// three strings.
const PINGPONG_V2: &[(&str, usize)] = &[
    ("CompletionCompact as WorkCompletion", 10),
    ("CompletionShort as WorkCompletion", 10),
    ("PostRecvCompact as PostRecv", 500),
    ("PostSendCompact as PostSend", 10),
    ("StringDef", 3),
];
/// The v2 server side besides those: two clock snapshots, 11 empty-poll records.
const SERVER_V2: &[(&str, usize)] = &[("ClockSnapshot", 2), ("EmptyPolls", 11)];
/// The v2 client side: one clock snapshot, 18 empty-poll records.
const CLIENT_V2: &[(&str, usize)] = &[("ClockSnapshot", 1), ("EmptyPolls", 18)];

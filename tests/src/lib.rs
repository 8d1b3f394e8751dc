//! Helpers for the end-to-end tests: everything comes from `sigmatrace-testkit` (artifact
//! lookup, free ports, guarded child processes, the repository's own trace checker); what is
//! specific to these tests is the golden-log fixture's location.

use std::path::{Path, PathBuf};

pub use sigmatrace_testkit::trace::validate;
pub use sigmatrace_testkit::{
    artifact, build_dir, convert_logs, free_port, output_ok, workspace_root, Guarded,
};

/// A file under `fixtures/` of the repository.
pub fn fixture(rel: &str) -> PathBuf {
    let p = workspace_root().join("fixtures").join(rel);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}

/// Converts `logs` into `dir/t1.perfetto-trace` and `dir/t2.perfetto-trace` with 1 and 2
/// worker threads, asserts the two are byte-identical and returns the first.
pub fn convert_with_one_and_two_workers(logs: &Path, dir: &Path, what: &str) -> PathBuf {
    let mut traces = Vec::new();
    for jobs in [1, 2] {
        let out = dir.join(format!("t{jobs}.perfetto-trace"));
        let opts = sigmatrace_convert::ConvertOptions {
            jobs,
            ..Default::default()
        };
        sigmatrace_convert::convert(&[logs.to_owned()], &out, &opts).unwrap();
        traces.push(out);
    }
    assert!(
        std::fs::read(&traces[0]).unwrap() == std::fs::read(&traces[1]).unwrap(),
        "{what}: traces with --jobs 1 and 2 differ"
    );
    traces.swap_remove(0)
}

/// Where softnic's count of the processes logging into `logs` goes (`SOFTNIC_TALLY`, set by
/// the tests' launchers): beside the log directory.
pub fn tally_path(logs: &Path) -> PathBuf {
    logs.with_file_name("tally.jsonl")
}

/// (send WRs, receive WRs, successful completions, failed completions) of one process.
pub type Counts = (u64, u64, u64, u64);

/// softnic's tally lines (`softnic::verbs::tally`: the device's own count of the work
/// requests it accepted and the completions it delivered), by pid; processes that posted
/// nothing and polled nothing left out.
pub fn device_tally(path: &Path) -> std::collections::BTreeMap<u32, Counts> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (softnic wrote no tally)", path.display()));
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a tally line");
            let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {l}"));
            let c = (
                n("sends"),
                n("recvs"),
                n("send_ok") + n("recv_ok"),
                n("send_err") + n("recv_err"),
            );
            (n("pid") as u32, c)
        })
        .filter(|(_, c)| *c != (0, 0, 0, 0))
        .collect()
}

/// The same four counts of one log's records.
pub fn logged_counts(log: &sigmatrace_schemas::LogFile) -> Counts {
    use sigmatrace_schemas::Record;
    let mut c = (0, 0, 0, 0);
    for chunk in log.chunks() {
        for raw in log.records(chunk) {
            match raw.unwrap().decode().unwrap() {
                Record::PostSend(_) => c.0 += 1,
                Record::PostRecv(_) => c.1 += 1,
                Record::WorkCompletion(w) if w.status == 0 => c.2 += 1,
                Record::WorkCompletion(_) => c.3 += 1,
                _ => {}
            }
        }
    }
    c
}

/// Checks each log in `logs` against softnic's count of its process ([`tally_path`]; a
/// process killed by a signal writes none): the tracer logged exactly the send and receive
/// work requests softnic accepted and the completions it delivered, by success. Returns how
/// many processes were compared (at least one).
pub fn check_against_device(logs: &Path, what: &str) -> usize {
    let device = device_tally(&tally_path(logs));
    let mut compared = 0;
    for e in std::fs::read_dir(logs).unwrap() {
        let path = e.unwrap().path();
        let log = sigmatrace_schemas::LogFile::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let pid = log.header().pid;
        if let Some(counted) = device.get(&pid) {
            assert_eq!(
                &logged_counts(&log),
                counted,
                "{what}: pid {pid}: logged (sends, recvs, ok completions, failed) vs softnic's count"
            );
            compared += 1;
        }
    }
    assert!(
        compared > 0,
        "{what}: no log of a process softnic counted: {device:?}"
    );
    compared
}

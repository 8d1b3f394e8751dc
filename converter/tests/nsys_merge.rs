//! `--nsys`: Nsight Systems exports (the real fixtures in fixtures/nsys/ and synthetic
//! NVTX exports) merged into the Perfetto output, alone and with a SigmaTrace log set. Traces
//! are checked with validate_perfetto.py and by decoding them here.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use sigmatrace_convert::import::nsys::cli as nsys_cli;
use sigmatrace_convert::import::nsys::NsysOptions;
use sigmatrace_convert::{ConvertError, ConvertOptions, Format};
use sigmatrace_nsys::{Anchor, HostClock};
use sigmatrace_schemas::header::{FileHeader, RankInfo};
use sigmatrace_schemas::records::*;
use sigmatrace_schemas::writer::{LogWriter, WriterOptions};
use sigmatrace_testkit::nsys_fixture as fixture;
use sigmatrace_testkit::{artifact, output_ok};
use sigmatrace_timeline::proto::{self, Trace, TracePacket};

const R1_UTC: u64 = 1_769_308_002_162_486_533;
const R1_SYS: u64 = 6_324_391_262_083;
const R2_UTC: u64 = 1_769_320_577_184_271_416;
/// First kernel start (session ns) in report1 / report2.
const R1_K0: u64 = 1_453_545_934;
const R2_K0: u64 = 1_546_026_682;

/// Debug annotations of an event, as strings.
type Args = BTreeMap<String, String>;
/// (parent, name, description, process pid)
type TrackInfo = (Option<u64>, String, Option<String>, Option<i32>);
/// (track, name, begin ts, end ts, args)
type Slice = (u64, String, u64, u64, Args);

/// A decoded trace: tracks, completed slices, instants, flow endpoints.
#[derive(Default)]
struct Decoded {
    /// uuid → (parent, name, description, process pid)
    tracks: HashMap<u64, TrackInfo>,
    /// (track, name, begin ts, end ts, args)
    slices: Vec<Slice>,
    instants: Vec<(u64, String, u64, Args)>,
    flows: HashMap<u64, usize>,
}

fn expand(bytes: &[u8], out: &mut Vec<TracePacket>) {
    for p in Trace::decode(bytes).expect("trace decodes").packet {
        match &p.compressed_packets {
            Some(z) => {
                let mut inner = Vec::new();
                flate2::read::ZlibDecoder::new(&z[..])
                    .read_to_end(&mut inner)
                    .expect("zlib block");
                expand(&inner, out);
            }
            None => out.push(p),
        }
    }
}

fn decode(path: &Path) -> Decoded {
    let mut packets = Vec::new();
    expand(&std::fs::read(path).unwrap(), &mut packets);
    let mut d = Decoded::default();
    let mut names: HashMap<(u32, u64), String> = HashMap::new();
    let mut keys: HashMap<(u32, u64), String> = HashMap::new();
    let mut open: HashMap<u64, Vec<(String, u64, Args)>> = HashMap::new();
    for p in packets {
        let seq = p.trusted_packet_sequence_id.unwrap_or(0);
        if let Some(i) = &p.interned_data {
            for n in &i.event_names {
                names.insert((seq, n.iid.unwrap()), n.name.clone().unwrap());
            }
            for n in &i.debug_annotation_names {
                keys.insert((seq, n.iid.unwrap()), n.name.clone().unwrap());
            }
        }
        if let Some(t) = &p.track_descriptor {
            let pid = t.process.as_ref().and_then(|x| x.pid);
            let prev = d.tracks.insert(
                t.uuid.unwrap(),
                (
                    t.parent_uuid,
                    t.name.clone().unwrap_or_default(),
                    t.description.clone(),
                    pid,
                ),
            );
            assert!(prev.is_none(), "track {} declared twice", t.uuid.unwrap());
        }
        let Some(e) = &p.track_event else { continue };
        let ts = p.timestamp.unwrap_or(0);
        let track = e.track_uuid.unwrap_or(0);
        for f in e.flow_ids.iter().chain(&e.terminating_flow_ids) {
            *d.flows.entry(*f).or_default() += 1;
        }
        let name = e
            .name
            .clone()
            .or_else(|| e.name_iid.map(|i| names[&(seq, i)].clone()));
        let args: BTreeMap<String, String> = e
            .debug_annotations
            .iter()
            .map(|a| {
                let k = a
                    .name
                    .clone()
                    .unwrap_or_else(|| keys[&(seq, a.name_iid.unwrap())].clone());
                let v = a
                    .string_value
                    .clone()
                    .or(a.uint_value.map(|v| v.to_string()))
                    .or(a.int_value.map(|v| v.to_string()))
                    .or(a.bool_value.map(|v| v.to_string()))
                    .unwrap_or_else(|| format!("{a:?}"));
                (k, v)
            })
            .collect();
        match e.r#type {
            Some(proto::TYPE_SLICE_BEGIN) => {
                open.entry(track)
                    .or_default()
                    .push((name.unwrap(), ts, args))
            }
            Some(proto::TYPE_SLICE_END) => {
                let (n, b, a) = open
                    .get_mut(&track)
                    .and_then(|s| s.pop())
                    .expect("END without BEGIN");
                d.slices.push((track, n, b, ts, a));
            }
            Some(proto::TYPE_INSTANT) => d.instants.push((track, name.unwrap(), ts, args)),
            _ => {}
        }
    }
    assert!(open.values().all(|s| s.is_empty()), "unclosed slices");
    d
}

impl Decoded {
    fn track_name(&self, uuid: u64) -> &str {
        &self.tracks[&uuid].1
    }

    /// Slices on tracks whose name starts with `prefix`, counted by event name.
    fn by_name(&self, prefix: &str) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in self
            .slices
            .iter()
            .filter(|s| self.track_name(s.0).starts_with(prefix))
        {
            *m.entry(s.1.clone()).or_default() += 1;
        }
        m
    }

    fn first_ts(&self, name: &str) -> u64 {
        self.slices
            .iter()
            .filter(|s| s.1 == name)
            .map(|s| s.2)
            .min()
            .expect("slice present")
    }
}

fn runtime_names(with_device_sync: bool) -> BTreeMap<String, usize> {
    let mut m: BTreeMap<String, usize> = sigmatrace_testkit::NSYS_COMMON_CALLS
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if with_device_sync {
        m.insert("cudaDeviceSynchronize".into(), 1);
    }
    m
}

/// Checks one fixture's events in a decoded trace: exact counts, names, tracks, flows.
fn check_fixture(d: &Decoded, pid: u32, report2: bool) {
    let api_track = format!("CUDA API async.out tid {pid}");
    let api: Vec<_> = d
        .slices
        .iter()
        .filter(|s| d.track_name(s.0) == api_track)
        .collect();
    assert_eq!(api.len(), if report2 { 45 } else { 44 });
    assert_eq!(d.by_name(&api_track), runtime_names(report2));
    let launch = api.iter().find(|s| s.1 == "cudaLaunchKernel").unwrap();
    assert_eq!(launch.4["api"], "cudaLaunchKernel_v7000");
    // GPU work of this process: under its "CUDA HW" group.
    let gpu: Vec<_> = d
        .slices
        .iter()
        .filter(|s| {
            let parent = d.tracks[&s.0].0.unwrap();
            d.track_name(parent) == "CUDA HW GPU 0: NVIDIA GeForce RTX 4060 Ti"
                && d.tracks[&parent].0 == d.tracks[&api[0].0].0
        })
        .collect();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &gpu {
        *names.entry(&s.1).or_default() += 1;
    }
    let syncs = if report2 { 2 } else { 1 };
    let mut want = BTreeMap::from([
        ("add_parallel", 4),
        ("Memcpy DtoH", 4),
        ("Memcpy HtoD", 8),
        ("Event sync", 1),
    ]);
    if report2 {
        want.insert("Context sync", 1);
    }
    assert_eq!(names, want);
    assert_eq!(gpu.len(), 4 + 12 + syncs);
    for k in gpu.iter().filter(|s| s.1 == "add_parallel") {
        assert!(["Stream 13", "Stream 14", "Stream 15", "Stream 16"].contains(&d.track_name(k.0)));
        assert_eq!(k.4["grid"], "97657×1×1");
        assert_eq!(k.4["block"], "256×1×1");
    }
    for m in gpu.iter().filter(|s| s.1.starts_with("Memcpy")) {
        assert_eq!(m.4["bytes"], "100000000");
    }
}

fn convert_only(
    files: &[&str],
    offset: Option<i64>,
    out: &Path,
) -> Vec<sigmatrace_convert::import::nsys::NsysMerged> {
    let opts = NsysOptions {
        files: files.iter().map(|f| fixture(f)).collect(),
        offset_ns: offset,
    };
    nsys_cli::convert_only(&opts, out, Format::Perfetto, 1).unwrap()
}

#[test]
fn each_fixture_alone_has_exact_counts_and_names() {
    for (file, pid, report2, utc, k0) in [
        ("report1.sqlite", 17068, false, R1_UTC, R1_K0),
        ("report2.sqlite", 58972, true, R2_UTC, R2_K0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nsys.pftrace");
        let merged = convert_only(&[file], None, &out);
        assert_eq!(merged[0].mapping.anchor, Anchor::UtcEpoch);
        assert_eq!(merged[0].own_pids, [pid]);
        let v = common::validate(&out, &[]);
        let (api, syncs) = if report2 { (45, 2) } else { (44, 1) };
        assert_eq!(v["stats"]["slices"], 4 + 12 + syncs + api, "{file}: {v}");
        assert_eq!(v["stats"]["flows"], 16, "one flow per launch / memcpy: {v}");
        assert_eq!(v["stats"]["process_tracks"], 1);
        let d = decode(&out);
        check_fixture(&d, pid, report2);
        assert_eq!(d.first_ts("add_parallel"), utc + k0);
        assert!(
            d.flows.values().all(|&n| n == 2),
            "each flow joins a call and its GPU work"
        );
        let proc_ = d.tracks.values().find(|t| t.3.is_some()).unwrap();
        assert_eq!(proc_.1, format!("async.out pid {pid} (Nsight Systems)"));
        let meta = d
            .tracks
            .values()
            .find(|t| t.1 == format!("Nsight Systems import: {file}"))
            .unwrap();
        let desc = meta.2.as_deref().unwrap();
        assert!(
            desc.contains(&format!("realtime = nsys time + {utc} ns (utcEpochNs")),
            "{desc}"
        );
    }
}

#[test]
fn manual_offset_shifts_every_event_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offset.pftrace");
    let merged = convert_only(&["report1.sqlite"], Some(-2_500), &out);
    assert_eq!(merged[0].mapping.manual_offset_ns, -2_500);
    common::validate(&out, &[]);
    let d = decode(&out);
    assert_eq!(d.first_ts("add_parallel"), R1_UTC + R1_K0 - 2_500);
    let meta = d
        .tracks
        .values()
        .find(|t| t.1.starts_with("Nsight Systems import"))
        .unwrap();
    assert!(meta
        .2
        .as_deref()
        .unwrap()
        .contains("manual offset -2500 ns"));
}

/// Writes one SigmaTrace log of `pid` on `host` whose start snapshot is taken 1 s after the
/// nsys capture start of report1, with MONOTONIC in the frame of report1's systemClockNs and
/// REALTIME 500 ns later than utcEpochNs implies; one RC QP with 3 completed sends.
fn write_log(dir: &Path, host: &str, pid: u32) -> PathBuf {
    let mono0 = R1_SYS + 1_000_000_000;
    let real0 = R1_UTC + 1_000_000_000 + 500;
    let raw0 = mono0 - 40_000_000; // MONOTONIC_RAW differs from MONOTONIC by 40 ms
    let start = ClockSnapshot {
        hdr: RecordHeader::of::<ClockSnapshot>(0),
        ts: raw0,
        monotonic: mono0,
        monotonic_raw: raw0,
        boottime: mono0 + 7_000_000_000,
        realtime: real0,
        ts_after: raw0,
    };
    let header = FileHeader {
        rank: RankInfo {
            rank: Some(0),
            local_rank: Some(0),
            world_size: Some(1),
            source: "OMPI_COMM_WORLD_RANK".into(),
        },
        hostname: host.into(),
        cmdline: vec!["async.out".into()],
        exe: "/home/hangyudu/tmp/async.out".into(),
        ..common::log_header(pid, 0, start)
    };
    let path = dir.join("rank0000.sigmatrace");
    let opts = WriterOptions {
        chunk_size: 1 << 16,
        max_bytes: 1 << 24,
        prefault: false,
        ..Default::default()
    };
    let w = LogWriter::create(&path, &header, opts).unwrap();
    let mut t = w.thread_writer(pid);
    let ctx = 0x7000_0000;
    let mut name = [0u8; 32];
    name[..6].copy_from_slice(b"mlx5_0");
    t.append(&DeviceOpen {
        hdr: RecordHeader::of::<DeviceOpen>(0),
        ts: raw0 + 1_000,
        context: ctx,
        guid: 0xabc,
        name,
    });
    t.append(&QpCreate {
        hdr: RecordHeader::of::<QpCreate>(2), // IBV_QPT_RC
        ts: raw0 + 2_000,
        qp: 0x5000,
        context: ctx,
        srq: 0,
        qpn: 0x42,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline: 0,
        _pad: 0,
    });
    for k in 0..3u64 {
        let ts = raw0 + 10_000 + k * 5_000;
        t.append(&PostSend {
            hdr: RecordHeader::of::<PostSend>(2), // IBV_SEND_SIGNALED
            ts,
            wr_id: k,
            qpn: 0x42,
            bytes: 4096,
            num_sge: 1,
            ..Default::default()
        });
        t.append(&WorkCompletion {
            hdr: RecordHeader::of::<WorkCompletion>(0),
            ts: ts + 2_000,
            wr_id: k,
            cq: 0x6000,
            qpn: 0x42,
            byte_len: 4096,
            ..Default::default()
        });
    }
    drop(t);
    w.flush().unwrap();
    path
}

#[test]
fn merge_with_a_sigmatrace_log_set_places_and_aligns_by_host_and_pid() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    write_log(&logs, "0x822a5b873", 17068);
    let out = dir.path().join("merged.pftrace");
    let opts = ConvertOptions {
        jobs: 1,
        nsys: NsysOptions {
            files: vec![fixture("report1.sqlite"), fixture("report2.sqlite")],
            offset_ns: None,
        },
        ..Default::default()
    };
    let summary = sigmatrace_convert::convert(&[logs], &out, &opts).unwrap();
    assert_eq!(summary.processes, 1);
    let (m1, m2) = (&summary.nsys[0], &summary.nsys[1]);
    // report1: same host and pid → under the SigmaTrace process; systemClockNs matched MONOTONIC.
    assert_eq!(m1.matched_pids, [17068]);
    assert!(m1.own_pids.is_empty());
    assert_eq!(m1.sigmatrace_host.as_deref(), Some("0x822a5b873"));
    assert_eq!(
        m1.mapping.anchor,
        Anchor::SystemClock {
            clock: HostClock::Monotonic,
            residual_ns: 500
        }
    );
    // report2: same host (same boot: utcEpochNs − systemClockNs is identical in both exports),
    // other pid → a process of its own, aligned through the same MONOTONIC snapshot.
    assert_eq!(m2.own_pids, [58972]);
    assert_eq!(m2.sigmatrace_host.as_deref(), Some("0x822a5b873"));
    assert_eq!(m2.mapping.anchor, m1.mapping.anchor);

    let v = common::validate(&out, &[]);
    assert!(v["stats"]["flows"].as_u64().unwrap() >= 32, "{v}");
    let d = decode(&out);
    check_fixture(&d, 17068, false);
    check_fixture(&d, 58972, true);
    // The nsys tracks of report1 hang under the SigmaTrace process track.
    let api1 = d
        .tracks
        .iter()
        .find(|(_, t)| t.1 == "CUDA API async.out tid 17068")
        .unwrap();
    let parent = api1.1 .0.unwrap();
    assert!(d.tracks[&parent].3.is_some(), "parent is a process track");
    assert!(
        d.tracks[&parent]
            .2
            .as_deref()
            .unwrap_or("")
            .starts_with("log "),
        "the SigmaTrace process"
    );
    assert!(
        d.tracks
            .values()
            .any(|t| t.0 == Some(parent) && t.1.starts_with("QP 0x42")),
        "RDMA QP track beside it"
    );
    let api2 = d
        .tracks
        .values()
        .find(|t| t.1 == "CUDA API async.out tid 58972")
        .unwrap();
    assert_eq!(
        d.track_name(api2.0.unwrap()),
        "async.out pid 58972 (Nsight Systems)"
    );
    // Times: both through the host's MONOTONIC snapshot (500 ns after utcEpochNs + t).
    let k1 = d
        .slices
        .iter()
        .filter(|s| s.1 == "add_parallel" && d.tracks[&d.tracks[&s.0].0.unwrap()].0 == Some(parent))
        .map(|s| s.2)
        .min()
        .unwrap();
    assert_eq!(k1, R1_UTC + 500 + R1_K0);
    assert_eq!(d.first_ts("add_parallel"), k1);
    let k2 = d
        .slices
        .iter()
        .filter(|s| s.1 == "add_parallel" && s.2 > k1 + 1_000_000_000)
        .map(|s| s.2)
        .min()
        .unwrap();
    assert_eq!(k2, R2_UTC + 500 + R2_K0);
}

/// A synthetic export with NVTX ranges (nested push/pop, overlapping start/end), marks with
/// payloads and an unterminated range.
fn nvtx_export(path: &Path) {
    let tid: i64 = (1 << 48) + (4242 << 24) + 4243;
    let json = r#"{"a":1}"#;
    let sql = format!(
        "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO StringIds VALUES (1, 'worker');
         CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);
         INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_TIME_NORMALIZE', 'false');
         CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INTEGER, systemClockNs INTEGER);
         INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, 1000);
         CREATE TABLE ThreadNames(nameId INTEGER, priority INTEGER, globalTid INTEGER);
         INSERT INTO ThreadNames VALUES (1, 10, {tid});
         CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER,
           category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, domainId INTEGER,
           int64Value INTEGER, doubleValue REAL, jsonText TEXT);
         INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, int64Value, color) VALUES
           (100, 1000, 59, 'outer', {tid}, -5, 4278255360),
           (200, 300, 59, 'inner', {tid}, NULL, NULL),
           (400, 700, 60, 'async A', {tid}, NULL, NULL),
           (500, 900, 60, 'async B', {tid}, NULL, NULL),
           (1500, NULL, 59, 'never ended', {tid}, NULL, NULL);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, doubleValue) VALUES (250, 34, 'mark', {tid}, 2.5);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, jsonText) VALUES (260, 34, 'json', {tid}, '{json}');"
    );
    let conn = rusqlite_conn(path);
    conn.execute_batch(&sql).unwrap();
}

fn rusqlite_conn(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

#[test]
fn nvtx_ranges_marks_and_payloads_on_thread_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("nvtx.sqlite");
    nvtx_export(&export);
    let out = dir.path().join("nvtx.pftrace");
    let opts = NsysOptions {
        files: vec![export],
        offset_ns: None,
    };
    let merged = nsys_cli::convert_only(&opts, &out, Format::Perfetto, 0).unwrap();
    assert_eq!(merged[0].nvtx, 7);
    let v = common::validate(&out, &[]);
    assert_eq!(v["stats"]["slices"], 4);
    assert_eq!(v["stats"]["instants"], 3);
    let d = decode(&out);
    const T0: u64 = 1_700_000_000_000_000_000;
    let on_thread = |n: &str| d.slices.iter().find(|s| s.1 == n).unwrap();
    let outer = on_thread("outer");
    assert_eq!((outer.2, outer.3), (T0 + 100, T0 + 1000));
    assert_eq!(outer.4["payload"], "-5");
    assert_eq!(outer.4["color"], "ARGB 0xff00ff00");
    assert_eq!(d.track_name(outer.0), "NVTX worker tid 4243");
    // Overlapping start/end ranges go to two lanes of one merged track.
    let (a, b) = (on_thread("async A"), on_thread("async B"));
    assert_ne!(a.0, b.0);
    assert_eq!(d.track_name(a.0), d.track_name(b.0));
    let marks: BTreeMap<&str, &BTreeMap<String, String>> =
        d.instants.iter().map(|i| (i.1.as_str(), &i.3)).collect();
    assert_eq!(marks["mark"]["payload"], "2.5");
    assert_eq!(marks["json"]["payload"], "{\"a\":1}");
    assert!(marks["never ended"].contains_key("unterminated"));
}

#[test]
fn bad_exports_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.sqlite");
    std::fs::write(&garbage, b"not a database at all").unwrap();
    let opts = NsysOptions {
        files: vec![garbage.clone()],
        offset_ns: None,
    };
    let err = nsys_cli::convert_only(&opts, &dir.path().join("x.pftrace"), Format::Perfetto, 1)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConvertError::Nsys(sigmatrace_nsys::NsysError::NotSqlite { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("garbage.sqlite"));
    // No session start and no --nsys-offset: refused with a hint.
    let bare = dir.path().join("bare.sqlite");
    rusqlite_conn(&bare)
        .execute_batch("CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT); CREATE TABLE META_DATA_EXPORT(name, value);")
        .unwrap();
    let opts = NsysOptions {
        files: vec![bare.clone()],
        offset_ns: None,
    };
    let err = nsys_cli::convert_only(&opts, &dir.path().join("y.pftrace"), Format::Perfetto, 1)
        .unwrap_err();
    assert!(err.to_string().contains("--nsys-offset"), "{err}");
    let opts = NsysOptions {
        files: vec![bare],
        offset_ns: Some(0),
    };
    nsys_cli::convert_only(&opts, &dir.path().join("z.pftrace"), Format::Perfetto, 1).unwrap();
}

#[test]
fn cli_nsys_summary_and_merge() {
    let out = output_ok(
        Command::new(artifact("sigmatrace-convert"))
            .arg("nsys-summary")
            .arg(fixture("report2.sqlite"))
            .arg("--json"),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["events"]["kernels"], 4);
    assert_eq!(v["events"]["memcpys"], 12);
    assert_eq!(v["events"]["api_calls"], 45);
    let out = Command::new(artifact("sigmatrace-convert"))
        .arg("nsys-summary")
        .arg(fixture("report1.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("CUDA kernels") && text.contains("utcEpochNs"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("cli.pftrace");
    output_ok(
        Command::new(artifact("sigmatrace-convert"))
            .args(["--nsys"])
            .arg(fixture("report1.sqlite"))
            .args(["--nsys"])
            .arg(fixture("report2.sqlite"))
            .args(["--nsys-offset", "-1000", "-o"])
            .arg(&trace),
    );
    let v = common::validate(&trace, &[]);
    assert_eq!(v["stats"]["slices"], 61 + 63);
    assert_eq!(v["stats"]["flows"], 32);
    let d = decode(&trace);
    assert_eq!(d.first_ts("add_parallel"), R1_UTC + R1_K0 - 1000);

    // Chrome JSON output of the same export.
    let json = dir.path().join("cli.json");
    output_ok(
        Command::new(artifact("sigmatrace-convert"))
            .arg("--nsys")
            .arg(fixture("report1.sqlite"))
            .args(["--format", "chrome-json", "-o"])
            .arg(&json),
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let count = |ph: &str, name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && (name.is_empty() || e["name"] == name))
            .count()
    };
    assert_eq!(count("B", ""), 61);
    assert_eq!(count("E", ""), 61);
    assert_eq!(count("B", "add_parallel"), 4);
    assert_eq!(count("B", "Memcpy HtoD"), 8);
    assert_eq!(count("B", "cudaMemcpyAsync"), 12);

    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, b"garbage").unwrap();
    let out = Command::new(artifact("sigmatrace-convert"))
        .arg("nsys-summary")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.sqlite") && err.contains("not an SQLite database"),
        "{err}"
    );
}

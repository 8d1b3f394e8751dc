//! Exact counts and names read from the real exports in fixtures/nsys/.

mod common;

use std::collections::BTreeMap;

use common::fixture;
use sigmatrace_nsys::{Anchor, ApiClass, GlobalId, NsysReport, NvtxKind};
use sigmatrace_testkit::NSYS_COMMON_CALLS;

fn counts<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut m = BTreeMap::new();
    for n in names {
        *m.entry(n).or_insert(0) += 1;
    }
    m
}

fn check_common(r: &NsysReport, pid: u32, gpid: i64) {
    // Kernels: 4 × add_parallel, one per stream 13–16, on device 0.
    assert_eq!(r.kernels.len(), 4);
    for (k, stream) in r.kernels.iter().zip(13..) {
        assert_eq!(k.name, "add_parallel");
        assert_eq!(
            k.demangled_name.as_deref(),
            Some("add_parallel(const float *, const float *, float *, int)")
        );
        assert_eq!(k.mangled_name.as_deref(), Some("_Z12add_parallelPKfS0_Pfi"));
        assert_eq!(k.stream_id, stream);
        assert_eq!(k.device_id, 0);
        assert_eq!(k.grid, [97657, 1, 1]);
        assert_eq!(k.block, [256, 1, 1]);
        assert_eq!(k.global_pid, Some(GlobalId(gpid)));
        assert!(k.end > k.start);
    }
    // Memcpys: 12 × 10^8 B, 8 HtoD (pinned → device) + 4 DtoH, 3 per stream.
    assert_eq!(r.memcpys.len(), 12);
    let kinds = counts(r.memcpys.iter().map(|m| m.kind.as_str()));
    assert_eq!(kinds, BTreeMap::from([("DtoH", 4), ("HtoD", 8)]));
    for m in &r.memcpys {
        assert_eq!(m.bytes, 100_000_000);
        let (src, dst) = if m.copy_kind == 1 {
            ("Pinned", "Device")
        } else {
            ("Device", "Pinned")
        };
        assert_eq!(
            (m.src_kind.as_deref(), m.dst_kind.as_deref()),
            (Some(src), Some(dst))
        );
    }
    let streams = counts(r.memcpys.iter().map(|m| match m.stream_id {
        13 => "13",
        14 => "14",
        15 => "15",
        16 => "16",
        _ => "other",
    }));
    assert_eq!(
        streams,
        BTreeMap::from([("13", 3), ("14", 3), ("15", 3), ("16", 3)])
    );
    // Every kernel and memcpy correlates with a launch / memcpy API call.
    for (corr, want) in r
        .kernels
        .iter()
        .map(|k| (k.correlation_id, "cudaLaunchKernel"))
        .chain(
            r.memcpys
                .iter()
                .map(|m| (m.correlation_id, "cudaMemcpyAsync")),
        )
    {
        let call = r
            .api_calls
            .iter()
            .find(|c| c.correlation_id == corr)
            .unwrap();
        assert_eq!(call.name, want);
    }
    // All API calls on the main thread (tid == pid), named "async.out".
    let main = r.api_calls[0].global_tid.unwrap();
    assert_eq!((main.pid(), main.tid()), (pid, pid));
    assert!(r.api_calls.iter().all(|c| c.global_tid == Some(main)));
    assert_eq!(r.thread_name(main), Some("async.out"));
    let first = &r.api_calls[0];
    assert_eq!(
        (first.name.as_str(), first.raw_name.as_str(), first.class),
        (
            "cuModuleGetLoadingMode",
            "cuModuleGetLoadingMode",
            ApiClass::Driver
        )
    );
    let launch = r
        .api_calls
        .iter()
        .find(|c| c.name == "cudaLaunchKernel")
        .unwrap();
    assert_eq!(launch.raw_name, "cudaLaunchKernel_v7000");
    assert_eq!(launch.class, ApiClass::Runtime);
    // Processes: only the profiled one (PROCESSES lists 51–53).
    assert_eq!(r.processes.len(), 1);
    let p = &r.processes[&GlobalId(gpid)];
    assert_eq!(
        (p.pid, p.name.as_deref()),
        (pid, Some("/home/hangyudu/tmp/async.out"))
    );
    // Only that process's threads are kept.
    assert!(r.threads.keys().all(|t| t.pid() == pid));
    // Host and device identity.
    assert_eq!(r.host.hostname.as_deref(), Some("0x822a5b873"));
    assert_eq!(r.host.product_version.as_deref(), Some("2026.1.1.204"));
    assert_eq!(r.host.schema_version.as_deref(), Some("3.24.14"));
    assert_eq!(r.devices.len(), 1);
    assert_eq!(r.devices[0].id, 0);
    assert_eq!(
        r.devices[0].name.as_deref(),
        Some("NVIDIA GeForce RTX 4060 Ti")
    );
    assert_eq!(r.devices[0].compute_capability.as_deref(), Some("8.9"));
    assert!(r.nvtx.is_empty());
    assert!(r.memsets.is_empty());
    assert!(!r.time_base.normalized);
    assert_eq!(r.time_base.time_shift_ns, 0);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn report1_exact_counts_and_names() {
    let r = NsysReport::open(fixture("report1.sqlite")).unwrap();
    check_common(&r, 17068, 281_761_330_233_344);
    assert_eq!(r.api_calls.len(), 44);
    let names = counts(r.api_calls.iter().map(|c| c.name.as_str()));
    assert_eq!(names, BTreeMap::from(NSYS_COMMON_CALLS));
    assert_eq!(
        r.api_calls
            .iter()
            .filter(|c| c.class == ApiClass::Runtime)
            .count(),
        43
    );
    assert_eq!(r.syncs.len(), 1);
    assert_eq!(r.syncs[0].kind, "Event sync");
    assert_eq!(r.syncs[0].stream_id, None);
    assert_eq!(r.time_base.utc_epoch_ns, Some(1_769_308_002_162_486_533));
    assert_eq!(r.time_base.system_clock_ns, Some(6_324_391_262_083));
    assert_eq!(r.time_span(), Some((575_249_585, 1_675_978_088)));
}

#[test]
fn report2_exact_counts_and_names() {
    let r = NsysReport::open(fixture("report2.sqlite")).unwrap();
    check_common(&r, 58972, 282_464_362_692_608);
    assert_eq!(r.api_calls.len(), 45);
    let mut want = BTreeMap::from(NSYS_COMMON_CALLS);
    want.insert("cudaDeviceSynchronize", 1);
    assert_eq!(counts(r.api_calls.iter().map(|c| c.name.as_str())), want);
    let syncs: Vec<&str> = r.syncs.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(syncs, ["Event sync", "Context sync"]);
    assert_eq!(r.time_base.utc_epoch_ns, Some(1_769_320_577_184_271_416));
    assert_eq!(r.time_base.system_clock_ns, Some(18_899_413_046_966));
}

#[test]
fn report1_maps_to_utc_wall_time() {
    let r = NsysReport::open(fixture("report1.sqlite")).unwrap();
    let m = r.clock_mapping(None, None).unwrap();
    assert_eq!(m.anchor, Anchor::UtcEpoch);
    // First kernel: utcEpochNs 1769308002162486533 + start 1453545934.
    assert_eq!(m.to_realtime(r.kernels[0].start), 1_769_308_003_616_032_467);
    let shifted = r.clock_mapping(Some(1_000), None).unwrap();
    assert_eq!(
        shifted.to_realtime(r.kernels[0].start),
        1_769_308_003_616_033_467
    );
    assert!(m.describe().contains("utcEpochNs"));
}

#[test]
fn summary_table_and_json() {
    let r = NsysReport::open(fixture("report1.sqlite")).unwrap();
    let s = r.summary();
    assert_eq!(s.events.kernels, 4);
    assert_eq!(s.events.memcpys, 12);
    assert_eq!(s.events.api_calls, 44);
    assert_eq!((s.events.runtime_calls, s.events.driver_calls), (43, 1));
    assert_eq!(s.events.nvtx_ranges + s.events.nvtx_marks, 0);
    assert_eq!(s.devices[0].streams, [13, 14, 15, 16]);
    assert_eq!(s.processes[0].threads.len(), 1);
    assert_eq!(s.processes[0].threads[0].api_calls, 44);
    let kernel_rows = s
        .tables
        .iter()
        .find(|t| t.table == "CUPTI_ACTIVITY_KIND_KERNEL");
    assert_eq!(kernel_rows.map(|t| t.rows), Some(4));
    assert_eq!(
        s.tables
            .iter()
            .find(|t| t.table == "PROCESSES")
            .map(|t| t.rows),
        Some(51)
    );

    let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
    assert_eq!(json["events"]["kernels"], 4);
    assert_eq!(json["events"]["runtime_calls"], 43);
    assert_eq!(json["schema_version"], "3.24.14");
    assert_eq!(json["hostname"], "0x822a5b873");
    assert_eq!(
        json["time_base"]["utc_epoch_ns"],
        1_769_308_002_162_486_533i64
    );
    assert_eq!(json["processes"][0]["pid"], 17068);
    assert_eq!(json["devices"][0]["name"], "NVIDIA GeForce RTX 4060 Ti");

    let table = s.to_table();
    assert!(
        table.contains("schema version               3.24.14"),
        "{table}"
    );
    let kernels_line = table
        .lines()
        .find(|l| l.trim_start().starts_with("CUDA kernels"))
        .unwrap();
    assert!(kernels_line.trim_end().ends_with(" 4"), "{kernels_line}");
    assert!(table.contains("async.out"));
    assert!(table.contains("NVIDIA GeForce RTX 4060 Ti"));
    assert!(table.contains("13,14,15,16"));
}

#[test]
fn nvtx_kind_is_not_confused_with_api_class() {
    // Guards the enum mapping used by the merge: the fixtures have no NVTX rows at all.
    assert_eq!(NvtxKind::from_event_type(59), Some(NvtxKind::PushPopRange));
}

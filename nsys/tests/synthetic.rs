//! Synthetic exports: NVTX (the real fixtures have none), an older schema (EXPORT_META_DATA,
//! no systemClockNs, fewer kernel columns), normalized/shifted times, memsets and odd rows.

mod common;

use common::make_db;
use sigmatrace_nsys::{Anchor, GlobalId, NsysReport, NvtxKind, NvtxPayload};

/// globalTid of pid 4242, tid 4243 on VM 1.
const TID: i64 = (1 << 48) + (4242 << 24) + 4243;
const TID2: i64 = (1 << 48) + (4242 << 24) + 4244;
const PID: i64 = (1 << 48) + (4242 << 24);

fn build(path: &std::path::Path) {
    let sql = format!(
        "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO StringIds VALUES (1,'old_kernel(int)'),(2,'old_kernel'),(3,'async work'),
           (4,'worker'),(5,'cudaMemset_v3020'),(6,'{{\"from\":\"id\"}}');
         CREATE TABLE EXPORT_META_DATA(name TEXT, value TEXT);
         INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION','3.0.0'),
           ('EXPORT_PRODUCT_VERSION','2022.4.2'),('EXPORT_PARAM_TIME_NORMALIZE','true'),
           ('EXPORT_PARAM_TIME_SHIFT','100');
         CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
         INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000,'x','y');
         CREATE TABLE TARGET_INFO_SYSTEM_ENV(name TEXT, value TEXT);
         INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('Hostname','node7');
         CREATE TABLE PROCESSES(globalPid INTEGER, pid INTEGER, name TEXT);
         INSERT INTO PROCESSES VALUES ({PID}, 4242, 'train.py'), (999, 1, 'init');
         CREATE TABLE ThreadNames(nameId INTEGER, priority INTEGER, globalTid INTEGER);
         INSERT INTO ThreadNames VALUES (4, 10, {TID});
         CREATE TABLE TARGET_INFO_GPU(id INTEGER, name TEXT);
         INSERT INTO TARGET_INFO_GPU VALUES (0, 'GPU zero');
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER, end INTEGER, deviceId INTEGER,
           streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
           gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
           (1000, 2000, 1, 7, 11, {PID}, 1, 2, 3, 4, 32, 1, 1),
           (3000, 2500, 1, 7, 12, {PID}, 1, 1, 1, 1, 1, 1, 1),
           (4000, 4500, 1, 7, 13, {PID}, 999, 1, 1, 1, 1, 1, 1);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start INTEGER, end INTEGER, deviceId INTEGER,
           streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER,
           bytes INTEGER, memKind INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (500, 600, 1, 7, 10, {PID}, 0, 4096, 2);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId,
           nameId, returnValue);
         INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
           ('400', 450.0, 0, {TID}, 10, 5, 0),
           (NULL, 460, 0, {TID}, 13, 5, 0);
         CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER,
           category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
           textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
           doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
           jsonTextId INTEGER, jsonText TEXT, binaryData BLOB);
         INSERT INTO NVTX_EVENTS(start, end, eventType, domainId, text) VALUES (1, NULL, 75, 7, 'mydomain');
         INSERT INTO NVTX_EVENTS(start, eventType, category, domainId, text) VALUES (2, 33, 3, 0, 'IO');
         INSERT INTO NVTX_EVENTS(start, end, eventType, category, color, text, globalTid, int64Value)
           VALUES (100, 200, 59, 3, 4278255360, 'step', {TID}, -5);
         INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid, endGlobalTid, domainId, rangeId, doubleValue)
           VALUES (150, 300, 60, 3, {TID}, {TID2}, 7, 1, 2.5);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, uint64Value)
           VALUES (250, 34, 'checkpoint', {TID}, -1);
         INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (400, NULL, 59, 'open', {TID});
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, jsonText) VALUES (410, 34, 'json', {TID}, '{{\"a\":1}}');
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, jsonTextId) VALUES (420, 34, 'json id', {TID}, 6);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, binaryData) VALUES (430, 34, 'blob', {TID}, X'010203');
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, uint32Value) VALUES (440, 65, 'u32', {TID}, 7);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, int32Value) VALUES (450, 34, 'i32', {TID}, -7);
         INSERT INTO NVTX_EVENTS(start, eventType, text, globalTid, floatValue) VALUES (460, 34, 'f32', {TID}, 0.5);"
    );
    make_db(path, &sql);
}

#[test]
fn nvtx_ranges_marks_payloads_domains_and_categories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvtx.sqlite");
    build(&path);
    let r = NsysReport::open(&path).unwrap();
    let texts: Vec<&str> = r.nvtx.iter().map(|e| e.text.as_deref().unwrap()).collect();
    assert_eq!(
        texts,
        [
            "step",
            "async work",
            "checkpoint",
            "open",
            "json",
            "json id",
            "blob",
            "u32",
            "i32",
            "f32"
        ]
    );
    let step = &r.nvtx[0];
    assert_eq!(step.kind, NvtxKind::PushPopRange);
    assert_eq!((step.start, step.end), (100, Some(200)));
    assert_eq!(step.color, Some(0xFF00_FF00));
    assert_eq!(
        (step.category, step.category_name.as_deref()),
        (Some(3), Some("IO"))
    );
    assert_eq!(step.payload, Some(NvtxPayload::I64(-5)));
    assert_eq!(step.global_tid, Some(GlobalId(TID)));
    assert_eq!(step.domain, None);

    let work = &r.nvtx[1];
    assert_eq!(work.kind, NvtxKind::StartEndRange);
    assert_eq!(work.domain.as_deref(), Some("mydomain"));
    assert_eq!(work.end_global_tid, Some(GlobalId(TID2)));
    assert_eq!(work.payload, Some(NvtxPayload::F64(2.5)));

    assert_eq!(r.nvtx[2].kind, NvtxKind::Mark);
    assert_eq!(r.nvtx[2].end, None);
    assert_eq!(r.nvtx[2].payload, Some(NvtxPayload::U64(u64::MAX)));
    assert_eq!(
        (r.nvtx[3].kind, r.nvtx[3].end),
        (NvtxKind::PushPopRange, None)
    );
    assert_eq!(
        r.nvtx[4].payload,
        Some(NvtxPayload::Json("{\"a\":1}".into()))
    );
    assert_eq!(
        r.nvtx[5].payload,
        Some(NvtxPayload::Json("{\"from\":\"id\"}".into()))
    );
    assert_eq!(r.nvtx[6].payload, Some(NvtxPayload::Binary(3)));
    assert_eq!(
        (r.nvtx[7].kind, r.nvtx[7].payload.clone()),
        (NvtxKind::Mark, Some(NvtxPayload::U32(7)))
    );
    assert_eq!(r.nvtx[8].payload, Some(NvtxPayload::I32(-7)));
    assert_eq!(r.nvtx[9].payload, Some(NvtxPayload::F32(0.5)));

    let s = r.summary();
    assert_eq!((s.events.nvtx_ranges, s.events.nvtx_marks), (3, 7));
    assert_eq!(s.processes.len(), 1);
    assert_eq!(s.processes[0].threads[0].name.as_deref(), Some("worker"));
    assert_eq!(s.processes[0].threads[0].nvtx_events, 10);
}

#[test]
fn older_schema_columns_and_odd_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    build(&path);
    let r = NsysReport::open(&path).unwrap();
    assert_eq!(r.host.schema_version.as_deref(), Some("3.0.0"));
    assert_eq!(r.host.hostname.as_deref(), Some("node7"));
    // Kernel names fall back to the demangled name; unknown string ids to a placeholder.
    assert_eq!(r.kernels.len(), 2);
    assert_eq!(r.kernels[0].name, "old_kernel(int)");
    assert_eq!(
        (r.kernels[0].grid, r.kernels[0].block),
        ([2, 3, 4], [32, 1, 1])
    );
    assert_eq!(r.kernels[0].mangled_name, None);
    assert_eq!(r.kernels[1].name, "<unnamed kernel>");
    // A kernel ending before it starts is not imported (its times are never changed), and
    // is counted.
    assert_eq!(
        r.kernels
            .iter()
            .map(|k| (k.start, k.end))
            .collect::<Vec<_>>(),
        [(1000, 2000), (4000, 4500)]
    );
    assert!(
        r.warnings.iter().any(|w| w
            == "CUPTI_ACTIVITY_KIND_KERNEL: 1 events end before they start (the first at 3000): \
                not imported"),
        "{:?}",
        r.warnings
    );
    // Memsets.
    assert_eq!(r.memsets.len(), 1);
    assert_eq!(
        (r.memsets[0].bytes, r.memsets[0].mem_kind.as_deref()),
        (4096, Some("Device"))
    );
    // Lenient typing: TEXT and REAL times read; a NULL start drops the row.
    assert_eq!(r.api_calls.len(), 1);
    assert_eq!((r.api_calls[0].start, r.api_calls[0].end), (400, 450));
    assert_eq!(r.api_calls[0].name, "cudaMemset");
    // Only processes with events; devices from TARGET_INFO_GPU.
    assert_eq!(r.processes.len(), 1);
    assert_eq!(
        r.processes[&GlobalId(PID)].name.as_deref(),
        Some("train.py")
    );
    let ids: Vec<i64> = r.devices.iter().map(|d| d.id).collect();
    assert_eq!(
        ids,
        [0, 1],
        "device 1 has activity but no TARGET_INFO_GPU row"
    );
}

#[test]
fn normalized_and_shifted_times_map_without_adding_the_session_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("norm.sqlite");
    build(&path);
    let r = NsysReport::open(&path).unwrap();
    assert!(r.time_base.normalized);
    assert_eq!(r.time_base.time_shift_ns, 100);
    assert_eq!(r.time_base.system_clock_ns, None);
    let m = r.clock_mapping(Some(7), None).unwrap();
    assert_eq!(m.anchor, Anchor::Normalized);
    assert_eq!(
        m.to_realtime(1_700_000_000_000_000_100),
        1_700_000_000_000_000_007
    );
}

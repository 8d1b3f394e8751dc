//! Command-line entry points around Nsight Systems exports: `sigmatrace-convert nsys-summary`
//! and a conversion of nsys exports alone (`--nsys` without SigmaTrace logs).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use sigmatrace_nsys::NsysReport;

use crate::error::ConvertError;
use crate::import::nsys::{self as nsys_merge, NsysMerged, NsysOptions};
use crate::model::emit::Format;
use sigmatrace_timeline::chrome;
use sigmatrace_timeline::perfetto::{self, PerfettoSeq};
use sigmatrace_timeline::TraceSink;

/// `nsys-summary FILE [--json]`: what the export holds, as a table or JSON.
pub fn summary(path: &Path, json: bool) -> Result<String, ConvertError> {
    let report = NsysReport::open(path)?;
    let s = report.summary();
    Ok(if json {
        let mut out = s.to_json();
        out.push('\n');
        out
    } else {
        let mut out = s.to_table();
        // The mapping a merge would apply without SigmaTrace logs of the same host.
        match report.clock_mapping(None, None) {
            Ok(m) => out.push_str(&format!("\nTime alignment\n  {}\n", m.describe())),
            Err(e) => out.push_str(&format!("\nTime alignment\n  {e}\n")),
        }
        out
    })
}

/// Writes a trace holding only Nsight Systems exports (no SigmaTrace logs).
pub fn convert_only(
    nsys: &NsysOptions,
    output: &Path,
    format: Format,
    compress_level: u32,
) -> Result<Vec<NsysMerged>, ConvertError> {
    let reports = nsys_merge::load(nsys)?;
    // Trace clock snapshot at the earliest mapped event (BOOTTIME = REALTIME: epoch-ns times).
    let mut t_start = i64::MAX;
    for r in &reports {
        let m = r
            .clock_mapping(nsys.offset_ns, None)
            .map_err(|e| ConvertError::Options(format!("{}: {e}", r.path.display())))?;
        if let Some((first, _)) = r.time_span() {
            t_start = t_start.min(m.to_realtime(first));
        }
    }
    let t_start = if t_start == i64::MAX {
        0
    } else {
        t_start.max(0)
    } as u64;
    let uuids = AtomicU64::new(1);
    let mut out = Vec::new();
    let merged = match format {
        Format::Perfetto => {
            perfetto::frame_packet(&mut out, &perfetto::clock_snapshot_packet(t_start));
            let (bytes, merged) =
                nsys_merge::emit_all(&reports, nsys.offset_ns, None, &uuids, |seq| {
                    Box::new(PerfettoSeq::new(seq, false, 0)) as Box<dyn TraceSink>
                })?;
            if compress_level > 0 {
                out.extend_from_slice(&perfetto::compress_block(&bytes, compress_level.min(9)));
            } else {
                out.extend_from_slice(&bytes);
            }
            merged
        }
        Format::ChromeJson => {
            let other = serde_json::json!({"sigmatrace_nsys": files_json(&nsys.files)});
            let (tracks, header) = chrome::header(&[], &other);
            out.extend_from_slice(&header);
            let (bytes, merged) =
                nsys_merge::emit_all(&reports, nsys.offset_ns, None, &uuids, |_| {
                    Box::new(chrome::ChromeSeq::new(tracks.clone())) as Box<dyn TraceSink>
                })?;
            out.extend_from_slice(&bytes);
            out.extend_from_slice(chrome::FOOTER);
            merged
        }
    };
    let werr = |source| ConvertError::Output {
        path: output.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(output).map_err(werr)?;
    f.write_all(&out).map_err(werr)?;
    f.flush().map_err(werr)?;
    Ok(merged)
}

fn files_json(files: &[PathBuf]) -> Vec<String> {
    files.iter().map(|f| f.display().to_string()).collect()
}

/// One line per merged export for the command's stderr report.
pub fn report_lines(merged: &[NsysMerged]) -> Vec<String> {
    merged
        .iter()
        .map(|m| {
            format!(
                "nsys {}: {} kernels, {} memcpys, {} memsets, {} syncs, {} API calls, {} NVTX events, {} flows; pids under SigmaTrace processes {:?}, own processes {:?}; {}",
                m.file,
                m.kernels,
                m.memcpys,
                m.memsets,
                m.syncs,
                m.api_calls,
                m.nvtx,
                m.flows,
                m.matched_pids,
                m.own_pids,
                m.description
            )
        })
        .collect()
}

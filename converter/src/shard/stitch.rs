//! A shard's output and its assembly: every modelled process's blocks go to its own part file
//! (`proc.<index>.part`, renamed into place when the process is done), and its totals and
//! warnings into the shard's result; rank 0 writes the header, every process's part in process
//! order and the footer — the bytes the single-process writer (`model::order`) writes, since
//! that writer too puts each process's blocks together, in process order, after the header.
//! Perfetto traces are streams of length-delimited packets and each process is its own packet
//! sequence (own sequence ids, interned data, incremental timestamps; `compressed_packets`
//! blocks hold whole packets), so parts concatenate into a valid trace at any process boundary.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

use crate::error::ConvertError;
use crate::model::order::Block;
use crate::model::ProcessTotals;
use crate::pipeline::ProcResult;
use crate::shard::exchange::Exchange;

fn out_err(path: &Path) -> impl Fn(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Output {
        path: path.to_owned(),
        source,
    }
}

/// The part writer: appends every block to its process's part file, renames it into place
/// when the process is done. Returns the bytes written.
pub fn spawn_part_writer(
    ex_dir: PathBuf,
    rx: Receiver<Block>,
) -> std::thread::JoinHandle<Result<u64, ConvertError>> {
    std::thread::spawn(move || {
        let part = |i: usize| ex_dir.join(format!("proc.{i}.part"));
        let tmp = |i: usize| ex_dir.join(format!("proc.{i}.part.tmp"));
        let mut open: HashMap<usize, std::io::BufWriter<std::fs::File>> = HashMap::new();
        let mut total = 0u64;
        let create = |i: usize| -> Result<std::io::BufWriter<std::fs::File>, ConvertError> {
            let p = tmp(i);
            let f = std::fs::File::create(&p).map_err(out_err(&p))?;
            Ok(std::io::BufWriter::with_capacity(1 << 16, f))
        };
        for msg in rx {
            match msg.into_blocks() {
                Ok((i, blocks)) => {
                    let w = match open.entry(i) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => e.insert(create(i)?),
                    };
                    let p = tmp(i);
                    for b in blocks {
                        w.write_all(&b).map_err(out_err(&p))?;
                        total += b.len() as u64;
                    }
                }
                Err(i) => {
                    let w = match open.remove(&i) {
                        Some(w) => w,
                        None => create(i)?,
                    };
                    let p = tmp(i);
                    let f = w.into_inner().map_err(|e| out_err(&p)(e.into_error()))?;
                    f.sync_all().map_err(out_err(&p))?;
                    drop(f);
                    std::fs::rename(&p, part(i)).map_err(out_err(&p))?;
                }
            }
        }
        Ok(total)
    })
}

/// Writes `header`, the parts of `procs` (ascending) and `footer` to `path` (under a temporary
/// name, renamed when complete); returns the bytes written.
pub fn assemble(
    ex: &Exchange,
    path: &Path,
    header: &[u8],
    procs: &[usize],
    footer: &[u8],
) -> Result<u64, ConvertError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let write = || -> Result<u64, ConvertError> {
        let f = std::fs::File::create(&tmp).map_err(out_err(&tmp))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        w.write_all(header).map_err(out_err(&tmp))?;
        let mut n = header.len() as u64;
        for &i in procs {
            let part = ex.part(i);
            let mut f = std::fs::File::open(&part).map_err(|e| {
                ConvertError::Shard(format!("{}: the part of process {i}: {e}", part.display()))
            })?;
            n += std::io::copy(&mut f, &mut w).map_err(out_err(&tmp))?;
        }
        w.write_all(footer).map_err(out_err(&tmp))?;
        w.flush().map_err(out_err(&tmp))?;
        Ok(n + footer.len() as u64)
    };
    match write() {
        Ok(n) => {
            std::fs::rename(&tmp, path).map_err(out_err(path))?;
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A shard's result: per modelled process its index, totals and warnings.
pub fn encode_result(subset: &[usize], results: &[ProcResult]) -> Vec<u8> {
    let procs: Vec<serde_json::Value> = subset
        .iter()
        .zip(results)
        .map(|(i, (t, _, w))| serde_json::json!({"index": i, "totals": t, "warnings": w}))
        .collect();
    serde_json::to_vec(&serde_json::json!({ "procs": procs })).unwrap_or_default()
}

/// The totals as [`encode_result`] wrote them (every field by name; see the test).
fn totals(v: &serde_json::Value) -> ProcessTotals {
    let f = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    ProcessTotals {
        wr_completed: f("wr_completed"),
        wr_failed: f("wr_failed"),
        recv_completed: f("recv_completed"),
        flows_out: f("flows_out"),
        flows_in: f("flows_in"),
        inferred: f("inferred"),
        orphan_completions: f("orphan_completions"),
        incomplete_wrs: f("incomplete_wrs"),
        slices: f("slices"),
        max_lanes: f("max_lanes"),
        recv_undrawn: f("recv_undrawn"),
        kernels_malformed: f("kernels_malformed"),
        observed_late: f("observed_late"),
        poll_runs: f("poll_runs"),
        empty_polls: f("empty_polls"),
        empty_poll_ns: f("empty_poll_ns"),
        poll_runs_malformed: f("poll_runs_malformed"),
    }
}

/// Decodes shard results into (process index, result) pairs (report sections stay with the
/// shards: a sharded conversion reports totals and warnings only).
pub fn decode_results(files: &[Vec<u8>]) -> Result<Vec<(usize, ProcResult)>, ConvertError> {
    let mut out = Vec::new();
    for (k, b) in files.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_slice(b)
            .map_err(|e| ConvertError::Shard(format!("result of shard {k}: {e}")))?;
        let procs = v["procs"].as_array().cloned().unwrap_or_default();
        for p in procs {
            let index = p["index"]
                .as_u64()
                .ok_or_else(|| ConvertError::Shard(format!("result of shard {k}: no index")))?;
            let warnings: Vec<String> = p["warnings"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|w| w.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            out.push((index as usize, (totals(&p["totals"]), Vec::new(), warnings)));
        }
    }
    out.sort_by_key(|e| e.0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_round_trip_every_field() {
        let t = ProcessTotals {
            wr_completed: 1,
            wr_failed: 2,
            recv_completed: 3,
            flows_out: 4,
            flows_in: 5,
            inferred: 6,
            orphan_completions: 7,
            incomplete_wrs: 8,
            slices: 9,
            max_lanes: 10,
            recv_undrawn: 11,
            kernels_malformed: 12,
            observed_late: 13,
            poll_runs: 14,
            empty_polls: 15,
            empty_poll_ns: 16,
            poll_runs_malformed: 17,
        };
        let v = serde_json::to_value(&t).unwrap();
        // A field added to ProcessTotals but not here would come back 0 and fail this.
        assert_eq!(serde_json::to_value(totals(&v)).unwrap(), v);
        let r = encode_result(&[3], &[(t.clone(), Vec::new(), vec!["w".into()])]);
        let back = decode_results(&[r]).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0, 3);
        assert_eq!(back[0].1 .0, t);
        assert_eq!(back[0].1 .2, vec!["w".to_string()]);
    }
}

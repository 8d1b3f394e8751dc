//! Sharded conversion: the job's own nodes convert its logs together, under the job's launcher
//! (mpirun, srun; [`launch`]) — no daemon, no scheduler, no MPI library. The processes talk
//! through files in the output's directory ([`exchange`]: `OUT.shards/<launch key>/`):
//!
//! ```text
//! every shard k:  open the logs it sees ─► hosts.k ─┐  (all: hosts sorted by name, each given to
//!                                                   │   one shard that sees it, fewest hosts first)
//!   scan own logs, own topology (cq recount) ─► logs.k/*.log (messages extracts) + meta.k
//!   ◄── every meta: all scans, extracts of the other shards' logs
//!   global topology, UD pairing, clock alignment (the unchanged passes, over own logs and
//!   the others' extracts: the same numbers on every shard)
//!   model own processes ─► proc.<i>.part ─► result.k (totals, warnings)
//! rank 0:  ◄── every result: header + proc.0.part … proc.<n-1>.part + footer ─► OUT
//! ```
//!
//! Every shard computes the same global topology (from all scans: [`wire`]) and the same
//! alignment (the join reads the other shards' logs' [`extract`]s, which hold exactly the
//! records it looks at), so each process is modelled exactly as in a single-process conversion
//! and the trace is byte-identical to it ([`stitch`]). The stats sections and Nsight Systems
//! merging are not sharded: the command line lets rank 0 convert alone for those (and says so).

#![forbid(unsafe_code)]

pub mod exchange;
pub mod extract;
pub mod launch;
pub mod stitch;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use launch::Launch;

use crate::align::topology::Topology;
use crate::error::ConvertError;
use crate::pipeline::{self, ConvertOptions, Frame, Summary};
use crate::read::input::LogInput;
use crate::read::scan::{self, QpCounts, Scan};
use exchange::Exchange;
use wire::{Dec, Enc};

/// What one shard did.
#[derive(Debug)]
pub struct Sharded {
    pub rank: usize,
    pub shards: usize,
    /// Hosts this shard read and the processes it modelled.
    pub hosts: Vec<String>,
    pub processes: usize,
    /// Rank 0: the whole conversion's summary (totals and warnings of every shard); others: `None`.
    pub summary: Option<Summary>,
    /// Traces this shard wrote (rank 0: the output; `--per-shard`: its own).
    pub written: Vec<PathBuf>,
}

/// The exchange directory of a launch: `OUT.shards/<key>`.
pub fn exchange_dir(output: &Path, key: &str) -> PathBuf {
    let mut d = output.as_os_str().to_owned();
    d.push(".shards");
    PathBuf::from(d).join(key)
}

/// `--per-shard`'s trace of shard `k`: `trace.perfetto-trace` → `trace.shard3.perfetto-trace`.
pub fn per_shard_path(output: &Path, k: usize) -> PathBuf {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, output.extension()) {
        (Some(s), Some(e)) => format!("{s}.shard{k}.{}", e.to_string_lossy()),
        (Some(s), None) => format!("{s}.shard{k}"),
        _ => format!("shard{k}"),
    };
    output.with_file_name(name)
}

/// Converts this shard's part of `paths` (see the module documentation). Rank 0 writes
/// `output` (or, with `per_shard`, every shard writes its own trace next to it).
pub fn convert_sharded(
    paths: &[PathBuf],
    output: &Path,
    opts: &ConvertOptions,
    launch: &Launch,
    per_shard: bool,
) -> Result<Sharded, ConvertError> {
    if !opts.nsys.files.is_empty() {
        return Err(ConvertError::Options(
            "--nsys is not merged by a sharded conversion (convert with SIGMATRACE_SHARD=0)".into(),
        ));
    }
    let ex = Exchange::open(exchange_dir(output, &launch.key), launch.rank, launch.size)?;
    let r = pipeline::pool(opts.jobs)
        .and_then(|pool| pool.install(|| run(paths, output, opts, &ex, per_shard)));
    if let Err(e) = &r {
        ex.fail(e);
    }
    r
}

/// Each host to one shard that sees its logs: hosts in name order, each to the shard with the
/// fewest hosts so far among those that see it (the lowest rank on a tie).
pub fn assign_hosts(seen: &[Vec<String>]) -> BTreeMap<String, usize> {
    let all: BTreeSet<&String> = seen.iter().flatten().collect();
    let mut load = vec![0usize; seen.len()];
    let mut owner = BTreeMap::new();
    for h in all {
        let k = (0..seen.len())
            .filter(|&k| seen[k].contains(h))
            .min_by_key(|&k| (load[k], k))
            .expect("a host is seen by someone");
        load[k] += 1;
        owner.insert(h.clone(), k);
    }
    owner
}

/// The logs this shard can see (none is fine: another shard may hold them all).
fn open_seen(
    paths: &[PathBuf],
    opts: &ConvertOptions,
) -> Result<(Vec<LogInput>, Vec<String>), ConvertError> {
    let opened = crate::read::open::open_logs(paths, opts.skip_unreadable, |h| {
        crate::pipeline::selected(opts, h)
    });
    match opened {
        Ok(o) => Ok((o.inputs, o.warnings)),
        Err(ConvertError::NoInputs(_)) => Ok((Vec::new(), Vec::new())),
        Err(e) => Err(e),
    }
}

/// This shard's meta file: its open warnings and per own log the path, size, extract name,
/// scan and per-QP counts (after `align::cq`); writes the extracts.
fn publish_meta(
    ex: &Exchange,
    own: &[LogInput],
    scans: &[Scan],
    warnings: &[String],
) -> Result<(), ConvertError> {
    let local = Topology::build(own, scans);
    // Each log's process (the topology orders processes by rank, not by log).
    let mut proc_of = vec![0; own.len()];
    for p in &local.procs {
        proc_of[p.input] = p.index;
    }
    let dir = ex.logs_dir(ex.rank);
    std::fs::create_dir_all(&dir).map_err(|source| ConvertError::Output {
        path: dir.clone(),
        source,
    })?;
    let mut e = Enc::new();
    e.strs(warnings);
    e.u64(own.len() as u64);
    for (n, (input, s)) in own.iter().zip(scans).enumerate() {
        let p = &local.procs[proc_of[n]];
        let name = format!("{n}.log");
        extract::write(input, p, &dir.join(&name))?;
        e.str(&input.path.to_string_lossy());
        e.u64(input.bytes);
        e.str(&name);
        e.scan(s);
        let counts: Vec<QpCounts> = p.qps.iter().map(|q| q.counts).collect();
        e.qp_counts(&counts);
    }
    ex.publish("meta", &e.0)
}

/// Every log of the run: this shard's own, the others' as their extracts (named by their
/// original paths), with scans, recounts, open warnings and the original input bytes.
struct AllLogs {
    inputs: Vec<LogInput>,
    scans: Vec<Scan>,
    recounted: Vec<Option<Vec<QpCounts>>>,
    warnings: Vec<String>,
    input_bytes: u64,
}

fn gather_logs(
    ex: &Exchange,
    own: Vec<LogInput>,
    own_scans: Vec<Scan>,
) -> Result<AllLogs, ConvertError> {
    let metas = ex.gather_all("meta")?;
    let mut all = AllLogs {
        inputs: Vec::new(),
        scans: Vec::new(),
        recounted: Vec::new(),
        warnings: Vec::new(),
        input_bytes: 0,
    };
    let mut own = Some((own, own_scans));
    let mut seen_paths: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for (k, m) in metas.iter().enumerate() {
        let what = ex.file("meta", k).display().to_string();
        let mut d = Dec::new(m, &what)?;
        for w in d.strs()? {
            if !all.warnings.contains(&w) {
                all.warnings.push(w);
            }
        }
        let n = d.u64()?;
        let mut logs = Vec::new();
        for _ in 0..n {
            let path = PathBuf::from(d.str()?);
            let bytes = d.u64()?;
            let name = d.str()?;
            let scan = d.scan()?;
            let counts = d.qp_counts()?;
            if let Some(j) = seen_paths.insert(path.clone(), k) {
                return Err(ConvertError::Shard(format!(
                    "{} is a log on shard {j} and on shard {k}: logs on different nodes need distinct paths",
                    path.display()
                )));
            }
            all.input_bytes += bytes;
            logs.push((path, name, scan, counts));
        }
        if k == ex.rank {
            let (inputs, scans) = own.take().expect("own logs once");
            all.recounted.extend(inputs.iter().map(|_| None));
            all.inputs.extend(inputs);
            all.scans.extend(scans);
            continue;
        }
        for (path, name, scan, counts) in logs {
            let mut input = LogInput::open(&ex.logs_dir(k).join(&name))?;
            input.path = path;
            all.inputs.push(input);
            all.scans.push(scan);
            all.recounted.push(Some(counts));
        }
    }
    Ok(all)
}

fn run(
    paths: &[PathBuf],
    output: &Path,
    opts: &ConvertOptions,
    ex: &Exchange,
    per_shard: bool,
) -> Result<Sharded, ConvertError> {
    let started = Instant::now();
    let (mut own, warnings) = open_seen(paths, opts)?;
    let mut hosts: Vec<String> = own
        .iter()
        .map(|i| i.file.header().hostname.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    let mut e = Enc::new();
    e.strs(&hosts);
    ex.publish("hosts", &e.0)?;
    let seen = ex
        .gather_all("hosts")?
        .iter()
        .enumerate()
        .map(|(k, b)| Dec::new(b, &ex.file("hosts", k).display().to_string())?.strs())
        .collect::<Result<Vec<_>, _>>()?;
    let owner = assign_hosts(&seen);
    own.retain(|i| owner.get(&i.file.header().hostname) == Some(&ex.rank));
    hosts.retain(|h| owner.get(h) == Some(&ex.rank));
    let own_paths: BTreeSet<PathBuf> = own.iter().map(|i| i.path.clone()).collect();
    let mut phases = vec![("open+hosts".to_string(), started.elapsed().as_secs_f64())];
    let lap = Instant::now();
    let scans = scan::scan_all(&own);
    publish_meta(ex, &own, &scans, &warnings)?;
    phases.push(("scan+extract".to_string(), lap.elapsed().as_secs_f64()));
    let lap = Instant::now();
    let all = gather_logs(ex, own, scans)?;
    phases.push(("exchange".to_string(), lap.elapsed().as_secs_f64()));
    if all.inputs.is_empty() {
        return Err(ConvertError::NothingSelected("no shard found a log".into()));
    }
    let mut loaded = pipeline::load_scanned(
        all.inputs,
        all.scans,
        &all.recounted,
        all.warnings,
        phases,
        opts,
    )?;
    loaded.input_bytes = all.input_bytes;
    let lap = Instant::now();
    let frame = Frame::new(opts, &loaded.inputs, &loaded.topo, &loaded.alignment);
    let subset: Vec<usize> = loaded
        .topo
        .procs
        .iter()
        .filter(|p| own_paths.contains(&p.path))
        .map(|p| p.index)
        .collect();
    let (tx, rx) = std::sync::mpsc::sync_channel(2 * rayon::current_num_threads() + 2);
    let writer = stitch::spawn_part_writer(ex.dir.clone(), rx);
    let results = pipeline::model_subset(&loaded, &frame, opts, &subset, tx);
    writer
        .join()
        .map_err(|_| ConvertError::Shard("part writer thread panicked".into()))??;
    let mut written = Vec::new();
    if per_shard {
        let path = per_shard_path(output, ex.rank);
        stitch::assemble(ex, &path, &frame.header, &subset, frame.footer)?;
        written.push(path);
    }
    ex.publish("result", &stitch::encode_result(&subset, &results))?;
    loaded
        .phases
        .push(("model+emit".into(), lap.elapsed().as_secs_f64()));
    let mut shard = Sharded {
        rank: ex.rank,
        shards: ex.size,
        hosts,
        processes: subset.len(),
        summary: None,
        written,
    };
    if ex.rank == 0 {
        let summary = finish(ex, output, opts, per_shard, loaded, &frame, started)?;
        if !per_shard {
            shard.written.push(output.to_owned());
        }
        shard.summary = Some(summary);
    }
    Ok(shard)
}

/// Rank 0, after every shard's result: the trace (unless per shard), the merged summary, and
/// the exchange directory removed.
fn finish(
    ex: &Exchange,
    output: &Path,
    _opts: &ConvertOptions,
    per_shard: bool,
    mut loaded: pipeline::Loaded,
    frame: &Frame,
    started: Instant,
) -> Result<Summary, ConvertError> {
    let results = stitch::decode_results(&ex.gather_all("result")?)?;
    let n = loaded.topo.procs.len();
    let indices: Vec<usize> = results.iter().map(|r| r.0).collect();
    if indices != (0..n).collect::<Vec<_>>() {
        return Err(ConvertError::Shard(format!(
            "the shards modelled processes {indices:?}, not each of the {n} exactly once"
        )));
    }
    let all: Vec<usize> = (0..n).collect();
    let output_bytes = if per_shard {
        (0..ex.size)
            .map(|k| std::fs::metadata(per_shard_path(output, k)).map_or(0, |m| m.len()))
            .sum()
    } else {
        stitch::assemble(ex, output, &frame.header, &all, frame.footer)?
    };
    let results = results.into_iter().map(|r| r.1).collect();
    let (totals, _) = pipeline::merge_results(
        results,
        crate::report::default_sections(),
        &loaded.topo,
        &mut loaded.warnings,
    );
    let _ = std::fs::remove_dir_all(&ex.dir);
    if let Some(parent) = ex.dir.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    Ok(Summary {
        inputs: loaded.inputs.len(),
        processes: n,
        hosts: loaded.topo.hosts.len(),
        input_bytes: loaded.input_bytes,
        records: loaded.records,
        wr_events: loaded.wr_events,
        output_bytes,
        totals,
        alignment: loaded.alignment,
        warnings: loaded.warnings,
        nsys: Vec::new(),
        elapsed_s: started.elapsed().as_secs_f64(),
        phases: loaded.phases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_go_to_a_shard_that_sees_them_balanced() {
        let all: Vec<String> = (0..5).map(|i| format!("h{i}")).collect();
        // A shared directory: every shard sees every host.
        let o = assign_hosts(&[all.clone(), all.clone()]);
        assert_eq!(o.values().copied().collect::<Vec<_>>(), vec![0, 1, 0, 1, 0]);
        // Node-local directories: each shard sees its own.
        let o = assign_hosts(&[vec!["b".into()], vec!["a".into(), "c".into()], vec![]]);
        assert_eq!(o["a"], 1);
        assert_eq!(o["b"], 0);
        assert_eq!(o["c"], 1);
    }

    #[test]
    fn per_shard_names() {
        assert_eq!(
            per_shard_path(Path::new("/o/t.perfetto-trace"), 3),
            PathBuf::from("/o/t.shard3.perfetto-trace")
        );
        assert_eq!(per_shard_path(Path::new("t"), 0), PathBuf::from("t.shard0"));
        assert_eq!(
            exchange_dir(Path::new("/o/t.pb"), "j-np4"),
            PathBuf::from("/o/t.pb.shards/j-np4")
        );
    }
}

//! The repository's own Perfetto trace checker.
//!
//! Data flow: file → [`read`] (gzip, `Trace` framing, `compressed_packets` inflated) → each
//! `TracePacket` decoded with the prost messages of [`proto`] (`sigmatrace_timeline::proto`, the
//! same declarations the encoder is tested byte-exact against) → [`checker`] (sequences,
//! interning, clocks, descriptors, events, flows) → at the end [`tracks`] (parents, references, counter tracks, [`slices`] nesting) →
//! a [`Report`]: violations by check, and statistics.
//!
//! Checks (the `check` name of each [`Violation`]): `unknown-field` (bytes the declared
//! messages do not understand, unknown enum values), `framing`, `track-uuid` (nonzero,
//! unique), `track-parent` (defined, no cycles), `track-ref` (every event's track defined),
//! `counter-track` (counter tracks get only COUNTER events, other tracks none),
//! `slice-nesting` (balanced, nested per track in timestamp order, no slice ending before it
//! begins, at most 512 deep), `interning` (every iid defined earlier on its sequence, after
//! SEQ_INCREMENTAL_STATE_CLEARED), `incremental-state`, `clock` (snapshots never go backwards,
//! every clock converts to the trace clock), `timestamp` (present, not negative), `track-event`
//! (known type, counter value present), `flow` (every flow id on at least two events).
//! Flows whose terminating event is earlier than their first event are counted in
//! [`Stats::backward_flows`]. A trace that cannot be read at all gives [`Report::fatal`].

mod checker;
mod clocks;
mod flows;
pub mod read;
mod slices;
mod tracks;

/// The Perfetto messages the checker decodes with: the timeline crate's declarations.
pub use sigmatrace_timeline::proto;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// Violations kept in a report (all are counted).
pub const MAX_ERRORS_KEPT: usize = 50;

/// One violated rule.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// Top-level packet index (packets inside `compressed_packets` report their container's).
    pub packet: Option<usize>,
    pub check: &'static str,
    pub message: String,
}

/// Violations found so far.
#[derive(Default, Debug)]
pub struct Errors {
    pub list: Vec<Violation>,
    pub count: usize,
    pub counts: BTreeMap<&'static str, usize>,
    /// Entry index while inside a `compressed_packets` block.
    inner: Option<usize>,
}

impl Errors {
    pub fn add(&mut self, check: &'static str, packet: usize, message: String) {
        self.count += 1;
        *self.counts.entry(check).or_default() += 1;
        if self.list.len() < MAX_ERRORS_KEPT {
            let message = match self.inner {
                Some(n) => format!("{message} (entry {n} of compressed_packets)"),
                None => message,
            };
            self.list.push(Violation {
                packet: Some(packet),
                check,
                message,
            });
        }
    }
}

/// What the trace holds.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    /// TracePackets, counting those inside `compressed_packets` (not the containers).
    pub packets: u64,
    pub compressed_blocks: u64,
    pub tracks: u64,
    pub process_tracks: u64,
    pub thread_tracks: u64,
    pub counter_tracks: u64,
    pub other_tracks: u64,
    pub track_events: u64,
    /// Completed slices (matched BEGIN/END pairs).
    pub slices: u64,
    pub instants: u64,
    pub counter_events: u64,
    /// Distinct flows (an id reused after a terminating event counts again).
    pub flows: u64,
    /// Flows whose terminating event is earlier in time than their first event.
    pub backward_flows: u64,
    /// Distinct nonzero `trusted_packet_sequence_id`s.
    pub sequences: u64,
    /// Smallest and largest TrackEvent time, in trace-clock ns.
    pub min_timestamp: Option<i64>,
    pub max_timestamp: Option<i64>,
    pub gzip: bool,
}

impl Stats {
    /// A statistic by name (the keys of `--expect-min`).
    pub fn get(&self, key: &str) -> Option<u64> {
        Some(match key {
            "packets" => self.packets,
            "tracks" => self.tracks,
            "process_tracks" => self.process_tracks,
            "thread_tracks" => self.thread_tracks,
            "counter_tracks" => self.counter_tracks,
            "slices" => self.slices,
            "instants" => self.instants,
            "counter_events" => self.counter_events,
            "flows" => self.flows,
            "backward_flows" => self.backward_flows,
            "sequences" => self.sequences,
            _ => return None,
        })
    }
}

/// The outcome of checking one trace.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// No violation, and readable.
    pub ok: bool,
    /// Why the trace could not be read (then `ok` is false and the stats are partial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fatal: Option<String>,
    /// The first [`MAX_ERRORS_KEPT`] violations.
    pub errors: Vec<Violation>,
    pub error_count: usize,
    pub error_counts: BTreeMap<&'static str, usize>,
    pub stats: Stats,
    /// Per counter track name, the sum of the integer values of every counter track of that
    /// name (not in the JSON: the independent validator has no such key).
    #[serde(skip)]
    pub counter_totals: BTreeMap<String, i128>,
    /// Every flow with a start and a terminating event: (id, start, end) trace times, in the
    /// order the flows were closed (not in the JSON either).
    #[serde(skip)]
    pub flow_spans: Vec<(u64, i128, i128)>,
}

impl Report {
    /// The report as JSON (`{"ok", "fatal"?, "errors", "error_count", "error_counts", "stats"}`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a report serialises")
    }

    /// Number of violations of one check.
    pub fn count(&self, check: &str) -> usize {
        self.error_counts.get(check).copied().unwrap_or(0)
    }

    /// Adds an `expect-min` violation for each `KEY=N` whose statistic is below N.
    pub fn expect_min(&mut self, expectations: &[&str]) -> Result<(), String> {
        for e in expectations {
            let (key, n) = e
                .split_once('=')
                .ok_or_else(|| format!("bad expectation {e:?}: use KEY=N"))?;
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| format!("bad expectation {e:?}: {n:?} is not a number"))?;
            let have = self
                .stats
                .get(key.trim())
                .ok_or_else(|| format!("bad expectation {e:?}: unknown statistic {key:?}"))?;
            if have < n {
                self.ok = false;
                self.error_count += 1;
                *self.error_counts.entry("expect-min").or_default() += 1;
                self.errors.push(Violation {
                    packet: None,
                    check: "expect-min",
                    message: format!("expected {key} >= {n}, got {have}"),
                });
            }
        }
        Ok(())
    }
}

/// Checks the trace at `path` (plain or gzip).
pub fn check(path: &Path) -> Report {
    match read::load(path) {
        Ok((data, gzip)) => {
            let mut r = check_decompressed(&data);
            r.stats.gzip = gzip;
            r
        }
        Err(e) => fatal(e, checker::Checker::default()),
    }
}

/// Checks a trace held in memory (plain, not gzip).
pub fn check_bytes(data: &[u8]) -> Report {
    check_decompressed(data)
}

fn check_decompressed(data: &[u8]) -> Report {
    let mut c = checker::Checker::default();
    if let Err(e) = c.feed(data) {
        return fatal(e, c);
    }
    c.finish();
    Report {
        ok: c.errs.count == 0,
        fatal: None,
        errors: c.errs.list,
        error_count: c.errs.count,
        error_counts: c.errs.counts,
        stats: c.stats,
        counter_totals: std::mem::take(&mut c.tracks.totals),
        flow_spans: std::mem::take(&mut c.flows.spans),
    }
}

fn fatal(e: read::Unreadable, c: checker::Checker) -> Report {
    Report {
        ok: false,
        fatal: Some(e.to_string()),
        errors: c.errs.list,
        error_count: c.errs.count,
        error_counts: c.errs.counts,
        stats: c.stats,
        counter_totals: BTreeMap::new(),
        flow_spans: Vec::new(),
    }
}

/// Checks `trace`, panics with the report unless it is valid and every `KEY=N` of
/// `expect_min` holds; returns the report as JSON (`v["stats"]["flows"]`, …).
pub fn validate(trace: &Path, expect_min: &[&str]) -> serde_json::Value {
    let mut r = check(trace);
    if let Err(e) = r.expect_min(expect_min) {
        panic!("{e}");
    }
    let json = r.json();
    assert!(
        r.ok,
        "the trace checker rejected {}: {json:#}",
        trace.display()
    );
    json
}

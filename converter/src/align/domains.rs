//! Clock domains: the groups of processes that read one clock.
//!
//! All processes of one boot of one machine read the same CLOCK_MONOTONIC / CLOCK_REALTIME, so
//! after each process's own TSC fit ([`crate::align::clock`]) their times are already on one
//! time line: they form one clock domain and get no correction between them. That holds for
//! several simulated nodes on one machine too (softnic's `node=` attribute): a node is a unit
//! of traffic, not of clocks. Causality alignment ([`crate::align`]) corrects domains against
//! each other only.
//!
//! Key of a domain: (boot id, hostname). A log without a boot id (zero) cannot prove that it
//! shares a machine's clock, so its domain also carries its `node=` value. A process whose
//! header has the debug attribute `clock_skew=<offset_ns>,<drift_ppb>` (the interposer's
//! injected clock error, see schemas/FORMAT.md) reads a deliberately different clock: it is a
//! domain of its own (the error grows from the process's own origin, so two processes with the
//! same attribute still disagree).

use std::collections::BTreeMap;

use sigmatrace_schemas::records::ClockSnapshot;

use crate::align::clock::{fit_snapshots, ProcessClock};
use crate::align::topology::Topology;
use crate::read::input::LogInput;

/// Header attribute naming an injected clock error (`clock_skew=<offset_ns>,<drift_ppb>`).
pub const CLOCK_SKEW_ATTR: &str = "clock_skew=";

/// Identity of a clock domain (ordered, so domains can be numbered deterministically).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DomainKey {
    boot_id: [u8; 16],
    hostname: String,
    /// Set when the boot id is unknown or the clock is skewed on purpose.
    node: Option<String>,
    /// The injected clock error and the process it belongs to.
    skew: Option<(String, usize)>,
}

/// The clock domains of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Domains {
    /// Domain of each process (index into `names`).
    pub of_proc: Vec<usize>,
    /// Display name of each domain ("host1", "host1/node2 clock_skew=…").
    pub names: Vec<String>,
    /// Processes of each domain, ascending.
    pub procs: Vec<Vec<usize>>,
}

impl Domains {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Groups the processes of `topo` into clock domains, numbered in order of their first
/// process (processes are sorted by rank, so domain 0 holds the lowest rank).
pub fn clock_domains(inputs: &[LogInput], topo: &Topology) -> Domains {
    let mut index: BTreeMap<DomainKey, usize> = BTreeMap::new();
    let mut out = Domains::default();
    for p in &topo.procs {
        let h = p.log_in(inputs).map(|i| i.file.header());
        let key = match h {
            Some(h) => {
                let skew = h
                    .attrs
                    .iter()
                    .find_map(|a| a.strip_prefix(CLOCK_SKEW_ATTR))
                    .map(str::to_owned);
                let node = (h.boot_id == [0; 16] || skew.is_some())
                    .then(|| h.node().map(str::to_owned))
                    .flatten();
                DomainKey {
                    boot_id: h.boot_id,
                    hostname: h.hostname.clone(),
                    node,
                    skew: skew.map(|s| (s, p.index)),
                }
            }
            None => DomainKey {
                boot_id: [0; 16],
                hostname: format!("{}#{}", p.hostname, p.index),
                node: None,
                skew: None,
            },
        };
        let d = *index.entry(key.clone()).or_insert_with(|| {
            let mut name = if key.hostname.is_empty() {
                "unknown".to_string()
            } else {
                key.hostname.clone()
            };
            if let Some(n) = &key.node {
                name.push_str(&format!("/node{n}"));
            }
            if let Some((s, _)) = &key.skew {
                name.push_str(&format!(" {} {CLOCK_SKEW_ATTR}{s}", p.label()));
            }
            out.names.push(name);
            out.procs.push(Vec::new());
            out.names.len() - 1
        });
        out.of_proc.push(d);
        out.procs[d].push(p.index);
    }
    out
}

/// Each process's clock with one rate fitted over the snapshots of every process of its clock
/// domain that uses the same timestamp source (the TSC and MONOTONIC_RAW tick at one rate on
/// one machine), each process keeping its own intercept. Fitted alone, short-lived processes
/// (a few snapshots over milliseconds, brackets stretched by preemption) got rates hundreds
/// of ppm apart, enough to put a receive µs before its send on one machine clock (8 of 800
/// in 8 concurrent ibv_rc_pingpong pairs at load 7). A process alone in its group keeps its
/// own fit; REALTIME − MONOTONIC stays each process's own.
pub fn pooled_clocks(topo: &Topology, dom: &Domains) -> Vec<ProcessClock> {
    let mut out: Vec<ProcessClock> = topo.procs.iter().map(|p| p.clock).collect();
    for procs in &dom.procs {
        let mut groups: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
        for &p in procs {
            groups
                .entry(topo.procs[p].ts_source as u8)
                .or_default()
                .push(p);
        }
        for ps in groups.values().filter(|ps| ps.len() > 1) {
            let first = &topo.procs[ps[0]];
            let sets: Vec<&[ClockSnapshot]> =
                ps.iter().map(|&p| &topo.procs[p].snapshots[..]).collect();
            let fits = fit_snapshots(&sets, first.ts_source, first.tsc_hz);
            for (&p, (map, resid, n)) in ps.iter().zip(fits) {
                if n > 0 {
                    let c = &mut out[p];
                    (c.to_monotonic, c.fit_residual_ns, c.snapshots) = (map, resid, n);
                }
            }
        }
    }
    out
}

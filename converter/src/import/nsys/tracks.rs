//! Logical tracks of an import: items (slices, instants, flows) collected per track key, laid
//! out in lanes that nest and emitted onto a sink; and the time map that places an export's
//! times on the output clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use sigmatrace_nsys::{ClockMapping, NvtxEvent, NvtxKind, NvtxPayload};
use sigmatrace_timeline::{ArgKey, ArgValue, Extra, TraceSink, TrackDef, TrackKind};

/// Maps export times of one report to output times.
pub(super) struct TimeMap {
    pub mapping: ClockMapping,
    /// (offset ns, rate, t0) of the matched SigmaTrace host.
    pub correction: Option<(f64, f64, i64)>,
}

impl TimeMap {
    /// Integer ns throughout: epoch-ns values do not fit an f64 mantissa; only the (small)
    /// correction is computed in floating point.
    pub fn out(&self, t: i64) -> u64 {
        let u = self.mapping.to_realtime(t);
        let v = u.saturating_add(self.correction_at(u));
        v.max(0) as u64
    }

    /// The host correction at realtime `u` (ns), 0 without a matched host.
    pub fn correction_at(&self, u: i64) -> i64 {
        match self.correction {
            Some((o, r, t0)) => (o + r * u.saturating_sub(t0) as f64).round() as i64,
            None => 0,
        }
    }
}

/// One slice or instant to place on a logical track.
pub(super) struct Item {
    pub start: u64,
    /// None: an instant.
    pub end: Option<u64>,
    pub name: String,
    pub args: Vec<(&'static str, Arg)>,
    pub flow: Option<u64>,
    /// Whether the flow ends here (last GPU activity of a correlation).
    pub terminates: bool,
}

/// Owned argument values.
pub(super) enum Arg {
    U(u64),
    I(i64),
    S(String),
}

/// A logical track: name, merge key, items; placed under `parent`.
pub(super) struct Logical {
    pub parent: u64,
    pub name: String,
    pub description: Option<String>,
    pub items: Vec<Item>,
}

/// Emits one logical track: lanes (stack discipline: a lane takes an item that is disjoint
/// from or nested in its open slices), events in timestamp order per lane.
pub(super) fn emit_logical(
    sink: &mut dyn TraceSink,
    uuids: &AtomicU64,
    key: &str,
    mut t: Logical,
) -> usize {
    t.items.sort_by(|a, b| {
        (a.start, std::cmp::Reverse(a.end.unwrap_or(a.start)))
            .cmp(&(b.start, std::cmp::Reverse(b.end.unwrap_or(b.start))))
    });
    let mut lanes: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut keys: HashMap<&'static str, ArgKey> = HashMap::new();
    let mut slices = 0;
    let new_lane = |sink: &mut dyn TraceSink, lanes: &mut Vec<(u64, Vec<u64>)>| {
        let uuid = uuids.fetch_add(1, Ordering::Relaxed);
        let mut def = TrackDef::slices(uuid, Some(t.parent), t.name.clone());
        def.description = t.description.clone();
        def.kind = TrackKind::Slices {
            merge_key: Some(key.to_string()),
        };
        sink.track(&def);
        lanes.push((uuid, Vec::new()));
        lanes.len() - 1
    };
    for item in &t.items {
        for (uuid, stack) in lanes.iter_mut() {
            while stack.last().is_some_and(|&e| e <= item.start) {
                let e = stack.pop().unwrap_or(item.start);
                sink.end(e, *uuid, &Extra::NONE);
            }
        }
        let end = item.end.unwrap_or(item.start);
        let lane = match lanes
            .iter()
            .position(|(_, s)| s.last().is_none_or(|&open_end| open_end >= end))
        {
            Some(l) => l,
            None => new_lane(sink, &mut lanes),
        };
        let uuid = lanes[lane].0;
        let name = sink.name(&item.name);
        let arg_pairs: Vec<(ArgKey, ArgValue<'_>)> = item
            .args
            .iter()
            .map(|(k, v)| {
                let key = *keys.entry(k).or_insert_with(|| sink.arg_key(k));
                let val = match v {
                    Arg::U(x) => ArgValue::U64(*x),
                    Arg::I(x) => ArgValue::I64(*x),
                    Arg::S(s) => ArgValue::Str(s),
                };
                (key, val)
            })
            .collect();
        let flow = item.flow.map(|f| [f]);
        let flows: &[u64] = match (&flow, item.terminates) {
            (Some(f), false) => f,
            _ => &[],
        };
        let terminating: &[u64] = match (&flow, item.terminates) {
            (Some(f), true) => f,
            _ => &[],
        };
        let extra = Extra {
            args: &arg_pairs,
            flows,
            terminating,
        };
        match item.end {
            Some(_) => {
                sink.begin(item.start, uuid, name, &extra);
                lanes[lane].1.push(end);
                slices += 1;
            }
            None => sink.instant(item.start, uuid, name, &extra),
        }
    }
    for (uuid, stack) in lanes.iter_mut() {
        while let Some(e) = stack.pop() {
            sink.end(e, *uuid, &Extra::NONE);
        }
    }
    slices
}

pub(super) fn dims(d: [i64; 3]) -> String {
    format!("{}×{}×{}", d[0], d[1], d[2])
}

pub(super) fn nvtx_item(e: &NvtxEvent, tm: &TimeMap) -> Item {
    let mut args: Vec<(&'static str, Arg)> = Vec::new();
    if let Some(c) = &e.category_name {
        args.push(("category", Arg::S(c.clone())));
    } else if let Some(c) = e.category {
        args.push(("category", Arg::I(c)));
    }
    if let Some(c) = e.color {
        args.push(("color", Arg::S(format!("ARGB {c:#010x}"))));
    }
    if let Some(d) = &e.domain {
        args.push(("domain", Arg::S(d.clone())));
    }
    if let Some(r) = e.range_id {
        args.push(("range_id", Arg::I(r)));
    }
    match &e.payload {
        Some(NvtxPayload::U64(v)) => args.push(("payload", Arg::U(*v))),
        Some(NvtxPayload::I64(v)) => args.push(("payload", Arg::I(*v))),
        Some(NvtxPayload::U32(v)) => args.push(("payload", Arg::U(u64::from(*v)))),
        Some(NvtxPayload::I32(v)) => args.push(("payload", Arg::I(i64::from(*v)))),
        Some(NvtxPayload::F64(v)) | Some(NvtxPayload::F32(v)) => {
            args.push(("payload", Arg::S(v.to_string())))
        }
        Some(NvtxPayload::Json(s)) => args.push(("payload", Arg::S(s.clone()))),
        Some(NvtxPayload::Binary(n)) => args.push(("payload_bytes", Arg::U(*n as u64))),
        None => {}
    }
    let ranged = e.kind != NvtxKind::Mark;
    if ranged && e.end.is_none() {
        args.push(("unterminated", Arg::S("range never ended".into())));
    }
    Item {
        start: tm.out(e.start),
        end: e.end.filter(|_| ranged).map(|x| tm.out(x)),
        name: e.text.clone().unwrap_or_else(|| "(unnamed NVTX)".into()),
        args,
        flow: None,
        terminates: false,
    }
}

//! Slice nesting on one track, as trace processor builds its slice stack: events in timestamp
//! order (ties in file order); a SLICE_END closes the innermost open slice, or — when it has a
//! name or category — the innermost open slice that matches them. Overlaps are found two ways:
//! a named END that closes an outer slice while an inner one is open, and (for tracks written
//! out of timestamp order) a different pairing in file order than in timestamp order.

use super::proto::TYPE_SLICE_BEGIN;
use super::Errors;

/// Trace processor drops slices nested deeper than this.
pub const MAX_DEPTH: usize = 512;

/// A SLICE_BEGIN or SLICE_END on a track.
#[derive(Clone, Copy)]
pub struct SliceEvent {
    pub ts: i128,
    pub packet: usize,
    /// Index into the checker's (name, category) table; 0 = an END without either.
    pub name: u32,
    pub ty: i32,
}

/// (name, category) of slices, indexed by [`SliceEvent::name`].
pub type Names = Vec<(Option<String>, Option<String>)>;

const NONE: usize = usize::MAX;

struct Pairing {
    completed: u64,
    unmatched: Vec<usize>,
    open: Vec<usize>,
    /// (END, the BEGIN it closed, the inner BEGIN still open).
    misnested: Vec<(usize, usize, usize)>,
    too_deep: Option<usize>,
    /// BEGIN index → END index.
    matched: Vec<usize>,
}

fn matches(names: &Names, end: u32, begin: u32) -> bool {
    let (en, ec) = &names[end as usize];
    let (bn, bc) = &names[begin as usize];
    (ec.is_none() || ec == bc) && (en.is_none() || bn.is_none() || en == bn)
}

fn pair(order: &[usize], ev: &[SliceEvent], names: &Names) -> Pairing {
    let mut p = Pairing {
        completed: 0,
        unmatched: Vec::new(),
        open: Vec::new(),
        misnested: Vec::new(),
        too_deep: None,
        matched: vec![NONE; ev.len()],
    };
    let mut stack: Vec<usize> = Vec::new();
    for &i in order {
        if ev[i].ty == TYPE_SLICE_BEGIN {
            if stack.len() >= MAX_DEPTH && p.too_deep.is_none() {
                p.too_deep = Some(i);
            }
            stack.push(i);
            continue;
        }
        let found = if ev[i].name == 0 {
            stack.len().checked_sub(1)
        } else {
            stack
                .iter()
                .rposition(|&b| matches(names, ev[i].name, ev[b].name))
        };
        let Some(j) = found else {
            p.unmatched.push(i);
            continue;
        };
        let b = stack[j];
        if j + 1 != stack.len() {
            p.misnested.push((i, b, *stack.last().expect("non-empty")));
        }
        stack.remove(j);
        p.completed += 1;
        p.matched[b] = i;
    }
    p.open = stack;
    p
}

fn label(names: &Names, ev: &SliceEvent) -> String {
    match &names[ev.name as usize].0 {
        Some(n) => format!("'{n}'"),
        None => "(unnamed)".into(),
    }
}

/// Checks one track's slices; returns the number of completed slices.
pub fn check(
    ev: &[SliceEvent],
    sorted: bool,
    names: &Names,
    track: &str,
    errs: &mut Errors,
) -> u64 {
    let file_order: Vec<usize> = (0..ev.len()).collect();
    let mut implicated = vec![false; ev.len()];
    let result = if sorted {
        pair(&file_order, ev, names)
    } else {
        let mut ts_order = file_order.clone();
        ts_order.sort_by_key(|&i| ev[i].ts); // stable: ties stay in file order
        let in_file = pair(&file_order, ev, names);
        let by_ts = pair(&ts_order, ev, names);
        for b in 0..ev.len() {
            let fe = in_file.matched[b];
            if fe == NONE {
                continue;
            }
            let se = by_ts.matched[b];
            if ev[fe].ts < ev[b].ts {
                errs.add(
                    "slice-nesting",
                    ev[b].packet,
                    format!(
                        "slice {} on {track} ends before it begins: SLICE_END at ts {} (packet {}) < SLICE_BEGIN at ts {}",
                        label(names, &ev[b]), ev[fe].ts, ev[fe].packet, ev[b].ts
                    ),
                );
                implicated[b] = true;
                implicated[fe] = true;
            } else if se != NONE && se != fe {
                errs.add(
                    "slice-nesting",
                    ev[b].packet,
                    format!(
                        "slice {} on {track} is written as [{}, {}] but in timestamp order its SLICE_BEGIN pairs with the SLICE_END at ts {}: slices overlap without nesting",
                        label(names, &ev[b]), ev[b].ts, ev[fe].ts, ev[se].ts
                    ),
                );
                implicated[b] = true;
                implicated[fe] = true;
                implicated[se] = true;
            }
        }
        by_ts
    };
    for &(e, b, inner) in &result.misnested {
        if !implicated[e] {
            errs.add(
                "slice-nesting",
                ev[e].packet,
                format!(
                    "SLICE_END {} at ts {} on {track} closes the slice begun at ts {} while inner slice {} (begun at ts {}) is still open: slices overlap without nesting",
                    label(names, &ev[e]), ev[e].ts, ev[b].ts, label(names, &ev[inner]), ev[inner].ts
                ),
            );
        }
    }
    for &e in &result.unmatched {
        if !implicated[e] {
            errs.add(
                "slice-nesting",
                ev[e].packet,
                format!(
                    "unbalanced: SLICE_END at ts {} on {track} has no matching open slice",
                    ev[e].ts
                ),
            );
        }
    }
    for &b in &result.open {
        if !implicated[b] {
            errs.add(
                "slice-nesting",
                ev[b].packet,
                format!(
                    "unbalanced: slice {} begun at ts {} on {track} is never ended",
                    label(names, &ev[b]),
                    ev[b].ts
                ),
            );
        }
    }
    if let Some(i) = result.too_deep {
        errs.add(
            "slice-nesting",
            ev[i].packet,
            format!("slices on {track} nest deeper than {MAX_DEPTH} levels (trace processor drops them)"),
        );
    }
    result.completed
}

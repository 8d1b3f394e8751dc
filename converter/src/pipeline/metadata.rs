//! The trace's own metadata: the Perfetto header (clock snapshot, the alignment track with
//! its instant, the static tracks) and the clock-correction labels on process tracks.

use crate::align::topology::Topology;
use crate::align::{self, Alignment};
use sigmatrace_timeline::perfetto::{self, PerfettoSeq};
use sigmatrace_timeline::TraceSink;

/// The start of a Perfetto trace: the clock snapshot, then the metadata sequence with the
/// alignment track, the static tracks and the alignment instant.
pub(super) fn perfetto_header(
    statics: &[sigmatrace_timeline::TrackDef],
    topo: &Topology,
    alignment: &Alignment,
    t_start: i64,
) -> Vec<u8> {
    let mut header = Vec::new();
    perfetto::frame_packet(
        &mut header,
        &perfetto::clock_snapshot_packet(t_start as u64),
    );
    let mut meta = PerfettoSeq::new(u32::MAX - 1, false, 0);
    let at = alignment_track(topo, alignment);
    meta.track(&at);
    for d in statics {
        meta.track(d);
    }
    alignment_instant(&mut meta, at.uuid, t_start as u64, alignment);
    header.extend_from_slice(&meta.take());
    header
}

/// One host's correction as text: "offset +12.3 µs, drift 0.10 ppm, ±0.4 µs".
fn host_alignment(h: &align::HostAlign) -> String {
    let unc = h
        .uncertainty_ns
        .map(|u| format!("±{:.3} µs", u / 1e3))
        .unwrap_or_else(|| "unbounded".into());
    format!(
        "offset {:+.3} µs, drift {:.3} ppm, {unc}",
        h.offset_ns / 1e3,
        h.drift_ppm
    )
}

/// Adds the host's clock correction to every process track's labels (shown next to the
/// process name in the UI).
pub(super) fn label_alignment(
    statics: &mut [sigmatrace_timeline::TrackDef],
    topo: &Topology,
    a: &Alignment,
) {
    let by_track: std::collections::HashMap<u64, &crate::align::topology::Process> =
        topo.procs.iter().map(|p| (p.track, p)).collect();
    for d in statics.iter_mut() {
        if let sigmatrace_timeline::TrackKind::Process { labels, .. } = &mut d.kind {
            let Some(p) = by_track.get(&d.uuid) else {
                continue;
            };
            if let Some(h) = a.hosts.get(p.host) {
                labels.push(format!("clock {}", host_alignment(h)));
            }
        }
    }
}

/// An instant at the trace start on the alignment track whose args list every host's offset,
/// drift and uncertainty (visible when the event is selected).
fn alignment_instant(seq: &mut PerfettoSeq, track: u64, t: u64, a: &Alignment) {
    use sigmatrace_timeline::{ArgValue, Extra};
    let name = seq.name("clock alignment");
    let texts: Vec<String> = a.hosts.iter().map(host_alignment).collect();
    let mut args = Vec::new();
    let key = seq.arg_key("method");
    args.push((key, ArgValue::Str(&a.method)));
    for (h, text) in a.hosts.iter().zip(&texts) {
        let key = seq.arg_key(&format!("host {}", h.host));
        args.push((key, ArgValue::Str(text)));
    }
    let key = seq.arg_key("message pairs");
    args.push((key, ArgValue::U64(a.pairs)));
    let key = seq.arg_key("receive before send, before alignment");
    args.push((key, ArgValue::U64(a.inverted_before)));
    let key = seq.arg_key("receive before send, after alignment");
    args.push((key, ArgValue::U64(a.inverted_after)));
    let key = seq.arg_key("dropped constraints");
    args.push((key, ArgValue::U64(a.dropped_constraints)));
    if let Some(note) = &a.note {
        let key = seq.arg_key("note");
        args.push((key, ArgValue::Str(note)));
    }
    seq.instant(
        t,
        track,
        name,
        &Extra {
            args: &args,
            ..Extra::NONE
        },
    );
}

/// A top-level track whose description carries the clock alignment (trace metadata).
fn alignment_track(topo: &Topology, a: &Alignment) -> sigmatrace_timeline::TrackDef {
    let mut desc = format!(
        "{}. Reference host: {}.",
        a.method,
        topo.hosts
            .get(a.reference_host)
            .map(|h| h.name.as_str())
            .unwrap_or("-")
    );
    for h in &a.hosts {
        let unc = h
            .uncertainty_ns
            .map(|u| format!("±{u:.0} ns"))
            .unwrap_or_else(|| "unbounded".into());
        desc.push_str(&format!(
            " {}: offset {:.0} ns, drift {:.3} ppm, uncertainty {unc}.",
            h.host, h.offset_ns, h.drift_ppm
        ));
    }
    desc.push_str(&format!(
        " Offsets and uncertainties are stated at t0 = {} ns (drift widens them away from it).",
        a.t0
    ));
    for l in &a.links {
        if let (Some(at), Some(est), Some(u)) = (l.best_at_ns, l.pair_skew_ns, l.uncertainty_ns) {
            let name = |d: usize| a.domains.get(d).map_or("-", |d| d.name.as_str());
            desc.push_str(&format!(
                " Clocks {} – {}: difference {est:.0} ns ±{u:.0} ns at {at} ns (where their messages bound it best).",
                name(l.a),
                name(l.b)
            ));
        }
    }
    let mut d =
        sigmatrace_timeline::TrackDef::slices(u64::MAX >> 1, None, "SigmaTrace clock alignment");
    d.description = Some(desc);
    d
}

//! Encoding recorded events ([`crate::batch`]) into a sequence: runs of plain events (no
//! value, flows or args) whose track's last packet of their type and name is in the block are
//! written from those templates in one loop ([`plain_repeats`]); an event with at most a
//! counter value or one flow is written from its template without going through the sink
//! interface; every other event goes through it ([`crate::batch::replay_one`]).

use super::small::{epoch_bits, repeat_plain, template_slot, Tail, Template, TEMPLATE_SLOTS};
use super::PerfettoSeq;
use crate::batch::{replay_one, Ev, GroupEvents};
use crate::fastz::{FastZ, WINDOW};

impl PerfettoSeq {
    /// Encodes one group's recorded events, in order.
    pub fn replay(&mut self, events: &GroupEvents) {
        let evs = events.evs();
        let mut i = 0;
        while i < evs.len() {
            if let (Some(z), Ok(templates), true) = (
                self.z.as_deref_mut(),
                <&mut [Template; TEMPLATE_SLOTS]>::try_from(&mut self.templates[..]),
                self.incremental,
            ) {
                let epoch = epoch_bits(self.epoch);
                let last = &mut self.last_ts;
                i += plain_repeats(&mut self.buf, templates, z, last, epoch, &evs[i..]);
                if i == evs.len() {
                    break;
                }
            }
            let ev = &evs[i];
            // Counters and events with one flow, then the rest.
            let written = if let Some(ty) = ev.plain_type() {
                self.templated(ty as i32, ev.track, ev.name1(), Tail::None, ev.ts)
            } else if let Some((ty, tail)) = ev.with_tail() {
                self.templated(ty as i32, ev.track, ev.name1(), tail, ev.ts)
            } else {
                false
            };
            if !written {
                replay_one(events, ev, self);
            }
            i += 1;
        }
    }
}

/// Writes the events at the start of `evs` that are plain repeats of their templates
/// ([`repeat_plain`]) into `buf` and `z` — the template in the current block (`epoch`:
/// [`epoch_bits`]), of the same type and name, neither with a tail, within the window — up to
/// the first that is not; returns how many. `last_ts`: the incremental clock.
#[inline(never)]
fn plain_repeats(
    buf: &mut Vec<u8>,
    templates: &mut [Template; TEMPLATE_SLOTS],
    z: &mut FastZ,
    last_ts: &mut u64,
    epoch: u64,
    evs: &[Ev],
) -> usize {
    z.wake();
    let mut now = *last_ts;
    let mut n = 0;
    for ev in evs {
        if ev.ts < now {
            break;
        }
        let ty = ev.meta as u8;
        let t = &mut templates[template_slot(ev.track, ty as i32)];
        let start = buf.len();
        // The kind (type, name, no tail, epoch) of a template equals a recorded plain event's
        // `meta` with the epoch ([`super::small::template_kind`]); an event with flags or a
        // value never matches.
        if t.kind != ev.meta | epoch || t.track != ev.track || start - t.at > WINDOW {
            break;
        }
        if !repeat_plain(buf, z, t, ev.ts - now, ty as usize) {
            break;
        }
        now = ev.ts;
        n += 1;
    }
    *last_ts = now;
    n
}

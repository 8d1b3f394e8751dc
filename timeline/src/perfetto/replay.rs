//! Encoding recorded events ([`crate::batch`]) into a sequence: an event without args (at most
//! a counter value or one flow) of a track whose last packet of its type and name is in the
//! block is written from that template here, without going through the sink interface; every
//! other event goes through it ([`crate::batch::replay_one`]).

use super::small::Tail;
use super::PerfettoSeq;
use crate::batch::{replay_one, GroupEvents};

impl PerfettoSeq {
    /// Encodes one group's recorded events, in order.
    pub fn replay(&mut self, events: &GroupEvents) {
        for ev in events.evs() {
            // Plain slices and instants (most events) first, then counters and events with
            // one flow.
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
        }
    }
}

//! Encoding recorded events ([`crate::batch`]) into a sequence: a plain event (no args or
//! flows) that repeats its track's last packet of its type and name is written from its
//! template here, without going through the sink interface; every other event goes through
//! it ([`crate::batch::replay_one`]).

use super::PerfettoSeq;
use crate::batch::{replay_one, GroupEvents};

impl PerfettoSeq {
    /// Encodes one group's recorded events, in order.
    pub fn replay(&mut self, events: &GroupEvents) {
        for ev in events.evs() {
            if let Some(ty) = ev.plain_type() {
                if ty != crate::proto::TYPE_COUNTER as u8
                    && self.repeat(ty as i32, ev.track, ev.name1(), ev.ts)
                {
                    continue;
                }
            }
            replay_one(events, ev, self);
        }
    }
}

//! The message round trips between clock domains that bound how well the converter can know
//! their offsets (used by real_timelines.rs).

use std::collections::BTreeMap;

use sigmatrace_convert::align::topology::Topology;
use sigmatrace_convert::align::Alignment;
use sigmatrace_convert::read::input::LogInput;

/// Round trips between two domains, each on one clock: a message x → y from domain a to b,
/// then the first message b sends back after y (x2 ≥ y, both on b's clock), received at y2 on
/// a's clock: y2 − x. An offset between the two clocks is known to within half the tightest
/// round trip (more cannot be known from messages).
pub struct RoundTrips(BTreeMap<(usize, usize), Vec<(i64, i64)>>);

impl RoundTrips {
    /// The messages (send, receive time) between the domains of `a`.
    pub fn new(inputs: &[LogInput], topo: &Topology, a: &Alignment) -> RoundTrips {
        let dom_of: BTreeMap<usize, usize> = a
            .domains
            .iter()
            .enumerate()
            .flat_map(|(d, da)| da.procs.iter().map(move |&p| (p, d)))
            .collect();
        let mut msgs: BTreeMap<(usize, usize), Vec<(i64, i64)>> = BTreeMap::new();
        sigmatrace_convert::align::join(inputs, topo, |pr| {
            let k = (dom_of[&pr.sender.0], dom_of[&pr.receiver]);
            msgs.entry(k).or_default().push((pr.x, pr.y));
        });
        for v in msgs.values_mut() {
            v.sort_unstable();
        }
        RoundTrips(msgs)
    }

    /// The tightest round trip out from `x` to `y` and back.
    fn min(&self, x: usize, y: usize) -> Option<i64> {
        let (go, back) = (self.0.get(&(x, y))?, self.0.get(&(y, x))?);
        go.iter()
            .filter_map(|&(x1, y1)| {
                let i = back.partition_point(|b| b.0 < y1);
                back.get(i).map(|&(_, y2)| y2 - x1)
            })
            .min()
    }

    /// Half the tightest round trip between `x` and `y`, either way round.
    pub fn half(&self, x: usize, y: usize) -> Option<f64> {
        let r1 = self.min(x, y);
        let r2 = self.min(y, x);
        r1.into_iter().chain(r2).min().map(|r| r as f64 / 2.0)
    }
}

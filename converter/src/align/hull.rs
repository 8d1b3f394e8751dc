//! Lower convex hulls of causality points.
//!
//! A message sent at x (sender's clock, relative to the reference time) and received d later
//! (receiver's clock) bounds the correction of the two clock domains:
//! `o_a − o_b + r_a·τ(x) − r_b·τ(x + d) ≤ d`. For any offsets and drifts the tightest of these
//! minimises a linear function of (x, d) with a positive weight on d, which a vertex of the lower
//! convex hull of the points (x, d) attains: the hull carries every binding constraint exactly.

/// Lower convex hull of points (x, d), sorted by x (the lowest d of each x).
pub fn lower_hull(mut pts: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    pts.sort_unstable();
    pts.dedup_by_key(|p| p.0);
    let mut h: Vec<(i64, i64)> = Vec::with_capacity(pts.len().min(64));
    for p in pts {
        push_right(&mut h, p);
    }
    h
}

/// Appends a point right of (or at) the chain's last x, keeping the chain a lower hull.
fn push_right(h: &mut Vec<(i64, i64)>, (x, d): (i64, i64)) {
    if let Some(&(lx, ld)) = h.last() {
        if x == lx {
            if d >= ld {
                return;
            }
            h.pop();
        }
    }
    while h.len() >= 2 {
        let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
        let df = |u: i64, v: i64| u as i128 - v as i128;
        if df(a.0, o.0) * df(d, o.1) - df(a.1, o.1) * df(x, o.0) <= 0 {
            h.pop();
        } else {
            break;
        }
    }
    h.push((x, d));
}

/// Incremental lower hull of one connection's points, which arrive with non-decreasing x
/// (points out of order are kept aside and merged at the end).
#[derive(Clone, Debug, Default)]
pub struct IncHull {
    /// (sending domain, receiving domain).
    pub domains: (usize, usize),
    pub hull: Vec<(i64, i64)>,
    pub spill: Vec<(i64, i64)>,
    pub pairs: u64,
}

impl IncHull {
    #[inline]
    pub fn push(&mut self, x: i64, d: i64) {
        self.pairs += 1;
        match self.hull.last() {
            Some(&(lx, _)) if x < lx => self.spill.push((x, d)),
            _ => push_right(&mut self.hull, (x, d)),
        }
    }

    /// The hull of every point pushed.
    pub fn finish(mut self) -> Vec<(i64, i64)> {
        if self.spill.is_empty() {
            return self.hull;
        }
        self.hull.append(&mut self.spill);
        lower_hull(self.hull)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hull_keeps_the_lower_envelope() {
        let pts = vec![(0, 10), (1, 3), (2, 8), (3, 2), (4, 9), (5, 4)];
        assert_eq!(lower_hull(pts), vec![(0, 10), (1, 3), (3, 2), (5, 4)]);
    }

    #[test]
    fn incremental_hull_equals_batch_hull_with_out_of_order_points() {
        let pts: Vec<(i64, i64)> = (0..200)
            .map(|i: i64| ((i * 7919) % 211, (i * 104_729) % 97))
            .collect();
        let mut inc = IncHull::default();
        for &(x, d) in &pts {
            inc.push(x, d);
        }
        assert_eq!(inc.pairs, 200);
        assert_eq!(inc.finish(), lower_hull(pts));
    }
}

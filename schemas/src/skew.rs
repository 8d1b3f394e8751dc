//! Traffic skew of a square byte matrix `m[src][dst]` (diagonal ignored) — the one definition
//! shared by the workloads' ground truth (`sigmatrace-examples`, e.g. MoE routing) and the
//! converter's report (`sigmatrace-convert stats`, section "skew"), so the two compare directly:
//!
//! * link skew = max / mean over the ordered pairs `i ≠ j` of `m[i][j]`;
//! * node skew (in) = max / mean over nodes j of the bytes j receives, `Σ_{i≠j} m[i][j]`;
//! * node skew (out) = the same over the bytes each node sends.
//!
//! A skew is 0 when the mean is 0.

/// Skews of one matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Skew {
    pub link: f64,
    pub node_in: f64,
    pub node_out: f64,
    pub link_max: f64,
    pub link_mean: f64,
    /// Bytes between distinct nodes.
    pub total: f64,
}

/// (max / mean, max, mean); 0 when the mean is 0.
fn ratio(v: &[f64]) -> (f64, f64, f64) {
    let max = v.iter().copied().fold(0.0, f64::max);
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    (if mean > 0.0 { max / mean } else { 0.0 }, max, mean)
}

/// Skews of the `n × n` matrix whose entry (source `i`, destination `j`) is `m(i, j)`.
pub fn skew(n: usize, m: impl Fn(usize, usize) -> f64) -> Skew {
    let mut links = Vec::with_capacity(n * n.saturating_sub(1));
    let mut inn = vec![0.0; n];
    let mut out = vec![0.0; n];
    for (i, sent) in out.iter_mut().enumerate() {
        for (j, received) in inn.iter_mut().enumerate() {
            if i != j {
                let v = m(i, j);
                links.push(v);
                *received += v;
                *sent += v;
            }
        }
    }
    let (link, link_max, link_mean) = ratio(&links);
    Skew {
        link,
        node_in: ratio(&inn).0,
        node_out: ratio(&out).0,
        link_max,
        link_mean,
        total: links.iter().sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_one_and_a_hot_node_shows() {
        let u = [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0]];
        let s = skew(3, |i, j| u[i][j]);
        assert_eq!((s.link, s.node_in, s.node_out), (1.0, 1.0, 1.0));
        // Everyone sends 4 to node 0 and 1 elsewhere; the diagonal is ignored.
        let h = [[9.0, 1.0, 1.0], [4.0, 9.0, 1.0], [4.0, 1.0, 9.0]];
        let s = skew(3, |i, j| h[i][j]);
        assert!((s.link - 4.0 / (12.0 / 6.0)).abs() < 1e-12);
        assert!((s.node_in - 8.0 / 4.0).abs() < 1e-12);
        assert!((s.node_out - 5.0 / 4.0).abs() < 1e-12);
        assert_eq!((s.link_max, s.link_mean, s.total), (4.0, 2.0, 12.0));
        assert_eq!(skew(1, |_, _| 5.0), Skew::default());
        assert_eq!(skew(0, |_, _| 5.0), Skew::default());
    }
}

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
    skew_pairs(
        n,
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .map(|(i, j)| (i, j, m(i, j))),
    )
}

/// [`skew`] of the `n × n` matrix whose entries are 0 but for `pairs` (source, destination,
/// value), given in row-major order (source, then destination, ascending; each pair once):
/// the same values to the last bit, in memory for the pairs only (a dense matrix of 4 096
/// ranks is 134 MB). Pairs outside the matrix are ignored.
pub fn skew_pairs(n: usize, pairs: impl IntoIterator<Item = (usize, usize, f64)>) -> Skew {
    let mut inn = vec![0.0; n];
    let mut out = vec![0.0; n];
    // The links' sum in row-major order, as over the dense matrix (adding a zero changes no
    // sum), and their maximum.
    let (mut total, mut link_max) = (0.0, 0.0f64);
    for (i, j, v) in pairs {
        if i != j && i < n && j < n {
            total += v;
            link_max = link_max.max(v);
            inn[j] += v;
            out[i] += v;
        }
    }
    let links = n * n.saturating_sub(1);
    let link_mean = if links == 0 {
        0.0
    } else {
        total / links as f64
    };
    Skew {
        link: if link_mean > 0.0 {
            link_max / link_mean
        } else {
            0.0
        },
        node_in: ratio(&inn).0,
        node_out: ratio(&out).0,
        link_max,
        link_mean,
        total,
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

    /// The pairs-only form gives the dense form's values to the last bit (sums in row-major
    /// order either way), zeros left out.
    #[test]
    fn pairs_equal_the_dense_matrix_bit_for_bit() {
        let n = 37;
        let v = |i: usize, j: usize| -> f64 {
            let x = (i * 7919 + j * 104_729) % 1013;
            if x.is_multiple_of(3) {
                0.0
            } else {
                x as f64 * 1.000_000_1 + 0.3
            }
        };
        let dense = skew(n, v);
        let pairs: Vec<(usize, usize, f64)> = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j, v(i, j))))
            .filter(|p| p.2 != 0.0)
            .collect();
        let sparse = skew_pairs(n, pairs);
        assert_eq!(dense, sparse);
        assert!(dense.link > 1.0 && dense.node_in > 1.0 && dense.node_out > 1.0);
        assert_eq!(skew_pairs(n, []), Skew::default());
    }
}

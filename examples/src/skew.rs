//! Traffic-skew metrics of a square byte matrix `m[src][dst]` (diagonal ignored).
//!
//! The same definitions are implemented by `sigmatrace-convert stats` (section "skew"), so a
//! workload's ground truth and the tracer's report can be compared directly:
//!
//! * link skew = max / mean over the ordered pairs `i ≠ j` of `m[i][j]`;
//! * node skew (in) = max / mean over nodes j of the bytes j receives, `Σ_{i≠j} m[i][j]`;
//! * node skew (out) = the same over the bytes each node sends.
//!
//! A skew is 0 when the mean is 0.

/// Skew of one matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Skew {
    pub link: f64,
    pub node_in: f64,
    pub node_out: f64,
    pub link_max: f64,
    pub link_mean: f64,
    pub total: f64,
}

fn ratio(v: &[f64]) -> (f64, f64, f64) {
    let max = v.iter().copied().fold(0.0, f64::max);
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    (if mean > 0.0 { max / mean } else { 0.0 }, max, mean)
}

/// Computes the skews of `m` (rows = source).
pub fn skew(m: &[Vec<f64>]) -> Skew {
    let n = m.len();
    let mut links = Vec::new();
    let mut inn = vec![0.0; n];
    let mut out = vec![0.0; n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                links.push(m[i][j]);
                inn[j] += m[i][j];
                out[i] += m[i][j];
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
    fn uniform_is_one_and_hot_node_shows() {
        let u = vec![
            vec![0.0, 1.0, 1.0],
            vec![1.0, 0.0, 1.0],
            vec![1.0, 1.0, 0.0],
        ];
        let s = skew(&u);
        assert_eq!((s.link, s.node_in, s.node_out), (1.0, 1.0, 1.0));
        // Everyone sends 4 to node 0 and 1 elsewhere.
        let h = vec![
            vec![0.0, 1.0, 1.0],
            vec![4.0, 0.0, 1.0],
            vec![4.0, 1.0, 0.0],
        ];
        let s = skew(&h);
        assert!((s.link - 4.0 / (12.0 / 6.0)).abs() < 1e-12);
        assert!((s.node_in - 8.0 / 4.0).abs() < 1e-12);
        assert!((s.node_out - 5.0 / 4.0).abs() < 1e-12);
        assert_eq!(skew(&[vec![0.0]]).link, 0.0);
    }
}

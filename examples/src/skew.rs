//! Traffic-skew metrics of a square byte matrix `m[src][dst]` (diagonal ignored), as defined
//! once in `sigmatrace_schemas::skew` — the definition `sigmatrace-convert stats` (section
//! "skew") uses too, so a workload's ground truth and the tracer's report compare directly:
//! link skew = max/mean over the pairs `i ≠ j`; node skew in/out = max/mean of the bytes each
//! node receives/sends; 0 when the mean is 0.

pub use sigmatrace_schemas::skew::Skew;

/// Computes the skews of `m` (rows = source).
pub fn skew(m: &[Vec<f64>]) -> Skew {
    sigmatrace_schemas::skew::skew(m.len(), |i, j| m[i][j])
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

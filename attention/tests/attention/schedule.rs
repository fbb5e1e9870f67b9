//! The blocked path is O(N·w): the number of scores it schedules grows linearly in N and in
//! the window, dilation and LongNet segments included, and never approaches N².

use swa_attention::{WindowSpec, scheduled_scores};

fn per_query_per_head(spec: &WindowSpec, n: usize) -> f64 {
    scheduled_scores(spec, n, n) as f64 / (n * spec.num_heads()) as f64
}

#[test]
fn sliding_and_dilated_schedules_are_linear_in_n() {
    for spec in [
        WindowSpec::sliding(8, 8, 256).unwrap(),
        WindowSpec::dilated(&[64; 4], &[1, 2, 3, 4], 2).unwrap(),
        WindowSpec::per_head(&[16, 32, 64, 128], 4).unwrap().with_sinks(4),
    ] {
        let w = spec.heads().iter().map(|h| h.left + 1).max().unwrap() as f64;
        let small = per_query_per_head(&spec, 4096);
        let large = per_query_per_head(&spec, 16384);
        assert!(
            large <= 2.5 * w && small <= 2.5 * w,
            "{spec:?}: {small} / {large} scores per query"
        );
        assert!(
            (large - small).abs() <= 0.05 * small,
            "per-query work grows with N: {small} → {large}"
        );
    }
}

#[test]
fn longnet_schedule_follows_the_segment_not_n() {
    let spec = WindowSpec::longnet_branch(4, 4, 512, 4).unwrap();
    // Each covered query sees at most 512/4 keys; uncovered ones cost nothing.
    assert!(per_query_per_head(&spec, 8192) <= 2.0 * 512.0 / 4.0);
}

#[test]
fn global_tokens_add_a_row_and_a_column_not_a_square() {
    let spec = WindowSpec::sliding(2, 2, 64).unwrap().with_globals([0, 100, 2000]);
    let n = 8192;
    assert!(scheduled_scores(&spec, n, n) < 2 * (n * 2 * (64 + 128 + 3) + 3 * n * 2));
}

//! The window spec says exactly what docs/semantics.md §2–§5 say, and rejects bad input by name.

use swa_attention::alibi::{self, SlopeMagnitudes};
use swa_attention::{AttentionError, HeadWindow, WindowSpec};

use crate::cases::random_case;
use crate::common::Rng;

fn keys_of(spec: &WindowSpec, h: usize, i: usize, n: usize) -> Vec<usize> {
    (0..n).filter(|&j| spec.visible(h, i, j, n)).collect()
}

#[test]
fn sliding_window_sees_w_keys_self_included() {
    let spec = WindowSpec::sliding(1, 1, 4).unwrap();
    assert_eq!(keys_of(&spec, 0, 10, 20), vec![7, 8, 9, 10]);
    assert_eq!(keys_of(&spec, 0, 1, 20), vec![0, 1]);
    let full = WindowSpec::sliding(1, 1, 20).unwrap();
    assert_eq!(keys_of(&full, 0, 5, 20), (0..=5).collect::<Vec<_>>(), "W >= N is causal attention");
}

#[test]
fn longformer_window_is_one_sided() {
    let spec = WindowSpec::longformer(2, &[1], 1, false).unwrap();
    assert_eq!(keys_of(&spec, 0, 10, 20), vec![8, 9, 10, 11, 12], "w = 2 gives 2w+1 keys");
    let dilated = WindowSpec::longformer(2, &[3], 1, true).unwrap();
    assert_eq!(keys_of(&dilated, 0, 10, 20), vec![4, 7, 10]);
}

#[test]
fn dilated_causal_window_spans_d_times_w_minus_1_plus_1() {
    let spec = WindowSpec::dilated(&[3], &[4], 1).unwrap();
    assert_eq!(keys_of(&spec, 0, 20, 30), vec![12, 16, 20]);
    assert_eq!(spec.heads()[0].span(), 4 * (3 - 1) + 1);
}

#[test]
fn sinks_globals_and_padding() {
    let spec = WindowSpec::sliding(1, 1, 2).unwrap().with_sinks(2).with_globals([5]);
    assert_eq!(keys_of(&spec, 0, 9, 12), vec![0, 1, 5, 8, 9]);
    assert_eq!(keys_of(&spec, 0, 5, 12), (0..=5).collect::<Vec<_>>(), "a global query sees all");
    assert_eq!(keys_of(&spec, 0, 1, 12), vec![0, 1], "causal: sinks only when j <= i");
    assert!(!spec.visible(0, 9, 8, 8), "a padded key is never visible");
    assert!(!spec.visible(0, 9, 0, 0), "not even a sink");
}

/// LongNet's `K_b(p, h)` written out as in docs/semantics.md §5.
fn longnet_keys(p: usize, h: usize, w: usize, r: usize, n: usize) -> Vec<usize> {
    let start = p / w * w;
    let o = h % r;
    if (p - start) % r != o {
        return vec![];
    }
    (0..n).filter(|&k| k / w == p / w && (k - start) % r == o && k <= p).collect()
}

#[test]
fn longnet_branch_matches_the_paper_sets() {
    for (w, r) in [(4, 1), (8, 2), (10, 3), (12, 4), (7, 7)] {
        let spec = WindowSpec::longnet_branch(6, 2, w, r).unwrap();
        for h in 0..6 {
            for p in 0..40 {
                assert_eq!(
                    keys_of(&spec, h, p, 40),
                    longnet_keys(p, h, w, r, 40),
                    "w={w} r={r} h={h} p={p}"
                );
            }
        }
    }
}

#[test]
fn window_range_and_stride_class_never_drop_a_visible_key() {
    let mut rng = Rng::new(11);
    for _ in 0..300 {
        let n = rng.pick(&[1, 3, 9, 30]);
        let spec = random_case(&mut rng, n).spec.with_sinks(0).with_query_offset(0);
        for h in 0..spec.num_heads() {
            for i in 0..n + 2 {
                for j in 0..n {
                    let by_window = spec.heads()[h].contains(i, j) && (!spec.is_causal() || j <= i);
                    if !by_window {
                        continue;
                    }
                    let (lo, hi) = spec.window_range(h, i, n).expect("visible key, so a range");
                    assert!(lo <= j && j <= hi, "{spec:?} h={h} i={i} j={j}");
                    assert_eq!(spec.stride_class(h, i), spec.stride_class(h, j));
                }
            }
        }
    }
}

#[test]
fn bad_specs_are_named() {
    assert_eq!(WindowSpec::sliding(4, 4, 0).unwrap_err(), AttentionError::ZeroWindow { head: 0 });
    assert_eq!(
        WindowSpec::dilated(&[3, 3], &[1, 0], 1).unwrap_err(),
        AttentionError::ZeroDilation { head: 1 }
    );
    assert_eq!(
        WindowSpec::sliding(6, 4, 3).unwrap_err(),
        AttentionError::HeadsNotDivisible { heads: 6, kv_heads: 4 }
    );
    let globals = WindowSpec::sliding(2, 2, 3).unwrap().with_globals([7]);
    assert_eq!(
        globals.check(2, 2, 5).unwrap_err(),
        AttentionError::GlobalOutOfRange { position: 7, len: 5 }
    );
    let phase = WindowSpec::new(vec![HeadWindow::longnet(8, 2, 2)], 1).unwrap_err();
    assert_eq!(phase, AttentionError::PhaseOutOfRange { head: 0, phase: 2, dilation: 2 });
    assert!(AttentionError::ZeroWindow { head: 3 }.to_string().contains("window size 0"));
    assert!(
        AttentionError::HeadsNotDivisible { heads: 6, kv_heads: 4 }
            .to_string()
            .contains("not divisible")
    );
}

#[test]
fn swat_balanced_alibi_matches_semantics() {
    let slopes = alibi::balanced(16, SlopeMagnitudes::Code).unwrap();
    let want: Vec<f32> = (1..=8)
        .map(|k| -(2f32).powf(-0.5 * k as f32))
        .chain((1..=8).rev().map(|k| (2f32).powf(-0.5 * k as f32)))
        .collect();
    for (got, want) in slopes.iter().zip(&want) {
        assert!((got - want).abs() < 1e-6, "{slopes:?}");
    }
    assert!(
        (slopes[0] + 2f32.powf(-0.5)).abs() < 1e-6 && (slopes[15] - 2f32.powf(-0.5)).abs() < 1e-6
    );
    // 8:4 with 12 heads: x = 2^(8/12); four distance heads then eight recency heads.
    let x = 2f64.powf(8.0 / 12.0);
    let split = alibi::split(8, 4, 12, SlopeMagnitudes::Code).unwrap();
    assert!((split[3] as f64 + x.powi(-4)).abs() < 1e-6);
    assert!((split[4] as f64 - x.powi(-8)).abs() < 1e-6);
    assert!((split[11] as f64 - x.powi(-1)).abs() < 1e-6);
    let paper = alibi::split(12, 0, 12, SlopeMagnitudes::Paper).unwrap();
    assert!(paper.iter().all(|&m| m > 0.0) && (paper[11] - 0.5).abs() < 1e-7);
    assert_eq!(
        alibi::split(5, 4, 12, SlopeMagnitudes::Code).unwrap_err(),
        AttentionError::BadAlibiSplit { recency: 5, distance: 4, heads: 12 }
    );
}

/// A relative-score table must cover every distance a query sees (its heads' reach, or back to
/// key 0), have one row per query, and go with a causal spec (docs/semantics.md §4).
#[test]
fn bad_relative_tables_are_named() {
    use burn::backend::NdArray;
    use burn::tensor::Tensor;
    use swa_attention::{ScoreOptions, windowed_attention_relative};
    let device = Default::default();
    let zeros = |shape: [usize; 4]| Tensor::<NdArray, 4>::zeros(shape, &device);
    let call = |spec: &WindowSpec, table: [usize; 4]| {
        let (q, kv) = (zeros([1, 2, 10, 4]), zeros([1, 1, 10, 4]));
        let table = Some(zeros(table));
        windowed_attention_relative(q, kv.clone(), kv, table, spec, &ScoreOptions::softmax())
            .map(|_| ())
    };
    let mswa = WindowSpec::per_head(&[3, 6], 1).unwrap();
    assert!(call(&mswa, [1, 2, 10, 6]).is_ok());
    let short = call(&mswa, [1, 2, 10, 5]).unwrap_err();
    assert_eq!(short, AttentionError::RelativeTableTooShort { needed: 6, got: 5 });
    assert!(short.to_string().contains("up to distance 5"), "{short}");
    let sinks = mswa.clone().with_sinks(1);
    assert_eq!(
        call(&sinks, [1, 2, 10, 6]).unwrap_err(),
        AttentionError::RelativeTableTooShort { needed: 10, got: 6 }
    );
    assert_eq!(
        call(&mswa, [1, 2, 9, 6]).unwrap_err(),
        AttentionError::ShapeMismatch {
            what: "relative scores rows (one per query)",
            expected: 10,
            got: 9
        }
    );
    let encoder = mswa.with_causal(false);
    assert_eq!(call(&encoder, [1, 2, 10, 6]).unwrap_err(), AttentionError::RelativeScoresNotCausal);
}

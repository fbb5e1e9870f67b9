//! Each mechanism against a test built from the dense reference and the formulas of docs/semantics.md.

use burn::backend::NdArray;
use burn::config::{Config, config_to_json};
use swa_attention::alibi::{self, SlopeMagnitudes};
use swa_attention::{AttentionError, ScoreOptions, WindowSpec, dense_attention};
use swa_models::layers::longformer::replace_global_rows;
use swa_models::layers::longnet::{branch_specs, longnet_attention};
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_models::layers::{AttentionKind, SelfAttentionConfig, SwatPositions};

use crate::layer_forward::swat_ablation;
use crate::{max_abs, tensor, to_vec};

type B = NdArray;

/// LongNet's output by docs/semantics.md §5 in f64: `o_p = Σ_b Σ_{k∈K_b} e^{s} v_k / Σ_b Σ_{k∈K_b} e^{s}`.
fn longnet_scalar(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: usize,
    d: usize,
    h: usize,
    specs: &[WindowSpec],
) -> Vec<f64> {
    let mut out = vec![0.0; n * d];
    for p in 0..n {
        let (mut num, mut den) = (vec![0.0f64; d], 0.0f64);
        for spec in specs {
            for j in (0..n).filter(|&j| spec.visible(h, p, j, n)) {
                let s: f64 = (0..d).map(|c| q[p * d + c] as f64 * k[j * d + c] as f64).sum::<f64>()
                    / (d as f64).sqrt();
                den += s.exp();
                for c in 0..d {
                    num[c] += s.exp() * v[j * d + c] as f64;
                }
            }
        }
        for c in 0..d {
            out[p * d + c] = if den > 0.0 { num[c] / den } else { 0.0 };
        }
    }
    out
}

#[test]
fn longnet_mixture_matches_the_formula() {
    // N not a multiple of a segment, w mod r ≠ 0, and a head set with uncovered rows.
    for (n, segments, dilations) in
        [(23, vec![4, 10], vec![1, 3]), (30, vec![6, 7, 30], vec![2, 3, 4]), (9, vec![4], vec![2])]
    {
        let (heads, d, softmax) = (4, 4, ScoreOptions::softmax());
        let (q, k, v) = (
            tensor::<B>(1, [1, heads, n, d]),
            tensor::<B>(2, [1, heads, n, d]),
            tensor::<B>(3, [1, heads, n, d]),
        );
        let got = to_vec(
            longnet_attention(q.clone(), k.clone(), v.clone(), &segments, &dilations, &softmax)
                .unwrap(),
        );
        let specs = branch_specs(&segments, &dilations, heads, heads, n).unwrap();
        let (q, k, v) = (to_vec(q), to_vec(k), to_vec(v));
        for h in 0..heads {
            let head = |x: &Vec<f32>| x[h * n * d..(h + 1) * n * d].to_vec();
            let want = longnet_scalar(&head(&q), &head(&k), &head(&v), n, d, h, &specs);
            for (g, w) in got[h * n * d..(h + 1) * n * d].iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() < 1e-5,
                    "n={n} {segments:?}/{dilations:?} h={h}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn longformer_global_rows_use_their_own_projections_over_every_key() {
    let (heads, n, d) = (2, 20, 4);
    for causal in [false, true] {
        // Global 5 lies inside other queries' windows; it must be counted once.
        let spec = WindowSpec::longformer(2, &[1, 2], heads, causal).unwrap().with_globals([0, 5]);
        let (q, k, v) = (
            tensor::<B>(4, [1, heads, n, d]),
            tensor::<B>(5, [1, heads, n, d]),
            tensor::<B>(6, [1, heads, n, d]),
        );
        let (qg, kg, vg) = (
            tensor::<B>(7, [1, heads, n, d]),
            tensor::<B>(8, [1, heads, n, d]),
            tensor::<B>(9, [1, heads, n, d]),
        );
        let opts = ScoreOptions::softmax();
        let (local, _) = dense_attention(q, k, v, &spec, &opts).unwrap();
        let got = to_vec(replace_global_rows(
            local.clone(),
            qg.clone(),
            kg.clone(),
            vg.clone(),
            &spec,
            &opts,
        ));
        // The global rows: dense attention of the global projections, every key a global query sees.
        let (global, _) = dense_attention(qg, kg, vg, &spec, &opts).unwrap();
        let (local, global) = (to_vec(local), to_vec(global));
        for h in 0..heads {
            for i in 0..n {
                let row = (h * n + i) * d..(h * n + i + 1) * d;
                let want =
                    if spec.is_global(i) { &global[row.clone()] } else { &local[row.clone()] };
                assert!(max_abs(&got[row], want) < 1e-6, "causal={causal} h={h} i={i}");
            }
        }
    }
}

#[test]
fn mswa_windows_follow_table_1() {
    let w = mswa_windows(MswaVariant::Both, MswaStrategy::Geometric, 128, 4, 4).unwrap();
    assert_eq!(w[0], vec![8, 16, 32, 64], "shallowest layer: w/16 … w/2");
    assert_eq!(w[3], vec![64, 128, 256, 512], "deepest layer: w/2 … 4w");
    let h = mswa_windows(MswaVariant::Heads, MswaStrategy::Arithmetic, 128, 2, 4).unwrap();
    assert_eq!(h[1], vec![64, 96, 128, 160]);
    let r = mswa_windows(MswaVariant::Layers, MswaStrategy::Reversed, 128, 8, 2).unwrap();
    assert_eq!((r[0][0], r[7][1]), (256, 32), "reversed: shallow layers largest");
    // Heads not divisible by 4: groups ⌊4h/H⌋ still apply.
    let odd = mswa_windows(MswaVariant::Heads, MswaStrategy::Geometric, 64, 1, 6).unwrap();
    assert_eq!(odd[0], vec![16, 16, 32, 64, 64, 128]);
    assert!(matches!(
        mswa_windows(MswaVariant::Layers, MswaStrategy::Geometric, 128, 3, 8),
        Err(AttentionError::ShapeMismatch { expected: 4, got: 3, .. })
    ));
    assert!(matches!(
        mswa_windows(MswaVariant::Both, MswaStrategy::Geometric, 8, 4, 4),
        Err(AttentionError::ZeroWindow { .. })
    ));
}

#[test]
fn swat_kind_is_sigmoid_with_balanced_alibi_on_a_sliding_window() {
    let kind = AttentionKind::swat(64);
    let spec = kind.spec(8, 8).unwrap();
    assert_eq!(spec, WindowSpec::sliding(8, 8, 64).unwrap());
    let opts = kind.score_options(8).unwrap();
    let slopes = opts.alibi.clone().unwrap();
    assert!(slopes[..4].iter().all(|&m| m < 0.0) && slopes[4..].iter().all(|&m| m > 0.0));
    assert!(matches!(opts.score_fn, swa_attention::ScoreFn::Sigmoid { beta } if beta == 0.0));
}

/// SWAT's Table 3 knobs (docs/semantics.md §4): the score function is `score_fn`'s, the balanced ALiBi
/// split is there unless RoPE is used alone, q and k are rotated unless ALiBi is used alone,
/// and the split is checked whenever ALiBi is used.
#[test]
fn swat_knobs_set_score_options_and_rope() {
    let balanced = alibi::split(4, 4, 8, SlopeMagnitudes::Code).unwrap();
    for kind in swat_ablation(8) {
        let AttentionKind::Swat { score_fn, positions, .. } = kind else {
            unreachable!("SWAT kinds")
        };
        let opts = kind.score_options(8).unwrap();
        assert_eq!(opts.score_fn, score_fn, "{kind:?}");
        assert_eq!(
            opts.alibi,
            (positions != SwatPositions::Rope).then(|| balanced.clone()),
            "{kind:?}"
        );
        assert_eq!(kind.rotates(), positions != SwatPositions::Alibi, "{kind:?}");
        let mut too_many_distance_heads = kind.clone();
        if let AttentionKind::Swat { distance_heads, .. } = &mut too_many_distance_heads {
            *distance_heads = Some(9);
        }
        let checked = too_many_distance_heads.validate(8, 8).is_err();
        assert_eq!(checked, positions != SwatPositions::Rope, "{kind:?}");
    }
}

/// A SWAT config that names neither the score function nor the positions is SWAT as published
/// (sigmoid with β = 0, ALiBi and RoPE), and every ablation setting round-trips through JSON.
#[test]
fn swat_configs_default_the_ablation_knobs_and_round_trip() {
    let bare = r#"{"kind": "swat", "window": 8, "distance_heads": null, "magnitudes": "Code"}"#;
    let kind: AttentionKind = serde_json::from_str(bare).unwrap();
    assert_eq!(kind, AttentionKind::swat(8));
    let load = |json: &str| {
        SelfAttentionConfig::load_binary(json.as_bytes())
            .unwrap_or_else(|e| panic!("{json}: {e}"))
            .kind
    };
    for kind in swat_ablation(8) {
        let json = config_to_json(&SelfAttentionConfig::new(16, 4, 4, kind.clone()));
        assert_eq!(load(&json), kind, "{json}");
    }
    let json = config_to_json(&SelfAttentionConfig::new(16, 4, 4, swat_ablation(8)[1].clone()));
    assert!(json.contains(r#""positions": "alibi""#), "{json}");
}

#[test]
fn bad_layer_configs_name_the_field() {
    let device = Default::default();
    let err = |kind: AttentionKind, d: usize, heads: usize, kv: usize| {
        SelfAttentionConfig::new(d, heads, kv, kind).init::<B>(&device).unwrap_err().to_string()
    };
    assert!(err(AttentionKind::Full, 30, 4, 4).contains("d_model"));
    assert!(err(AttentionKind::Full, 32, 4, 3).contains("not divisible"));
    assert!(err(AttentionKind::Sliding { window: 0 }, 32, 4, 4).contains("window size 0"));
    assert!(
        err(AttentionKind::MultiScale { windows: vec![4, 4] }, 32, 4, 4)
            .contains("MultiScale.windows")
    );
    let longnet = AttentionKind::LongNet { segments: vec![8, 16], dilations: vec![1] };
    assert!(err(longnet, 32, 4, 4).contains("LongNet.dilations"));
    let dilated = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1, 0, 1, 1],
        globals: vec![],
        causal: true,
    };
    assert!(err(dilated, 32, 4, 4).contains("dilation 0"));
    assert!(err(AttentionKind::Linear { feature_dim: 5 }, 32, 4, 4).contains("feature_dim"));
}

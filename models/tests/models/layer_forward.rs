//! The whole `SelfAttention` layer of every [`AttentionKind`] against the f64 model of
//! `layer_reference`, written from docs/semantics.md: `SelfAttentionConfig::new(..).init()` and
//! `forward(x)` on `x: [batch, N, d]`, compared with projections, RoPE (§4), the kind's keys
//! (§2, §3, §5), scores (§1, §4) or Taylor features (§6), merge and output projection, all
//! recomputed from the layer's weights. Awkward configurations are the point: N = 1, one head,
//! GQA, windows ≥ N, heads and layers not multiples of 4, N not a multiple of a LongNet
//! segment, `w mod r ≠ 0`, uncovered LongNet rows, and a Longformer global inside a window.

use burn::module::Module;
use swa_attention::ScoreFn;
use swa_attention::alibi::SlopeMagnitudes;
use swa_models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_models::layers::{AttentionKind, MixerRecord, SelfAttentionConfig, SwatPositions};

use crate::layer_reference::{B, TOLERANCE, input, reference, seeded_layer};
use crate::to_vec;

/// Builds the layer with seeded weights, runs `forward` on a seeded `[batch, n, d]` and asserts
/// that the largest `|layer − reference|` is within [`TOLERANCE`].
pub fn check(d: usize, heads: usize, kv_heads: usize, kind: AttentionKind, batch: usize, n: usize) {
    let layer = seeded_layer(d, heads, kv_heads, kind.clone());
    let (x, x64) = input(batch, n, d);
    let got = layer.forward(x).unwrap_or_else(|e| panic!("{kind:?} n={n}: {e}"));
    assert_eq!(got.dims(), [batch, n, d]);
    let want = reference(&layer, &kind, heads, kv_heads, &x64, batch, n);
    let error =
        to_vec(got).iter().zip(&want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0.0, f64::max);
    assert!(
        error <= TOLERANCE,
        "{kind:?} d={d} H={heads} H_kv={kv_heads} batch={batch} N={n}: max |layer − reference| = {error:e}"
    );
}

/// Full causal attention (§1, §2): GQA, one head, and N = 1.
#[test]
fn full_attention_layer() {
    check(16, 4, 2, AttentionKind::Full, 2, 13);
    check(8, 1, 1, AttentionKind::Full, 1, 9);
    check(16, 4, 4, AttentionKind::Full, 2, 1);
}

/// Sliding window of W keys, self included (§2): W < N with GQA, W = 1 (only itself), W ≥ N
/// (full causal attention), one head, N = 1.
#[test]
fn sliding_window_layer() {
    let sliding = |window| AttentionKind::Sliding { window };
    check(16, 4, 1, sliding(5), 2, 12);
    check(16, 4, 2, sliding(1), 1, 7);
    check(16, 4, 4, sliding(40), 1, 9);
    check(8, 1, 1, sliding(3), 2, 10);
    check(16, 4, 2, sliding(3), 1, 1);
}

/// `W(l, h)` of §3 for the geometric strategy, written from the formula:
/// `w · f[⌊4l/L⌋] · f[⌊4h/H⌋]` rounded down, `f = (1/4, 1/2, 1, 2)`, each factor 1 where the
/// variant does not vary over that dimension.
fn table_1(variant: MswaVariant, w: usize, layers: usize, heads: usize) -> Vec<Vec<usize>> {
    let f = [0.25, 0.5, 1.0, 2.0];
    let (by_layer, by_head) = match variant {
        MswaVariant::Swa => (false, false),
        MswaVariant::Heads => (false, true),
        MswaVariant::Layers => (true, false),
        MswaVariant::Both => (true, true),
    };
    let factor = |vary: bool, x: usize, of: usize| if vary { f[4 * x / of] } else { 1.0 };
    (0..layers)
        .map(|l| {
            let row = (0..heads)
                .map(|h| w as f64 * factor(by_layer, l, layers) * factor(by_head, h, heads));
            row.map(|x| x.floor() as usize).collect()
        })
        .collect()
}

/// MSWA (§3): the windows of `mswa_windows` follow the formula for heads and layers that are
/// not multiples of 4 (MSWA-l with L = 6 and H = 6, MSWA-h with H = 6, MSWA with L = H = 5), and
/// the layer of every one of those layers matches the reference, with GQA where H allows it.
#[test]
fn multi_scale_layers() {
    let n = 20;
    for (variant, w, layers, heads, kv_heads) in [
        (MswaVariant::Layers, 8, 6, 6, 3),
        (MswaVariant::Heads, 8, 1, 6, 2),
        (MswaVariant::Both, 16, 5, 5, 5),
        (MswaVariant::Swa, 6, 2, 3, 1),
    ] {
        let windows = mswa_windows(variant, MswaStrategy::Geometric, w, layers, heads).unwrap();
        assert_eq!(
            windows,
            table_1(variant, w, layers, heads),
            "{variant:?} w={w} L={layers} H={heads}"
        );
        for layer_windows in windows {
            check(
                4 * heads,
                heads,
                kv_heads,
                AttentionKind::MultiScale { windows: layer_windows },
                2,
                n,
            );
        }
    }
}

/// SWAT (§1, §4): sliding window, sigmoid scores, ALiBi split and RoPE. Balanced split (H = 4,
/// and odd H = 3 where it is ⌊H/2⌋ distance heads), an R:D split 4:2 with GQA, the paper's
/// `2^-k` magnitudes with `β = −ln W`, all distance (0:4) and all recency (4:0) heads, N = 1.
#[test]
fn swat_layer() {
    let swat = |window, distance_heads, magnitudes, beta| AttentionKind::Swat {
        window,
        distance_heads,
        magnitudes,
        score_fn: ScoreFn::Sigmoid { beta },
        positions: SwatPositions::AliRope,
    };
    check(16, 4, 4, AttentionKind::swat(3), 2, 11);
    check(12, 3, 3, AttentionKind::swat(4), 1, 10);
    check(24, 6, 3, swat(5, Some(2), SlopeMagnitudes::Code, 0.0), 2, 14);
    check(16, 4, 2, swat(4, None, SlopeMagnitudes::Paper, -(4f32.ln())), 1, 12);
    check(16, 4, 4, swat(6, Some(4), SlopeMagnitudes::Code, 0.0), 1, 9);
    check(16, 4, 4, swat(6, Some(0), SlopeMagnitudes::Code, 0.0), 1, 9);
    check(16, 4, 4, AttentionKind::swat(6), 1, 1);
}

/// SWAT's Table 3 ablation over windows of `window` keys with the balanced split: sigmoid with
/// β = 0 (SWAT's), sigmoid with β = −ln W, and softmax, each with ALiBi and RoPE together,
/// ALiBi alone and RoPE alone.
pub fn swat_ablation(window: usize) -> Vec<AttentionKind> {
    let score_fns = [
        ScoreFn::Sigmoid { beta: 0.0 },
        ScoreFn::Sigmoid { beta: -(window as f32).ln() },
        ScoreFn::Softmax,
    ];
    let positions = [SwatPositions::AliRope, SwatPositions::Alibi, SwatPositions::Rope];
    let swat = |score_fn, positions| AttentionKind::Swat {
        window,
        distance_heads: None,
        magnitudes: SlopeMagnitudes::Code,
        score_fn,
        positions,
    };
    score_fns.into_iter().flat_map(|score_fn| positions.map(|p| swat(score_fn, p))).collect()
}

/// SWAT's Table 3 ablation (§1, §4): every score function with every positional encoding
/// matches the reference, which rotates q and k only with RoPE and adds the ALiBi bias only
/// with ALiBi. GQA with W < N, one head per kv head, N = 1.
#[test]
fn swat_ablation_layers() {
    for kind in swat_ablation(4) {
        check(16, 4, 2, kind.clone(), 2, 11);
        check(24, 6, 6, kind.clone(), 1, 9);
        check(16, 4, 4, kind, 1, 1);
    }
}

/// Attention sinks (§2): positions `0 … S−1` stay visible beside the window of W keys; sinks
/// inside the window are counted once; S ≥ W; S ≥ N.
#[test]
fn sinks_layer() {
    let sinks = |sinks, window| AttentionKind::Sinks { sinks, window };
    check(16, 4, 2, sinks(2, 3), 2, 12);
    check(16, 4, 4, sinks(5, 2), 1, 9);
    check(8, 1, 1, sinks(1, 1), 1, 6);
    check(16, 4, 1, sinks(8, 2), 1, 5);
}

/// LongNet (§5): the layer mixes the branches by their softmax denominators. N = 23 with
/// segments [4, 10] and dilations [1, 3] (23 is a multiple of neither segment; 10 mod 3 ≠ 0);
/// three branches whose offsets leave some rows uncovered (output 0 before the projection), a
/// segment clipped to N, odd H and GQA; N = 1.
#[test]
fn longnet_layer() {
    let longnet = |segments: &[usize], dilations: &[usize]| AttentionKind::LongNet {
        segments: segments.to_vec(),
        dilations: dilations.to_vec(),
    };
    check(16, 4, 2, longnet(&[4, 10], &[1, 3]), 2, 23);
    check(12, 3, 3, longnet(&[6, 7, 30], &[2, 3, 4]), 1, 19);
    check(16, 4, 1, longnet(&[5], &[2]), 1, 13);
    check(16, 4, 4, longnet(&[4, 8], &[1, 2]), 1, 1);
}

/// Longformer (§2): one-sided window w (2w+1 keys) with a dilation per head; causal and
/// encoder; global 6 lies inside the windows of queries 4 … 8 and must be counted once; global
/// rows use the layer's own global projections (seeded apart from the local ones here) over
/// every key. Also: no globals, a window ≥ N, the last position global, N = 1 with a global.
#[test]
fn longformer_layer() {
    let longformer =
        |window, dilations: &[usize], globals: &[usize], causal| AttentionKind::Longformer {
            window,
            dilations: dilations.to_vec(),
            globals: globals.to_vec(),
            causal,
        };
    for causal in [true, false] {
        check(12, 3, 1, longformer(2, &[1, 2, 3], &[0, 6], causal), 2, 15);
        check(16, 4, 2, longformer(1, &[2, 1, 1, 3], &[], causal), 1, 11);
        check(16, 4, 4, longformer(20, &[1, 1, 2, 1], &[8], causal), 1, 9);
        check(8, 1, 1, longformer(3, &[2], &[0], causal), 1, 1);
    }
}

/// §2: `Wq_g, Wk_g, Wv_g` start as copies of the local projections (before the test seeds them
/// apart), and the layer has them only when there are globals.
#[test]
fn longformer_global_projections_start_as_copies() {
    let kind = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1, 2],
        globals: vec![3],
        causal: true,
    };
    let config = SelfAttentionConfig::new(8, 2, 2, kind);
    let mixer = |config: &SelfAttentionConfig| {
        config.init::<B>(&Default::default()).unwrap().into_record().mixer
    };
    let MixerRecord::Longformer(record) = mixer(&config) else {
        panic!("Longformer with globals has a module of its own");
    };
    let (local, global) = (record.local.local, record.global);
    assert_eq!(to_vec(local.qkv.weight.val()), to_vec(global.qkv.weight.val()));
    assert_ne!(local.qkv.weight.id, global.qkv.weight.id, "they train apart");
    let kind = AttentionKind::Longformer {
        window: 2,
        dilations: vec![1, 2],
        globals: vec![],
        causal: true,
    };
    let config = SelfAttentionConfig::new(8, 2, 2, kind);
    assert!(matches!(mixer(&config), MixerRecord::Windowed(_)), "no globals: a window");
}

/// Taylor linear attention (§6), against its formula `1 + s + s²/2` rather than the feature
/// map: within one chunk of the layer's 64 positions, exactly one, across chunks with a partial
/// last chunk (N = 70 and 130), one head, `d_f` ≠ `d_h`, N = 1.
#[test]
fn linear_attention_layer() {
    let linear = |feature_dim| AttentionKind::Linear { feature_dim };
    check(16, 2, 2, linear(4), 2, 20);
    check(16, 4, 4, linear(8), 1, 64);
    check(16, 2, 2, linear(6), 1, 70);
    check(8, 1, 1, linear(2), 1, 130);
    check(16, 4, 4, linear(4), 1, 1);
}

/// The tolerance has teeth: a layer is far outside it from the reference of a neighbouring
/// configuration: a window of W+1 keys (MSWA's equation 4 and candle's count), a sink fewer, a
/// LongNet branch fewer, a Longformer dilation of 1 instead of 2, SWAT's split reversed, and
/// SWAT without RoPE, without ALiBi, or with softmax instead of sigmoid.
#[test]
fn neighbouring_configurations_are_told_apart() {
    let (batch, n, heads) = (1, 16, 4);
    let swat = |distance_heads, score_fn, positions| AttentionKind::Swat {
        window: 5,
        distance_heads: Some(distance_heads),
        magnitudes: SlopeMagnitudes::Code,
        score_fn,
        positions,
    };
    let sigmoid = ScoreFn::Sigmoid { beta: 0.0 };
    let pairs = [
        (AttentionKind::Sliding { window: 4 }, AttentionKind::Sliding { window: 5 }),
        (
            AttentionKind::Sinks { sinks: 2, window: 3 },
            AttentionKind::Sinks { sinks: 1, window: 3 },
        ),
        (
            AttentionKind::LongNet { segments: vec![8, 4], dilations: vec![2, 1] },
            AttentionKind::LongNet { segments: vec![8], dilations: vec![2] },
        ),
        (
            AttentionKind::Longformer {
                window: 2,
                dilations: vec![2; 4],
                globals: vec![],
                causal: true,
            },
            AttentionKind::Longformer {
                window: 2,
                dilations: vec![1; 4],
                globals: vec![],
                causal: true,
            },
        ),
        (swat(1, sigmoid, SwatPositions::AliRope), swat(3, sigmoid, SwatPositions::AliRope)),
        (swat(1, sigmoid, SwatPositions::AliRope), swat(1, sigmoid, SwatPositions::Alibi)),
        (swat(1, sigmoid, SwatPositions::AliRope), swat(1, sigmoid, SwatPositions::Rope)),
        (
            swat(1, sigmoid, SwatPositions::AliRope),
            swat(1, ScoreFn::Softmax, SwatPositions::AliRope),
        ),
    ];
    for (kind, neighbour) in pairs {
        let layer = seeded_layer(16, heads, heads, kind.clone());
        let (x, x64) = input(batch, n, 16);
        let got = to_vec(layer.forward(x).unwrap());
        // The neighbour's layer has the same parameter shapes, so the same seeded weights.
        let other = seeded_layer(16, heads, heads, neighbour.clone());
        let want = reference(&other, &neighbour, heads, heads, &x64, batch, n);
        let gap = got.iter().zip(&want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0.0, f64::max);
        assert!(gap > 100.0 * TOLERANCE, "{kind:?} vs {neighbour:?}: only {gap:e} apart");
    }
}

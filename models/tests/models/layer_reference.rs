//! An f64 scalar model of the whole [`SelfAttention`] layer, written from docs/semantics.md alone: it
//! reads the layer's weights and its kind (as data) and nothing else from the library (no
//! window spec, no slopes, no RoPE tables), so that `layer_forward` checks the layer, the kind →
//! window mapping, RoPE and ALiBi against the specification rather than against themselves.
//!
//! Layout: a Burn `Linear` computes `y = x·W` with `W: [d_in, d_out]`; heads are consecutive
//! column blocks of a projection (the layer reshapes `[batch, N, H·d_h]` to `[batch, N, H, d_h]`).

use burn::backend::NdArray;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};
use swa_attention::ScoreFn;
use swa_attention::alibi::SlopeMagnitudes;
use swa_models::layers::{
    AttentionKind, MixerRecord, SelfAttention, SelfAttentionConfig, SwatPositions,
};

use crate::values;

/// The backend under test: ndarray, f32, no autodiff.
pub type B = NdArray;

/// Largest allowed `|layer − reference|`, absolute. The layer runs in f32, the reference in
/// f64. With the seeded weights below, outputs are of order 1–10 and f32 rounding through the
/// projections, RoPE, softmax and output projection stays around 1e-6–1e-5, so 1e-4 leaves a
/// margin of about 10×, while a wrong key set, slope, rotation or projection moves some output
/// by 1e-2 or more (`neighbouring_configurations_are_told_apart` checks that).
pub const TOLERANCE: f64 = 1e-4;

/// `ε` of docs/semantics.md §6.
const LINEAR_EPSILON: f64 = 1e-6;

/// Replaces every weight with seeded values in [−1, 1): deterministic, the same on every
/// backend, and large enough that attention is far from uniform, so a wrong key shows in the
/// output.
pub struct Seeded(pub u64);

impl<B: Backend> ModuleMapper<B> for Seeded {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        self.0 += 1;
        let seed = self.0;
        param.map(|t| {
            let dims = t.dims();
            let data = values(seed, dims.iter().product());
            Tensor::from_data(TensorData::new(data, dims), &t.device())
        })
    }
}

/// `SelfAttentionConfig::new(d, heads, kv_heads, kind).init()`, with seeded weights.
pub fn seeded_layer(
    d: usize,
    heads: usize,
    kv_heads: usize,
    kind: AttentionKind,
) -> SelfAttention<B> {
    let layer =
        SelfAttentionConfig::new(d, heads, kv_heads, kind.clone()).init::<B>(&Default::default());
    let layer = layer.unwrap_or_else(|e| panic!("{kind:?} d={d} H={heads} H_kv={kv_heads}: {e}"));
    layer.map(&mut Seeded(1000))
}

/// Seeded input `x: [batch, n, d]`, as the f32 tensor and as f64 values.
pub fn input(batch: usize, n: usize, d: usize) -> (Tensor<B, 3>, Vec<f64>) {
    let data = values(7, batch * n * d);
    let x = Tensor::from_data(TensorData::new(data.clone(), [batch, n, d]), &Default::default());
    (x, data.into_iter().map(f64::from).collect())
}

/// The q, k and v weights of a layer's joined projection `[d, (H + 2·H_kv)·d_h]`: its columns
/// in that order.
fn split_qkv(qkv: &Param<Tensor<B, 2>>, heads: usize, kv_heads: usize) -> [Param<Tensor<B, 2>>; 3] {
    let w = qkv.val();
    let head = w.dims()[1] / (heads + 2 * kv_heads);
    let (q, kv) = (heads * head, kv_heads * head);
    [(0, q), (q, kv), (q + kv, kv)]
        .map(|(start, width)| Param::from_tensor(w.clone().narrow(1, start, width)))
}

/// `rows · W` for `rows: [r, d_in]` and a Burn `Linear` weight `W: [d_in, d_out]` → `[r, d_out]`.
fn project(rows: &[f64], weight: &Param<Tensor<B, 2>>) -> Vec<f64> {
    let [d_in, d_out] = weight.val().dims();
    let w: Vec<f64> = crate::to_vec(weight.val()).into_iter().map(f64::from).collect();
    let mut out = vec![0.0; rows.len() / d_in * d_out];
    for (row, x) in out.chunks_mut(d_out).zip(rows.chunks(d_in)) {
        for (a, &xa) in x.iter().enumerate() {
            for (c, y) in row.iter_mut().enumerate() {
                *y += xa * w[a * d_out + c];
            }
        }
    }
    out
}

/// One projection split into heads: row `(b, i)` of `[batch·N, heads·width]`.
struct Heads {
    data: Vec<f64>,
    n: usize,
    heads: usize,
    width: usize,
}

impl Heads {
    fn new(x: &[f64], weight: &Param<Tensor<B, 2>>, n: usize, heads: usize) -> Self {
        let data = project(x, weight);
        let width = weight.val().dims()[1] / heads;
        Self { data, n, heads, width }
    }

    fn row(&self, b: usize, h: usize, i: usize) -> &[f64] {
        let start = ((b * self.n + i) * self.heads + h) * self.width;
        &self.data[start..start + self.width]
    }

    /// RoPE of docs/semantics.md §4, "rotate half", base 10000, row `i` at position `i`: pair
    /// `(u_k, u_{k+d/2})` turns by `i · 10000^(−2k/d)`.
    fn rotated(mut self) -> Self {
        let (d, half) = (self.width, self.width / 2);
        for (r, u) in self.data.chunks_mut(d).enumerate() {
            let position = (r / self.heads % self.n) as f64;
            for k in 0..half {
                let angle = position * 10000f64.powf(-2.0 * k as f64 / d as f64);
                let (a, b) = (u[k], u[k + half]);
                u[k] = a * angle.cos() - b * angle.sin();
                u[k + half] = b * angle.cos() + a * angle.sin();
            }
        }
        self
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// How one head scores (docs/semantics.md §1, §4): ALiBi slope `m_h` (0 for none), and `Some(β)` for
/// sigmoid attention, `None` for softmax.
#[derive(Clone, Copy)]
struct Score {
    slope: f64,
    sigmoid: Option<f64>,
}

const SOFTMAX: Score = Score { slope: 0.0, sigmoid: None };

/// docs/semantics.md §1 for the query `q` at position `i` over a multiset of keys (a key listed twice
/// counts twice), `kv(j)` giving the rotated key and the value at position `j`: score
/// `q·k/√d − m·(i − j)`; softmax (no key → 0), or sigmoid `Σ σ(s + β) v` unnormalised.
fn attend<'a>(
    q: &[f64],
    i: usize,
    keys: &[usize],
    kv: impl Fn(usize) -> (&'a [f64], &'a [f64]),
    score: Score,
) -> Vec<f64> {
    let scale = 1.0 / (q.len() as f64).sqrt();
    let scores: Vec<f64> = keys
        .iter()
        .map(|&j| scale * dot(q, kv(j).0) - score.slope * (i as f64 - j as f64))
        .collect();
    let weights: Vec<f64> = match score.sigmoid {
        Some(beta) => scores.iter().map(|s| 1.0 / (1.0 + (-(s + beta)).exp())).collect(),
        None => {
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = e.iter().sum();
            e.iter().map(|x| x / total).collect()
        }
    };
    let mut out = vec![0.0; q.len()];
    for (&j, w) in keys.iter().zip(weights) {
        for (o, x) in out.iter_mut().zip(kv(j).1) {
            *o += w * x;
        }
    }
    out
}

/// The keys query `i` of head `h` attends to, written from docs/semantics.md §2, §3 and §5. LongNet
/// lists a key once per branch that reaches it (its mixture counts it twice).
fn keys(kind: &AttentionKind, h: usize, i: usize, n: usize) -> Vec<usize> {
    let last = |w: usize| (0..=i).filter(move |&j| i - j < w);
    match kind {
        AttentionKind::Full => (0..=i).collect(),
        AttentionKind::Sliding { window } | AttentionKind::Swat { window, .. } => {
            last(*window).collect()
        }
        AttentionKind::MultiScale { windows } => last(windows[h]).collect(),
        AttentionKind::Sinks { sinks, window } => {
            (0..=i).filter(|&j| i - j < *window || j < *sinks).collect()
        }
        AttentionKind::Longformer { window, dilations, globals, causal } => (0..n)
            .filter(|&j| !causal || j <= i)
            .filter(|&j| {
                let (distance, delta) = (i.abs_diff(j), dilations[h]);
                let in_window = distance % delta == 0 && distance / delta <= *window;
                in_window || globals.contains(&j) || globals.contains(&i)
            })
            .collect(),
        AttentionKind::LongNet { segments, dilations } => {
            let mut keys = Vec::new();
            for (&w, &r) in segments.iter().zip(dilations) {
                let (w, offset) = (w.min(n), h % r);
                let start = i / w * w;
                if (i - start) % r == offset {
                    keys.extend((start..=i).filter(|k| (k - start) % r == offset));
                }
            }
            keys
        }
        AttentionKind::Linear { .. } => unreachable!("linear attention has no keys"),
        other => panic!("the layer reference has no {other:?}"),
    }
}

/// How each head scores: SWAT's score function (sigmoid with β, or softmax) and, unless it uses
/// RoPE alone, its ALiBi split of docs/semantics.md §4 (the first D heads distance heads
/// `−x^-1 … −x^-D`, the last R recency heads `x^-R … x^-1`, `x = 2^(8/H)`, or 2 for the paper's
/// magnitudes); softmax without ALiBi for the other kinds.
fn scores(kind: &AttentionKind, heads: usize) -> Vec<Score> {
    match kind {
        AttentionKind::Swat { distance_heads, magnitudes, score_fn, positions, .. } => {
            let sigmoid = match score_fn {
                ScoreFn::Sigmoid { beta } => Some(f64::from(*beta)),
                ScoreFn::Softmax => None,
                other => panic!("the layer reference has no {other:?}"),
            };
            if *positions == SwatPositions::Rope {
                return vec![Score { slope: 0.0, sigmoid }; heads];
            }
            let distance = distance_heads.unwrap_or(heads / 2);
            let recency = heads - distance;
            let x = match magnitudes {
                SlopeMagnitudes::Code => 2f64.powf(8.0 / heads as f64),
                SlopeMagnitudes::Paper => 2.0,
            };
            let slope = |h: usize| match h < distance {
                true => -x.powi(-(h as i32 + 1)),
                false => x.powi(-((recency - (h - distance)) as i32)),
            };
            (0..heads).map(|h| Score { slope: slope(h), sigmoid }).collect()
        }
        _ => vec![SOFTMAX; heads],
    }
}

/// The layer's output by docs/semantics.md: `x: [batch, n, d]` (f64) → `[batch, n, d]`.
pub fn reference(
    layer: &SelfAttention<B>,
    kind: &AttentionKind,
    heads: usize,
    kv_heads: usize,
    x: &[f64],
    batch: usize,
    n: usize,
) -> Vec<f64> {
    let (local, global, output) = match layer.clone().into_record().mixer {
        MixerRecord::Windowed(record) => (record.local, None, record.output),
        MixerRecord::Longformer(record) => {
            (record.local.local, Some(record.global), record.local.output)
        }
        MixerRecord::Linear(linear) => {
            let [q, k] = [&linear.query.weight, &linear.key.weight]
                .map(|w| Heads::new(x, w, n, heads).rotated());
            let v = Heads::new(x, &linear.value.weight, n, heads);
            return project(&linear_attention(&q, &k, &v, batch), &linear.output.weight);
        }
    };
    // RoPE on q and k (docs/semantics.md §4), for every kind but SWAT with ALiBi alone.
    let rope = !matches!(kind, AttentionKind::Swat { positions: SwatPositions::Alibi, .. });
    let rotate = |heads: Heads| if rope { heads.rotated() } else { heads };
    let [wq, wk, wv] = split_qkv(&local.qkv.weight, heads, kv_heads);
    let q = rotate(Heads::new(x, &wq, n, heads));
    let k = rotate(Heads::new(x, &wk, n, kv_heads));
    let v = Heads::new(x, &wv, n, kv_heads);
    // Longformer's global rows (docs/semantics.md §2): the global projections over every key, causal
    // in a decoder.
    let global = global.map(|g| {
        let [wq, wk, wv] = split_qkv(&g.qkv.weight, heads, kv_heads);
        let q = rotate(Heads::new(x, &wq, n, heads));
        let k = rotate(Heads::new(x, &wk, n, kv_heads));
        (q, k, Heads::new(x, &wv, n, kv_heads))
    });
    let (globals, causal) = match kind {
        AttentionKind::Longformer { globals, causal, .. } => (globals.clone(), *causal),
        _ => (Vec::new(), true),
    };
    let score = scores(kind, heads);
    let (width, group) = (q.width, heads / kv_heads);
    let mut merged = vec![0.0; batch * n * heads * width];
    for b in 0..batch {
        for (h, &score) in score.iter().enumerate() {
            for i in 0..n {
                let kv_head = h / group;
                let o = match &global {
                    Some((qg, kg, vg)) if globals.contains(&i) => {
                        let every: Vec<usize> = (0..n).filter(|&j| !causal || j <= i).collect();
                        let kv = |j| (kg.row(b, kv_head, j), vg.row(b, kv_head, j));
                        attend(qg.row(b, h, i), i, &every, kv, SOFTMAX)
                    }
                    _ => {
                        let kv = |j| (k.row(b, kv_head, j), v.row(b, kv_head, j));
                        attend(q.row(b, h, i), i, &keys(kind, h, i, n), kv, score)
                    }
                };
                let start = ((b * n + i) * heads + h) * width;
                merged[start..start + width].copy_from_slice(&o);
            }
        }
    }
    project(&merged, &output.weight)
}

/// Taylor linear attention of docs/semantics.md §6 on rotated `q, k` (d_f per head) and `v`:
/// `y_i = Σ_{j≤i} a_ij v_j / (Σ_{j≤i} a_ij + ε)` with `a_ij = φ(q_i)·φ(k_j) = 1 + s + s²/2`,
/// `s = q_i·k_j/√d_f`. Returns the merged heads `[batch·N, H·d_h]`.
fn linear_attention(q: &Heads, k: &Heads, v: &Heads, batch: usize) -> Vec<f64> {
    let (n, heads, width) = (q.n, q.heads, v.width);
    let mut merged = vec![0.0; batch * n * heads * width];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..n {
                let (mut num, mut den) = (vec![0.0; width], 0.0);
                for j in 0..=i {
                    let s = dot(q.row(b, h, i), k.row(b, h, j)) / (q.width as f64).sqrt();
                    let a = 1.0 + s + s * s / 2.0;
                    den += a;
                    for (y, x) in num.iter_mut().zip(v.row(b, h, j)) {
                        *y += a * x;
                    }
                }
                let start = ((b * n + i) * heads + h) * width;
                for (m, y) in merged[start..start + width].iter_mut().zip(num) {
                    *m = y / (den + LINEAR_EPSILON);
                }
            }
        }
    }
    merged
}

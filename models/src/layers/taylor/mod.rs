//! Taylor linear attention, the feature map of Based (docs/semantics.md §6): causal, chunked for
//! training, recurrent for decoding, with RoPE on q and k. Here the mechanism, the module and
//! its three forms; in `run.rs` how it runs in a layer.

mod run;

use burn::config::Config;
use burn::module::Module;
use burn::module::{Content, DisplaySettings, ModuleDisplay};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

use crate::layers::mechanism::Mechanism;
use swa_attention::layer_ops::linear;
use swa_attention::reciprocal::reciprocal;
use swa_attention::{AttentionError, ModelBackend, Rope, RopeConfig, WindowSpec};

/// `ε` of the normaliser (docs/semantics.md §6).
const EPSILON: f32 = 1e-6;

/// Configuration of [`LinearAttention`] (docs/semantics.md §6).
#[derive(Config, Debug)]
pub struct LinearAttentionConfig {
    /// Model width `d_model`; must be a multiple of `heads`.
    pub d_model: usize,
    /// Heads `H`; each gets `d_f` features for q and k and `d_h = d_model / H` for v.
    pub heads: usize,
    /// Feature dimension `d_f` of q and k per head (16 in MSWA's Table 3); even, for RoPE.
    #[config(default = 16)]
    pub feature_dim: usize,
    /// Positions per chunk `C` of the training form; only speed and memory depend on it.
    #[config(default = 64)]
    pub chunk: usize,
    /// RoPE base (docs/semantics.md §4), applied to q and k after projection to `d_f`.
    #[config(default = "10000.0")]
    pub rope_base: f64,
}

/// Taylor linear attention (docs/semantics.md §6):
/// `y_i = Σ_{j≤i} (φ(q_i)·φ(k_j)) v_j / (Σ_{j≤i} φ(q_i)·φ(k_j) + ε)`, a causal layer whose
/// decoding state does not grow with the sequence.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct LinearAttention<B: Backend> {
    query: Linear<B>,
    key: Linear<B>,
    value: Linear<B>,
    output: Linear<B>,
    rope: Rope,
    heads: usize,
    feature_dim: usize,
    head_dim: usize,
    chunk: usize,
}

/// The recurrent decoding state of [`LinearAttention`] (docs/semantics.md §6): the sums over the tokens
/// seen so far, whose size does not depend on their number.
#[derive(Clone, Debug)]
pub struct LinearState<B: Backend> {
    /// `Σ φ(k_j)ᵀ v_j`: `[batch, H, F, d_h]`, `F = 1 + d_f + d_f²`.
    pub kv: Tensor<B, 4>,
    /// `Σ φ(k_j)`: `[batch, H, F]`.
    pub k_sum: Tensor<B, 3>,
    /// Position of the next token, where RoPE rotates it.
    pub position: usize,
}

impl<B: Backend> LinearState<B> {
    /// Bytes held by the sums.
    pub fn bytes(&self) -> usize {
        let kv = self.kv.shape().num_elements() * self.kv.dtype().size();
        kv + self.k_sum.shape().num_elements() * self.k_sum.dtype().size()
    }
}

impl LinearAttentionConfig {
    /// Builds the layer (docs/semantics.md §6); fails, naming the field, when `heads` is zero or does not
    /// divide `d_model`, when `feature_dim` is odd or zero, or when `chunk` is zero.
    pub fn init<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<LinearAttention<B>, AttentionError> {
        let bad = |what, expected, got| Err(AttentionError::ShapeMismatch { what, expected, got });
        if self.heads == 0 {
            return bad("LinearAttentionConfig.heads (must be positive)", 1, 0);
        }
        if !self.d_model.is_multiple_of(self.heads) {
            let expected = self.d_model.next_multiple_of(self.heads);
            return bad(
                "LinearAttentionConfig.d_model (must be a multiple of heads)",
                expected,
                self.d_model,
            );
        }
        if self.feature_dim == 0 || !self.feature_dim.is_multiple_of(2) {
            let expected = self.feature_dim.next_multiple_of(2).max(2);
            return bad(
                "LinearAttentionConfig.feature_dim (must be even and positive)",
                expected,
                self.feature_dim,
            );
        }
        if self.chunk == 0 {
            return bad("LinearAttentionConfig.chunk (must be positive)", 1, 0);
        }
        let rope = RopeConfig::new(self.feature_dim).with_base(self.rope_base).init()?;
        let linear = |a, b| LinearConfig::new(a, b).with_bias(false).init(device);
        let features = self.heads * self.feature_dim;
        Ok(LinearAttention {
            query: linear(self.d_model, features),
            key: linear(self.d_model, features),
            value: linear(self.d_model, self.d_model),
            output: linear(self.d_model, self.d_model),
            rope,
            heads: self.heads,
            feature_dim: self.feature_dim,
            head_dim: self.d_model / self.heads,
            chunk: self.chunk,
        })
    }
}

/// The Taylor feature map `φ(x) = [1, x / d_f^(1/4), vec(x xᵀ) / (√2·√d_f)]` (docs/semantics.md §6), so
/// that `φ(q)·φ(k) = 1 + s + s²/2` with `s = q·k/√d_f`, the second-order Taylor expansion of
/// `exp(s)`. Shapes: `x: [batch, H, N, d_f]` → `[batch, H, N, F]`, `F = 1 + d_f + d_f²`.
pub fn feature_map<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [batch, heads, n, d] = x.dims();
    let ones = Tensor::ones([batch, heads, n, 1], &x.device());
    let linear = x.clone().mul_scalar((d as f32).powf(-0.25));
    let outer = x.clone().unsqueeze_dim::<5>(4) * x.unsqueeze_dim::<5>(3);
    let quadratic =
        outer.reshape([batch, heads, n, d * d]).mul_scalar((2.0 * d as f32).sqrt().recip());
    Tensor::cat(vec![ones, linear, quadratic], 3)
}

impl<B: Backend> LinearAttention<B> {
    /// The decoding state before any token (docs/semantics.md §6): zero sums at position 0.
    pub fn empty_state(&self, batch: usize, device: &B::Device) -> LinearState<B> {
        let features = 1 + self.feature_dim + self.feature_dim * self.feature_dim;
        LinearState {
            kv: Tensor::zeros([batch, self.heads, features, self.head_dim], device),
            k_sum: Tensor::zeros([batch, self.heads, features], device),
            position: 0,
        }
    }
}

impl<B: ModelBackend> LinearAttention<B> {
    /// The training form (docs/semantics.md §6): `x: [batch, N, d_model]` at positions `0 … N−1` →
    /// `[batch, N, d_model]`. The sequence is cut into chunks of `C` positions: within a chunk a
    /// masked quadratic term, across chunks the sums of `φ(k)ᵀv` and `φ(k)` over earlier chunks.
    /// Work grows as `N·C·F + N·F·d_h`, linearly in `N`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, n, _] = x.dims();
        let (q, k, v) = self.features(x, 0);
        self.chunked(q, k, v, None, [batch, n])
    }

    /// The training form after earlier tokens summed in `state`: `x: [batch, N, d_model]` at
    /// positions `state.position …` → (`[batch, N, d_model]`, the state after `x`, detached):
    /// a stream read segment by segment (docs/semantics.md §10), exact across segments, the
    /// gradient stopping at the earlier segments' sums.
    pub fn forward_from(
        &self,
        x: Tensor<B, 3>,
        state: &LinearState<B>,
    ) -> (Tensor<B, 3>, LinearState<B>) {
        let [batch, n, _] = x.dims();
        let (q, k, v) = self.features(x, state.position);
        let next = LinearState {
            kv: (state.kv.clone() + k.clone().swap_dims(2, 3).matmul(v.clone())).detach(),
            k_sum: (state.k_sum.clone() + k.clone().sum_dim(2).squeeze_dim::<3>(2)).detach(),
            position: state.position + n,
        };
        (self.chunked(q, k, v, Some(state), [batch, n]), next)
    }

    /// The chunked form on features `φ(q), φ(k): [batch, H, N, F]` and `v: [batch, H, N, d_h]`,
    /// the sums of earlier tokens in `before` added to every chunk's.
    fn chunked(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        before: Option<&LinearState<B>>,
        [batch, n]: [usize; 2],
    ) -> Tensor<B, 3> {
        let (c, chunks) = (self.chunk, n.div_ceil(self.chunk));
        // Zero-pad to whole chunks: padded keys follow every real query, so none sees them.
        let split = |t: Tensor<B, 4>| {
            let [b, h, _, f] = t.dims();
            let t = match chunks * c - n {
                0 => t,
                pad => Tensor::cat(vec![t.clone(), Tensor::zeros([b, h, pad, f], &t.device())], 2),
            };
            t.reshape([b, h, chunks, c, f])
        };
        let (q, k, v) = (split(q), split(k), split(v));
        let mut kv_before = exclusive_prefix_sum(k.clone().swap_dims(3, 4).matmul(v.clone()));
        let mut k_before = exclusive_prefix_sum(k.clone().sum_dim(3));
        if let Some(state) = before {
            kv_before = kv_before + state.kv.clone().unsqueeze_dim::<5>(2);
            k_before = k_before + state.k_sum.clone().unsqueeze_dims::<5>(&[2, 3]);
        }
        let causal = Tensor::<B, 2>::ones([c, c], &q.device()).tril(0).reshape([1, 1, 1, c, c]);
        let scores = q.clone().matmul(k.swap_dims(3, 4)) * causal;
        let numerator = q.clone().matmul(kv_before) + scores.clone().matmul(v);
        let denominator = q.matmul(k_before.swap_dims(3, 4)) + scores.sum_dim(4);
        let y = numerator * reciprocal(denominator.add_scalar(EPSILON));
        self.merge(y.reshape([batch, self.heads, chunks * c, self.head_dim]).narrow(2, 0, n))
    }

    /// The direct O(N²) masked form of the formula of docs/semantics.md §6, kept as the reference the
    /// chunked [`forward`](Self::forward) and the recurrent [`step`](Self::step) are tested
    /// against. Shapes: `x: [batch, N, d_model]` at positions `0 … N−1` → `[batch, N, d_model]`.
    pub fn forward_quadratic(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let n = x.dims()[1];
        let (q, k, v) = self.features(x, 0);
        let causal = Tensor::<B, 2>::ones([n, n], &q.device()).tril(0).reshape([1, 1, n, n]);
        let scores = q.matmul(k.swap_dims(2, 3)) * causal;
        let denominator = scores.clone().sum_dim(3).add_scalar(EPSILON);
        self.merge(scores.matmul(v) * reciprocal(denominator))
    }

    /// One decoding step of the recurrent form (docs/semantics.md §6): `x: [batch, 1, d_model]` at
    /// `state.position` → (`[batch, 1, d_model]`, the state with this token added). It costs the
    /// same at every position, since the state holds sums rather than the past keys.
    pub fn step(&self, x: Tensor<B, 3>, state: LinearState<B>) -> (Tensor<B, 3>, LinearState<B>) {
        let (q, k, v) = self.features(x, state.position);
        let kv = state.kv + k.clone().swap_dims(2, 3).matmul(v);
        let k_sum = state.k_sum + k.squeeze_dim::<3>(2);
        let denominator = q.clone().matmul(k_sum.clone().unsqueeze_dim::<4>(3)).add_scalar(EPSILON);
        let y = q.matmul(kv.clone()) * reciprocal(denominator);
        (self.merge(y), LinearState { kv, k_sum, position: state.position + 1 })
    }

    /// The training form over a prompt, `x: [batch, N, d_model]` at positions `0 … N−1` →
    /// (`[batch, N, d_model]`, the decoding state after the prompt): the state's sums taken over
    /// every prompt token at once, as [`step`](Self::step) would have accumulated them.
    pub fn prefill(&self, x: Tensor<B, 3>) -> (Tensor<B, 3>, LinearState<B>) {
        let n = x.dims()[1];
        let (_, k, v) = self.features(x.clone(), 0);
        let kv = k.clone().swap_dims(2, 3).matmul(v);
        let k_sum = k.sum_dim(2).squeeze_dim::<3>(2);
        (self.forward(x), LinearState { kv, k_sum, position: n })
    }

    /// Projects `x: [batch, N, d_model]` at positions `offset …` to `φ(q), φ(k): [batch, H, N, F]`
    /// and `v: [batch, H, N, d_h]`, with RoPE on q and k before the feature map.
    fn features(
        &self,
        x: Tensor<B, 3>,
        offset: usize,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, n, _] = x.dims();
        let heads =
            |t: Tensor<B, 3>, width| t.reshape([batch, n, self.heads, width]).swap_dims(1, 2);
        let rotated = |p: &Linear<B>| {
            self.rope.forward(heads(linear(p, x.clone()), self.feature_dim), offset)
        };
        let (q, k) = (feature_map(rotated(&self.query)), feature_map(rotated(&self.key)));
        (q, k, heads(linear(&self.value, x), self.head_dim))
    }

    /// `y: [batch, H, N, d_h]` → the output projection of `[batch, N, H·d_h]`.
    fn merge(&self, y: Tensor<B, 4>) -> Tensor<B, 3> {
        let [batch, heads, n, head_dim] = y.dims();
        linear(&self.output, y.swap_dims(1, 2).reshape([batch, n, heads * head_dim]))
    }
}

/// The sum over earlier chunks: `t: [batch, H, chunks, …]` → same shape, chunk `i` holding
/// `Σ_{j<i} t_j` (zero for the first). Shifting before the cumulative sum, rather than
/// subtracting `t` from the inclusive sum, avoids cancellation.
fn exclusive_prefix_sum<B: Backend>(t: Tensor<B, 5>) -> Tensor<B, 5> {
    let [batch, heads, chunks, rows, cols] = t.dims();
    let zero = Tensor::zeros([batch, heads, 1, rows, cols], &t.device());
    if chunks == 1 {
        return zero;
    }
    Tensor::cat(vec![zero, t.narrow(2, 0, chunks - 1)], 2).cumsum(2)
}

/// One line: heads, feature and head widths.
impl<B: Backend> ModuleDisplay for LinearAttention<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("heads", &self.heads)
            .add("feature_dim", &self.feature_dim)
            .add("head_dim", &self.head_dim)
            .optional()
    }
}

/// Taylor linear attention's mechanism: no window, a feature map of `feature_dim`.
pub(crate) struct TaylorLinear {
    pub(crate) feature_dim: usize,
}

impl Mechanism for TaylorLinear {
    /// The full spec (the layer runs no window).
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::full(heads, kv_heads)
    }

    /// None: the layer keeps sums, not keys.
    fn specs(&self, _: usize, _: usize, _: usize) -> Result<Vec<WindowSpec>, AttentionError> {
        Ok(Vec::new())
    }

    fn validate(&self, heads: usize, kv_heads: usize) -> Result<(), AttentionError> {
        let d = self.feature_dim;
        match d > 0 && d.is_multiple_of(2) {
            true => self.spec(heads, kv_heads).map(|_| ()),
            false => Err(AttentionError::ShapeMismatch {
                what: "Linear.feature_dim (must be even and positive)",
                expected: d + d % 2,
                got: d,
            }),
        }
    }

    fn window_sum(&self, _heads: usize, _n: usize) -> usize {
        0
    }

    fn name(&self) -> &'static str {
        "linear"
    }

    fn label(&self, _head: usize) -> String {
        "linear".into()
    }
}

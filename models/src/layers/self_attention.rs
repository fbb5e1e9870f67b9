//! The self-attention layer: projects, normalises q and k if asked, rotates (RoPE), runs the
//! layer's [`AttentionKind`] and, with learned sink logits, rescales each row
//! (docs/semantics.md §8, §9). Decoding with it is in [`crate::layers::layer_cache`].

use burn::config::Config;
use burn::module::{Content, DisplaySettings, ModuleDisplay};
use burn::module::{Module, Param};
use burn::nn::LinearConfig;
use burn::tensor::activation::sigmoid;
use burn::tensor::{DType, Tensor, backend::Backend};

use crate::layers::layer_options::LayerOptions;
use crate::layers::linear::LinearAttentionConfig;
use crate::layers::mixer::{Mixer, Projections, WindowedMixer};
use crate::layers::norm::RmsNorm;
use crate::layers::transformer_xl::RelativePositions;
use crate::layers::{AttentionKind, LayerError, longformer, longnet};
use swa_attention::layer_ops::linear;
use swa_attention::relative::distances_needed;
use swa_attention::split::split;
use swa_attention::{
    AttentionError, ModelBackend, Rope, RopeConfig, ScoreFn, ScoreOptions,
    windowed_attention_relative,
};

/// Where the rows of one call of a layer's attention sit in its stream: the stream position of
/// every key row (the queries are the last of them), and how many key rows come before the
/// first query (the memory of earlier segments; docs/semantics.md §10).
pub(crate) struct StreamRows {
    /// Stream position of each key row, for RoPE.
    pub positions: Vec<usize>,
    /// Key rows before the first query.
    pub memory: usize,
    /// The key rows of the kind's global positions, when they are not where the kind says
    /// (kept rows of earlier segments); `None`: the kind's own.
    pub globals: Option<Vec<usize>>,
}

impl StreamRows {
    /// N rows at positions `0 … N−1`, no memory.
    pub fn alone(n: usize) -> Self {
        Self { positions: (0..n).collect(), memory: 0, globals: None }
    }
}

/// Configuration of [`SelfAttention`]: the Transformer++ layer of docs/semantics.md §8 unless
/// `options` say otherwise (docs/semantics.md §9).
#[derive(Config, Debug)]
pub struct SelfAttentionConfig {
    /// Model width `d`.
    pub d_model: usize,
    /// Query heads `H`; unless `head_dim` is set, must divide `d_model`.
    pub heads: usize,
    /// Key/value heads `H_kv` (GQA); must divide `heads`.
    pub kv_heads: usize,
    /// The mechanism, as data.
    pub kind: AttentionKind,
    /// RoPE base (docs/semantics.md §4); RoPE is applied to q and k of every kind but SWAT with
    /// ALiBi alone.
    #[config(default = "10000.0")]
    pub rope_base: f64,
    /// What the layer does otherwise than Transformer++ (docs/semantics.md §9); the default
    /// departs in nothing.
    #[config(default = "LayerOptions::default()")]
    pub options: LayerOptions,
}

/// Multi-head self-attention of one [`AttentionKind`].
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct SelfAttention<B: Backend> {
    /// The weights that mix the tokens: the windowed core's projections, or linear attention.
    pub(crate) mixer: Mixer<B>,
    /// RMSNorm of each query head and each key head, before RoPE.
    query_norm: Option<RmsNorm<B>>,
    key_norm: Option<RmsNorm<B>>,
    /// Learned sink logit `s_h` of each query head, `[H]`.
    sinks: Option<Param<Tensor<B, 1>>>,
    /// Transformer-XL's position terms, in place of RoPE (docs/semantics.md §4).
    relative: Option<RelativePositions<B>>,
    pub(crate) kind: AttentionKind,
    pub(crate) rope: Rope,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    /// The kind's score options with the layer's scale and softcap.
    pub(crate) scores: ScoreOptions,
}

impl SelfAttentionConfig {
    /// The head width `d_h`.
    pub fn head_width(&self) -> usize {
        self.options.head_dim.unwrap_or(self.d_model / self.heads.max(1))
    }

    /// Builds the layer; fails, naming the field, on an inconsistent configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<SelfAttention<B>, LayerError> {
        let (d, heads, kv_heads) = (self.d_model, self.heads, self.kv_heads);
        let options = &self.options;
        if heads == 0 || (options.head_dim.is_none() && d % heads != 0) {
            let expected = heads.max(1) * (d / heads.max(1)).max(1);
            return Err(AttentionError::ShapeMismatch {
                what: "SelfAttentionConfig.d_model (must be a multiple of heads)",
                expected,
                got: d,
            }
            .into());
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(AttentionError::HeadsNotDivisible { heads, kv_heads }.into());
        }
        self.kind.validate(heads, kv_heads)?;
        let head_dim = self.head_width();
        let rope = RopeConfig::new(head_dim)
            .with_base(self.rope_base)
            .with_scaling(options.rope_scaling)
            .init()?;
        let mut scores = self.kind.score_options(heads)?;
        scores.scale = options.scale.or(scores.scale);
        scores.softcap = options.softcap.or(scores.softcap);
        scores.check(heads)?;
        let (mut query_norm, mut key_norm, mut sinks) = (None, None, None);
        let relative = match options.relative_positions {
            true => {
                check_relative_positions(&self.kind)?;
                Some(RelativePositions::new(d, heads, head_dim, device))
            }
            false => None,
        };
        let mixer = if let Some(feature_dim) = self.kind.linear_features() {
            if options.sink_logits {
                return Err(LayerError::SinkLogitsUnsupported { kind: "linear" });
            }
            let config = LinearAttentionConfig::new(d, heads)
                .with_feature_dim(feature_dim)
                .with_rope_base(self.rope_base);
            Mixer::Linear(config.init(device)?)
        } else {
            if options.sink_logits {
                check_sink_logits(&self.kind, &scores)?;
                sinks = Some(Param::from_tensor(Tensor::zeros([heads], device)));
            }
            if let Some(norm) = &options.qk_norm {
                if norm.d_model != head_dim {
                    return Err(AttentionError::ShapeMismatch {
                        what: "SelfAttentionConfig.qk_norm width (the head width)",
                        expected: head_dim,
                        got: norm.d_model,
                    }
                    .into());
                }
                query_norm = Some(norm.init(device));
                key_norm = Some(norm.init(device));
            }
            Mixer::Windowed(self.windowed_mixer(options, head_dim, device))
        };
        Ok(SelfAttention {
            mixer,
            query_norm,
            key_norm,
            sinks,
            relative,
            kind: self.kind.clone(),
            rope,
            heads,
            kv_heads,
            head_dim,
            scores,
        })
    }

    /// The projections of a windowed kind, Longformer's global ones copies of the local ones.
    fn windowed_mixer<B: Backend>(
        &self,
        options: &LayerOptions,
        head_dim: usize,
        device: &B::Device,
    ) -> WindowedMixer<B> {
        let (d, heads, kv_heads) = (self.d_model, self.heads, self.kv_heads);
        let width = (heads + 2 * kv_heads) * head_dim;
        let qkv = LinearConfig::new(d, width).with_bias(options.qkv_bias).init(device);
        let local = Projections { qkv };
        // Longformer's global rows have projections of their own.
        let global = (!self.kind.global_positions().is_empty()).then(|| local.copy());
        let output = LinearConfig::new(heads * head_dim, d).with_bias(false).init(device);
        WindowedMixer { local, global, output }
    }
}

/// The core's output with learned sink logits (docs/semantics.md §9): `o · σ(lse − s_h)`, as if
/// each head's softmax had one more key, of score `s_h` and value 0. `o: [batch, H, N, d]`,
/// `lse: [batch, H, N]`, `sinks: [H]` → `[batch, H, N, d]`; differentiable in all three. The gate
/// is computed in f32 (the core's `lse` is f32, docs/semantics.md §1), then cast to `o`'s dtype.
pub fn with_sink_logits<B: Backend>(
    o: Tensor<B, 4>,
    lse: Tensor<B, 3>,
    sinks: Tensor<B, 1>,
) -> Tensor<B, 4> {
    let s = sinks.unsqueeze_dims::<3>(&[0, 2]).cast(DType::F32);
    let dtype = o.dtype();
    o * sigmoid(lse.cast(DType::F32) - s).cast(dtype).unsqueeze_dim(3)
}

/// Transformer-XL's relative positions go through the core's relative scores, which LongNet's
/// branches, Longformer's global rows and linear attention do not take, and which need a
/// causal layer (docs/semantics.md §4).
fn check_relative_positions(kind: &AttentionKind) -> Result<(), LayerError> {
    match kind.relative_positions_unsupported() {
        Some(kind) => Err(LayerError::RelativePositionsUnsupported { kind }),
        None => Ok(()),
    }
}

/// Learned sink logits need one softmax denominator per row (docs/semantics.md §9).
fn check_sink_logits(kind: &AttentionKind, scores: &ScoreOptions) -> Result<(), LayerError> {
    let unsupported = |kind| Err(LayerError::SinkLogitsUnsupported { kind });
    match kind.sink_logits_unsupported() {
        Some(kind) => unsupported(kind),
        None if scores.score_fn != ScoreFn::Softmax => unsupported("sigmoid"),
        None => Ok(()),
    }
}

impl<B: ModelBackend> SelfAttention<B> {
    /// `x: [batch, N, d_model]` at positions `0 … N−1` → `[batch, N, d_model]`.
    ///
    /// Fails when the input does not fit the layer's spec, e.g. a Longformer global position
    /// past the end of the sequence.
    pub fn forward(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        let mixer = match &self.mixer {
            Mixer::Windowed(mixer) => mixer,
            Mixer::Linear(linear) => return Ok(linear.forward(x)),
        };
        let (q, k, v) = self.project(&mixer.local, x.clone());
        let globals = mixer.global.as_ref().map(|global| self.project(global, x));
        let out = self.attend(q, k, v, globals)?;
        Ok(self.merge(mixer, out))
    }

    /// The attention weights of every head, `x: [batch, N, d_model]` → `[batch, H, N, N]`, row
    /// `i` holding the weight query `i` gives each key (0 where it sees none; with learned
    /// sinks the rows sum to less than 1, the rest going to the sink). Every path's output is
    /// linear in the values, so this is the layer's own attention run with columns of the
    /// identity as values, `d_h` keys at a time: the weights come from the same code as the
    /// output, whatever the kind and backend. Fails for linear attention, which has no weights
    /// of this form.
    pub fn attention_map(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        let Mixer::Windowed(mixer) = &self.mixer else {
            return Err(LayerError::NoAttentionMap { kind: "linear" });
        };
        let [batch, n, _] = x.dims();
        let (d, chunks) = (self.head_dim, n.div_ceil(self.head_dim));
        let identity = Tensor::<B, 2>::eye(chunks * d, &x.device()).narrow(0, 0, n);
        let (q, k, _) = self.project(&mixer.local, x.clone());
        let globals = mixer.global.as_ref().map(|global| self.project(global, x.clone()));
        let mut columns = Vec::with_capacity(chunks);
        for chunk in 0..chunks {
            let values = identity.clone().narrow(1, chunk * d, d).unsqueeze::<4>().expand([
                batch,
                self.kv_heads,
                n,
                d,
            ]);
            let globals = globals.clone().map(|(q_g, k_g, _)| (q_g, k_g, values.clone()));
            columns.push(self.attend(q.clone(), k.clone(), values, globals)?);
        }
        Ok(Tensor::cat(columns, 3).narrow(3, 0, n))
    }

    /// The kind's attention over rows at positions `0 … N−1`: q `[batch, H, N, d_h]` and k, v
    /// `[batch, H_kv, N, d_v]` before RoPE, with Longformer's global projections of the same
    /// shapes when the layer has them → `[batch, H, N, d_v]`.
    pub(crate) fn attend(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        globals: Option<(Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>)>,
    ) -> Result<Tensor<B, 4>, LayerError> {
        let n = q.dims()[2];
        let out = self.attend_placed(q, k, v, &StreamRows::alone(n))?;
        Ok(match globals {
            Some((q_g, k_g, v_g)) => {
                let rotate = |t: Tensor<B, 4>| match self.rope() {
                    Some(rope) => rope.forward(t, 0),
                    None => t,
                };
                let (q_g, k_g) = (rotate(q_g), rotate(k_g));
                let spec = self.kind.spec(self.heads, self.kv_heads)?;
                longformer::replace_global_rows(out, q_g, k_g, v_g, &spec, &self.scores)
            }
            None => out,
        })
    }

    /// The kind's attention, Longformer's global rows aside, for queries `q: [batch, H, N, d_h]`
    /// and keys and values `[batch, H_kv, M + N, d_v]` (before RoPE) placed by `placement`: the
    /// queries are the last N key rows → `[batch, H, N, d_v]`.
    pub(crate) fn attend_placed(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        placement: &StreamRows,
    ) -> Result<Tensor<B, 4>, LayerError> {
        let (q, k) = match self.rope() {
            Some(rope) => {
                let queries = &placement.positions[placement.positions.len() - q.dims()[2]..];
                (rope.forward_at(q, queries), rope.forward_at(k, &placement.positions))
            }
            None => (q, k),
        };
        if let Some((segments, dilations)) = self.kind.branches() {
            return Ok(longnet::longnet_attention(q, k, v, &segments, &dilations, &self.scores)?);
        }
        let mut spec =
            self.kind.spec(self.heads, self.kv_heads)?.with_query_offset(placement.memory);
        if let Some(globals) = &placement.globals {
            spec = spec.with_globals_replaced(globals.iter().copied());
        }
        let (q, table) = match &self.relative {
            Some(relative) => {
                let distances = distances_needed(&spec, q.dims()[2]).max(1);
                let scale = self.scores.scale_for(self.head_dim);
                let (q, table) = relative.queries_and_table(q, distances, scale);
                (q, Some(table))
            }
            None => (q, None),
        };
        let (out, lse) = windowed_attention_relative(q, k, v, table, &spec, &self.scores)?;
        Ok(self.sink(out, lse))
    }

    /// The layer's attention kind.
    pub fn kind(&self) -> &AttentionKind {
        &self.kind
    }
}

impl<B: ModelBackend> SelfAttention<B> {
    /// With learned sink logits, `o · σ(lse − s_h)`: the softmax's denominator gains `exp(s_h)`
    /// with no value (docs/semantics.md §9). `o: [batch, H, N, d_h]`, `lse: [batch, H, N]`.
    pub(crate) fn sink(&self, o: Tensor<B, 4>, lse: Tensor<B, 3>) -> Tensor<B, 4> {
        match &self.sinks {
            Some(sinks) => with_sink_logits(o, lse, sinks.val()),
            None => o,
        }
    }

    /// Whether the layer has learned sink logits.
    pub(crate) fn has_sink_logits(&self) -> bool {
        self.sinks.is_some()
    }

    /// The rotation of q and k, or `None` for a kind without RoPE ([`AttentionKind::rotates`])
    /// and with Transformer-XL's relative positions.
    pub(crate) fn rope(&self) -> Option<&Rope> {
        (self.kind.rotates() && self.relative.is_none()).then_some(&self.rope)
    }

    /// The heads merged and projected back by `mixer`'s output projection:
    /// `[batch, H, N, d_h]` → `[batch, N, d_model]`.
    pub(crate) fn merge(&self, mixer: &WindowedMixer<B>, out: Tensor<B, 4>) -> Tensor<B, 3> {
        let [batch, _, n, _] = out.dims();
        let merged = out.swap_dims(1, 2).reshape([batch, n, self.heads * self.head_dim]);
        linear(&mixer.output, merged)
    }

    /// How the layer mixes its tokens: the windowed core's projections or linear attention.
    pub fn mixer(&self) -> &Mixer<B> {
        &self.mixer
    }

    /// q `[batch, H, N, d_h]` and k, v `[batch, H_kv, N, d_h]` of `x: [batch, N, d_model]`,
    /// from one product and three views of its heads; q and k normalised per head if the
    /// layer says so, before RoPE.
    pub(crate) fn project(
        &self,
        p: &Projections<B>,
        x: Tensor<B, 3>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, n, _] = x.dims();
        let (heads, kv_heads) = (self.heads, self.kv_heads);
        // Heads first, then the parts: a reshape of the contiguous product moves nothing, where
        // one of a part (a strided view) may copy it.
        let qkv = linear(&p.qkv, x).reshape([batch, n, heads + 2 * kv_heads, self.head_dim]);
        let mut parts = split(qkv, 2, &[heads, kv_heads, kv_heads]).into_iter();
        let mut next = || parts.next().expect("three parts").swap_dims(1, 2);
        let norm = |t: Tensor<B, 4>, norm: &Option<RmsNorm<B>>| match norm {
            Some(norm) => norm.forward(t),
            None => t,
        };
        let q = norm(next(), &self.query_norm);
        let k = norm(next(), &self.key_norm);
        (q, k, next())
    }
}

impl<B: Backend> SelfAttention<B> {
    /// The query heads `H` and key/value heads `H_kv`.
    pub(crate) fn head_counts(&self) -> (usize, usize) {
        (self.heads, self.kv_heads)
    }

    /// Whether the layer scores positions with Transformer-XL's relative terms.
    pub fn has_relative_positions(&self) -> bool {
        self.relative.is_some()
    }
}

/// One line: the kind, the heads and the head width, and what the layer adds to them (Burn's
/// default would list every projection and RoPE's frequencies).
impl<B: Backend> ModuleDisplay for SelfAttention<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("kind", &format!("{:?}", self.kind))
            .add("heads", &self.heads)
            .add("kv_heads", &self.kv_heads)
            .add("head_dim", &self.head_dim)
            .add("score", &format!("{:?}", self.scores.score_fn))
            .add("qk_norm", &self.query_norm.is_some())
            .add("sink_logits", &self.sinks.is_some())
            .add("relative_positions", &self.relative.is_some())
            .optional()
    }
}

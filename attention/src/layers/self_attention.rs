//! The self-attention layer: projects, normalises q and k if asked, rotates (RoPE), runs the
//! layer's [`AttentionKind`] and, with learned sink logits, rescales each row
//! (docs/semantics.md §8, §9). Decoding with it is in [`crate::layers::layer_cache`].

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::sigmoid;
use burn::tensor::{Tensor, backend::Backend};

use crate::layers::linear::{LinearAttention, LinearAttentionConfig};
use crate::layers::norm::{RmsNorm, RmsNormConfig};
use crate::layers::{AttentionKind, longformer, longnet};
use crate::{
    AttentionError, Rope, RopeConfig, RopeScaling, ScoreFn, ScoreOptions, WindowedAttentionBackend,
    windowed_attention,
};

/// Configuration of [`SelfAttention`]. Every field after `kind` has a default that gives the
/// Transformer++ layer of docs/semantics.md §8; the others describe pretrained architectures
/// (docs/semantics.md §9).
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
    /// A stretch of RoPE's frequencies (docs/semantics.md §9); `None` keeps them.
    pub rope_scaling: Option<RopeScaling>,
    /// Width `d_h` of each head, even (RoPE); `None` is `d_model / heads`.
    pub head_dim: Option<usize>,
    /// Biases on the q, k and v projections (Qwen2); the output projection has none.
    #[config(default = false)]
    pub qkv_bias: bool,
    /// Multiplier of `q·k`; `None` is the kind's, `1/√d_h` (Gemma sets
    /// `query_pre_attn_scalar^(−½)`).
    pub scale: Option<f32>,
    /// Softcap `c` of the scores, `c·tanh(s/c)` (Gemma 2); `None` disables it.
    pub softcap: Option<f32>,
    /// RMSNorm over each head of q and k before RoPE (Gemma 3); its `d_model` must be `d_h`.
    pub qk_norm: Option<RmsNormConfig>,
    /// A learned sink logit per head joining each softmax denominator with no value (gpt-oss;
    /// docs/semantics.md §9).
    #[config(default = false)]
    pub sink_logits: bool,
}

/// The q, k, v projections of one set of heads (biases only under
/// [`SelfAttentionConfig::qkv_bias`]).
#[derive(Module, Debug)]
pub struct Projections<B: Backend> {
    query: Linear<B>,
    key: Linear<B>,
    value: Linear<B>,
}

/// Multi-head self-attention of one [`AttentionKind`].
#[derive(Module, Debug)]
pub struct SelfAttention<B: Backend> {
    /// q, k, v projections; absent for linear attention.
    pub(crate) local: Option<Projections<B>>,
    /// Longformer's `Wq_g, Wk_g, Wv_g`, initialised as copies of `local`.
    pub(crate) global: Option<Projections<B>>,
    /// Output projection; absent for linear attention, which has its own.
    pub(crate) output: Option<Linear<B>>,
    /// Taylor linear attention, for the `Linear` kind.
    pub(crate) linear: Option<LinearAttention<B>>,
    /// RMSNorm of each query head and each key head, before RoPE.
    query_norm: Option<RmsNorm<B>>,
    key_norm: Option<RmsNorm<B>>,
    /// Learned sink logit `s_h` of each query head, `[H]`.
    sinks: Option<Param<Tensor<B, 1>>>,
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
        self.head_dim.unwrap_or(self.d_model / self.heads.max(1))
    }

    /// Builds the layer; fails, naming the field, on an inconsistent configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<SelfAttention<B>, AttentionError> {
        let (d, heads, kv_heads) = (self.d_model, self.heads, self.kv_heads);
        if heads == 0 || (self.head_dim.is_none() && d % heads != 0) {
            let expected = heads.max(1) * (d / heads.max(1)).max(1);
            return Err(AttentionError::ShapeMismatch {
                what: "SelfAttentionConfig.d_model (must be a multiple of heads)",
                expected,
                got: d,
            });
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(AttentionError::HeadsNotDivisible { heads, kv_heads });
        }
        self.kind.validate(heads, kv_heads)?;
        let head_dim = self.head_width();
        let rope = RopeConfig::new(head_dim)
            .with_base(self.rope_base)
            .with_scaling(self.rope_scaling)
            .init()?;
        let mut scores = self.kind.score_options(heads)?;
        scores.scale = self.scale.or(scores.scale);
        scores.softcap = self.softcap.or(scores.softcap);
        scores.check(heads)?;
        let mut layer = SelfAttention {
            local: None,
            global: None,
            output: None,
            linear: None,
            query_norm: None,
            key_norm: None,
            sinks: None,
            kind: self.kind.clone(),
            rope,
            heads,
            kv_heads,
            head_dim,
            scores,
        };
        if let AttentionKind::Linear { feature_dim } = self.kind {
            if self.sink_logits {
                return Err(AttentionError::SinkLogitsUnsupported { kind: "linear" });
            }
            let config = LinearAttentionConfig::new(d, heads)
                .with_feature_dim(feature_dim)
                .with_rope_base(self.rope_base);
            layer.linear = Some(config.init(device)?);
            return Ok(layer);
        }
        if self.sink_logits {
            check_sink_logits(&self.kind, &layer.scores)?;
            layer.sinks = Some(Param::from_tensor(Tensor::zeros([heads], device)));
        }
        if let Some(norm) = &self.qk_norm {
            if norm.d_model != head_dim {
                return Err(AttentionError::ShapeMismatch {
                    what: "SelfAttentionConfig.qk_norm width (the head width)",
                    expected: head_dim,
                    got: norm.d_model,
                });
            }
            layer.query_norm = Some(norm.init(device));
            layer.key_norm = Some(norm.init(device));
        }
        let linear =
            |out: usize, bias: bool| LinearConfig::new(d, out).with_bias(bias).init(device);
        let local = Projections {
            query: linear(heads * head_dim, self.qkv_bias),
            key: linear(kv_heads * head_dim, self.qkv_bias),
            value: linear(kv_heads * head_dim, self.qkv_bias),
        };
        if let AttentionKind::Longformer { globals, .. } = &self.kind
            && !globals.is_empty()
        {
            layer.global = Some(local.copy());
        }
        layer.local = Some(local);
        layer.output = Some(LinearConfig::new(heads * head_dim, d).with_bias(false).init(device));
        Ok(layer)
    }
}

/// Learned sink logits need one softmax denominator per row (docs/semantics.md §9).
fn check_sink_logits(kind: &AttentionKind, scores: &ScoreOptions) -> Result<(), AttentionError> {
    let unsupported = |kind| Err(AttentionError::SinkLogitsUnsupported { kind });
    match kind {
        AttentionKind::LongNet { .. } => unsupported("LongNet"),
        AttentionKind::Longformer { globals, .. } if !globals.is_empty() => {
            unsupported("Longformer with global tokens")
        }
        _ if scores.score_fn != ScoreFn::Softmax => unsupported("sigmoid"),
        _ => Ok(()),
    }
}

impl<B: Backend> Projections<B> {
    /// A copy with its own parameters (new ids), so that it trains separately.
    fn copy(&self) -> Self {
        let copy = |l: &Linear<B>| Linear {
            weight: Param::from_tensor(l.weight.val()),
            bias: l.bias.as_ref().map(|b| Param::from_tensor(b.val())),
        };
        Self { query: copy(&self.query), key: copy(&self.key), value: copy(&self.value) }
    }
}

impl<B: WindowedAttentionBackend> SelfAttention<B> {
    /// `x: [batch, N, d_model]` at positions `0 … N−1` → `[batch, N, d_model]`.
    ///
    /// Fails when the input does not fit the layer's spec, e.g. a Longformer global position
    /// past the end of the sequence.
    pub fn forward(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, AttentionError> {
        if let Some(linear) = &self.linear {
            return Ok(linear.forward(x));
        }
        let (q, k, v) = self.project(self.projections(), x.clone());
        let out = self.attend(q, k, v, x)?;
        Ok(self.merge(out))
    }

    /// The kind's attention over rows at positions `0 … N−1`: q `[batch, H, N, d_h]` and k, v
    /// `[batch, H_kv, N, d_h]` before RoPE, `x` the layer's input (for Longformer's global
    /// projections) → `[batch, H, N, d_h]`.
    pub(crate) fn attend(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        x: Tensor<B, 3>,
    ) -> Result<Tensor<B, 4>, AttentionError> {
        let rotate = |t: Tensor<B, 4>| match self.rope() {
            Some(rope) => rope.forward(t, 0),
            None => t,
        };
        let (q, k) = (rotate(q), rotate(k));
        if let AttentionKind::LongNet { segments, dilations } = &self.kind {
            return longnet::longnet_attention(q, k, v, segments, dilations, &self.scores);
        }
        let spec = self.kind.spec(self.heads, self.kv_heads)?;
        let (out, lse) = windowed_attention(q, k, v, &spec, &self.scores)?;
        let out = self.sink(out, lse);
        Ok(match &self.global {
            Some(global) => {
                let (q_g, k_g, v_g) = self.project(global, x);
                let (q_g, k_g) = (rotate(q_g), rotate(k_g));
                longformer::replace_global_rows(out, q_g, k_g, v_g, &spec, &self.scores)
            }
            None => out,
        })
    }

    /// The layer's attention kind.
    pub fn kind(&self) -> &AttentionKind {
        &self.kind
    }
}

impl<B: Backend> SelfAttention<B> {
    /// With learned sink logits, `o · σ(lse − s_h)`: the softmax's denominator gains `exp(s_h)`
    /// with no value (docs/semantics.md §9). `o: [batch, H, N, d_h]`, `lse: [batch, H, N]`.
    pub(crate) fn sink(&self, o: Tensor<B, 4>, lse: Tensor<B, 3>) -> Tensor<B, 4> {
        match &self.sinks {
            Some(sinks) => {
                let s = sinks.val().unsqueeze_dims::<3>(&[0, 2]);
                o * sigmoid(lse - s).unsqueeze_dim(3)
            }
            None => o,
        }
    }

    /// Whether the layer has learned sink logits.
    pub(crate) fn has_sink_logits(&self) -> bool {
        self.sinks.is_some()
    }

    /// The rotation of q and k, or `None` for a kind without RoPE ([`AttentionKind::rotates`]).
    pub(crate) fn rope(&self) -> Option<&Rope> {
        self.kind.rotates().then_some(&self.rope)
    }

    /// The ordinary projections of a windowed layer.
    pub(crate) fn projections(&self) -> &Projections<B> {
        self.local.as_ref().expect("every kind but linear attention has projections")
    }

    /// The heads merged and projected back: `[batch, H, N, d_h]` → `[batch, N, d_model]`.
    pub(crate) fn merge(&self, out: Tensor<B, 4>) -> Tensor<B, 3> {
        let [batch, _, n, _] = out.dims();
        let merged = out.swap_dims(1, 2).reshape([batch, n, self.heads * self.head_dim]);
        let output = self.output.as_ref().expect("every kind but linear attention has one");
        output.forward(merged)
    }

    /// q `[batch, H, N, d_h]` and k, v `[batch, H_kv, N, d_h]`, q and k normalised per head if
    /// the layer says so, before RoPE.
    pub(crate) fn project(
        &self,
        p: &Projections<B>,
        x: Tensor<B, 3>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, n, _] = x.dims();
        let split = |t: Tensor<B, 3>, heads: usize| {
            t.reshape([batch, n, heads, self.head_dim]).swap_dims(1, 2)
        };
        let norm = |t: Tensor<B, 4>, norm: &Option<RmsNorm<B>>| match norm {
            Some(norm) => norm.forward(t),
            None => t,
        };
        let q = norm(split(p.query.forward(x.clone()), self.heads), &self.query_norm);
        let k = norm(split(p.key.forward(x.clone()), self.kv_heads), &self.key_norm);
        let v = split(p.value.forward(x), self.kv_heads);
        (q, k, v)
    }
}

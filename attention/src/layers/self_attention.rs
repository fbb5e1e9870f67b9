//! The self-attention layer: projects, rotates (RoPE), and runs the layer's [`AttentionKind`].

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::linear::{LinearAttention, LinearAttentionConfig, LinearState};
use crate::layers::{AttentionKind, longformer, longnet};
use crate::{
    AttentionError, Rope, RopeConfig, ScoreOptions, WindowSpec, WindowedAttentionBackend,
    windowed_attention,
};

/// Configuration of [`SelfAttention`].
#[derive(Config, Debug)]
pub struct SelfAttentionConfig {
    /// Model width `d`.
    pub d_model: usize,
    /// Query heads `H`; must divide `d_model`, and the head size `d/H` must be even (RoPE).
    pub heads: usize,
    /// Key/value heads `H_kv` (GQA); must divide `heads`.
    pub kv_heads: usize,
    /// The mechanism, as data.
    pub kind: AttentionKind,
    /// RoPE base (docs/semantics.md §4); RoPE is applied to q and k of every kind but SWAT with ALiBi
    /// alone.
    #[config(default = "10000.0")]
    pub rope_base: f64,
}

/// The q, k, v projections of one set of heads (no biases; docs/semantics.md §8).
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
    local: Option<Projections<B>>,
    /// Longformer's `Wq_g, Wk_g, Wv_g`, initialised as copies of `local`.
    global: Option<Projections<B>>,
    /// Output projection; absent for linear attention, which has its own.
    output: Option<Linear<B>>,
    /// Taylor linear attention, for the `Linear` kind.
    linear: Option<LinearAttention<B>>,
    kind: AttentionKind,
    rope: Rope,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl SelfAttentionConfig {
    /// Builds the layer; fails, naming the field, on an inconsistent configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<SelfAttention<B>, AttentionError> {
        let (d, heads, kv_heads) = (self.d_model, self.heads, self.kv_heads);
        if heads == 0 || d % heads != 0 {
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
        let head_dim = d / heads;
        let rope = RopeConfig::new(head_dim).with_base(self.rope_base).init()?;
        let mut layer = SelfAttention {
            local: None,
            global: None,
            output: None,
            linear: None,
            kind: self.kind.clone(),
            rope,
            heads,
            kv_heads,
            head_dim,
        };
        if let AttentionKind::Linear { feature_dim } = self.kind {
            let config = LinearAttentionConfig::new(d, heads)
                .with_feature_dim(feature_dim)
                .with_rope_base(self.rope_base);
            layer.linear = Some(config.init(device)?);
            return Ok(layer);
        }
        let linear = |out: usize| LinearConfig::new(d, out).with_bias(false).init(device);
        let local = Projections {
            query: linear(heads * head_dim),
            key: linear(kv_heads * head_dim),
            value: linear(kv_heads * head_dim),
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
        let [batch, n, _] = x.dims();
        let (local, output) = (self.local.as_ref(), self.output.as_ref());
        let (q, k, v) = self.project(local.expect("windowed layers have projections"), x.clone());
        let rope = self.rope();
        let rotate = |t: Tensor<B, 4>| match rope {
            Some(rope) => rope.forward(t, 0),
            None => t,
        };
        let (q, k) = (rotate(q), rotate(k));
        let out = match &self.kind {
            AttentionKind::LongNet { segments, dilations } => {
                longnet::longnet_attention(q, k, v, segments, dilations)?
            }
            kind => {
                let spec = kind.spec(self.heads, self.kv_heads)?;
                let opts = kind.score_options(self.heads)?;
                let (out, _) = windowed_attention(q, k, v, &spec, &opts)?;
                match &self.global {
                    Some(global) => {
                        let (q_g, k_g, v_g) = self.project(global, x);
                        let (q_g, k_g) = (rotate(q_g), rotate(k_g));
                        longformer::replace_global_rows(out, q_g, k_g, v_g, &spec)
                    }
                    None => out,
                }
            }
        };
        let merged = out.swap_dims(1, 2).reshape([batch, n, self.heads * self.head_dim]);
        Ok(output.expect("windowed layers have an output projection").forward(merged))
    }

    /// The layer's attention kind.
    pub fn kind(&self) -> &AttentionKind {
        &self.kind
    }
}

/// A layer's decoding state (docs/semantics.md §7), made by [`SelfAttention::cache`]. A clone is an
/// independent copy (tensors are shared until one of the copies writes).
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one cache per layer: boxing would add an indirection to save a few hundred bytes"
)]
pub enum LayerCache<B: Backend> {
    /// Windowed kinds: the bounded cache of the local projections, and for Longformer's global
    /// rows a cache of the global projections, kept only until the last global position.
    Windowed {
        /// Keys and values of the layer's ordinary projections.
        local: KvCache<B>,
        /// Keys and values of `Wk_g, Wv_g`, with the global positions.
        global: Option<(KvCache<B>, Vec<usize>)>,
    },
    /// Linear attention's recurrent state (docs/semantics.md §6).
    Linear(LinearState<B>),
}

impl<B: Backend> LayerCache<B> {
    /// Bytes held by the cached keys and values or the recurrent state.
    pub fn bytes(&self) -> usize {
        let bytes = |t: &Tensor<B, 3>| t.shape().num_elements() * t.dtype().size();
        match self {
            LayerCache::Windowed { local, global } => {
                local.bytes() + global.as_ref().map_or(0, |(cache, _)| cache.bytes())
            }
            LayerCache::Linear(state) => {
                let kv = state.kv.shape().num_elements() * state.kv.dtype().size();
                kv + bytes(&state.k_sum)
            }
        }
    }
}

impl<B: Backend> SelfAttention<B> {
    /// An empty decoding state for `batch` sequences. `positions` matters for sinks, where
    /// [`CachePositions::Streaming`] is StreamingLLM's position shift. Fails for an encoder
    /// (bidirectional Longformer), which cannot decode.
    pub fn cache(
        &self,
        batch: usize,
        positions: CachePositions,
        device: &B::Device,
    ) -> Result<LayerCache<B>, AttentionError> {
        if let Some(linear) = &self.linear {
            return Ok(LayerCache::Linear(linear.empty_state(batch, device)));
        }
        let specs = match &self.kind {
            AttentionKind::LongNet { segments, dilations } => {
                longnet::branch_specs(segments, dilations, self.heads, self.kv_heads, usize::MAX)?
            }
            kind => vec![kind.spec(self.heads, self.kv_heads)?],
        };
        let opts = self.kind.score_options(self.heads)?;
        let globals = specs[0].globals().to_vec();
        let local = KvCache::new(specs, opts, positions)?;
        let global = match globals.is_empty() {
            true => None,
            false => {
                let spec = WindowSpec::full(self.heads, self.kv_heads)?;
                Some((KvCache::new(vec![spec], ScoreOptions::softmax(), positions)?, globals))
            }
        };
        Ok(LayerCache::Windowed { local, global })
    }

    /// One decoding step: `x: [batch, 1, d_model]` at the cache's next position →
    /// `[batch, 1, d_model]`, the same as row `position` of [`SelfAttention::forward`] over the
    /// whole prefix (with [`CachePositions::Absolute`]).
    pub fn step(&self, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3>
    where
        B: WindowedAttentionBackend,
    {
        let (local, global) = match (cache, &self.linear) {
            (LayerCache::Linear(state), Some(linear)) => {
                let (y, next) = linear.step(x, state.clone());
                *state = next;
                return y;
            }
            (LayerCache::Windowed { local, global }, None) => (local, global),
            _ => unreachable!("a layer's cache is made by its own `cache`"),
        };
        let batch = x.dims()[0];
        let position = local.len();
        let projections = self.local.as_ref().expect("windowed layers have projections");
        let (q, k, v) = self.project(projections, x.clone());
        local.append(k, v, self.rope());
        let mut out = local.attend(q, self.rope());
        if let (Some((cache, globals)), Some(projections)) = (global.as_mut(), &self.global) {
            let (q_g, k_g, v_g) = self.project(projections, x);
            cache.append(k_g, v_g, self.rope());
            if globals.contains(&position) {
                out = cache.attend(q_g, self.rope());
            }
            // No query after the last global position reads the global keys again.
            if globals.last() <= Some(&position) {
                *global = None;
            }
        }
        let merged = out.swap_dims(1, 2).reshape([batch, 1, self.heads * self.head_dim]);
        self.output.as_ref().expect("windowed layers have an output projection").forward(merged)
    }

    /// The rotation of q and k, or `None` for a kind without RoPE ([`AttentionKind::rotates`]).
    fn rope(&self) -> Option<&Rope> {
        self.kind.rotates().then_some(&self.rope)
    }

    /// q `[batch, H, N, d_h]` and k, v `[batch, H_kv, N, d_h]`, before RoPE.
    fn project(
        &self,
        p: &Projections<B>,
        x: Tensor<B, 3>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, n, _] = x.dims();
        let split = |t: Tensor<B, 3>, heads: usize| {
            t.reshape([batch, n, heads, self.head_dim]).swap_dims(1, 2)
        };
        let q = split(p.query.forward(x.clone()), self.heads);
        let k = split(p.key.forward(x.clone()), self.kv_heads);
        let v = split(p.value.forward(x), self.kv_heads);
        (q, k, v)
    }
}

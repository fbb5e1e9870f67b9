//! The self-attention layer: normalises q and k if asked, and runs the module of its
//! mechanism, chosen once from its [`AttentionKind`] when it is built ([`crate::layers::mixer`]),
//! which projects, rotates (RoPE) and attends (docs/semantics.md §8, §9). The layer knows no
//! mechanism: each runs itself, its decoding and its segment memory included.

use burn::config::Config;
use burn::module::Module;
use burn::module::{Content, DisplaySettings, ModuleDisplay};
use burn::tensor::{Tensor, backend::Backend};

use crate::layers::attend::{Heads, LayerCache, Shape};
use crate::layers::cache::CachePositions;
use crate::layers::layer_options::LayerOptions;
use crate::layers::mechanism::Mechanism;
use crate::layers::mixer::Mixer;
use crate::layers::norm::RmsNorm;
use crate::layers::segment_memory::LayerMemory;
use crate::layers::window::WindowedAttention;
use crate::layers::{AttentionKind, LayerError};
use swa_attention::{AttentionError, ModelBackend, Rope, RopeConfig, ScoreOptions};

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

/// Multi-head self-attention of one mechanism.
#[derive(Module, Debug)]
#[module(custom_display)]
pub struct SelfAttention<B: Backend> {
    /// The module of the layer's mechanism, with its weights.
    pub(crate) mixer: Mixer<B>,
    /// RMSNorm of each query head and each key head, before RoPE.
    query_norm: Option<RmsNorm<B>>,
    key_norm: Option<RmsNorm<B>>,
    rope: Rope,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// The mechanism's score options with the layer's scale and softcap.
    scores: ScoreOptions,
    /// The mechanism as configured, for display.
    kind: String,
}

impl SelfAttentionConfig {
    /// The head width `d_h`.
    pub fn head_width(&self) -> usize {
        self.options.head_dim.unwrap_or(self.d_model / self.heads.max(1))
    }

    /// Builds the layer; fails, naming the field, on an inconsistent configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<SelfAttention<B>, LayerError> {
        self.kind.mechanism(|mechanism| {
            self.build(mechanism, format!("{:?}", self.kind), device, |shape, scores| {
                self.kind.mixer(shape, &self.options, scores, self.rope_base, device)
            })
        })
    }

    /// Builds the layer around `mechanism` in place of `kind`, run as its window
    /// ([`WindowedAttention`]): a mechanism of one's own that is not a kind.
    pub fn init_mechanism<B: Backend>(
        &self,
        mechanism: &dyn Mechanism,
        device: &B::Device,
    ) -> Result<SelfAttention<B>, LayerError> {
        self.build(mechanism, mechanism.label(0), device, |shape, scores| {
            let mixer = WindowedAttention::new(mechanism, shape, &self.options, scores, device)?;
            Ok(Mixer::Windowed(mixer))
        })
    }

    /// The layer of `mechanism`, its module made by `mixer` from the heads' shape and the
    /// score options, printed as `kind`; checks the heads and the mechanism first.
    fn build<B: Backend>(
        &self,
        mechanism: &dyn Mechanism,
        kind: String,
        device: &B::Device,
        mixer: impl FnOnce(&Shape, &ScoreOptions) -> Result<Mixer<B>, LayerError>,
    ) -> Result<SelfAttention<B>, LayerError> {
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
        mechanism.validate(heads, kv_heads)?;
        let head_dim = self.head_width();
        let rope = RopeConfig::new(head_dim)
            .with_base(self.rope_base)
            .with_scaling(options.rope_scaling)
            .init()?;
        let mut scores = mechanism.score_options(heads)?;
        scores.scale = options.scale.or(scores.scale);
        scores.softcap = options.softcap.or(scores.softcap);
        scores.check(heads)?;
        let shape = Shape { d_model: d, heads, kv_heads, head_dim };
        let layer = SelfAttention {
            mixer: mixer(&shape, &scores)?,
            query_norm: None,
            key_norm: None,
            rope,
            heads,
            kv_heads,
            head_dim,
            scores,
            kind,
        };
        layer.with_norms(options, device)
    }
}

impl<B: Backend> SelfAttention<B> {
    /// The layer with RMSNorm over each head of q and k if `options` ask for it (Gemma 3).
    fn with_norms(
        mut self,
        options: &LayerOptions,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        if let Some(norm) = &options.qk_norm {
            if norm.d_model != self.head_dim {
                return Err(AttentionError::ShapeMismatch {
                    what: "SelfAttentionConfig.qk_norm width (the head width)",
                    expected: self.head_dim,
                    got: norm.d_model,
                }
                .into());
            }
            self.query_norm = Some(norm.init(device));
            self.key_norm = Some(norm.init(device));
        }
        Ok(self)
    }

    /// The query heads `H` and key/value heads `H_kv`.
    pub(crate) fn head_counts(&self) -> (usize, usize) {
        (self.heads, self.kv_heads)
    }

    /// The module of the layer's mechanism.
    pub fn mixer(&self) -> &Mixer<B> {
        &self.mixer
    }

    /// What the mechanism's module sees of the layer.
    fn heads(&self) -> Heads<'_, B> {
        Heads {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scores: &self.scores,
            rope: &self.rope,
            query_norm: self.query_norm.as_ref(),
            key_norm: self.key_norm.as_ref(),
        }
    }
}

impl<B: ModelBackend> SelfAttention<B> {
    /// `x: [batch, N, d_model]` at positions `0 … N−1` → `[batch, N, d_model]`.
    ///
    /// Fails when the input does not fit the layer's spec, e.g. a Longformer global position
    /// past the end of the sequence.
    pub fn forward(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        self.mixer.attend().forward(&self.heads(), x)
    }

    /// The attention weights of every head, `x: [batch, N, d_model]` → `[batch, H, N, N]`, row
    /// `i` holding the weight query `i` gives each key (0 where it sees none; with learned
    /// sinks the rows sum to less than 1, the rest going to the sink), read through the layer's
    /// own attention with columns of the identity as values
    /// ([`identity_columns`](crate::layers::window::identity_columns)). Fails for linear
    /// attention, which has no weights of this form.
    pub fn attention_map(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        self.mixer.attend().attention_map(&self.heads(), x)
    }

    /// An empty decoding state for `batch` sequences (docs/semantics.md §7). `positions`
    /// matters for sinks, where [`CachePositions::Streaming`] is StreamingLLM's position
    /// shift. Fails for an encoder (bidirectional Longformer), which cannot decode, and for
    /// Transformer-XL's relative positions.
    pub fn cache(
        &self,
        batch: usize,
        positions: CachePositions,
        device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError> {
        self.mixer.attend().cache(&self.heads(), batch, positions, device)
    }

    /// One decoding step: `x: [batch, 1, d_model]` at the cache's next position →
    /// `[batch, 1, d_model]`, the same as row `position` of [`SelfAttention::forward`] over the
    /// whole prefix (with [`CachePositions::Absolute`]).
    pub fn step(&self, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        self.mixer.attend().step(&self.heads(), x, cache)
    }

    /// The forward pass over a prompt `x: [batch, N, d_model]` at positions `0 … N−1` →
    /// `[batch, N, d_model]`, filling `cache`, which must be empty, with what N calls of
    /// [`SelfAttention::step`] would leave in it: a windowed layer's last window, its sinks and
    /// globals, a full layer's every key, linear attention's sums.
    pub fn prefill(
        &self,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        self.mixer.attend().prefill(&self.heads(), x, cache)
    }

    /// Whether keys at fixed positions stay visible to every later query (StreamingLLM's
    /// sinks, Longformer's global tokens), so that a cache cannot renumber its positions.
    pub fn pins_positions(&self) -> bool {
        self.mixer.attend().pins_positions()
    }

    /// An empty memory for `batch` streams (docs/semantics.md §10). Windowed layers keep their
    /// widest window's reach less one, and their sinks and global tokens; full attention keeps
    /// `full_memory` positions (Transformer-XL's memory length); LongNet keeps nothing; linear
    /// attention its sums. Fails, naming the kind, for an encoder, and for sinks with
    /// Transformer-XL's relative positions (their distances would not be the stream's).
    pub fn memory(
        &self,
        batch: usize,
        full_memory: usize,
        device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        self.mixer.attend().memory(batch, full_memory, device)
    }

    /// Whether the layer can read a stream in segments of `segment` tokens with memory: the
    /// errors [`SelfAttention::memory`] and [`SelfAttention::forward_in_stream`] would give,
    /// before any work.
    pub fn check_stream(&self, segment: usize) -> Result<(), LayerError> {
        self.mixer.attend().check_segment(segment, 0)
    }

    /// The next segment of a stream, `x: [batch, N, d_model]` at stream positions
    /// `memory.start() …` → `[batch, N, d_model]`, its queries seeing the kept rows of earlier
    /// segments as well as their own (docs/semantics.md §10); then `memory` keeps what the next
    /// segment can see. With a memory that holds every position a window reaches, the result
    /// is the same as the rows of one forward over the whole stream. Fails for LongNet when a
    /// branch's segment does not divide N (its segments would straddle two of ours).
    pub fn forward_in_stream(
        &self,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let attend = self.mixer.attend();
        attend.check_segment(x.dims()[1], memory.start())?;
        attend.forward_in_stream(&self.heads(), x, memory)
    }
}

/// One line: the mechanism, the heads and the head width, and what the layer adds to them
/// (Burn's default would list every projection and RoPE's frequencies).
impl<B: Backend> ModuleDisplay for SelfAttention<B> {
    fn custom_settings(&self) -> Option<DisplaySettings> {
        DisplaySettings::new().with_new_line_after_attribute(false).optional()
    }

    fn custom_content(&self, content: Content) -> Option<Content> {
        content
            .add("kind", &self.kind)
            .add("heads", &self.heads)
            .add("kv_heads", &self.kv_heads)
            .add("head_dim", &self.head_dim)
            .add("score", &format!("{:?}", self.scores.score_fn))
            .add("qk_norm", &self.query_norm.is_some())
            .optional()
    }
}

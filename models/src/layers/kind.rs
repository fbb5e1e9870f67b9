//! The attention kind of a layer, as data: which mechanism of docs/semantics.md §2–§6 it runs.

use serde::{Deserialize, Serialize};

use burn::tensor::backend::Backend;

use super::attend::Shape;
use super::full::Full;
use super::longformer::{Longformer, LongformerAttention};
use super::longnet::LongNet;
use super::mechanism::Mechanism;
use super::mixer::Mixer;
use super::mswa::MultiScale;
use super::sinks::Sinks;
use super::sliding::Sliding;
use super::swat::Swat;
use super::taylor::{LinearAttention, TaylorLinear};
use super::window::WindowedAttention;
use super::{LayerError, LayerOptions};
use swa_attention::alibi::SlopeMagnitudes;
use swa_attention::{AttentionError, ScoreFn, ScoreOptions, WindowSpec};

/// Which attention a layer runs. Serialised with a `"kind"` tag, e.g.
/// `{"kind": "sliding", "window": 256}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttentionKind {
    /// Full causal attention, the baseline.
    Full,
    /// Sliding window of `window` keys, self included (SWA; docs/semantics.md §2).
    Sliding {
        /// Keys each query sees, `W ≥ 1`.
        window: usize,
    },
    /// A sliding window per head (MSWA; docs/semantics.md §3). See [`crate::layers::mswa`].
    MultiScale {
        /// Keys each head sees, one entry per query head.
        windows: Vec<usize>,
    },
    /// SWAT (docs/semantics.md §4): sliding window, sigmoid scores, ALiBi split `R:D`, RoPE. The score
    /// function and the positional encoding can be changed for SWAT's Table 3 ablation.
    Swat {
        /// Keys each query sees.
        window: usize,
        /// Number of distance heads `D` (the first D heads); the rest are recency heads.
        /// `None` is SWAT's balanced split, `H/2`.
        distance_heads: Option<usize>,
        /// ALiBi slope magnitudes: SWAT's code (default) or its paper text.
        magnitudes: SlopeMagnitudes,
        /// Sigmoid with its β (SWAT; its code uses β = 0, the default) or softmax (the
        /// ablation's baseline).
        #[serde(default = "swat_score_fn")]
        score_fn: ScoreFn,
        /// ALiBi and RoPE together (the default), or one of them alone.
        #[serde(default)]
        positions: SwatPositions,
    },
    /// A sliding window plus attention sinks (StreamingLLM; docs/semantics.md §2, §7).
    Sinks {
        /// Sink positions `0 … sinks−1`.
        sinks: usize,
        /// Most recent keys each query sees, self included.
        window: usize,
    },
    /// LongNet dilated attention (docs/semantics.md §5). See [`crate::layers::longnet`].
    LongNet {
        /// Segment length `w_b` of each branch.
        segments: Vec<usize>,
        /// Dilation `r_b` of each branch.
        dilations: Vec<usize>,
    },
    /// Longformer (docs/semantics.md §2). See [`crate::layers::longformer`].
    Longformer {
        /// One-sided window `w`: `2w+1` keys (Hugging Face's value is `2w`).
        window: usize,
        /// Dilation of each query head.
        dilations: Vec<usize>,
        /// Global positions, with their own projections.
        globals: Vec<usize>,
        /// Decoder (causal) or encoder (bidirectional).
        causal: bool,
    },
    /// Taylor linear attention (docs/semantics.md §6). See [`crate::layers::taylor`].
    Linear {
        /// Feature dimension `d_f` per head (16 in MSWA's Table 3).
        feature_dim: usize,
    },
}

/// The positional encoding of a SWAT layer (docs/semantics.md §4), the second knob of SWAT's Table 3
/// ablation. Serialised in lower case: `"alirope"`, `"alibi"`, `"rope"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwatPositions {
    /// ALiBi bias and RoPE on q and k together, "AliRoPE" (docs/semantics.md §4; SWAT Table 3): SWAT's
    /// attention as published, and the default.
    #[default]
    AliRope,
    /// The ALiBi bias of docs/semantics.md §4 alone: q and k are not rotated (SWAT Table 3).
    Alibi,
    /// RoPE of docs/semantics.md §4 alone: no ALiBi bias (SWAT Table 3).
    Rope,
}

/// SWAT's score function when a config does not name one: sigmoid with β = 0 (docs/semantics.md §1).
fn swat_score_fn() -> ScoreFn {
    ScoreFn::Sigmoid { beta: 0.0 }
}

impl AttentionKind {
    /// SWAT with the balanced split, code magnitudes, sigmoid with β = 0, ALiBi and RoPE, as in
    /// SWAT's released code.
    pub fn swat(window: usize) -> Self {
        Self::Swat {
            window,
            distance_heads: None,
            magnitudes: SlopeMagnitudes::Code,
            score_fn: swat_score_fn(),
            positions: SwatPositions::AliRope,
        }
    }

    /// Asks the mechanism this kind runs: the one `match` from the serialised data to the
    /// behaviour of each mechanism, in the file named after it (a view on the stack, no
    /// allocation: the layers ask on every forward pass).
    pub(crate) fn mechanism<R>(&self, ask: impl FnOnce(&dyn Mechanism) -> R) -> R {
        match self {
            Self::Full => ask(&Full),
            Self::Sliding { window } => ask(&Sliding { window: *window }),
            Self::MultiScale { windows } => ask(&MultiScale { windows }),
            Self::Swat { window, distance_heads, magnitudes, score_fn, positions } => ask(&Swat {
                window: *window,
                distance_heads: *distance_heads,
                magnitudes: *magnitudes,
                score_fn: *score_fn,
                positions: *positions,
            }),
            Self::Sinks { sinks, window } => ask(&Sinks { sinks: *sinks, window: *window }),
            Self::LongNet { segments, dilations } => ask(&LongNet { segments, dilations }),
            Self::Longformer { window, dilations, globals, causal } => {
                ask(&Longformer { window: *window, dilations, globals, causal: *causal })
            }
            Self::Linear { feature_dim } => ask(&TaylorLinear { feature_dim: *feature_dim }),
        }
    }

    /// Whether the layer rotates q and k with RoPE (docs/semantics.md §4): every kind but SWAT
    /// with ALiBi alone.
    pub fn rotates(&self) -> bool {
        self.mechanism(|m| m.rotates())
    }

    /// The causal sliding windows of the kind, in keys, self included: the one window that every
    /// head of a sliding, SWAT or sinks layer shares, or MSWA's window per head
    /// (docs/semantics.md §2, §3). `None` for the kinds whose queries see further back than a
    /// window: full, LongNet and linear attention, and Longformer, whose global tokens reach
    /// every position. Callers take the smallest or largest entry, e.g. to check that a
    /// training length lets every window slide, or to bound how far information travels.
    pub fn windows(&self) -> Option<Vec<usize>> {
        self.mechanism(|m| m.windows().map(<[usize]>::to_vec))
    }

    /// A short label for figures, of head `head` where the heads differ: `full causal`,
    /// `sliding W=16`, `MSWA head window 8`, `SWAT W=16`, `sliding W=16 + 4 sinks`,
    /// `LongNet w=8,16 r=1,2`, `Longformer w=4 dilation 2`, `linear`.
    pub fn label(&self, head: usize) -> String {
        self.mechanism(|m| m.label(head))
    }

    /// The window specs of the calls of the core over `n` positions, for `heads` query heads
    /// over `kv_heads`: one, one per LongNet branch, or none for linear attention (no keys).
    pub fn specs(
        &self,
        heads: usize,
        kv_heads: usize,
        n: usize,
    ) -> Result<Vec<WindowSpec>, AttentionError> {
        self.mechanism(|m| m.specs(heads, kv_heads, n))
    }

    /// The module that runs this kind in a layer of `shape` with `options` and `scores`:
    /// the mechanisms that run otherwise than one windowed call have modules of their own,
    /// every other runs as its window.
    pub(crate) fn mixer<B: Backend>(
        &self,
        shape: &Shape,
        options: &LayerOptions,
        scores: &ScoreOptions,
        rope_base: f64,
        device: &B::Device,
    ) -> Result<Mixer<B>, LayerError> {
        Ok(match self {
            Self::Longformer { window, dilations, globals, causal } if !globals.is_empty() => {
                let mechanism = Longformer { window: *window, dilations, globals, causal: *causal };
                let module = LongformerAttention::new(&mechanism, shape, options, scores, device)?;
                Mixer::Longformer(module)
            }
            Self::Linear { feature_dim } => {
                let mechanism = TaylorLinear { feature_dim: *feature_dim };
                Mixer::Linear(LinearAttention::new(&mechanism, shape, options, rope_base, device)?)
            }
            _ => self
                .mechanism(|m| WindowedAttention::new(m, shape, options, scores, device))
                .map(Mixer::Windowed)?,
        })
    }

    /// The kind with its one window replaced by `window` keys, everything else kept: for the
    /// sliding, SWAT and sinks kinds, whose weights do not depend on the window (SWAT Table 2's
    /// evaluation window). `None` for the others, MSWA included (its heads have windows of
    /// their own).
    pub fn with_window(&self, window: usize) -> Option<Self> {
        let mut kind = self.clone();
        match &mut kind {
            Self::Sliding { window: w }
            | Self::Swat { window: w, .. }
            | Self::Sinks { window: w, .. } => {
                *w = window;
                Some(kind)
            }
            _ => None,
        }
    }

    /// The kind an evaluation at a window of `window` keys with `sinks` sink tokens runs in
    /// place of this one (SWAT Table 2, StreamingLLM): full, sliding and sinks layers become a
    /// sliding window (with the sinks, if any); SWAT keeps its scores with the new window and
    /// no sinks; `None` for the others.
    pub fn at_eval_window(&self, window: usize, sinks: usize) -> Option<Self> {
        match (self, sinks) {
            (Self::Full | Self::Sliding { .. } | Self::Sinks { .. }, 0) => {
                Some(Self::Sliding { window })
            }
            (Self::Full | Self::Sliding { .. } | Self::Sinks { .. }, sinks) => {
                Some(Self::Sinks { sinks, window })
            }
            (Self::Swat { .. }, 0) => self.with_window(window),
            _ => None,
        }
    }

    /// The window spec of one call of the core for `heads` query heads over `kv_heads`, for
    /// every kind but LongNet (one spec per branch) and linear attention (no window).
    pub fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        self.mechanism(|m| m.spec(heads, kv_heads))
    }

    /// The score options of the kind: softmax, except SWAT's score function, with its ALiBi
    /// split unless the layer uses RoPE alone.
    pub fn score_options(&self, heads: usize) -> Result<ScoreOptions, AttentionError> {
        self.mechanism(|m| m.score_options(heads))
    }

    /// Checks the kind for a layer of `heads` query heads and `kv_heads` kv heads.
    pub fn validate(&self, heads: usize, kv_heads: usize) -> Result<(), AttentionError> {
        self.mechanism(|m| m.validate(heads, kv_heads))
    }

    /// Keys of every head summed, `Σ_h W_h`: the layer's cost and KV-cache size in MSWA's sense
    /// (docs/semantics.md §3). Full attention and the global parts count `n` keys; linear
    /// attention 0.
    pub fn window_sum(&self, heads: usize, n: usize) -> usize {
        self.mechanism(|m| m.window_sum(heads, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One kind of each variant, for 4 heads.
    fn every_kind() -> Vec<AttentionKind> {
        vec![
            AttentionKind::Full,
            AttentionKind::Sliding { window: 8 },
            AttentionKind::MultiScale { windows: vec![2, 4, 8, 16] },
            AttentionKind::swat(8),
            AttentionKind::Sinks { sinks: 2, window: 8 },
            AttentionKind::LongNet { segments: vec![8, 16], dilations: vec![1, 2] },
            AttentionKind::Longformer {
                window: 4,
                dilations: vec![1, 1, 2, 2],
                globals: vec![0],
                causal: true,
            },
            AttentionKind::Linear { feature_dim: 8 },
        ]
    }

    #[test]
    fn windows_of_every_kind() {
        let windows: Vec<Option<Vec<usize>>> =
            every_kind().iter().map(|kind| kind.windows()).collect();
        let expected = [
            None,
            Some(vec![8]),
            Some(vec![2, 4, 8, 16]),
            Some(vec![8]),
            Some(vec![8]),
            None,
            None,
            None,
        ];
        assert_eq!(windows, expected);
    }

    #[test]
    fn with_window_replaces_the_window_alone() {
        let replaced: Vec<Option<AttentionKind>> =
            every_kind().iter().map(|kind| kind.with_window(3)).collect();
        let expected = [
            None,
            Some(AttentionKind::Sliding { window: 3 }),
            None,
            Some(AttentionKind::swat(3)),
            Some(AttentionKind::Sinks { sinks: 2, window: 3 }),
            None,
            None,
            None,
        ];
        assert_eq!(replaced, expected);
        let ablation = AttentionKind::Swat {
            window: 8,
            distance_heads: Some(1),
            magnitudes: SlopeMagnitudes::Paper,
            score_fn: ScoreFn::Softmax,
            positions: SwatPositions::Rope,
        };
        let AttentionKind::Swat { window, distance_heads, positions, .. } =
            ablation.with_window(5).unwrap()
        else {
            panic!("SWAT stays SWAT");
        };
        assert_eq!((window, distance_heads, positions), (5, Some(1), SwatPositions::Rope));
    }

    #[test]
    fn specs_count_the_calls_of_the_core() {
        let calls: Vec<usize> =
            every_kind().iter().map(|kind| kind.specs(4, 2, 10).unwrap().len()).collect();
        // LongNet one per branch; linear attention none (it keeps sums, not keys).
        assert_eq!(calls, [1, 1, 1, 1, 1, 2, 1, 0]);
    }

    #[test]
    fn every_kind_validates_for_four_heads() {
        for kind in every_kind() {
            assert_eq!(kind.validate(4, 2), Ok(()), "{kind:?}");
        }
    }

    #[test]
    fn window_sums_clip_to_the_context() {
        let sums: Vec<usize> = every_kind().iter().map(|kind| kind.window_sum(4, 10)).collect();
        // Full 4·10; SWA 4·8; MSWA 2+4+8+10; SWAT 4·8; sinks 4·min(10, 10); LongNet
        // 4·min(8 + 10/2, 10); Longformer decoder 4·(4+1+1); linear 0.
        assert_eq!(sums, [40, 32, 24, 32, 40, 40, 24, 0]);
    }

    #[test]
    fn swat_splits_alibi_between_recency_and_distance_heads() {
        let opts = AttentionKind::swat(8).score_options(4).unwrap();
        assert_eq!(opts.score_fn, ScoreFn::Sigmoid { beta: 0.0 });
        let slopes = opts.alibi.expect("SWAT uses ALiBi");
        assert_eq!(slopes.len(), 4);
        assert!(AttentionKind::Sliding { window: 8 }.score_options(4).unwrap().alibi.is_none());
    }
}

//! What each attention mechanism says about itself, behind one trait: its window spec, score
//! options and validation, its windows and their cost, its label in figures, and what the
//! layer must special-case. [`crate::layers::AttentionKind`] is the serialised data and
//! dispatches to the mechanism of its variant in one `match`; each mechanism lives in the file
//! named after it (`sliding.rs`, `mswa.rs`, `swat.rs`, `sinks.rs`, `longnet.rs`,
//! `longformer.rs`, `linear.rs`, `full.rs`).

use swa_attention::{AttentionError, ScoreOptions, WindowSpec};

/// One attention mechanism of docs/semantics.md §2–§6, as its layer and the tools ask it.
pub trait Mechanism {
    /// The window spec of one call of the core for `heads` query heads over `kv_heads`
    /// (LongNet: the full spec, its branches are [`Mechanism::branches`]).
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError>;

    /// The score options: softmax unless the mechanism says otherwise.
    fn score_options(&self, _heads: usize) -> Result<ScoreOptions, AttentionError> {
        Ok(ScoreOptions::softmax())
    }

    /// Checks the mechanism for a layer of `heads` query heads and `kv_heads` kv heads.
    fn validate(&self, heads: usize, kv_heads: usize) -> Result<(), AttentionError> {
        self.spec(heads, kv_heads)?;
        self.score_options(heads).map(|_| ())
    }

    /// The causal sliding windows, in keys, self included (one shared by every head, or one
    /// per head); `None` when queries see further back than a window.
    fn windows(&self) -> Option<&[usize]> {
        None
    }

    /// Keys of every head summed, `Σ_h W_h`, at context `n` (docs/semantics.md §3). The default
    /// reads [`Self::windows`]: one shared window for every head, a window per head, or, without
    /// windows, every key.
    fn window_sum(&self, heads: usize, n: usize) -> usize {
        match self.windows() {
            Some([window]) => heads * (*window).min(n),
            Some(per_head) => per_head.iter().map(|w| (*w).min(n)).sum(),
            None => heads * n,
        }
    }

    /// A short label for figures, of head `head` where the heads differ.
    fn label(&self, head: usize) -> String;

    /// The positions whose keys every query sees, wherever it is.
    fn global_positions(&self) -> &[usize] {
        &[]
    }

    /// Whether keys at fixed positions stay visible to every later query, so that a cache
    /// cannot renumber its positions.
    fn pins_positions(&self) -> bool {
        !self.global_positions().is_empty()
    }

    /// The size of linear attention's feature map; `None` for the windowed mechanisms.
    fn linear_features(&self) -> Option<usize> {
        None
    }

    /// Whether the layer rotates q and k with RoPE (docs/semantics.md §4).
    fn rotates(&self) -> bool {
        true
    }

    /// LongNet's branches, `(segments, dilations)`: one call of the core per branch, mixed by
    /// their log-sum-exps (docs/semantics.md §5); `None` for one call.
    fn branches(&self) -> Option<(&[usize], &[usize])> {
        None
    }

    /// Why Transformer-XL's relative positions cannot run with this mechanism (they go through
    /// the core's relative scores, which need one causal call; docs/semantics.md §4), if not.
    fn relative_positions_unsupported(&self) -> Option<&'static str> {
        None
    }

    /// Why a layer of this mechanism cannot keep a bounded memory of earlier segments
    /// (docs/semantics.md §10), if it cannot.
    fn memory_unsupported(&self) -> Option<&'static str> {
        None
    }

    /// Why learned sink logits cannot run with this mechanism (they need one softmax
    /// denominator per row; docs/semantics.md §9), if not.
    fn sink_logits_unsupported(&self) -> Option<&'static str> {
        None
    }
}

/// Fails unless a per-head list has one entry per query head.
pub(crate) fn expect_per_head(
    what: &'static str,
    got: usize,
    heads: usize,
) -> Result<(), AttentionError> {
    match got == heads {
        true => Ok(()),
        false => Err(AttentionError::ShapeMismatch { what, expected: heads, got }),
    }
}

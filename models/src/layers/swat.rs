//! SWAT (docs/semantics.md §4): a sliding window with sigmoid scores, ALiBi split between
//! recency and distance heads, and RoPE; the score function and the positional encoding can be
//! changed for SWAT's Table 3 ablation.

use super::SwatPositions;
use super::mechanism::Mechanism;
use swa_attention::alibi::{self, SlopeMagnitudes};
use swa_attention::{AttentionError, ScoreFn, ScoreOptions, WindowSpec};

/// SWAT's window and score settings.
pub(crate) struct Swat {
    pub(crate) window: usize,
    pub(crate) distance_heads: Option<usize>,
    pub(crate) magnitudes: SlopeMagnitudes,
    pub(crate) score_fn: ScoreFn,
    pub(crate) positions: SwatPositions,
}

impl Mechanism for Swat {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::sliding(heads, kv_heads, self.window)
    }

    /// SWAT's score function, with its ALiBi split unless the layer uses RoPE alone.
    fn score_options(&self, heads: usize) -> Result<ScoreOptions, AttentionError> {
        let opts = ScoreOptions { score_fn: self.score_fn, ..ScoreOptions::softmax() };
        if self.positions == SwatPositions::Rope {
            return Ok(opts);
        }
        let distance = self.distance_heads.unwrap_or(heads / 2);
        let recency = heads.checked_sub(distance).ok_or(AttentionError::BadAlibiSplit {
            recency: 0,
            distance,
            heads,
        })?;
        let slopes = alibi::split(recency, distance, heads, self.magnitudes)?;
        Ok(opts.with_alibi(slopes))
    }

    fn windows(&self) -> Option<&[usize]> {
        Some(std::slice::from_ref(&self.window))
    }

    fn name(&self) -> &'static str {
        "SWAT"
    }

    fn label(&self, _head: usize) -> String {
        format!("SWAT W={}", self.window)
    }

    /// Every SWAT layer but the one with ALiBi alone.
    fn rotates(&self) -> bool {
        self.positions != SwatPositions::Alibi
    }
}

//! Score options of the core (docs/semantics.md §1, §4): softmax or sigmoid, softcap, scale and
//! ALiBi.

use serde::{Deserialize, Serialize};

use crate::AttentionError;

/// How scores become attention weights (docs/semantics.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ScoreFn {
    /// `exp(s − m) / Σ exp(s − m)` over the visible keys.
    Softmax,
    /// `σ(s + β)` with no normalisation (SWAT). SWAT's code uses `β = 0`; Apple's sigmoid
    /// attention recommends `β = −ln(window)`.
    Sigmoid {
        /// Bias added to every score before the sigmoid.
        beta: f32,
    },
}

/// Everything about a score except which keys are visible (that is the [`crate::WindowSpec`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreOptions {
    /// Softmax or sigmoid.
    pub score_fn: ScoreFn,
    /// Multiplier of `q·k`; `None` means `1/√d`.
    pub scale: Option<f32>,
    /// Softcap `c`: scores become `c·tanh(s/c)` (Gemma 2). `None` disables it.
    pub softcap: Option<f32>,
    /// ALiBi slope `m_h` per query head, bias `−m_h·(i − j)`: positive slopes are recency
    /// heads, negative ones distance heads (docs/semantics.md §4). Build them with
    /// [`crate::alibi`].
    pub alibi: Option<Vec<f32>>,
}

impl Default for ScoreOptions {
    fn default() -> Self {
        Self::softmax()
    }
}

impl ScoreOptions {
    /// Plain softmax attention with scale `1/√d`.
    pub fn softmax() -> Self {
        Self { score_fn: ScoreFn::Softmax, scale: None, softcap: None, alibi: None }
    }

    /// Sigmoid attention `σ(s + β)` (SWAT; docs/semantics.md §1).
    pub fn sigmoid(beta: f32) -> Self {
        Self { score_fn: ScoreFn::Sigmoid { beta }, ..Self::softmax() }
    }

    /// Sets the scale of `q·k`.
    pub fn with_scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Caps scores at `±c` with `c·tanh(s/c)`.
    pub fn with_softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }

    /// Adds ALiBi slopes, one per query head.
    pub fn with_alibi(mut self, slopes: Vec<f32>) -> Self {
        self.alibi = Some(slopes);
        self
    }

    /// The scale used for head dimension `d`.
    pub fn scale_for(&self, head_dim: usize) -> f32 {
        self.scale.unwrap_or(1.0 / (head_dim as f32).sqrt())
    }

    /// Checks the options against the number of query heads.
    pub fn check(&self, heads: usize) -> Result<(), AttentionError> {
        if let Some(c) = self.softcap
            && !(c.is_finite() && c > 0.0)
        {
            return Err(AttentionError::BadSoftcap(c));
        }
        if let Some(s) = self.scale
            && !s.is_finite()
        {
            return Err(AttentionError::BadScale(s));
        }
        if let Some(slopes) = &self.alibi
            && slopes.len() != heads
        {
            return Err(AttentionError::ShapeMismatch {
                what: "ALiBi slopes per head",
                expected: heads,
                got: slopes.len(),
            });
        }
        Ok(())
    }
}

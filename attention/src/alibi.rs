//! ALiBi slopes, including SWAT's balanced recency/distance split (docs/semantics.md §4).
//!
//! A slope `m_h > 0` makes head `h` a *recency* head (it penalises distance); `m_h < 0` makes it
//! a *distance* head (it rewards older keys inside the window). The bias is `−m_h·(i − j)`.

use serde::{Deserialize, Serialize};

use crate::AttentionError;

/// Which magnitudes the slopes take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlopeMagnitudes {
    /// `x^-k` with `x = 2^(8/H)`, as in SWAT's released code, which produced its published
    /// numbers. The default.
    #[default]
    Code,
    /// `2^-k`, as SWAT's paper text writes them.
    Paper,
}

impl SlopeMagnitudes {
    fn base(self, heads: usize) -> f64 {
        match self {
            SlopeMagnitudes::Code => 2f64.powf(8.0 / heads as f64),
            SlopeMagnitudes::Paper => 2.0,
        }
    }
}

/// SWAT's split `R:D`: the first `distance` heads are distance heads with slopes
/// `−x^-1 … −x^-D`, the last `recency` heads are recency heads with slopes `x^-R … x^-1`,
/// both in head order (docs/semantics.md §4).
pub fn split(
    recency: usize,
    distance: usize,
    heads: usize,
    magnitudes: SlopeMagnitudes,
) -> Result<Vec<f32>, AttentionError> {
    if recency + distance != heads || heads == 0 {
        return Err(AttentionError::BadAlibiSplit { recency, distance, heads });
    }
    let x = magnitudes.base(heads);
    let distance_heads = (1..=distance).map(|k| -x.powi(-(k as i32)));
    let recency_heads = (1..=recency).rev().map(|k| x.powi(-(k as i32)));
    Ok(distance_heads.chain(recency_heads).map(|m| m as f32).collect())
}

/// SWAT's balanced ALiBi: half distance heads, half recency heads (`H/2 : H/2`).
pub fn balanced(heads: usize, magnitudes: SlopeMagnitudes) -> Result<Vec<f32>, AttentionError> {
    split(heads - heads / 2, heads / 2, heads, magnitudes)
}

/// Every head a recency head (`H : 0`), the classic ALiBi set of slopes.
pub fn recency(heads: usize, magnitudes: SlopeMagnitudes) -> Result<Vec<f32>, AttentionError> {
    split(heads, 0, heads, magnitudes)
}

//! Multi-scale window allocation (MSWA; docs/semantics.md §3): a window per head and per layer.

use serde::{Deserialize, Serialize};

use swa_attention::AttentionError;

/// Which dimensions the windows vary over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MswaVariant {
    /// Every head and layer uses the base window `w` (SWA).
    Swa,
    /// Windows vary across heads only (MSWA-h): `W(l, h) = w·f[g_h]`.
    Heads,
    /// Windows vary across layers only (MSWA-l): `W(l, h) = w·f[g_l]`.
    Layers,
    /// Both (MSWA, the paper's Table 1): `W(l, h) = w·f[g_l]·f[g_h]`.
    Both,
}

/// How the multipliers grow across the four groups (the paper's Table 6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MswaStrategy {
    /// `f = (1/4, 1/2, 1, 2)`, shallow layers smallest. The default.
    #[default]
    Geometric,
    /// `f = (1/2, 3/4, 1, 5/4)`.
    Arithmetic,
    /// Geometric, with layer group `3 − g_l`: shallow layers largest.
    Reversed,
}

impl MswaStrategy {
    /// Multipliers in quarters: `f[g] = numerator[g] / 4`.
    fn quarters(self) -> [usize; 4] {
        match self {
            MswaStrategy::Arithmetic => [2, 3, 4, 5],
            MswaStrategy::Geometric | MswaStrategy::Reversed => [1, 2, 4, 8],
        }
    }
}

/// The windows `W(l, h)` of `layers × heads` for base window `base`, rounded down
/// (docs/semantics.md §3). Layer `l` is in group `⌊4l/L⌋`, head `h` in `⌊4h/H⌋`.
///
/// Errors when a variation needs four groups and `L < 4` or `H < 4`, or a window rounds to 0.
pub fn mswa_windows(
    variant: MswaVariant,
    strategy: MswaStrategy,
    base: usize,
    layers: usize,
    heads: usize,
) -> Result<Vec<Vec<usize>>, AttentionError> {
    let too_few = |what, got| AttentionError::ShapeMismatch { what, expected: 4, got };
    if matches!(variant, MswaVariant::Layers | MswaVariant::Both) && layers < 4 {
        return Err(too_few("MSWA layers (at least 4 to vary windows across layers)", layers));
    }
    if matches!(variant, MswaVariant::Heads | MswaVariant::Both) && heads < 4 {
        return Err(too_few("MSWA heads (at least 4 to vary windows across heads)", heads));
    }
    let f = strategy.quarters();
    let layer_quarters = |l: usize| {
        let group = 4 * l / layers;
        let group = if strategy == MswaStrategy::Reversed { 3 - group } else { group };
        match variant {
            MswaVariant::Layers | MswaVariant::Both => f[group],
            _ => 4,
        }
    };
    let head_quarters = |h: usize| match variant {
        MswaVariant::Heads | MswaVariant::Both => f[4 * h / heads],
        _ => 4,
    };
    let mut windows = Vec::with_capacity(layers);
    for l in 0..layers {
        let row: Vec<usize> =
            (0..heads).map(|h| base * layer_quarters(l) * head_quarters(h) / 16).collect();
        if let Some(head) = row.iter().position(|&w| w == 0) {
            return Err(AttentionError::ZeroWindow { head: l * heads + head });
        }
        windows.push(row);
    }
    Ok(windows)
}

/// MSWA's mechanism: a sliding window per head.
pub(crate) struct MultiScale<'a> {
    pub(crate) windows: &'a [usize],
}

impl super::mechanism::Mechanism for MultiScale<'_> {
    fn spec(
        &self,
        heads: usize,
        kv_heads: usize,
    ) -> Result<swa_attention::WindowSpec, AttentionError> {
        super::mechanism::expect_per_head("MultiScale.windows", self.windows.len(), heads)?;
        swa_attention::WindowSpec::per_head(self.windows, kv_heads)
    }

    fn windows(&self) -> Option<&[usize]> {
        Some(self.windows)
    }

    fn name(&self) -> &'static str {
        "MSWA"
    }

    fn label(&self, head: usize) -> String {
        let window = self.windows.get(head).map_or("?".to_string(), usize::to_string);
        format!("MSWA head window {window}")
    }
}

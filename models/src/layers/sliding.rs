//! Sliding-window attention (SWA; docs/semantics.md §2): each query sees the `W` most recent
//! keys, itself included.

use super::mechanism::Mechanism;
use swa_attention::{AttentionError, WindowSpec};

/// A sliding window of `window` keys.
pub(crate) struct Sliding {
    pub(crate) window: usize,
}

impl Mechanism for Sliding {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::sliding(heads, kv_heads, self.window)
    }

    fn windows(&self) -> Option<&[usize]> {
        Some(std::slice::from_ref(&self.window))
    }

    fn name(&self) -> &'static str {
        "sliding"
    }

    fn label(&self, _head: usize) -> String {
        format!("sliding W={}", self.window)
    }
}

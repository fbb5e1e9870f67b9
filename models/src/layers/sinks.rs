//! A sliding window plus attention sinks (StreamingLLM; docs/semantics.md §2, §7): the first
//! `sinks` positions stay visible to every query.

use super::mechanism::Mechanism;
use swa_attention::{AttentionError, WindowSpec};

/// `sinks` sink positions and a sliding window of `window` keys.
pub(crate) struct Sinks {
    pub(crate) sinks: usize,
    pub(crate) window: usize,
}

impl Mechanism for Sinks {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        Ok(WindowSpec::sliding(heads, kv_heads, self.window)?.with_sinks(self.sinks))
    }

    fn windows(&self) -> Option<&[usize]> {
        Some(std::slice::from_ref(&self.window))
    }

    fn window_sum(&self, heads: usize, n: usize) -> usize {
        heads * (self.sinks + self.window).min(n)
    }

    fn name(&self) -> &'static str {
        "sinks"
    }

    fn label(&self, _head: usize) -> String {
        format!("sliding W={} + {} sinks", self.window, self.sinks)
    }
}

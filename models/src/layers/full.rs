//! Full causal attention, the baseline: every query sees every earlier key.

use super::mechanism::Mechanism;
use swa_attention::{AttentionError, WindowSpec};

/// Full causal attention.
pub(crate) struct Full;

impl Mechanism for Full {
    fn spec(&self, heads: usize, kv_heads: usize) -> Result<WindowSpec, AttentionError> {
        WindowSpec::full(heads, kv_heads)
    }

    fn name(&self) -> &'static str {
        "full"
    }

    fn label(&self, _head: usize) -> String {
        "full causal".into()
    }
}

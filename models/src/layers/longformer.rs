//! Longformer's global rows (docs/semantics.md §2): the queries at global positions attend to every key
//! (causally in a decoder) through their own projections `Wq_g, Wk_g, Wv_g`, and replace the
//! local result for those rows. The local rows are one call of the core with the Longformer
//! window spec, whose global keys every query sees.

use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use swa_attention::expand_kv;
use swa_attention::index::{index_tensor, inverse_permutation};
use swa_attention::scores::attend;
use swa_attention::{ScoreOptions, WindowSpec};

/// Replaces the rows of `local: [batch, H, N, d]` at the spec's global positions with
/// attention of `q_g: [batch, H, N, d]` over `k_g, v_g: [batch, H_kv, N, d]`, every key the
/// spec shows a global query, scored with `opts`. Returns `[batch, H, N, d]`. O(|G|·N).
pub fn replace_global_rows<B: Backend>(
    local: Tensor<B, 4>,
    q_g: Tensor<B, 4>,
    k_g: Tensor<B, 4>,
    v_g: Tensor<B, 4>,
    spec: &WindowSpec,
    opts: &ScoreOptions,
) -> Tensor<B, 4> {
    let globals = spec.globals();
    let [_, heads, n, _] = local.dims();
    if globals.is_empty() {
        return local;
    }
    let device = local.device();
    let count = globals.len();
    let rows = index_tensor::<B>(globals.iter().copied(), &device);
    let mask = spec.mask(0..heads, globals.iter().copied(), 0..n, n);
    let mask =
        Tensor::<B, 4, Bool>::from_data(TensorData::new(mask, [1, heads, count, n]), &device);
    let (k_g, v_g) = (expand_kv(k_g, heads), expand_kv(v_g, heads));
    let (global, _) = attend(q_g.select(2, rows), k_g, v_g, mask, None, None, opts);
    // The rows of `local`, then the global rows appended: a global position reads the last
    // slot that holds it, its global row.
    let slots = (0..n).chain(globals.iter().copied()).map(Some);
    let index = index_tensor::<B>(inverse_permutation(n, slots), &device);
    Tensor::cat(vec![local, global], 2).select(2, index)
}

/// Longformer's mechanism: a dilated window per head, global positions, causal or not.
pub(crate) struct Longformer<'a> {
    pub(crate) window: usize,
    pub(crate) dilations: &'a [usize],
    pub(crate) globals: &'a [usize],
    pub(crate) causal: bool,
}

impl super::mechanism::Mechanism for Longformer<'_> {
    fn spec(
        &self,
        heads: usize,
        kv_heads: usize,
    ) -> Result<WindowSpec, swa_attention::AttentionError> {
        super::mechanism::expect_per_head("Longformer.dilations", self.dilations.len(), heads)?;
        let spec = WindowSpec::longformer(self.window, self.dilations, kv_heads, self.causal)?;
        Ok(spec.with_globals(self.globals.iter().copied()))
    }

    fn window_sum(&self, heads: usize, n: usize) -> usize {
        let local = if self.causal { self.window + 1 } else { 2 * self.window + 1 };
        heads * (local + self.globals.len()).min(n)
    }

    fn label(&self, head: usize) -> String {
        let dilation = self.dilations.get(head).map_or("?".to_string(), usize::to_string);
        let mut text = format!("Longformer w={} dilation {dilation}", self.window);
        if !self.globals.is_empty() {
            text += &format!(" globals {}", super::longnet::list(self.globals));
        }
        if !self.causal {
            text += " bidirectional";
        }
        text
    }

    fn global_positions(&self) -> &[usize] {
        self.globals
    }

    fn relative_positions_unsupported(&self) -> Option<&'static str> {
        match (self.globals.is_empty(), self.causal) {
            (false, _) => Some("Longformer with global tokens"),
            (true, false) => Some("bidirectional Longformer"),
            (true, true) => None,
        }
    }

    fn sink_logits_unsupported(&self) -> Option<&'static str> {
        (!self.globals.is_empty()).then_some("Longformer with global tokens")
    }

    /// An encoder's rows see later keys, which a memory of earlier segments cannot hold.
    fn memory_unsupported(&self) -> Option<&'static str> {
        (!self.causal).then_some("bidirectional Longformer")
    }
}

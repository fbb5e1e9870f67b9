//! What the benchmarks of the core itself (`benches/cpu_attention.rs`, `benches/gpu_attention.rs`)
//! share: which implementation a measurement runs, and the CSV their PyTorch anchors write
//! (`benches/anchors/`).

use std::path::Path;

use burn::tensor::Tensor;
use swa_attention::{
    ModelBackend, ScoreOptions, WindowSpec, blocked_attention, dense_attention, windowed_attention,
};

/// An implementation of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorePath {
    /// [`windowed_attention`]: the backend's fused kernel (CubeCL, or the CPU kernel on flex).
    Kernel,
    /// The blocked O(N·w) tensor-op path.
    Blocked,
    /// The dense reference.
    Dense,
}

/// `o` of a softmax call of `spec` through `path`: `q, k, v: [batch, H, N, d]` →
/// `[batch, H, N, d]`.
pub fn attend<B: ModelBackend>(
    path: CorePath,
    [q, k, v]: [Tensor<B, 4>; 3],
    spec: &WindowSpec,
) -> Tensor<B, 4> {
    let opts = ScoreOptions::softmax();
    let out = match path {
        CorePath::Kernel => windowed_attention(q, k, v, spec, &opts),
        CorePath::Blocked => blocked_attention(q, k, v, spec, &opts),
        CorePath::Dense => dense_attention(q, k, v, spec, &opts),
    };
    out.expect("a benchmark's call is valid").0
}

/// The data rows of an anchors CSV (its header skipped), each split at its commas.
pub fn anchor_rows(path: &Path) -> std::io::Result<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().skip(1).map(|line| line.split(',').map(str::to_string).collect()).collect())
}

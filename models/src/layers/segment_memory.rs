//! Segment memory (Transformer-XL, Dai et al., 2019, §3.2; docs/semantics.md §10): a layer that
//! reads a stream segment by segment keeps what its queries can still see of the earlier
//! segments, so that windows reach across segment boundaries.
//!
//! A windowed layer keeps its own inputs (the hidden states after the block's norm) for the
//! stream positions its widest window reaches back to, and the stream's sinks for good; the
//! next segment computes their keys and values with the current weights, so gradients reach the
//! projections but stop at the kept states. Linear attention keeps its sums. Kinds whose
//! visibility depends on absolute positions say what they keep: sinks and Longformer's global
//! tokens stay for good (global tokens must lie in the first segment, since a global query sees
//! every earlier position), LongNet keeps nothing but needs segments made of whole LongNet
//! segments, and encoders are refused.

use burn::tensor::{Tensor, TensorData, backend::Backend};
use serde::{Deserialize, Serialize};

use crate::layers::taylor::LinearState;
use swa_attention::index::index_tensor;
use swa_attention::{ModelBackend, Rope, WindowSpec};

/// Where the rows of one call of a layer's attention sit in its stream: the stream position of
/// every key row (the queries are the last of them), and how many key rows come before the
/// first query (the memory of earlier segments; docs/semantics.md §10).
pub struct StreamRows {
    /// Stream position of each key row, for RoPE.
    pub positions: Vec<usize>,
    /// Key rows before the first query.
    pub memory: usize,
    /// The key rows of the spec's global positions, when they are not where the spec says
    /// (kept rows of earlier segments); `None`: the spec's own.
    pub globals: Option<Vec<usize>>,
}

impl StreamRows {
    /// N rows at positions `0 … N−1`, no memory.
    pub fn alone(n: usize) -> Self {
        Self { positions: (0..n).collect(), memory: 0, globals: None }
    }

    /// `spec` for a call over these rows: its queries after the memory, its global keys where
    /// the rows hold them.
    pub fn place(&self, spec: &WindowSpec) -> WindowSpec {
        let spec = spec.clone().with_query_offset(self.memory);
        match &self.globals {
            Some(globals) => spec.with_globals_replaced(globals.iter().copied()),
            None => spec,
        }
    }

    /// q `[batch, H, N, d]` and k `[batch, H_kv, M + N, d]` rotated at these rows' positions
    /// (the queries are the last N).
    pub fn rotate<B: ModelBackend>(
        &self,
        rope: &Rope,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let queries = &self.positions[self.positions.len() - q.dims()[2]..];
        (rope.forward_at(q, queries), rope.forward_at(k, &self.positions))
    }
}

/// Which earlier positions of a stream a windowed layer keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keep {
    /// The first positions of the stream, kept for good (attention sinks).
    pub sinks: usize,
    /// The latest positions before the next segment: the widest window's reach less one.
    pub recent: usize,
    /// Longformer's global positions, kept for good once read, sorted.
    pub globals: Vec<usize>,
}

impl Keep {
    /// Nothing.
    pub(crate) fn nothing() -> Self {
        Self { sinks: 0, recent: 0, globals: Vec::new() }
    }

    /// What a causal layer of `spec` keeps: its widest window's reach less one (`full_memory`
    /// positions if a head has no reach), its sinks and its global positions.
    pub(crate) fn of(spec: &WindowSpec, full_memory: usize) -> Self {
        // Unbounded if any head is.
        let reaches: Option<Vec<usize>> = spec.heads().iter().map(|w| w.reach()).collect();
        let recent = reaches.and_then(|r| r.into_iter().max()).map_or(full_memory, |r| r - 1);
        Self { sinks: spec.sinks(), recent, globals: spec.globals().to_vec() }
    }

    /// Whether the row at stream position `p` is kept once the stream has reached `end`.
    fn keeps(&self, p: usize, end: usize) -> bool {
        p < self.sinks || p + self.recent >= end || self.globals.binary_search(&p).is_ok()
    }
}

/// One layer's memory of the stream it is reading, made by its mechanism
/// ([`Attend::memory`](crate::layers::attend::Attend::memory)). A clone is an independent copy.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LayerMemory<B: Backend> {
    /// A windowed layer's kept inputs.
    Hidden {
        /// The kept inputs `[batch, M, d_model]`, detached, in stream order; `None` before the
        /// first segment or when the layer keeps nothing.
        rows: Option<Tensor<B, 3>>,
        /// The stream position of each kept row.
        positions: Vec<usize>,
        /// What the layer keeps.
        keep: Keep,
        /// The stream position of the next segment's first token.
        start: usize,
    },
    /// Linear attention's sums over every earlier position, detached.
    Linear(LinearState<B>),
}

impl<B: Backend> LayerMemory<B> {
    /// An empty memory of a windowed layer that keeps `keep`.
    pub(crate) fn hidden(keep: Keep) -> Self {
        Self::Hidden { rows: None, positions: Vec::new(), keep, start: 0 }
    }

    /// The stream position of the next segment's first token.
    pub fn start(&self) -> usize {
        match self {
            Self::Hidden { start, .. } => *start,
            Self::Linear(state) => state.position,
        }
    }

    /// The memory of a stream whose next segment starts at `start` but of which nothing was
    /// kept: the kept rows and sums stay as they are (empty for a fresh memory), and the
    /// segment's rows sit at their stream positions.
    pub fn starting_at(mut self, at: usize) -> Self {
        match &mut self {
            Self::Hidden { start, .. } => *start = at,
            Self::Linear(state) => state.position = at,
        }
        self
    }

    /// How many earlier positions a windowed layer keeps now; `None` for linear attention,
    /// which keeps sums.
    pub fn kept_positions(&self) -> Option<usize> {
        match self {
            Self::Hidden { positions, .. } => Some(positions.len()),
            Self::Linear(_) => None,
        }
    }

    /// Bytes held: the kept rows, or linear attention's sums.
    pub fn bytes(&self) -> usize {
        let bytes = |elements: usize, t: burn::tensor::DType| elements * t.size();
        match self {
            Self::Hidden { rows, .. } => {
                rows.as_ref().map_or(0, |r| bytes(r.shape().num_elements(), r.dtype()))
            }
            Self::Linear(state) => state.bytes(),
        }
    }

    /// The key rows of the next segment `x: [batch, N, d_model]`, the kept rows before its
    /// own, and where they sit in the stream, the kept global positions among them.
    pub(crate) fn rows_before(&self, x: Tensor<B, 3>) -> (Tensor<B, 3>, StreamRows) {
        let Self::Hidden { rows, positions, keep, start } = self else {
            unreachable!("linear attention keeps its sums, not its inputs")
        };
        let kept = positions.iter().enumerate();
        let globals = kept.filter(|(_, p)| keep.globals.binary_search(p).is_ok()).map(|(r, _)| r);
        let mut placement = StreamRows {
            positions: positions.clone(),
            memory: positions.len(),
            globals: Some(globals.collect()),
        };
        placement.positions.extend(*start..*start + x.dims()[1]);
        let rows = match rows {
            Some(rows) => Tensor::cat(vec![rows.clone(), x], 1),
            None => x,
        };
        (rows, placement)
    }

    /// Adds a segment's inputs `x: [batch, N, d_model]` (detached here) and keeps what the layer
    /// keeps.
    pub(crate) fn remember(&mut self, x: Tensor<B, 3>) {
        let Self::Hidden { rows, positions, keep, start } = self else {
            unreachable!("linear attention keeps its sums, not its inputs")
        };
        let n = x.dims()[1];
        let end = *start + n;
        let all: Vec<usize> = positions.iter().copied().chain(*start..end).collect();
        let kept: Vec<usize> = (0..all.len()).filter(|&r| keep.keeps(all[r], end)).collect();
        let joined = match rows.take() {
            Some(old) => Tensor::cat(vec![old, x.detach()], 1),
            None => x.detach(),
        };
        *rows = (!kept.is_empty()).then(|| {
            joined.clone().select(1, index_tensor::<B>(kept.iter().copied(), &joined.device()))
        });
        *positions = kept.iter().map(|&r| all[r]).collect();
        *start = end;
    }
}

/// A [`LayerMemory`] on the host, in f32, to save with a checkpoint and restore exactly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum LayerMemoryData {
    /// [`LayerMemory::Hidden`]: the kept rows `[batch, M, d_model]` row-major, if any.
    Hidden {
        rows: Option<(Vec<f32>, [usize; 3])>,
        positions: Vec<usize>,
        sinks: usize,
        recent: usize,
        globals: Vec<usize>,
        start: usize,
    },
    /// [`LayerMemory::Linear`]: `Σ φ(k)ᵀv` `[batch, H, F, d_h]` and `Σ φ(k)` `[batch, H, F]`.
    Linear { kv: (Vec<f32>, [usize; 4]), k_sum: (Vec<f32>, [usize; 3]), position: usize },
}

/// A tensor's values in f32 and its shape.
fn host<B: Backend, const D: usize>(t: &Tensor<B, D>) -> (Vec<f32>, [usize; D]) {
    let values = t.to_data().convert::<f32>().to_vec().expect("f32 values");
    (values, t.dims())
}

/// The tensor of `(values, shape)` on `device`, in the device's float type.
fn device_tensor<B: Backend, const D: usize>(
    (values, shape): (Vec<f32>, [usize; D]),
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

impl<B: Backend> LayerMemory<B> {
    /// The memory on the host, as a checkpoint saves it.
    pub fn to_data(&self) -> LayerMemoryData {
        match self {
            Self::Hidden { rows, positions, keep, start } => LayerMemoryData::Hidden {
                rows: rows.as_ref().map(host),
                positions: positions.clone(),
                sinks: keep.sinks,
                recent: keep.recent,
                globals: keep.globals.clone(),
                start: *start,
            },
            Self::Linear(state) => LayerMemoryData::Linear {
                kv: host(&state.kv),
                k_sum: host(&state.k_sum),
                position: state.position,
            },
        }
    }

    /// The memory saved by [`LayerMemory::to_data`], on `device`.
    pub fn from_data(data: LayerMemoryData, device: &B::Device) -> Self {
        match data {
            LayerMemoryData::Hidden { rows, positions, sinks, recent, globals, start } => {
                Self::Hidden {
                    rows: rows.map(|rows| device_tensor(rows, device)),
                    positions,
                    keep: Keep { sinks, recent, globals },
                    start,
                }
            }
            LayerMemoryData::Linear { kv, k_sum, position } => Self::Linear(LinearState {
                kv: device_tensor(kv, device),
                k_sum: device_tensor(k_sum, device),
                position,
            }),
        }
    }
}

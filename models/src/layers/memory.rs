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

use super::LayerError;
use crate::layers::SelfAttention;
use crate::layers::linear::LinearState;
use crate::layers::mixer::Mixer;
use crate::layers::self_attention::StreamRows;
use swa_attention::ModelBackend;
use swa_attention::index::index_tensor;

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
    fn nothing() -> Self {
        Self { sinks: 0, recent: 0, globals: Vec::new() }
    }

    /// Whether the row at stream position `p` is kept once the stream has reached `end`.
    fn keeps(&self, p: usize, end: usize) -> bool {
        p < self.sinks || p + self.recent >= end || self.globals.binary_search(&p).is_ok()
    }
}

/// One layer's memory of the stream it is reading, made by [`SelfAttention::memory`]. A clone is
/// an independent copy.
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
            Self::Linear(state) => {
                bytes(state.kv.shape().num_elements(), state.kv.dtype())
                    + bytes(state.k_sum.shape().num_elements(), state.k_sum.dtype())
            }
        }
    }

    /// Adds a segment's inputs `x: [batch, N, d_model]` (detached here) and keeps what the layer
    /// keeps.
    fn remember(&mut self, x: Tensor<B, 3>) {
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

impl<B: Backend> SelfAttention<B> {
    /// An empty memory for `batch` streams (docs/semantics.md §10). Windowed layers keep their
    /// widest window's reach less one, and their sinks and global tokens; full attention keeps
    /// `full_memory` positions (Transformer-XL's memory length); LongNet keeps nothing; linear
    /// attention its sums. Fails, naming the kind, for an encoder, and for sinks with
    /// Transformer-XL's relative positions (their distances would not be the stream's).
    pub fn memory(
        &self,
        batch: usize,
        full_memory: usize,
        device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError> {
        Ok(match (self.keep(full_memory)?, &self.mixer) {
            (None, Mixer::Linear(linear)) => LayerMemory::Linear(linear.empty_state(batch, device)),
            (keep, _) => LayerMemory::Hidden {
                rows: None,
                positions: Vec::new(),
                keep: keep.unwrap_or_else(Keep::nothing),
                start: 0,
            },
        })
    }

    /// Whether the layer can read a stream in segments of `segment` tokens with memory: the
    /// errors [`SelfAttention::memory`] and [`SelfAttention::forward_in_stream`] would give,
    /// before any work.
    pub fn check_stream(&self, segment: usize) -> Result<(), LayerError> {
        self.keep(0)?;
        self.check_segment(segment, 0)
    }

    /// Whether a segment of `segment` tokens at stream position `start` can be read: LongNet's
    /// segments must tile it, and the stream's first segment must hold every global position.
    fn check_segment(&self, segment: usize, start: usize) -> Result<(), LayerError> {
        if let Some((segments, _)) = self.kind.branches() {
            return match segments.iter().find(|&&s| s == 0 || !segment.is_multiple_of(s)) {
                Some(&branch) => Err(LayerError::LongNetSegmentsInStream { segment, branch }),
                None => Ok(()),
            };
        }
        match self.kind.global_positions().iter().max() {
            Some(&position) if start == 0 && position >= segment => {
                Err(LayerError::GlobalPastFirstSegment { position, segment })
            }
            _ => Ok(()),
        }
    }

    /// What a windowed layer keeps, `None` for linear attention (its sums); fails for the kinds
    /// that cannot keep a bounded memory.
    fn keep(&self, full_memory: usize) -> Result<Option<Keep>, LayerError> {
        if let Mixer::Linear(_) = &self.mixer {
            return Ok(None);
        }
        if let Some(kind) = self.kind.memory_unsupported() {
            return Err(LayerError::MemoryUnsupported { kind });
        }
        let keep = match self.kind.branches() {
            Some(_) => Keep::nothing(),
            None => {
                let spec = self.kind.spec(self.heads, self.kv_heads)?;
                // Unbounded if any head is.
                let reaches: Option<Vec<usize>> = spec.heads().iter().map(|w| w.reach()).collect();
                let recent =
                    reaches.and_then(|r| r.into_iter().max()).map_or(full_memory, |r| r - 1);
                Keep { sinks: spec.sinks(), recent, globals: spec.globals().to_vec() }
            }
        };
        if keep.sinks > 0 && self.has_relative_positions() {
            let kind = "sinks with Transformer-XL relative positions";
            return Err(LayerError::MemoryUnsupported { kind });
        }
        Ok(Some(keep))
    }
}

impl<B: ModelBackend> SelfAttention<B> {
    /// The next segment of a stream, `x: [batch, N, d_model]` at stream positions
    /// `memory.start() …` → `[batch, N, d_model]`, its queries seeing the kept rows of earlier
    /// segments as well as their own (docs/semantics.md §10); then `memory` keeps what the next
    /// segment can see. With a memory that holds every position a window reaches, the result
    /// is the same as the rows of one forward over the whole stream. Fails for LongNet when a
    /// branch's segment does not divide N (its segments would straddle two of ours).
    pub fn forward_in_stream(
        &self,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let mixer = match (&mut *memory, &self.mixer) {
            (LayerMemory::Linear(state), Mixer::Linear(linear)) => {
                let (y, next) = linear.forward_from(x, state);
                *state = next;
                return Ok(y);
            }
            (LayerMemory::Hidden { .. }, Mixer::Windowed(mixer)) => mixer,
            _ => unreachable!("a layer's memory is made by its own `memory`"),
        };
        let n = x.dims()[1];
        let LayerMemory::Hidden { rows, positions, start, keep } = &*memory else {
            unreachable!("matched above")
        };
        self.check_segment(n, *start)?;
        if *start == 0 {
            // The stream's first segment: the layer's own forward, Longformer's global rows
            // included (they lie in it).
            let (q, k, v) = self.project(&mixer.local, x.clone());
            let globals = mixer.global.as_ref().map(|global| self.project(global, x.clone()));
            let out = self.attend(q, k, v, globals)?;
            memory.remember(x);
            return Ok(self.merge(mixer, out));
        }
        // Kept global positions, where they sit among the key rows of this call.
        let kept = positions.iter().enumerate();
        let globals = kept.filter(|(_, p)| keep.globals.binary_search(p).is_ok()).map(|(r, _)| r);
        let mut placement = StreamRows {
            positions: positions.clone(),
            memory: positions.len(),
            globals: Some(globals.collect()),
        };
        placement.positions.extend(*start..*start + n);
        // The kept rows and the segment's in one product; the kept rows' queries are dropped.
        let (rows, kept) = match rows {
            Some(rows) => (Tensor::cat(vec![rows.clone(), x.clone()], 1), rows.dims()[1]),
            None => (x.clone(), 0),
        };
        let (q, k, v) = self.project(&mixer.local, rows);
        let q = q.narrow(2, kept, n);
        let out = self.attend_placed(q, k, v, &placement)?;
        memory.remember(x);
        Ok(self.merge(mixer, out))
    }
}

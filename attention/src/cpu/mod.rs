//! The fused CPU kernel of the windowed core (docs/semantics.md §1–§5), FlashAttention-2 style,
//! on plain f32 slices.
//!
//! The blocked path ([`crate::blocked`]) builds every block out of tensor ops and materialises
//! its scores; on a CPU most of its time goes to those temporaries. This kernel streams instead:
//! a tile of query rows keeps its output accumulator, reads the keys its windows can reach in
//! chunks, and folds each chunk in with an online softmax (running maximum and sum) or with plain
//! sums of `σ(s + β)`. No score, weight or mask tensor is ever stored.
//!
//! - `schedule` decides which keys each tile reads, from [`crate::WindowSpec`] alone: stride
//!   classes (a dilated head reads only its class's keys), window ranges, sinks and globals;
//!   `gather` lays each list's rows out contiguously and puts the tiles' rows back.
//! - `block` scores one chunk (`scale·q·k`, softcap, ALiBi, −∞ where not visible), with the
//!   block products of `matmul` (gemm) and the vectorised `exp` and reductions of `math`.
//! - [`decode`] is the fused decode step of the bounded caches: one query per head against its
//!   ring buffer; [`write_slot`] their fused append.
//! - [`forward`] computes `o` and `lse`; [`backward`] the exact `dq`, `dk`, `dv` from `∂L/∂o`
//!   and `∂L/∂lse`, recomputing weights from `lse` (a dQ pass over query tiles, a dK/dV pass over
//!   key tiles, each owning its outputs).
//!
//! # Layout contract
//!
//! Every buffer is contiguous and row-major, in f32 ([`Dims`] names the sizes):
//! - inputs `q: [batch, H, N_q, d]`, `k, v: [batch, H_kv, N_k, d]` (GQA: query head `h` reads kv
//!   head [`crate::WindowSpec::kv_head_of`]);
//! - outputs `o: [batch, H, N_q, d]` and `lse: [batch, H, N_q]`, in separate buffers, with `lse`
//!   as in [`crate::windowed_attention`]: the softmax log-normaliser, or for sigmoid the log of
//!   the total weight; rows that see no key give `o = 0` and `lse = −∞`;
//! - the backward takes `∂L/∂o` and `∂L/∂lse` in those shapes and returns `dq`, `dk`, `dv` in the
//!   shapes of `q`, `k`, `v`; padded keys (at or past the spec's valid length) get zeros.
//!
//! `flex` makes it the windowed core of `Flex` (and, through `crate::autodiff`, of
//! `Autodiff<Flex>`).
//!
//! Every option of [`crate::WindowSpec`] and [`crate::ScoreOptions`] runs, global tokens
//! included: a global query's tile reads every key, and global keys are read like sinks.
//! Threads (rayon) go over (batch, kv head) slabs and, inside, over tiles.

mod backward;
mod block;
mod cross_entropy;
mod decode;
mod flex;
mod forward;
mod gather;
mod layer_ops;
pub mod layout;
mod linear;
mod math;
mod matmul;
mod rope;
mod schedule;
#[cfg(test)]
mod tests;

pub use backward::{BackwardInputs, Gradients, backward};
pub(crate) use block::RelativeSlab;
pub use decode::{DecodeBuffer, decode, write_slot};
pub use forward::{Output, forward};
pub use linear::isa::{ISA_VARIABLE, Isa};

use crate::{AttentionError, ScoreOptions, WindowSpec};

/// A relative-score table (docs/semantics.md §4): `[batch, H, N_q, len]` row-major, entry
/// `(i, δ)` added to the score of the key at distance `δ` from query `i`.
#[derive(Clone, Copy, Debug)]
pub struct Relative<'a> {
    /// The table's entries.
    pub table: &'a [f32],
    /// Distances per query row, `L`.
    pub len: usize,
}

impl<'a> Relative<'a> {
    /// The rows of slab `index` (one batch element and kv head: `[G_kv, N_q, len]`).
    fn slab(&self, index: usize, dims: Dims) -> RelativeSlab<'a> {
        let rows = dims.group() * dims.q_len * self.len;
        let table = &self.table[index * rows..(index + 1) * rows];
        RelativeSlab { rows: table, len: self.len, q_len: dims.q_len, group: dims.group() }
    }
}

/// The sizes of one call: `q: [batch, heads, q_len, dim]`, `k, v: [batch, kv_heads, keys, dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Batch size.
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `H_kv`, dividing `H`.
    pub kv_heads: usize,
    /// Query rows `N_q` per head.
    pub q_len: usize,
    /// Key rows `N_k` per kv head, padding included.
    pub keys: usize,
    /// Head dimension `d` of queries, keys and values, at least 1.
    pub dim: usize,
}

impl Dims {
    /// Elements of `q`, `o` and their gradients.
    pub fn query_elements(&self) -> usize {
        self.batch * self.heads * self.q_len * self.dim
    }

    /// Elements of `k`, `v` and their gradients.
    pub fn key_elements(&self) -> usize {
        self.batch * self.kv_heads * self.keys * self.dim
    }

    /// Elements of `lse` and its gradient: one per query row.
    pub fn rows(&self) -> usize {
        self.batch * self.heads * self.q_len
    }

    /// Query heads per kv head.
    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Checks the spec, the options and the length of every `(name, buffer, expected length)`
    /// against these sizes; returns the number of valid keys.
    fn check(
        &self,
        spec: &WindowSpec,
        opts: &ScoreOptions,
        buffers: &[(&'static str, &[f32], usize)],
    ) -> Result<usize, AttentionError> {
        let kv_len = spec.check(self.heads, self.kv_heads, self.keys)?;
        opts.check(self.heads)?;
        if self.dim == 0 {
            return Err(AttentionError::ShapeMismatch { what: "head dim", expected: 1, got: 0 });
        }
        for &(what, buffer, expected) in buffers {
            if buffer.len() != expected {
                return Err(AttentionError::ShapeMismatch { what, expected, got: buffer.len() });
            }
        }
        Ok(kv_len)
    }
}

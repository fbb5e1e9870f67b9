//! The errors of the attention crate: every bad input is named before any tensor is touched.

use std::fmt;

use crate::rope::RopeScaling;

/// Why a window spec, score option or attention call was rejected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AttentionError {
    /// A sliding window must see at least one key (docs/semantics.md §2: `W = 0` is an error).
    ZeroWindow { head: usize },
    /// A dilation must be at least 1 (docs/semantics.md §2).
    ZeroDilation { head: usize },
    /// A LongNet segment length must be at least 1 (docs/semantics.md §5).
    ZeroSegment { head: usize },
    /// A LongNet head offset must be smaller than the branch's dilation (docs/semantics.md §5).
    PhaseOutOfRange { head: usize, phase: usize, dilation: usize },
    /// The number of query heads must be a multiple of the number of kv heads (GQA).
    HeadsNotDivisible { heads: usize, kv_heads: usize },
    /// A spec needs at least one head.
    NoHeads,
    /// A global position lies past the end of the key sequence (docs/semantics.md §2).
    GlobalOutOfRange { position: usize, len: usize },
    /// The tensors and the spec disagree on a size.
    ShapeMismatch { what: &'static str, expected: usize, got: usize },
    /// The valid key length exceeds the key tensor's length.
    KvLenTooLong { kv_len: usize, keys: usize },
    /// A softcap must be a positive finite number.
    BadSoftcap(f32),
    /// A score scale must be a finite number.
    BadScale(f32),
    /// An ALiBi split `R:D` must use every head exactly once (docs/semantics.md §4).
    BadAlibiSplit { recency: usize, distance: usize, heads: usize },
    /// A RoPE scaling whose factors describe no stretch (docs/semantics.md §9).
    BadRopeScaling(RopeScaling),
    /// A relative-score table has a column per distance `0 … L−1`, and the call's queries see
    /// keys further away (docs/semantics.md §4).
    RelativeTableTooShort { needed: usize, got: usize },
    /// Relative scores are indexed by the distance `i − j ≥ 0` of a causal call.
    RelativeScoresNotCausal,
}

impl fmt::Display for AttentionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use AttentionError::*;
        match self {
            ZeroWindow { head } => write!(f, "head {head}: window size 0 sees no key; use W >= 1"),
            ZeroDilation { head } => {
                write!(f, "head {head}: dilation 0 is invalid; use dilation >= 1")
            }
            ZeroSegment { head } => write!(f, "head {head}: LongNet segment length 0 is invalid"),
            PhaseOutOfRange { head, phase, dilation } => write!(
                f,
                "head {head}: LongNet offset {phase} must be smaller than the dilation {dilation}"
            ),
            HeadsNotDivisible { heads, kv_heads } => write!(
                f,
                "{heads} query heads are not divisible by {kv_heads} kv heads (GQA needs H % H_kv == 0)"
            ),
            NoHeads => write!(f, "a window spec needs at least one head"),
            GlobalOutOfRange { position, len } => {
                write!(f, "global position {position} is outside the key sequence of length {len}")
            }
            ShapeMismatch { what, expected, got } => {
                write!(f, "{what}: expected {expected}, got {got}")
            }
            KvLenTooLong { kv_len, keys } => {
                write!(f, "valid kv length {kv_len} is longer than the {keys} keys given")
            }
            BadSoftcap(c) => write!(f, "softcap must be positive and finite, got {c}"),
            BadScale(s) => write!(f, "score scale must be finite, got {s}"),
            BadAlibiSplit { recency, distance, heads } => {
                write!(f, "ALiBi split {recency}:{distance} does not add up to the {heads} heads")
            }
            BadRopeScaling(scaling) => write!(f, "RoPE scaling {scaling:?} describes no stretch"),
            RelativeTableTooShort { needed, got } => write!(
                f,
                "the relative scores cover distances 0..{got}, but queries see keys up to distance {}",
                needed.saturating_sub(1)
            ),
            RelativeScoresNotCausal => {
                write!(f, "relative scores need a causal window spec (distances i - j >= 0)")
            }
        }
    }
}

impl std::error::Error for AttentionError {}

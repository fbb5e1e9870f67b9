//! The errors of a model's attention layers: the windowed core's, and those of what a layer
//! builds on it (sink logits, attention maps, relative positions, the KV cache, segment
//! memory), which the core itself never raises.

use std::fmt;

use swa_attention::AttentionError;

/// Why an attention layer rejected its configuration or its input.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LayerError {
    /// The windowed core rejected the layer's window spec, score options or tensors.
    Attention(AttentionError),
    /// Token-by-token decoding needs a causal layer; an encoder sees later tokens
    /// (docs/semantics.md §7).
    NotCausal {
        /// What is bidirectional.
        what: &'static str,
    },
    /// Learned sink logits join one softmax denominator (docs/semantics.md §9): the kind named
    /// mixes several (LongNet), has none (linear, sigmoid scores) or replaces rows (Longformer's
    /// globals).
    SinkLogitsUnsupported {
        /// The attention kind.
        kind: &'static str,
    },
    /// Attention maps are weights over keys; the kind named has none (linear attention).
    NoAttentionMap {
        /// The attention kind.
        kind: &'static str,
    },
    /// Transformer-XL's relative positions go through the core's relative scores, which the
    /// kind named does not take (docs/semantics.md §4).
    RelativePositionsUnsupported {
        /// The attention kind.
        kind: &'static str,
    },
    /// The KV cache does not score Transformer-XL's relative positions yet: a layer with them
    /// runs whole sequences and streams of segments, not token-by-token decoding.
    NoRelativeDecoding,
    /// Segment memory keeps what a layer's windows reach; the kind named sees positions no
    /// bounded memory holds, or would see them at other distances (docs/semantics.md §10).
    MemoryUnsupported {
        /// The attention kind.
        kind: &'static str,
    },
    /// With segment memory, the segments of heads confined to segments (LongNet's branches)
    /// must tile the stream's segments of length `segment`: `branch` must divide it
    /// (docs/semantics.md §10).
    SegmentsInStream {
        /// The stream's segment length.
        segment: usize,
        /// The head's segment length.
        branch: usize,
    },
    /// With segment memory, Longformer's global positions must lie in the stream's first
    /// segment, of `segment` tokens: a global query sees every earlier position, which only the
    /// first segment holds without memory (docs/semantics.md §10).
    GlobalPastFirstSegment {
        /// The global position.
        position: usize,
        /// The stream's segment length.
        segment: usize,
    },
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use LayerError::*;
        match self {
            Attention(source) => source.fmt(f),
            NotCausal { what } => {
                write!(f, "{what} is bidirectional (an encoder) and cannot decode token by token")
            }
            SinkLogitsUnsupported { kind } => {
                write!(f, "learned sink logits need one softmax per row; {kind} attention has none")
            }
            NoAttentionMap { kind } => write!(f, "{kind} attention has no attention map"),
            RelativePositionsUnsupported { kind } => {
                write!(f, "Transformer-XL relative positions are not supported by {kind} attention")
            }
            NoRelativeDecoding => write!(
                f,
                "token-by-token decoding does not support Transformer-XL relative positions yet"
            ),
            MemoryUnsupported { kind } => write!(f, "segment memory is not supported for {kind}"),
            SegmentsInStream { segment, branch } => write!(
                f,
                "attention segment {branch} (a LongNet branch's) does not divide the stream's \
                 segment length {segment}: with segment memory, use segments that are multiples \
                 of every attention segment"
            ),
            GlobalPastFirstSegment { position, segment } => write!(
                f,
                "Longformer global position {position} is past the stream's first segment of \
                 {segment} tokens: with segment memory, global tokens must lie in it"
            ),
        }
    }
}

impl std::error::Error for LayerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LayerError::Attention(source) => Some(source),
            _ => None,
        }
    }
}

impl From<AttentionError> for LayerError {
    fn from(error: AttentionError) -> Self {
        LayerError::Attention(error)
    }
}

//! The synthetic tasks of [`crate::tasks`] as training data and as an accuracy test.
//!
//! A [`SyntheticTask`] is saved in a run's `train.json`; the loader draws its examples from
//! `(seed, index)` like text windows, and the loss covers the scored positions only (the MQAR
//! values asked for, the passkey's digits, the majority's class at the CLS token).
//! [`model_accuracy`] runs a model on fresh examples and counts the scored positions whose most
//! likely token is the answer. [`influence`] says which positions can reach a given one through the stack's
//! masks: what a windowed model can know at the position it is scored.

use serde::{Deserialize, Serialize};
use swa_attention::ModelBackend;
use swa_attention::rng::SplitMix64;
use swa_models::{Decoder, DecoderConfig, ModelError};

use crate::batch::TokenBatch;
use crate::error::TrainingError;
use crate::tasks::{Example, Majority, Mqar, Passkey, correct_answers, exact_match};

/// A synthetic task to train on, with its sequence length given by the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SyntheticTask {
    /// Multi-query associative recall: `pairs` key-value pairs, every key asked for once
    /// afterwards ([`Mqar`] with `queries = pairs`).
    Mqar {
        /// Key-value pairs per example.
        pairs: usize,
        /// Distinct key tokens.
        key_vocab: usize,
        /// Distinct value tokens.
        value_vocab: usize,
    },
    /// Passkey retrieval of a `digits`-digit key, at a distance drawn per example among all
    /// that fit in the sequence ([`Passkey`]).
    Passkey {
        /// Digits of the key.
        digits: usize,
    },
    /// Majority vote ([`Majority`]): `markers` markers A or B spread over the sequence among
    /// random filler, and the marker that occurs more often asked at the CLS token, position 0.
    /// For encoders: a causal model sees nothing after position 0.
    Majority {
        /// Markers per example (odd).
        markers: usize,
        /// Distinct filler tokens.
        filler_vocab: usize,
    },
}

impl SyntheticTask {
    /// MQAR with `pairs` pairs over 64 keys and 64 values.
    pub fn mqar(pairs: usize) -> Self {
        SyntheticTask::Mqar { pairs, key_vocab: 64, value_vocab: 64 }
    }

    /// Passkey retrieval of `digits` digits.
    pub fn passkey(digits: usize) -> Self {
        SyntheticTask::Passkey { digits }
    }

    /// Majority vote over `markers` markers among 64 filler tokens.
    pub fn majority(markers: usize) -> Self {
        SyntheticTask::Majority { markers, filler_vocab: 64 }
    }

    /// Whether examples of `seq_len` tokens exist, naming the field at fault.
    pub fn validate(&self, seq_len: usize) -> Result<(), TrainingError> {
        match *self {
            SyntheticTask::Mqar { pairs, key_vocab, value_vocab } => {
                Mqar::new(pairs, pairs, seq_len, key_vocab, value_vocab).map(|_| ())
            }
            SyntheticTask::Passkey { digits } => {
                Passkey::new(seq_len, Passkey::min_distance(digits), digits).map(|_| ())
            }
            SyntheticTask::Majority { markers, filler_vocab } => {
                Majority::new(seq_len, markers, filler_vocab).map(|_| ())
            }
        }
    }

    /// Example `index` of `seq_len` tokens under `seed`.
    pub fn example(&self, seq_len: usize, seed: u64, index: u64) -> Result<Example, TrainingError> {
        match *self {
            SyntheticTask::Mqar { pairs, key_vocab, value_vocab } => {
                Mqar::new(pairs, pairs, seq_len, key_vocab, value_vocab)?.sample(seed, index)
            }
            SyntheticTask::Passkey { digits } => {
                let (min, max) =
                    (Passkey::min_distance(digits), Passkey::max_distance(seq_len, digits));
                let mut rng = SplitMix64::for_index(seed ^ 0xD157_A4CE, index);
                let distance = min + rng.below(max.saturating_sub(min) + 1);
                Passkey::new(seq_len, distance, digits)?.sample(seed, index)
            }
            SyntheticTask::Majority { markers, filler_vocab } => {
                Majority::new(seq_len, markers, filler_vocab)?.sample(seed, index)
            }
        }
    }
}

/// What a model got right on a set of examples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Accuracy {
    /// Scored positions predicted right.
    pub correct: usize,
    /// Scored positions.
    pub scored: usize,
    /// Examples whose scored positions are all right (the whole passkey).
    pub exact: usize,
    /// Examples.
    pub examples: usize,
}

impl Accuracy {
    /// Fraction of scored positions right (MQAR recall accuracy; passkey digit accuracy).
    pub fn token_accuracy(&self) -> f64 {
        self.correct as f64 / self.scored.max(1) as f64
    }

    /// Fraction of examples entirely right (passkey retrieval accuracy).
    pub fn exact_rate(&self) -> f64 {
        self.exact as f64 / self.examples.max(1) as f64
    }
}

/// The model's accuracy on `examples`, run `batch_size` at a time: the prediction at a
/// position is its most likely next token.
pub fn model_accuracy<B: ModelBackend>(
    model: &Decoder<B>,
    examples: &[Example],
    batch_size: usize,
    device: &B::Device,
) -> Result<Accuracy, TrainingError> {
    let mut total = Accuracy::default();
    for chunk in examples.chunks(batch_size.max(1)) {
        let inputs = TokenBatch::<B>::from_examples(chunk, device).inputs;
        let logits = model.forward(inputs)?;
        let [rows, len, _] = logits.dims();
        let predicted = logits.argmax(2).reshape([rows * len]).into_data().convert::<i64>();
        let predicted: Vec<u32> =
            predicted.to_vec::<i64>()?.into_iter().map(|t| t as u32).collect();
        for (example, row) in chunk.iter().zip(predicted.chunks(len)) {
            let (correct, scored) = correct_answers(row, example);
            total.correct += correct;
            total.scored += scored;
            total.exact += usize::from(exact_match(row, example));
            total.examples += 1;
        }
    }
    Ok(total)
}

/// The largest causal window `W` of the model's local layers and the number of layers `L`:
/// information can travel `(W − 1)·L` positions through the stack. `None` when a layer sees
/// the whole past (full or linear attention, LongNet, Longformer's globals).
pub fn receptive_field(config: &DecoderConfig) -> Option<(usize, usize)> {
    let window = |l: usize| config.kind_of(l).windows()?.iter().copied().max();
    let windows = (0..config.layers).map(window).collect::<Option<Vec<_>>>()?;
    Some((windows.into_iter().max()?, config.layers))
}

/// Default passkey distances for a model: inside the window, at it, beyond it, and at the
/// stack's reach `(W − 1)·L`, kept to those at least [`Passkey::min_distance`]. Without a
/// window, fractions of `seq_len`.
pub fn passkey_distances(config: &DecoderConfig, seq_len: usize, digits: usize) -> Vec<usize> {
    let mut distances = match receptive_field(config) {
        Some((w, l)) => vec![w / 2, w, 2 * w, (w - 1) * l],
        None => vec![seq_len / 4, seq_len / 2, Passkey::max_distance(seq_len, digits)],
    };
    distances.retain(|&d| d >= Passkey::min_distance(digits));
    distances.sort_unstable();
    distances.dedup();
    distances
}

/// Which positions of a sequence of `n` tokens can reach position `query`'s output through
/// the stack (docs/semantics.md §2): going down from the last layer, a position is reached when some
/// head of the layer shows it to a position already reached (the residual stream keeps those
/// too). Sinks, globals and dilation count, so this is the exact receptive field of a
/// windowed stack, dilated heads' gaps included; LongNet layers count as full attention, a
/// superset of their branches.
pub fn influence(
    config: &DecoderConfig,
    n: usize,
    query: usize,
) -> Result<Vec<bool>, TrainingError> {
    if query >= n {
        return Err(TrainingError::Position { position: query, len: n });
    }
    let mut reached = vec![false; n];
    reached[query] = true;
    for l in (0..config.layers).rev() {
        if reached.iter().all(|&r| r) {
            break;
        }
        let spec = config
            .kind_of(l)
            .spec(config.heads, config.kv_heads())
            .map_err(|source| ModelError::Layer { layer: l, source: source.into() })?;
        let extra = spec.extra_keys(n);
        let from: Vec<usize> = (0..n).filter(|&i| reached[i]).collect();
        for i in from {
            for h in 0..spec.num_heads() {
                let keys: Vec<usize> = match (spec.is_global(i), spec.window_range(h, i, n)) {
                    (true, _) => (0..n).collect(),
                    (false, Some((lo, hi))) => (lo..=hi).chain(extra.iter().copied()).collect(),
                    (false, None) => extra.clone(),
                };
                for j in keys {
                    reached[j] |= spec.visible(h, i, j, n);
                }
            }
        }
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use swa_models::layers::AttentionKind;

    use super::*;

    /// `layers` layers of sliding windows of `window` keys.
    fn sliding(window: usize, layers: usize) -> DecoderConfig {
        DecoderConfig::new(vec![AttentionKind::Sliding { window }])
            .with_d_model(16)
            .with_layers(layers)
            .with_heads(2)
    }

    #[test]
    fn the_reach_of_a_stack_is_its_windows_times_its_layers() {
        assert_eq!(receptive_field(&sliding(8, 3)), Some((8, 3)));
        let full = DecoderConfig::new(vec![AttentionKind::Full])
            .with_d_model(16)
            .with_layers(2)
            .with_heads(2);
        assert_eq!(receptive_field(&full), None);
        // Position 28 sees 21 ..= 28 through the last layer, and each layer below 7 further.
        let reached = influence(&sliding(8, 3), 32, 28).unwrap();
        assert_eq!(reached.iter().position(|&r| r), Some(28 - 3 * 7));
        assert!(reached[28 - 3 * 7..=28].iter().all(|&r| r) && !reached[29]);
        assert!(matches!(
            influence(&sliding(8, 3), 32, 32),
            Err(TrainingError::Position { position: 32, len: 32 })
        ));
    }

    #[test]
    fn passkey_distances_straddle_the_window_and_reach() {
        let digits = 2;
        let distances = passkey_distances(&sliding(64, 2), 256, digits);
        assert_eq!(distances, [64, 126, 128]);
        assert!(distances.iter().all(|&d| d >= Passkey::min_distance(digits)));
    }
}

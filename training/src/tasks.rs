//! Synthetic long-range tasks, generated on the fly and deterministic from a seed and an example
//! index, to probe what windowed attention can still recall:
//! - [`Mqar`]: multi-query associative recall (Zoology, Arora et al. 2023; Based): key-value
//!   pairs, then queries of earlier keys whose answers are the paired values;
//! - [`Passkey`]: passkey retrieval (Mohtashami & Jaggi 2023): a number hidden in filler text,
//!   asked for at the end, at a chosen distance;
//! - [`Majority`]: which of two markers spread over the sequence occurs more often, asked at a
//!   CLS token at position 0: a classification task for encoders with global tokens
//!   (Longformer, Beltagy et al. 2020).
//!
//! Every token is below 256, so the byte-level language models train and evaluate on these
//! tasks unchanged. An [`Example`] is aligned with the model's outputs: `targets[t]`, when set,
//! is the token the model must predict at position `t`. In MQAR and passkey it is the next
//! token `tokens[t + 1]`, predicted from `tokens[..=t]`; in [`Majority`] it is the class at
//! the CLS position. [`correct_answers`] scores the predictions at those positions.

mod majority;

use swa_attention::rng::SplitMix64;

use crate::error::TrainingError;

pub use majority::{MAJORITY_CLS, MAJORITY_MARKERS, Majority};

/// One sequence of a task and the answers scored in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The input tokens, all below 256.
    pub tokens: Vec<u32>,
    /// Per position, the token to predict there (`tokens[t + 1]` in MQAR and passkey, the
    /// class at the CLS position in [`Majority`]), or `None` where unscored.
    pub targets: Vec<Option<u32>>,
}

/// Multi-query associative recall: `pairs` key-value pairs `k v k v …` at the start, then, at
/// random 2-token slots among pad tokens, `queries` distinct keys of those pairs each followed by
/// its value. The target at a query key is its value; no other position has a target.
///
/// Tokens: pad `0`, keys `1..=key_vocab`, values `key_vocab + 1..=key_vocab + value_vocab`.
/// Keys within an example are distinct; values are drawn independently (they may repeat).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mqar {
    /// Key-value pairs stated at the start.
    pub pairs: usize,
    /// Keys queried afterwards (at most `pairs`).
    pub queries: usize,
    /// Tokens per example.
    pub seq_len: usize,
    /// Distinct key tokens.
    pub key_vocab: usize,
    /// Distinct value tokens.
    pub value_vocab: usize,
}

/// The pad token of [`Mqar`].
pub const MQAR_PAD: u32 = 0;

impl Mqar {
    /// A checked setting (see [`Mqar::validate`]).
    pub fn new(
        pairs: usize,
        queries: usize,
        seq_len: usize,
        key_vocab: usize,
        value_vocab: usize,
    ) -> Result<Self, TrainingError> {
        let task = Mqar { pairs, queries, seq_len, key_vocab, value_vocab };
        task.validate().map(|_| task)
    }

    /// Whether the setting can produce examples: at least one pair, query, key and value;
    /// `queries <= pairs <= key_vocab`; `1 + key_vocab + value_vocab <= 256`; and
    /// `seq_len >= 2 * (pairs + queries)`.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let Mqar { pairs, queries, seq_len, key_vocab, value_vocab } = *self;
        if pairs == 0 || queries == 0 || value_vocab == 0 {
            return Err(TrainingError::field(
                "Mqar",
                format!(
                    "pairs ({pairs}), queries ({queries}) and value_vocab ({value_vocab}) must be at least 1"
                ),
            ));
        }
        if queries > pairs {
            return Err(TrainingError::field(
                "Mqar.queries",
                format!("{queries} distinct queries need as many pairs, not {pairs}"),
            ));
        }
        if pairs > key_vocab {
            return Err(TrainingError::field(
                "Mqar.key_vocab",
                format!(
                    "{pairs} distinct keys need a key_vocab of at least {pairs}, not {key_vocab}"
                ),
            ));
        }
        if key_vocab.saturating_add(value_vocab) > 255 {
            return Err(TrainingError::field(
                "Mqar",
                format!(
                    "pad + key_vocab ({key_vocab}) + value_vocab ({value_vocab}) exceeds the 256 byte tokens"
                ),
            ));
        }
        if seq_len < pairs.saturating_add(queries).saturating_mul(2) {
            return Err(TrainingError::field(
                "Mqar.seq_len",
                format!(
                    "{seq_len} is below the {} tokens of {pairs} pairs and {queries} queries",
                    2 * (pairs + queries)
                ),
            ));
        }
        Ok(())
    }

    /// Example `index` under `seed`; the same pair always gives the same example.
    pub fn sample(&self, seed: u64, index: u64) -> Result<Example, TrainingError> {
        self.validate()?;
        let mut rng = SplitMix64::for_index(seed, index);
        let keys: Vec<u32> =
            rng.distinct(self.pairs, self.key_vocab).into_iter().map(|k| 1 + k as u32).collect();
        let values: Vec<u32> = keys
            .iter()
            .map(|_| (1 + self.key_vocab + rng.below(self.value_vocab)) as u32)
            .collect();
        let mut tokens = vec![MQAR_PAD; self.seq_len];
        let mut targets = vec![None; self.seq_len];
        for (i, (&k, &v)) in keys.iter().zip(&values).enumerate() {
            tokens[2 * i] = k;
            tokens[2 * i + 1] = v;
        }
        let start = 2 * self.pairs;
        let slots = rng.distinct(self.queries, (self.seq_len - start) / 2);
        let asked = rng.distinct(self.queries, self.pairs);
        for (slot, pair) in slots.into_iter().zip(asked) {
            let at = start + 2 * slot;
            tokens[at] = keys[pair];
            tokens[at + 1] = values[pair];
            targets[at] = Some(values[pair]);
        }
        Ok(Example { tokens, targets })
    }
}

/// The filler sentence of [`Passkey`], repeated.
pub const PASSKEY_FILLER: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
const KEY_HEAD: &str = "The pass key is ";
const KEY_TAIL: &str = ". Remember it. ";
const QUESTION: &str = "What is the pass key? The pass key is ";

/// Passkey retrieval, in bytes:
///
/// `filler · "The pass key is " · KEY · ". Remember it. " · filler ·
/// "What is the pass key? The pass key is " · KEY`
///
/// exactly `seq_len` bytes long and ending with the answer. KEY has `digits` digits, the first
/// non-zero. The **distance** is measured from the first digit of the stated key to the first
/// digit of the answer: `answer_start - key_start`, exactly `distance`. The filler is
/// [`PASSKEY_FILLER`] repeated and cut at its start, so that it always ends a sentence; the
/// targets are the answer's digits only. Distances run from `digits + 53` (no filler between
/// the key and the question) to `seq_len - digits - 16` (the key at the very start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passkey {
    /// Bytes per example.
    pub seq_len: usize,
    /// Bytes from the first key digit to the first answer digit.
    pub distance: usize,
    /// Digits of the key.
    pub digits: usize,
}

impl Passkey {
    /// A checked setting (see [`Passkey::validate`]).
    pub fn new(seq_len: usize, distance: usize, digits: usize) -> Result<Self, TrainingError> {
        let task = Passkey { seq_len, distance, digits };
        task.validate().map(|_| task)
    }

    /// The shortest distance for `digits`: the key's sentence tail and the question in between.
    pub fn min_distance(digits: usize) -> usize {
        digits.saturating_add(KEY_TAIL.len() + QUESTION.len())
    }

    /// The longest distance that fits in `seq_len` bytes with `digits` digits (the key at the
    /// very start); below [`Passkey::min_distance`] when nothing fits.
    pub fn max_distance(seq_len: usize, digits: usize) -> usize {
        seq_len.saturating_sub(digits.saturating_add(KEY_HEAD.len()))
    }

    /// The shortest sequence holding a key `distance` bytes before its answer.
    pub fn shortest_seq_len(distance: usize, digits: usize) -> usize {
        distance.saturating_add(digits).saturating_add(KEY_HEAD.len())
    }

    /// Whether the setting can produce examples: `digits >= 1` and
    /// `digits + 53 <= distance <= seq_len - digits - 16`.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let Passkey { seq_len, distance, digits } = *self;
        if digits == 0 {
            return Err(TrainingError::field("Passkey.digits", "must be at least 1"));
        }
        let min = Passkey::min_distance(digits);
        if distance < min {
            return Err(TrainingError::field(
                "Passkey.distance",
                format!("{distance} is below {min}, the shortest for {digits} digits"),
            ));
        }
        let max = Passkey::max_distance(seq_len, digits);
        if distance > max {
            return Err(TrainingError::field(
                "Passkey.distance",
                format!(
                    "{distance} does not fit in seq_len {seq_len} (at most {max} for {digits} digits)"
                ),
            ));
        }
        Ok(())
    }

    /// Example `index` under `seed`: the key is random, the layout fixed by the setting.
    pub fn sample(&self, seed: u64, index: u64) -> Result<Example, TrainingError> {
        self.validate()?;
        let mut rng = SplitMix64::for_index(seed, index);
        let key: Vec<u8> = (0..self.digits)
            .map(|i| if i == 0 { b'1' + rng.below(9) as u8 } else { b'0' + rng.below(10) as u8 })
            .collect();
        let answer_start = self.seq_len - self.digits;
        let key_start = answer_start - self.distance;
        let mut text = filler(key_start - KEY_HEAD.len());
        text.extend_from_slice(KEY_HEAD.as_bytes());
        text.extend_from_slice(&key);
        text.extend_from_slice(KEY_TAIL.as_bytes());
        text.extend(filler(self.distance - Passkey::min_distance(self.digits)));
        text.extend_from_slice(QUESTION.as_bytes());
        text.extend_from_slice(&key);
        debug_assert_eq!(text.len(), self.seq_len);
        let tokens: Vec<u32> = text.into_iter().map(u32::from).collect();
        let targets = (0..self.seq_len)
            .map(|t| (t + 1 >= answer_start && t + 1 < self.seq_len).then(|| tokens[t + 1]))
            .collect();
        Ok(Example { tokens, targets })
    }
}

/// `n` bytes of repeated filler, ending at the end of a sentence.
fn filler(n: usize) -> Vec<u8> {
    let s = PASSKEY_FILLER.as_bytes();
    let shift = s.len() - n % s.len();
    (0..n).map(|i| s[(i + shift) % s.len()]).collect()
}

/// `(correct, total)` over the scored positions of `example`, where `predicted[t]` is the
/// model's token at position `t`; positions past the end of `predicted` count as wrong.
pub fn correct_answers(predicted: &[u32], example: &Example) -> (usize, usize) {
    let scored =
        example.targets.iter().enumerate().filter_map(|(t, target)| target.map(|v| (t, v)));
    scored.fold((0, 0), |(correct, total), (t, v)| {
        (correct + usize::from(predicted.get(t) == Some(&v)), total + 1)
    })
}

/// Whether every scored position is right (for passkey: the whole key), and there is one.
pub fn exact_match(predicted: &[u32], example: &Example) -> bool {
    let (correct, total) = correct_answers(predicted, example);
    total > 0 && correct == total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_alignment(example: &Example) {
        for (t, target) in example.targets.iter().enumerate() {
            if let Some(v) = target {
                assert_eq!(example.tokens.get(t + 1), Some(v), "target at {t}");
            }
        }
        assert!(example.tokens.iter().all(|&t| t < 256));
    }

    #[test]
    fn examples_are_deterministic_from_seed_and_index() {
        let mqar = Mqar::new(8, 4, 64, 64, 64).unwrap();
        assert_eq!(mqar.sample(7, 3).unwrap(), mqar.sample(7, 3).unwrap());
        assert_ne!(mqar.sample(7, 3).unwrap(), mqar.sample(7, 4).unwrap());
        assert_ne!(mqar.sample(7, 3).unwrap(), mqar.sample(8, 3).unwrap());
        let passkey = Passkey::new(256, 100, 5).unwrap();
        assert_eq!(passkey.sample(1, 0).unwrap(), passkey.sample(1, 0).unwrap());
        assert_ne!(passkey.sample(1, 0).unwrap(), passkey.sample(1, 1).unwrap());
    }

    #[test]
    fn mqar_targets_are_the_values_of_queried_keys() {
        let mqar = Mqar::new(8, 4, 64, 20, 30).unwrap();
        for index in 0..20 {
            let ex = mqar.sample(0, index).unwrap();
            check_alignment(&ex);
            assert_eq!(ex.targets.iter().flatten().count(), 4);
            let pairs: Vec<(u32, u32)> = ex.tokens[..16].chunks(2).map(|c| (c[0], c[1])).collect();
            assert!(pairs.iter().all(|&(k, v)| (1..=20).contains(&k) && (21..=50).contains(&v)));
            for (t, target) in ex.targets.iter().enumerate() {
                match target {
                    Some(v) => assert!(t >= 16 && pairs.contains(&(ex.tokens[t], *v))),
                    None => assert!(
                        t < 16 || ex.tokens[t] == MQAR_PAD || (21..=50).contains(&ex.tokens[t])
                    ),
                }
            }
        }
    }

    #[test]
    fn passkey_distance_is_exact_and_only_the_answer_is_scored() {
        for (seq_len, distance, digits) in
            [(256, 100, 5), (300, 58, 5), (300, 279, 5), (4096, 1000, 1), (1000, 777, 9)]
        {
            let task = Passkey::new(seq_len, distance, digits).unwrap();
            let ex = task.sample(42, 0).unwrap();
            check_alignment(&ex);
            assert_eq!(ex.tokens.len(), seq_len);
            let key_start =
                ex.tokens.iter().position(|t| (b'0' as u32..=b'9' as u32).contains(t)).unwrap();
            let answer_start = seq_len - digits;
            assert_eq!(answer_start - key_start, distance);
            assert_eq!(ex.tokens[key_start..key_start + digits], ex.tokens[answer_start..]);
            let scored: Vec<usize> = (0..seq_len).filter(|&t| ex.targets[t].is_some()).collect();
            assert_eq!(scored, (answer_start - 1..seq_len - 1).collect::<Vec<_>>());
            let text = String::from_utf8(ex.tokens.iter().map(|&t| t as u8).collect()).unwrap();
            assert!(
                text.contains(". Remember it. ")
                    && text.ends_with(&format!(
                        "The pass key is {}",
                        &text[key_start..key_start + digits]
                    ))
            );
        }
    }

    #[test]
    fn impossible_settings_are_errors() {
        assert!(Mqar::new(8, 9, 64, 64, 64).unwrap_err().to_string().contains("queries"));
        assert!(Mqar::new(8, 4, 20, 64, 64).unwrap_err().to_string().contains("seq_len"));
        assert!(Mqar::new(8, 4, 64, 4, 64).unwrap_err().to_string().contains("key_vocab"));
        assert!(Mqar::new(8, 4, 64, 200, 100).unwrap_err().to_string().contains("256"));
        assert!(Passkey::new(256, 10, 5).unwrap_err().to_string().contains("below"));
        assert!(Passkey::new(256, 236, 5).unwrap_err().to_string().contains("does not fit"));
        assert!(Passkey::new(256, 235, 5).is_ok());
        assert!(Passkey::new(256, 100, 0).unwrap_err().to_string().contains("digits"));
        let bad = Passkey { seq_len: 10, distance: 100, digits: 5 };
        assert!(bad.sample(0, 0).is_err());
    }

    #[test]
    fn accuracy_counts_scored_positions_only() {
        let ex = Passkey::new(128, 60, 5).unwrap().sample(3, 9).unwrap();
        let perfect: Vec<u32> = (0..128).map(|t| ex.targets[t].unwrap_or(0)).collect();
        assert_eq!(correct_answers(&perfect, &ex), (5, 5));
        assert!(exact_match(&perfect, &ex));
        let mut one_wrong = perfect.clone();
        one_wrong[124] += 1;
        assert_eq!(correct_answers(&one_wrong, &ex), (4, 5));
        assert!(!exact_match(&one_wrong, &ex));
        assert_eq!(correct_answers(&perfect[..10], &ex), (0, 5));
    }
}

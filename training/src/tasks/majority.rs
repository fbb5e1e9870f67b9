//! Majority vote: a classification task for an encoder whose first token, like BERT's CLS
//! token in Longformer's classification tasks (Beltagy et al. 2020, §3.1 and §6), must gather
//! evidence spread over the whole sequence.

use swa_attention::rng::SplitMix64;

use super::Example;
use crate::error::TrainingError;

/// The class token at position 0 of [`Majority`], where the answer is asked for.
pub const MAJORITY_CLS: u32 = 0;
/// The two marker tokens of [`Majority`]; the answer is one of them.
pub const MAJORITY_MARKERS: [u32; 2] = [1, 2];
/// The first filler token of [`Majority`]; fillers are `3 .. 3 + filler_vocab`.
const FIRST_FILLER: usize = 3;

/// Majority vote over markers spread through a sequence:
///
/// `CLS x₁ x₂ … x_{N−1}`, where `markers` distinct positions among `1 … N−1`, drawn uniformly,
/// hold a marker token A or B, each drawn independently with probability ½, and every other
/// position holds a filler token drawn uniformly from `filler_vocab` tokens. The one scored
/// position is the CLS token at 0, whose target is the marker that occurs more often (an odd
/// number of markers leaves no tie). Unlike the language-model tasks, the target is a class,
/// not the next token: the task is for encoders (Longformer with `causal: false`), in which
/// position 0 reads the whole sequence only through its window, its globals or full attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Majority {
    /// Tokens per example, the CLS token included.
    pub seq_len: usize,
    /// Markers per example: odd, so that one of A and B always wins.
    pub markers: usize,
    /// Distinct filler tokens.
    pub filler_vocab: usize,
}

impl Majority {
    /// A checked setting (see [`Majority::validate`]).
    pub fn new(seq_len: usize, markers: usize, filler_vocab: usize) -> Result<Self, TrainingError> {
        let task = Majority { seq_len, markers, filler_vocab };
        task.validate().map(|_| task)
    }

    /// Whether the setting can produce examples: an odd number of markers, at most one per
    /// position after the CLS token, and `1 ≤ filler_vocab ≤ 253` (all tokens below 256).
    pub fn validate(&self) -> Result<(), TrainingError> {
        let Majority { seq_len, markers, filler_vocab } = *self;
        if markers % 2 == 0 {
            return Err(TrainingError::field(
                "Majority.markers",
                format!("{markers} can tie; use an odd number"),
            ));
        }
        if markers >= seq_len {
            return Err(TrainingError::field(
                "Majority.seq_len",
                format!("{seq_len} leaves no room for the CLS token and {markers} markers"),
            ));
        }
        if filler_vocab == 0 || FIRST_FILLER + filler_vocab > 256 {
            return Err(TrainingError::field(
                "Majority.filler_vocab",
                format!("{filler_vocab} is not in 1 ..= {}", 256 - FIRST_FILLER),
            ));
        }
        Ok(())
    }

    /// Example `index` under `seed`; the same pair always gives the same example.
    pub fn sample(&self, seed: u64, index: u64) -> Result<Example, TrainingError> {
        self.validate()?;
        let mut rng = SplitMix64::for_index(seed, index);
        let mut tokens: Vec<u32> = (0..self.seq_len)
            .map(|_| (FIRST_FILLER + rng.below(self.filler_vocab)) as u32)
            .collect();
        tokens[0] = MAJORITY_CLS;
        for position in rng.distinct(self.markers, self.seq_len - 1) {
            tokens[1 + position] = MAJORITY_MARKERS[rng.below(2)];
        }
        let mut targets = vec![None; self.seq_len];
        targets[0] = Some(majority(&tokens, |_| true).expect("an odd number of markers"));
        Ok(Example { tokens, targets })
    }

    /// The expected accuracy on `example` of the best answer that reads only the positions where
    /// `seen` is true: the majority of the markers seen, and a fair guess on a tie (0.5). The
    /// markers not seen are independent fair coins, so no reader of those positions does better:
    /// averaged over examples, this is the ceiling of a model whose answer at position 0 depends
    /// on those positions alone (its receptive field).
    pub fn best_accuracy(example: &Example, seen: &[bool]) -> f64 {
        let answer = example.targets.first().copied().flatten();
        match majority(&example.tokens, |t| seen.get(t).copied().unwrap_or(false)) {
            None => 0.5,
            guess => f64::from(u8::from(guess == answer)),
        }
    }
}

/// The marker that occurs more often among the positions `seen` accepts, or `None` on a tie.
fn majority(tokens: &[u32], seen: impl Fn(usize) -> bool) -> Option<u32> {
    let count = |marker: u32| {
        tokens.iter().enumerate().filter(|&(t, &token)| token == marker && seen(t)).count()
    };
    let [a, b] = MAJORITY_MARKERS.map(count);
    match a.cmp(&b) {
        std::cmp::Ordering::Greater => Some(MAJORITY_MARKERS[0]),
        std::cmp::Ordering::Less => Some(MAJORITY_MARKERS[1]),
        std::cmp::Ordering::Equal => None,
    }
}

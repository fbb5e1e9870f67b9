//! A batch of token sequences as the Learner's model reads it: inputs, next-token targets and,
//! for a synthetic task, the positions the loss covers. Text windows ([`crate::loader`]) and task
//! examples ([`TokenBatch::from_examples`]) both become one.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use crate::tasks::Example;

/// Inputs and next-token targets, both `[batch, N]`.
#[derive(Clone, Debug)]
pub struct TokenBatch<B: Backend> {
    /// Tokens `t_0 … t_{N−1}`.
    pub inputs: Tensor<B, 2, Int>,
    /// Tokens `t_1 … t_N`.
    pub targets: Tensor<B, 2, Int>,
    /// A synthetic task's answers: `[batch, N]`, 1 at the positions the loss covers and 0
    /// elsewhere, and how many there are. `None` is every position (language modelling).
    pub scored: Option<(Tensor<B, 2, Int>, usize)>,
    /// With segment memory (docs/semantics.md §10), the stream position of the inputs' first
    /// token: every row is the next segment of its own stream. `None`: independent windows.
    pub stream_start: Option<usize>,
}

impl<B: Backend> TokenBatch<B> {
    /// A batch of task examples: the tokens as inputs, the answers as targets where scored (0
    /// elsewhere), and the mask of scored positions.
    pub fn from_examples(examples: &[Example], device: &B::Device) -> Self {
        let (rows, len) = (examples.len(), examples[0].tokens.len());
        let ids =
            examples.iter().flat_map(|e| e.tokens.iter().map(|&t| t as i64)).collect::<Vec<_>>();
        let targets = examples
            .iter()
            .flat_map(|e| e.targets.iter().map(|t| t.unwrap_or(0) as i64))
            .collect::<Vec<_>>();
        let scored = examples
            .iter()
            .flat_map(|e| e.targets.iter().map(|t| t.is_some() as i64))
            .collect::<Vec<_>>();
        let count = scored.iter().sum::<i64>() as usize;
        let tensor = |values: Vec<i64>| {
            Tensor::<B, 2, Int>::from_data(TensorData::new(values, [rows, len]), device)
        };
        TokenBatch {
            inputs: tensor(ids),
            targets: tensor(targets),
            scored: Some((tensor(scored), count)),
            stream_start: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;

    #[test]
    fn task_examples_become_inputs_targets_and_a_mask() {
        let example = |first: u32| Example {
            tokens: vec![first, first + 1, first + 2],
            targets: vec![None, Some(first + 2), None],
        };
        let batch =
            TokenBatch::<NdArray>::from_examples(&[example(5), example(9)], &Default::default());
        let ints =
            |t: Tensor<NdArray, 2, Int>| t.into_data().convert::<i64>().to_vec::<i64>().unwrap();
        assert_eq!(ints(batch.inputs), [5, 6, 7, 9, 10, 11]);
        assert_eq!(ints(batch.targets), [0, 7, 0, 0, 11, 0]);
        let (mask, count) = batch.scored.unwrap();
        assert_eq!((ints(mask), count), (vec![0, 1, 0, 0, 1, 0], 2));
    }
}

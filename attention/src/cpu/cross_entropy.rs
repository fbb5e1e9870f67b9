//! The cross-entropy of logits on `Flex` ([`crate::layer_ops::LayerKernels`]): per row, the
//! log-normaliser `lse = m + log Σ exp(x − m)` (`m` the row's maximum) and the loss
//! `lse − x[target]` in one pass forward; `g·(exp(x − lse) − onehot(target))` in one pass
//! backward. The softmax is never stored. Rows run in parallel (rayon) in chunks worth a thread,
//! each under pulp's dispatch so that `exp`, the maximum and the sum vectorise.

use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, Shape, TensorData, TensorMetadata};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::layout;
use super::math::{exp, max, sum};

/// Logits a thread takes at least.
const TASK: usize = 1 << 15;

/// `logits: [rows, V]`, `targets: [rows]` → (the loss of each row in the logits' dtype, the
/// log-normaliser of each row in f32).
pub fn cross_entropy(logits: FlexTensor, targets: FlexTensor) -> [FlexTensor; 2] {
    let [rows, vocab] = logits.shape().dims::<2>();
    let (x, targets) = (layout::read(&logits), indices(targets));
    let (mut loss, mut lse) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    let per_task = (TASK / vocab.max(1)).max(1);
    let outputs = loss.par_chunks_mut(per_task).zip(lse.par_chunks_mut(per_task));
    let inputs = x.par_chunks(per_task * vocab.max(1)).zip(targets.par_chunks(per_task));
    outputs.zip(inputs).for_each(|((loss, lse), (x, targets))| {
        pulp::Arch::new().dispatch(CrossEntropyTask::Forward { x, targets, loss, lse });
    });
    let loss = TensorData::new(loss, [rows]).convert_dtype(logits.dtype());
    [FlexTensor::from_data(loss), FlexTensor::from_data(TensorData::new(lse, [rows]))]
}

/// `∂L/∂logits = g·(exp(logits − lse) − onehot(target))` for `g = ∂L/∂loss: [rows]`.
pub fn cross_entropy_backward(
    logits: FlexTensor,
    targets: FlexTensor,
    lse: FlexTensor,
    d_loss: FlexTensor,
) -> FlexTensor {
    let [rows, vocab] = logits.shape().dims::<2>();
    let (x, targets) = (layout::read(&logits), indices(targets));
    let (lse, d_loss) = (layout::read(&lse), layout::read(&d_loss));
    let mut d_x = vec![0.0f32; rows * vocab];
    let per_task = (TASK / vocab.max(1)).max(1);
    let chunk = per_task * vocab.max(1);
    let rows_of = lse.par_chunks(per_task).zip(d_loss.par_chunks(per_task));
    let tasks =
        d_x.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).zip(targets.par_chunks(per_task));
    tasks.zip(rows_of).for_each(|(((d_x, x), targets), (lse, d_loss))| {
        pulp::Arch::new().dispatch(CrossEntropyTask::Backward { x, targets, lse, d_loss, d_x });
    });
    let data = TensorData::new(d_x, Shape::new([rows, vocab])).convert_dtype(logits.dtype());
    FlexTensor::from_data(data)
}

/// The targets as indices; a negative one becomes `usize::MAX` (outside every vocabulary).
fn indices(targets: FlexTensor) -> Vec<usize> {
    let data = targets.into_data().convert_dtype(DType::I64);
    let values = data.into_vec::<i64>().expect("converted to i64");
    values.into_iter().map(|t| usize::try_from(t).unwrap_or(usize::MAX)).collect()
}

/// One task's rows, run under pulp's dispatch; reached through `#[inline(always)]` code only
/// (see `super::layer_ops::Chunk` for why a closure would not do).
enum CrossEntropyTask<'a> {
    Forward {
        x: &'a [f32],
        targets: &'a [usize],
        loss: &'a mut [f32],
        lse: &'a mut [f32],
    },
    Backward {
        x: &'a [f32],
        targets: &'a [usize],
        lse: &'a [f32],
        d_loss: &'a [f32],
        d_x: &'a mut [f32],
    },
}

impl WithSimd for CrossEntropyTask<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        match self {
            CrossEntropyTask::Forward { x, targets, loss, lse } => {
                let vocab = x.len() / targets.len().max(1);
                let outputs = loss.iter_mut().zip(lse.iter_mut());
                for ((row, &t), (loss, lse)) in x.chunks_exact(vocab).zip(targets).zip(outputs) {
                    let m = max(row);
                    *lse = m + row_exp_sum(row, m).ln();
                    *loss = row.get(t).map_or(f32::NAN, |&x_t| *lse - x_t);
                }
            }
            CrossEntropyTask::Backward { x, targets, lse, d_loss, d_x } => {
                let vocab = x.len() / targets.len().max(1);
                let rows = x.chunks_exact(vocab).zip(d_x.chunks_exact_mut(vocab));
                for (((x, d_x), &t), (&lse, &g)) in rows.zip(targets).zip(lse.iter().zip(d_loss)) {
                    for (d_x, &x) in d_x.iter_mut().zip(x) {
                        *d_x = g * exp(x - lse);
                    }
                    if let Some(d_x) = d_x.get_mut(t) {
                        *d_x -= g;
                    }
                }
            }
        }
    }
}

/// `Σ exp(x − m)` over a row, in chunks that stay in cache between the two passes.
#[inline(always)]
fn row_exp_sum(row: &[f32], m: f32) -> f32 {
    let mut buffer = [0.0f32; 256];
    let mut total = 0.0;
    for chunk in row.chunks(buffer.len()) {
        let part = &mut buffer[..chunk.len()];
        for (e, &x) in part.iter_mut().zip(chunk) {
            *e = exp(x - m);
        }
        total += sum(part);
    }
    total
}

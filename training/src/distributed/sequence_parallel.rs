//! LongNet's distributed algorithm (the LongNet paper's §3; docs/semantics.md §5): one sequence
//! split into contiguous pieces of `M = N / P` positions over the `P` processes, each holding
//! the queries, keys and values of its own piece.
//!
//! - A branch whose segment fits in a piece (`w ≤ M`, `M` a multiple of `w`) sees only keys of
//!   the piece: each process runs it on its own tensors.
//! - A longer branch (`w` a multiple of `M`, `M` a multiple of the dilation `r`) needs other
//!   pieces' keys, but only the dilated ones: head `h` reads the positions `≡ h mod r` of its
//!   segment. Each process contributes, per group of heads sharing an offset, its `M / r` keys
//!   and values of that class; after the gather, the class of the whole sequence is a
//!   sequence of `N / r` positions in which the branch is a plain causal segment of `w / r`.
//!   Each process then runs the core on its own queries of the class (a query offset into that
//!   sequence), and the others' keys get their gradients through [`gather_pieces`].
//!
//! The branches are mixed by their log-normalisers exactly as on one process, so the result
//! equals [`longnet_attention`](swa_models::layers::longnet_attention) on the whole
//! sequence. Per long branch a process receives `N·d/r` keys and as many values per head
//! (an MPI all-gather), instead of all `N·d`.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::{ModelBackend, ScoreFn, ScoreOptions, WindowSpec, windowed_attention};
use swa_models::layers::{branch_specs, mix_branches};

use super::cluster::Cluster;
use super::gather::gather_pieces;
use crate::error::TrainingError;

/// LongNet attention of this process's piece of a sequence split over the processes of
/// `cluster`: `q: [batch, H, M, d]`, `k, v: [batch, H_kv, M, d]` (positions `rank·M …`) →
/// `[batch, H, M, d]`, causal, softmax scores with `opts` (no ALiBi: distances change in a
/// dilated class).
pub fn longnet_sequence_parallel<B: ModelBackend, C: CheckpointStrategy>(
    cluster: &Cluster,
    q: Tensor<Autodiff<B, C>, 4>,
    k: Tensor<Autodiff<B, C>, 4>,
    v: Tensor<Autodiff<B, C>, 4>,
    segments: &[usize],
    dilations: &[usize],
    opts: &ScoreOptions,
) -> Result<Tensor<Autodiff<B, C>, 4>, TrainingError> {
    let [_, heads, piece, _] = q.dims();
    let kv_heads = k.dims()[1];
    let n = piece * cluster.nodes();
    let refuse = |problem: String| TrainingError::field("LongNet sequence parallelism", problem);
    if opts.alibi.is_some() || !matches!(opts.score_fn, ScoreFn::Softmax) {
        return Err(refuse("needs softmax scores without ALiBi".into()));
    }
    // The specs check segments, dilations and heads as the one-process path does.
    let specs = branch_specs(segments, dilations, heads, kv_heads, n)?;
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for (spec, (&segment, &dilation)) in specs.iter().zip(segments.iter().zip(dilations)) {
        let segment = segment.min(n);
        let (o, lse) = if segment <= piece {
            if piece % segment != 0 {
                return Err(refuse(format!(
                    "a piece of {piece} positions is not a whole number of segments of {segment}"
                )));
            }
            windowed_attention(q.clone(), k.clone(), v.clone(), spec, opts)?
        } else {
            if segment % piece != 0 || piece % dilation != 0 {
                return Err(refuse(format!(
                    "a segment of {segment} over pieces of {piece} needs the segment to be a \
                     whole number of pieces and the piece of dilations ({dilation})"
                )));
            }
            let parts = (q.clone(), k.clone(), v.clone());
            long_branch(cluster, parts, segment, dilation, opts)?
        };
        outs.push(o);
        lses.push(lse);
    }
    Ok(mix_branches(outs, lses))
}

/// The tensors of one process's piece: queries, keys, values.
type Piece<A> = (Tensor<A, 4>, Tensor<A, 4>, Tensor<A, 4>);

/// A branch's output and log-normaliser, `[batch, H, M, d]` and `[batch, H, M]`.
type Branch<A> = (Tensor<A, 4>, Tensor<A, 3>);

/// A branch whose segment spans pieces: `(o, lse)` of this process's queries, zero and `−∞`
/// where the branch gives a query no key (docs/semantics.md §5).
fn long_branch<B: ModelBackend, C: CheckpointStrategy>(
    cluster: &Cluster,
    (q, k, v): Piece<Autodiff<B, C>>,
    segment: usize,
    dilation: usize,
    opts: &ScoreOptions,
) -> Result<Branch<Autodiff<B, C>>, TrainingError> {
    let [batch, heads, piece, dim] = q.dims();
    let group = heads / k.dims()[1];
    let device = q.device();
    let index = |values: Vec<usize>| {
        let values: Vec<i64> = values.into_iter().map(|i| i as i64).collect();
        let len = values.len();
        Tensor::<Autodiff<B, C>, 1, Int>::from_data(TensorData::new(values, [len]), &device)
    };
    let class_len = piece / dilation;
    // Per head: its rows of the class's output and lse, found by the head's offset.
    let mut by_head = vec![None; heads];
    for offset in 0..dilation.min(heads) {
        let members: Vec<usize> = (offset..heads).step_by(dilation).collect();
        let positions = index((offset..piece).step_by(dilation).collect());
        let kv_members = index(members.iter().map(|h| h / group).collect());
        let select = |t: &Tensor<Autodiff<B, C>, 4>, rows: &Tensor<Autodiff<B, C>, 1, Int>| {
            t.clone().select(1, rows.clone()).select(2, positions.clone())
        };
        let queries = select(&q, &index(members.clone()));
        let keys = gather_pieces(cluster, select(&k, &kv_members), 2);
        let values = gather_pieces(cluster, select(&v, &kv_members), 2);
        let spec = WindowSpec::longnet_branch(members.len(), members.len(), segment / dilation, 1)?
            .with_query_offset(cluster.rank() * class_len);
        let (o, lse) = windowed_attention(queries, keys, values, &spec, opts)?;
        for (row, &h) in members.iter().enumerate() {
            by_head[h] = Some((o.clone().narrow(1, row, 1), lse.clone().narrow(1, row, 1)));
        }
    }
    // Back to every position: the class at column `offset` of `[class_len, dilation]`.
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for (h, rows) in by_head.into_iter().enumerate() {
        let (o, lse) = rows.expect("every head has an offset below the dilation");
        let offset = h % dilation;
        let o = o.reshape([batch, 1, class_len, 1, dim]);
        let lse = lse.reshape([batch, 1, class_len, 1]);
        let o_columns = (0..dilation).map(|c| match c == offset {
            true => o.clone(),
            false => o.zeros_like(),
        });
        let lse_columns = (0..dilation).map(|c| match c == offset {
            true => lse.clone(),
            false => lse.full_like(f32::NEG_INFINITY),
        });
        outs.push(Tensor::cat(o_columns.collect(), 3).reshape([batch, 1, piece, dim]));
        lses.push(Tensor::cat(lse_columns.collect(), 3).reshape([batch, 1, piece]));
    }
    Ok((Tensor::cat(outs, 1), Tensor::cat(lses, 1)))
}

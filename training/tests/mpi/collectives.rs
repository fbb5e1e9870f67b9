//! The collectives under `mpirun`: LongNet's sequence parallelism over 2 processes against one
//! process, and a 300M-parameter gradient averaged across 2 processes. A rank writes what it
//! computed to a file named by its rank, which the launching test reads.

use std::path::PathBuf;

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_attention::ScoreOptions;
use swa_models::layers::longnet_attention;
use swa_training::distributed::gradients::mean_gradients;
use swa_training::distributed::{Cluster, longnet_sequence_parallel};

use crate::{Reference, as_rank, max_abs, run_dir, tensor, to_vec, under_mpirun};

/// Where rank `rank` writes its result, in the folder the launching test passes.
fn result_file(dir: &std::path::Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.json"))
}

/// LongNet configurations of 4 heads over 2 kv heads, 32 positions split over 2 processes
/// (pieces of 16): segments shorter than, as long as and longer than a piece.
const LONGNET: [(&[usize], &[usize]); 2] = [(&[8, 16, 32], &[1, 2, 4]), (&[4, 32], &[1, 2])];
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const N: usize = 32;
const D: usize = 8;

/// One process's share: its rows of the output and of the gradients of `q`, `k`, `v` for the
/// loss `Σ o·g`, from the whole sequence's seeded tensors.
fn longnet_piece(
    cluster: Option<&Cluster>,
    segments: &[usize],
    dilations: &[usize],
) -> Vec<Vec<f32>> {
    let (rank, nodes) = cluster.map_or((0, 1), |c| (c.rank(), c.nodes()));
    let piece = |t: Tensor<Reference, 4>| t.narrow(2, rank * N / nodes, N / nodes);
    let q = piece(tensor::<Reference>(1, [1, HEADS, N, D])).require_grad();
    let k = piece(tensor::<Reference>(2, [1, KV_HEADS, N, D])).require_grad();
    let v = piece(tensor::<Reference>(3, [1, KV_HEADS, N, D])).require_grad();
    let g = piece(tensor::<Reference>(4, [1, HEADS, N, D]));
    let opts = ScoreOptions::softmax();
    let (q2, k2, v2) = (q.clone(), k.clone(), v.clone());
    let o = match cluster {
        Some(c) => longnet_sequence_parallel(c, q2, k2, v2, segments, dilations, &opts).unwrap(),
        None => longnet_attention(q2, k2, v2, segments, dilations, &opts).unwrap(),
    };
    let grads = (o.clone() * g).sum().backward();
    let grad = |t: &Tensor<Reference, 4>| to_vec(t.grad(&grads).unwrap());
    vec![to_vec(o), grad(&q), grad(&k), grad(&v)]
}

/// Two processes compute LongNet on their halves of a sequence, forward and backward; their
/// outputs and gradients, side by side, are the one-process ones.
#[test]
fn longnet_sequence_parallel_matches_one_process() {
    if let Some((cluster, dir)) = as_rank() {
        let pieces: Vec<_> =
            LONGNET.iter().map(|(s, r)| longnet_piece(Some(&cluster), s, r)).collect();
        let json = serde_json::to_string(&pieces).unwrap();
        std::fs::write(result_file(&dir, cluster.rank()), json).unwrap();
        cluster.finish();
        return;
    }
    let dir = run_dir("longnet");
    let name = "collectives::longnet_sequence_parallel_matches_one_process";
    under_mpirun(2, name, &dir);
    let halves: Vec<Vec<Vec<Vec<f32>>>> = (0..2)
        .map(|rank| {
            let json = std::fs::read_to_string(result_file(&dir, rank)).unwrap();
            serde_json::from_str(&json).unwrap()
        })
        .collect();
    for (c, (segments, dilations)) in LONGNET.iter().enumerate() {
        let whole = longnet_piece(None, segments, dilations);
        for (t, what) in ["output", "dq", "dk", "dv"].iter().enumerate() {
            // Each half is [1, heads, 16, d]: side by side along the positions.
            let heads = whole[t].len() / (N * D);
            let joined: Vec<f32> = (0..heads)
                .flat_map(|h| {
                    halves.iter().flat_map(move |half| {
                        half[c][t][h * N / 2 * D..(h + 1) * N / 2 * D].to_vec()
                    })
                })
                .collect();
            let error = max_abs(&joined, &whole[t]);
            eprintln!("segments {segments:?}: {what} within {error:e}");
            assert!(error < 1e-5, "segments {segments:?}: {what} differs by {error}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Parameters of the all-reduce test: 300M in all (1.2 GB of f32), in pieces of awkward sizes
/// (one larger than a bucket of 4 MB, some far smaller).
const BIG: [usize; 4] = [290_000_001, 9_999_989, 7, 3];

/// A module of [`BIG`]'s parameters.
#[derive(Module, Debug)]
struct Big<B: Backend> {
    weights: Vec<Param<Tensor<B, 1>>>,
}

/// Rank `r`'s gradient value at index `i`: `r + 1 + (i mod 7)`, whose mean over `P` ranks is
/// `(P + 1) / 2 + (i mod 7)`, exact in f32.
fn big_gradient(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (rank + 1) as f32 + (i % 7) as f32).collect()
}

/// A gradient of 300M parameters averaged across 2 processes by the training path
/// (`mean_gradients`: host copies, 4 MB buckets): every value is the exact mean.
#[test]
fn a_300m_parameter_gradient_is_averaged_across_2_processes() {
    type B = burn::backend::Autodiff<burn::backend::NdArray>;
    let Some((cluster, dir)) = as_rank() else {
        let dir = run_dir("300m");
        let name = "collectives::a_300m_parameter_gradient_is_averaged_across_2_processes";
        let output = under_mpirun(2, name, &dir);
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        for rank in 0..2 {
            let checked = std::fs::read_to_string(result_file(&dir, rank)).unwrap();
            assert_eq!(checked.trim(), format!("{} exact", BIG.iter().sum::<usize>()));
        }
        let _ = std::fs::remove_dir_all(dir);
        return;
    };
    let device = Default::default();
    let (rank, nodes) = (cluster.rank(), cluster.nodes());
    let weights = BIG.map(|len| Param::from_tensor(Tensor::<B, 1>::zeros([len], &device)));
    let model = Big { weights: weights.to_vec() };
    let mut grads = GradientsParams::new();
    for (param, &len) in model.weights.iter().zip(&BIG) {
        let values = TensorData::new(big_gradient(rank, len), [len]);
        grads.register(param.id, Tensor::<burn::backend::NdArray, 1>::from_data(values, &device));
    }
    let start = std::time::Instant::now();
    let mut mean = mean_gradients(&cluster, &model, grads);
    let seconds = start.elapsed().as_secs_f64();
    let mut exact = 0;
    for param in &model.weights {
        let got = mean.remove::<burn::backend::NdArray, 1>(param.id).unwrap();
        let got = got.into_data().into_vec::<f32>().unwrap();
        let want = |i: usize| (nodes + 1) as f32 / 2.0 + (i % 7) as f32;
        exact += got.iter().enumerate().filter(|&(i, &v)| v == want(i)).count();
    }
    eprintln!("rank {rank}: 300M-parameter gradient averaged in {seconds:.2} s");
    let verdict = match exact == BIG.iter().sum::<usize>() {
        true => format!("{exact} exact"),
        false => format!("{exact} of {} exact", BIG.iter().sum::<usize>()),
    };
    std::fs::write(result_file(&dir, rank), verdict).unwrap();
    cluster.finish();
}

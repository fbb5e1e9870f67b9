//! The gradient all-reduce of multi-process training against MPI's own, on the same ranks and
//! the same bytes: under `mpirun -np P`, every rank holds a model's gradients in Flex tensors,
//! and
//!
//! - **ours** is `mean_gradients` end to end: the gradients from the backend's tensors to the
//!   host, summed in 25 MB buckets, divided, and back into tensors (what a training step pays);
//! - **MPI** is one `MPI_Allreduce` of the same number of f32 from one host buffer into another
//!   (`Cluster::raw_sum`), both already touched.
//!
//! Bus bandwidth is NCCL's measure, `bytes · 2(P − 1)/P / seconds`: the fraction of each
//! process's link an all-reduce of that size uses, comparable across `P`.
//!
//! ```sh
//! cargo bench --features mpi --bench all_reduce --no-run   # prints the binary's path
//! mpirun -np 2 target/release/deps/all_reduce-… --sizes 25,100,300 --runs 5
//! ```
//! Rank 0 prints one markdown row per size (medians over `--runs`).

use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_zoo::training::distributed::gradients::mean_gradients;
use swa_zoo::training::distributed::{Cluster, ClusterConfig};

/// The backend whose gradients are averaged, as in training on the CPU.
type Trained = Autodiff<Flex>;

/// A model's parameters: one tensor per piece.
#[derive(Module, Debug)]
struct Parameters<B: Backend> {
    pieces: Vec<Param<Tensor<B, 1>>>,
}

/// `total` parameters in pieces shaped like a decoder's: eight large matrices and, for every
/// 10 000 of them, a norm-sized vector of 256.
fn piece_sizes(total: usize) -> Vec<usize> {
    let small = (total / 10_000).min(2_000);
    let large = (total - small * 256) / 8;
    let mut sizes = vec![large; 8];
    sizes.extend(std::iter::repeat_n(256, small));
    sizes[0] += total - sizes.iter().sum::<usize>();
    sizes
}

/// The median of `times`.
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Seconds of `mean_gradients` over a model of `total` parameters, `runs` times.
fn ours(cluster: &Cluster, total: usize, runs: usize) -> Vec<f64> {
    let device = Default::default();
    let sizes = piece_sizes(total);
    let pieces = sizes.iter().map(|&n| Param::from_tensor(Tensor::<Trained, 1>::zeros([n], &device)));
    let model = Parameters { pieces: pieces.collect() };
    (0..runs)
        .map(|_| {
            let mut grads = GradientsParams::new();
            for (param, &n) in model.pieces.iter().zip(&sizes) {
                let values = TensorData::new(vec![cluster.rank() as f32; n], [n]);
                grads.register(param.id, Tensor::<Flex, 1>::from_data(values, &device));
            }
            cluster.agree(0, "the start of a run").expect("every rank agrees on 0");
            let start = Instant::now();
            let mean = mean_gradients::<Trained, _>(cluster, &model, grads);
            let seconds = start.elapsed().as_secs_f64();
            drop(mean);
            seconds
        })
        .collect()
}

/// Seconds of one raw `MPI_Allreduce` of `total` f32, `runs` times after one untimed call.
fn raw(cluster: &Cluster, total: usize, runs: usize) -> Vec<f64> {
    let send = vec![cluster.rank() as f32; total];
    let mut recv = vec![0.0f32; total];
    cluster.raw_sum(&send, &mut recv);
    (0..runs)
        .map(|_| {
            cluster.agree(0, "the start of a run").expect("every rank agrees on 0");
            let start = Instant::now();
            cluster.raw_sum(&send, &mut recv);
            start.elapsed().as_secs_f64()
        })
        .collect()
}

/// `--sizes` (millions of parameters, comma-separated) and `--runs`.
fn arguments() -> (Vec<usize>, usize) {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let sizes = value("--sizes").map_or("25,100,300".to_string(), |s| s.clone());
    let sizes = sizes.split(',').map(|s| s.trim().parse::<usize>().expect("--sizes: millions"));
    let runs = value("--runs").map_or(5, |r| r.parse().expect("--runs: a count"));
    (sizes.map(|m| m * 1_000_000).collect(), runs.max(1))
}

fn main() {
    let (sizes, runs) = arguments();
    let cluster = Cluster::join(&ClusterConfig::new()).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let p = cluster.nodes() as f64;
    if cluster.rank() == 0 {
        println!("{} processes, median of {runs} runs", cluster.nodes());
        println!(
            "| parameters | bytes | ours s | ours bus GB/s | MPI s | MPI bus GB/s | ours / MPI |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
    }
    for total in sizes {
        let mpi = median(raw(&cluster, total, runs));
        let ours = median(ours(&cluster, total, runs));
        let bytes = total as f64 * 4.0;
        let bus = |seconds: f64| bytes * 2.0 * (p - 1.0) / p / seconds / 1e9;
        if cluster.rank() == 0 {
            println!(
                "| {}M | {:.2} GB | {ours:.3} | {:.2} | {mpi:.3} | {:.2} | {:.2}× |",
                total / 1_000_000,
                bytes / 1e9,
                bus(ours),
                bus(mpi),
                mpi / ours
            );
        }
    }
    cluster.finish();
}

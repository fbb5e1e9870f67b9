//! The gradient all-reduce of multi-process training against MPI's own, on the same ranks and
//! the same bytes: under `mpirun -np P`, every rank holds a model's gradients in Flex tensors,
//! and
//!
//! - **ours** is `mean_gradients` end to end: the gradients from the backend's tensors to the
//!   host, summed in the cluster's buckets (4 MB), divided, and back into tensors (what a training step pays);
//! - **MPI** is one `MPI_Allreduce` of the same number of f32 from one host buffer into another
//!   (`Cluster::raw_sum`), both already touched.
//!
//! The two alternate (raw, ours, raw, …), after one untimed call of each.
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

/// Seconds of raw `MPI_Allreduce` and of `mean_gradients` over a model of `total`
/// parameters, `runs` times each, in turn (raw, ours, raw, …) after one untimed call of each,
/// so that both see the same state of the machine.
fn measure(cluster: &Cluster, total: usize, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let device = Default::default();
    let sizes = piece_sizes(total);
    let pieces =
        sizes.iter().map(|&n| Param::from_tensor(Tensor::<Trained, 1>::zeros([n], &device)));
    let model = Parameters { pieces: pieces.collect() };
    let ours = || {
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
    };
    let send = vec![cluster.rank() as f32; total];
    let mut recv = vec![0.0f32; total];
    let mut raw = || {
        cluster.agree(0, "the start of a run").expect("every rank agrees on 0");
        let start = Instant::now();
        cluster.raw_sum(&send, &mut recv);
        start.elapsed().as_secs_f64()
    };
    raw();
    ours();
    (0..runs).map(|_| (raw(), ours())).unzip()
}

/// `--sizes` (millions of parameters, comma-separated), `--runs` and `--bucket-mb`.
fn arguments() -> (Vec<usize>, usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let sizes = value("--sizes").map_or("25,100,300".to_string(), |s| s.clone());
    let sizes = sizes.split(',').map(|s| s.trim().parse::<usize>().expect("--sizes: millions"));
    let runs = value("--runs").map_or(5, |r| r.parse().expect("--runs: a count"));
    let bucket = value("--bucket-mb").map_or(4, |b| b.parse().expect("--bucket-mb: megabytes"));
    (sizes.map(|m| m * 1_000_000).collect(), runs.max(1), bucket)
}

fn main() {
    let (sizes, runs, bucket) = arguments();
    swa_zoo::runtime::keep_large_buffers_on_the_heap();
    let config = ClusterConfig::new().with_bucket_bytes(bucket * 1_000_000);
    let cluster = Cluster::join(&config).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let p = cluster.nodes() as f64;
    if cluster.rank() == 0 {
        println!("{} processes, buckets of {bucket} MB, median of {runs} runs", cluster.nodes());
        println!(
            "| parameters | bytes | ours s | ours bus GB/s | MPI s | MPI bus GB/s | ours / MPI |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
    }
    for total in sizes {
        let (mpi, ours) = measure(&cluster, total, runs);
        let (mpi, ours) = (median(mpi), median(ours));
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

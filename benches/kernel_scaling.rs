//! The CubeCL kernels against the blocked and dense paths on wgpu, and the kernels' scaling in
//! N: their work is O(N·W), so time(4096) / time(1024) should stay near 4 (≤ 5 is the target).
//!
//! `cargo bench --bench kernel_scaling --features wgpu`. B=1, H=4, d=64, sliding window W=64,
//! f32, N ∈ {1024, 2048, 4096}, on Burn's default `Wgpu` type (fusion). Without a GPU, wgpu runs
//! on Mesa's lavapipe, a Vulkan driver that executes shaders on the CPU: the ratios between
//! lengths and between paths are what this measures, not GPU speed. Each time is the median of
//! 5 synchronised calls after a warm-up (which compiles the kernels). Prints a Markdown table.

use burn::backend::{Autodiff, Wgpu};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_zoo::attention::{
    ScoreOptions, WindowSpec, blocked_attention, dense_attention, windowed_attention,
};
use swa_zoo::bench::median_ms;

const HEADS: usize = 4;
const DIM: usize = 64;
const WINDOW: usize = 64;
const LENGTHS: [usize; 3] = [1024, 2048, 4096];
const RUNS: usize = 5;
/// The dense path's `H·N²` f32 scores must fit one wgpu buffer (256 MiB by default, with room
/// for the softmax's copies): it runs up to N = 2048 here.
const DENSE_MAX_SCORES: usize = HEADS * 2048 * 2048;

/// Median time in ms of [`RUNS`] calls after one warm-up (which compiles the kernels).
fn median(mut call: impl FnMut()) -> f64 {
    call();
    median_ms(RUNS, call)
}

/// A `[1, HEADS, n, DIM]` tensor of deterministic values in [−1, 1).
fn input<B: Backend>(n: usize, seed: u64) -> Tensor<B, 4> {
    let values: Vec<f32> = (0..HEADS * n * DIM)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::from_data(TensorData::new(values, [1, HEADS, n, DIM]), &Default::default())
}

fn main() {
    let spec = WindowSpec::sliding(HEADS, HEADS, WINDOW).expect("valid spec");
    let opts = ScoreOptions::softmax();
    println!(
        "wgpu (default adapter), B=1, H={HEADS}, d={DIM}, W={WINDOW}, f32, median of {RUNS}\n"
    );
    println!(
        "| N | kernel fwd ms | kernel fwd+bwd ms | blocked fwd ms | dense fwd ms | blocked / kernel | dense / kernel |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut kernel_times = Vec::new();
    for n in LENGTHS {
        let (q, k, v) = (input::<Wgpu>(n, 1), input::<Wgpu>(n, 2), input::<Wgpu>(n, 3));
        let kernel = median(|| {
            let (o, _) = windowed_attention(q.clone(), k.clone(), v.clone(), &spec, &opts).unwrap();
            o.into_data();
        });
        let train = median(|| {
            let [q, k, v] = [&q, &k, &v]
                .map(|t| Tensor::<Autodiff<Wgpu>, 4>::from_inner(t.clone()).require_grad());
            let (o, _) = windowed_attention(q.clone(), k, v, &spec, &opts).unwrap();
            let grads = o.sum().backward();
            q.grad(&grads).expect("q is tracked").into_data();
        });
        let blocked = median(|| {
            let (o, _) = blocked_attention(q.clone(), k.clone(), v.clone(), &spec, &opts).unwrap();
            o.into_data();
        });
        let dense = (HEADS * n * n <= DENSE_MAX_SCORES).then(|| {
            median(|| {
                let (o, _) =
                    dense_attention(q.clone(), k.clone(), v.clone(), &spec, &opts).unwrap();
                o.into_data();
            })
        });
        let (dense_ms, dense_ratio) = match dense {
            Some(d) => (format!("{:.1}", d), format!("{:.1}×", d / kernel)),
            None => ("— (scores exceed a wgpu buffer)".into(), "—".into()),
        };
        println!(
            "| {n} | {:.1} | {:.1} | {:.1} | {dense_ms} | {:.1}× | {dense_ratio} |",
            kernel,
            train,
            blocked,
            blocked / kernel,
        );
        kernel_times.push((kernel, train));
    }
    let (first, last) = (kernel_times[0], kernel_times[LENGTHS.len() - 1]);
    println!(
        "\nkernel time(4096) / time(1024): forward {:.2}, forward+backward {:.2} (linear: 4.0, target ≤ 5)",
        last.0 / first.0,
        last.1 / first.1
    );
}

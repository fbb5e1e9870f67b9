//! Blocked O(N·w) path vs the dense reference, forward pass, on the CPU backends.
//!
//! `cargo bench --bench blocked_vs_dense --features flex` (drop `--features flex` for ndarray
//! alone). B=1, H=8, d=64, sliding window W=256, N ∈ {1024, 4096, 16384}; the dense path runs
//! only where its N² scores fit in memory. Peak memory is the most heap the call held above
//! what was live before it, measured by a counting allocator. Prints a Markdown table.

use std::time::Duration;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use swa_zoo::attention::{
    ScoreOptions, WindowSpec, blocked_attention, dense_attention, scheduled_scores,
};
use swa_zoo::bench::median_ms;
use swa_zoo::bench::memory::{CountingAllocator, peak_during};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HEADS: usize = 8;
const DIM: usize = 64;
const WINDOW: usize = 256;
const LENGTHS: [usize; 3] = [1024, 4096, 16384];
/// The dense path holds several `H·N²` f32 tensors at once; skip it past this many scores.
const DENSE_MAX_SCORES: usize = HEADS * 4096 * 4096;

struct Measure {
    time: Duration,
    peak_bytes: usize,
}

/// Median time of `runs` calls after one warm-up, and the peak heap of the warm-up.
fn measure(runs: usize, mut call: impl FnMut()) -> Measure {
    let ((), peak) = peak_during(&mut call);
    let time = Duration::from_secs_f64(median_ms(runs, call) / 1e3);
    Measure { time, peak_bytes: peak.expect("this binary counts its allocations") }
}

/// Prints one table row per length and returns the scaling summary of the blocked path.
fn bench_backend<B: Backend>(name: &str, device: &B::Device) -> String {
    let spec = WindowSpec::sliding(HEADS, HEADS, WINDOW).expect("valid spec");
    let opts = ScoreOptions::softmax();
    let mut blocked_times = Vec::new();
    for n in LENGTHS {
        let tensor = |seed: u64| {
            let values: Vec<f32> = (0..HEADS * n * DIM)
                .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            Tensor::<B, 4>::from_data(TensorData::new(values, [1, HEADS, n, DIM]), device)
        };
        let (q, k, v) = (tensor(1), tensor(2), tensor(3));
        let runs = if n >= 16384 { 3 } else { 5 };
        let schedule = measure(runs, || {
            std::hint::black_box(scheduled_scores(&spec, n, n));
        });
        let blocked = measure(runs, || {
            let (o, _) = blocked_attention(q.clone(), k.clone(), v.clone(), &spec, &opts).unwrap();
            o.into_data();
        });
        let dense = (HEADS * n * n <= DENSE_MAX_SCORES).then(|| {
            measure(runs, || {
                let (o, _) =
                    dense_attention(q.clone(), k.clone(), v.clone(), &spec, &opts).unwrap();
                o.into_data();
            })
        });
        let ms = |m: &Measure| m.time.as_secs_f64() * 1e3;
        let mib = |m: &Measure| m.peak_bytes as f64 / (1 << 20) as f64;
        let (dense_ms, dense_mib, speedup) = match &dense {
            Some(d) => (
                format!("{:.1}", ms(d)),
                format!("{:.0}", mib(d)),
                format!("{:.1}×", ms(d) / ms(&blocked)),
            ),
            None => (
                "—".into(),
                format!(
                    "({:.0} for one H·N² f32 tensor)",
                    (HEADS * n * n * 4) as f64 / (1 << 20) as f64
                ),
                "—".into(),
            ),
        };
        println!(
            "| {name} | {n} | {:.1} | {:.1} | {dense_ms} | {speedup} | {:.0} | {dense_mib} |",
            ms(&blocked),
            ms(&schedule),
            mib(&blocked)
        );
        blocked_times.push((n, ms(&blocked)));
    }
    let time_of = |n: usize| blocked_times.iter().find(|t| t.0 == n).map(|t| t.1).unwrap();
    format!(
        "{name}: blocked time(16384) / time(4096) = {:.2} (linear: 4.0)",
        time_of(16384) / time_of(4096)
    )
}

fn main() {
    println!("B=1, H={HEADS}, d={DIM}, W={WINDOW}, forward, f32\n");
    println!(
        "| backend | N | blocked ms | of which schedule ms | dense ms | dense / blocked | blocked peak MiB | dense peak MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut summaries =
        vec![bench_backend::<burn::backend::NdArray>("ndarray", &Default::default())];
    #[cfg(feature = "flex")]
    summaries.push(bench_backend::<burn::backend::Flex>("flex", &Default::default()));
    println!();
    for summary in summaries {
        println!("{summary}");
    }
}

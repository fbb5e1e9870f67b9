//! The windowed core on the CPU: the fused kernel, the blocked O(N·w) path and the dense
//! reference on flex, forward and forward+backward, beside the machine's matmul peak and, when
//! given, PyTorch's anchors measured in the same run.
//!
//! ```text
//! python benches/anchors/torch_attention.py --threads 2 > target/anchors.csv
//! cargo bench --bench cpu_attention -- --anchors target/anchors.csv
//! ```
//!
//! B=1, H=8, d=64, causal sliding window W=256, f32, N ∈ {1024, 4096, 16384} (`--lengths`).
//! GFLOP/s count in-window work only: the forward `4·N·W·d` per head, the backward 2.5× that.
//! Peak memory is the most heap a forward held above what was live before it (a counting
//! allocator). The dense path runs only where its `H·N²` scores fit (N ≤ 4096). Prints Markdown.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use clap::Parser;
use swa_zoo::attention::WindowSpec;
use swa_zoo::bench::core_bench::{CorePath, anchor_rows, attend};
use swa_zoo::bench::heap::{CountingAllocator, peak_during};
use swa_zoo::bench::median_ms;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HEADS: usize = 8;
const DIM: usize = 64;
/// The dense path holds several `H·N²` f32 tensors at once; skip it past this many scores.
const DENSE_MAX_SCORES: usize = HEADS * 4096 * 4096;

#[derive(Parser)]
#[command(about = "The windowed core on the CPU: fused kernel, blocked path and dense reference")]
struct Flags {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// Sequence lengths.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384")]
    lengths: Vec<usize>,
    /// Window W of the causal sliding window.
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// CSV written by `benches/anchors/torch_attention.py`, for swa-zoo / torch ratios.
    #[arg(long)]
    anchors: Option<PathBuf>,
}

fn inputs<B: Backend>(n: usize) -> [Tensor<B, 4>; 3] {
    let shape = [1, HEADS, n, DIM];
    std::array::from_fn(|_| {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
    })
}

/// Median forward milliseconds of `path` at length `n` and the forward's peak heap in MiB.
fn forward(path: CorePath, n: usize, spec: &WindowSpec, runs: usize) -> (f64, f64) {
    let x = inputs::<Flex>(n);
    let ((), peak) = peak_during(|| {
        attend(path, x.clone(), spec).into_data();
    });
    let ms = median_ms(runs, || {
        attend(path, x.clone(), spec).into_data();
    });
    (ms, peak.expect("this binary counts its allocations") as f64 / (1 << 20) as f64)
}

/// Median forward+backward milliseconds of `path` on `Autodiff<Flex>` at length `n`.
fn forward_backward(path: CorePath, n: usize, spec: &WindowSpec, runs: usize) -> f64 {
    let x = inputs::<Autodiff<Flex>>(n).map(Tensor::require_grad);
    let g = inputs::<Autodiff<Flex>>(n)[0].clone();
    let step = || {
        let grads = (attend(path, x.clone(), spec) * g.clone()).sum().backward();
        x.iter().for_each(|t| {
            t.grad(&grads).expect("a gradient").into_data();
        });
    };
    step();
    median_ms(runs, step)
}

/// GFLOP/s of in-window work: `4·N·W·d` per head for the forward, times `factor`.
fn gflops(n: usize, window: usize, ms: f64, factor: f64) -> f64 {
    4.0 * (n * window.min(n) * DIM * HEADS) as f64 * factor / (ms * 1e6)
}

/// Burn's flex matmul (gemm) on 2048² f32: the dense peak this machine reaches in Rust.
fn matmul_gflops() -> f64 {
    let size: usize = 2048;
    let a = Tensor::<Flex, 2>::random([size, size], Distribution::Default, &Default::default());
    a.clone().matmul(a.clone()).into_data();
    let ms = median_ms(10, || {
        a.clone().matmul(a.clone()).into_data();
    });
    2.0 * (size * size * size) as f64 / (ms * 1e6)
}

/// Anchor rows `(anchor, n, forward ms, forward+backward ms)` from the anchors' CSV.
fn read_anchors(path: &Path) -> Vec<(String, usize, f64, Option<f64>)> {
    let rows = anchor_rows(path)
        .unwrap_or_else(|e| panic!("cannot read the anchors {}: {e}", path.display()));
    rows.iter()
        .filter_map(|fields| {
            let [name, n, fwd, both] = &fields[..] else { return None };
            Some((name.clone(), n.parse().ok()?, fwd.parse().ok()?, both.parse().ok()))
        })
        .collect()
}

fn main() {
    let flags = Flags::parse();
    // As every job of the CLI, the examples and the other benches does (`runtime::run_on`).
    swa_zoo::runtime::keep_large_buffers_on_the_heap();
    let w = flags.window;
    let anchors = flags.anchors.as_deref().map(read_anchors).unwrap_or_default();
    println!("B=1, H={HEADS}, d={DIM}, causal W={w}, f32, flex on {} threads\n", rayon_threads());
    let peak = matmul_gflops();
    println!("machine: Burn flex matmul 2048² f32 at {peak:.0} GFLOP/s");
    for (name, n, ms, _) in anchors.iter().filter(|a| a.0.contains("matmul")) {
        println!("machine: {name} at {:.0} GFLOP/s", 2.0 * (n * n * n) as f64 / (ms * 1e6));
    }
    println!();
    println!(
        "| N | pass | fused ms | GFLOP/s | blocked ms | dense ms | fused peak MiB | \
         blocked peak MiB | fused / blocked |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let spec = WindowSpec::sliding(HEADS, HEADS, w).expect("a valid spec");
    let mut fused_times = Vec::new();
    for &n in &flags.lengths {
        let runs = if n >= 16384 { 3 } else { 5 };
        eprintln!("N={n}: forward");
        let (fused, fused_mib) = forward(CorePath::Kernel, n, &spec, runs);
        let (blocked, blocked_mib) = forward(CorePath::Blocked, n, &spec, runs);
        let dense = if HEADS * n * n <= DENSE_MAX_SCORES {
            format!("{:.1}", forward(CorePath::Dense, n, &spec, runs).0)
        } else {
            "—".into()
        };
        println!(
            "| {n} | forward | {fused:.1} | {:.1} | {blocked:.1} | {dense} | {fused_mib:.0} | \
             {blocked_mib:.0} | {:.2} |",
            gflops(n, w, fused, 1.0),
            fused / blocked
        );
        eprintln!("N={n}: forward+backward");
        let both = forward_backward(CorePath::Kernel, n, &spec, runs);
        let blocked_both = forward_backward(CorePath::Blocked, n, &spec, runs);
        println!(
            "| {n} | forward+backward | {both:.1} | {:.1} | {blocked_both:.1} | — | — | — | {:.2} |",
            gflops(n, w, both, 3.5),
            both / blocked_both
        );
        fused_times.push((n, fused, both));
    }
    if let (Some(a), Some(b)) =
        (fused_times.iter().find(|t| t.0 == 4096), fused_times.iter().find(|t| t.0 == 16384))
    {
        println!("\nfused forward time(16384) / time(4096) = {:.2} (linear: 4.0)", b.1 / a.1);
    }
    let rows: Vec<_> = anchors.iter().filter(|a| !a.0.contains("matmul")).collect();
    if !rows.is_empty() {
        println!(
            "\n| N | anchor | anchor forward ms | swa-zoo / anchor, forward | anchor fwd+bwd ms | \
             swa-zoo / anchor, fwd+bwd |"
        );
        println!("|---|---|---|---|---|---|");
        for (name, n, fwd, both) in rows {
            let Some(&(_, ours, ours_both)) = fused_times.iter().find(|t| t.0 == *n) else {
                continue;
            };
            let both_cells = match both {
                Some(both) => format!("{both:.1} | {:.2}×", both / ours_both),
                None => "— | —".into(),
            };
            println!("| {n} | {name} | {fwd:.1} | {:.2}× | {both_cells} |", fwd / ours);
        }
        println!("\n(ratios above 1: swa-zoo's fused kernel is faster)");
    }
}

/// Threads of rayon's pool, which the fused kernel and flex use.
fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

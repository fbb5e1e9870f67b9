//! The windowed core on a GPU: the CubeCL kernels, forward and forward+backward, over the grid
//! of the field's attention benchmarks, beside PyTorch's anchors measured on the same GPU in the
//! same run.
//!
//! ```text
//! python benches/anchors/gpu_attention.py > target/gpu_anchors.csv          # on the GPU
//! cargo bench --features cuda --bench gpu_attention -- --anchors target/gpu_anchors.csv
//! # any Vulkan/Metal adapter, lavapipe included, at small sizes:
//! cargo bench --features wgpu --bench gpu_attention -- --backend wgpu --lengths 1024,4096 \
//!     --windows 64 --dims 64 --dtypes f32 --blocked
//! ```
//!
//! B=1, H=16 (B·H = 16), causal windows: SWA (W keys per head) and MSWA (per-head windows
//! `W·(1/4, 1/2, 1, 2)` over four head groups, docs/semantics.md §3), over N, W, d and dtype.
//! TFLOP/s count in-window work only: the forward `4·N·W_h·d` per head (with `W_h ≤ N`), the
//! backward 2.5× that. CubeCL compiles and autotunes each new shape on its first call: that call
//! is timed on its own ("first call") and two more warm-ups run before the median of `--runs`
//! calls, each synchronised. The ratio columns are FlexAttention's time over swa-zoo's for the
//! same row (above 1: swa-zoo is faster). Prints Markdown; progress goes to stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Tensor};
use clap::{Parser, ValueEnum};
use swa_zoo::attention::{ModelBackend, WindowSpec};
use swa_zoo::bench::core_bench::{CorePath, anchor_rows, attend};
use swa_zoo::bench::median_ms;
use swa_zoo::models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};

#[derive(Parser)]
#[command(about = "The CubeCL kernels of the windowed core on a GPU, beside PyTorch's anchors")]
struct Flags {
    /// What `cargo bench` passes to every bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// The GPU backend: `cuda` (feature `cuda`) or `wgpu` (feature `wgpu`: Vulkan, Metal, DX12).
    #[arg(long, value_enum, default_value_t = Gpu::default())]
    backend: Gpu,
    /// Sequence lengths N.
    #[arg(long, value_delimiter = ',', default_value = "4096,16384")]
    lengths: Vec<usize>,
    /// Base windows W.
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096")]
    windows: Vec<usize>,
    /// Head dims d.
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    dims: Vec<usize>,
    /// Tensor dtypes; one the device lacks (bf16 on wgpu) is skipped with a note.
    #[arg(long, value_delimiter = ',', default_value = "bf16,f16,f32")]
    dtypes: Vec<Precision>,
    /// Query (= key/value) heads; the batch is 1.
    #[arg(long, default_value_t = 16)]
    heads: usize,
    /// Timed calls per measurement (the median is reported).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Also time the blocked O(N·w) tensor-op path, the fallback the kernels replace.
    #[arg(long)]
    blocked: bool,
    /// CSV written by `benches/anchors/gpu_attention.py` on the same GPU, for the ratio columns.
    #[arg(long)]
    anchors: Option<PathBuf>,
    /// Also write the grid as CSV here (`benches/results/cuda/gpu_attention.csv`), one row per
    /// point, with `--card` and `--date` in every row.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// The card's name for the CSV (`nvidia-smi --query-gpu=name`).
    #[arg(long, default_value = "unknown")]
    card: String,
    /// The run's date for the CSV (`date -u +%F`).
    #[arg(long, default_value = "unknown")]
    date: String,
}

/// The GPU backends this binary was built with.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Gpu {
    Cuda,
    Wgpu,
}

impl Default for Gpu {
    /// CUDA when built in, else wgpu.
    fn default() -> Self {
        if cfg!(feature = "cuda") { Gpu::Cuda } else { Gpu::Wgpu }
    }
}

/// The dtypes of the grid.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Precision {
    Bf16,
    F16,
    F32,
}

impl Precision {
    fn dtype(self) -> DType {
        match self {
            Precision::Bf16 => DType::BF16,
            Precision::F16 => DType::F16,
            Precision::F32 => DType::F32,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
            Precision::F32 => "f32",
        }
    }
}

/// The attention kinds of the grid.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Swa,
    Mswa,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Swa => "SWA",
            Kind::Mswa => "MSWA",
        }
    }

    /// The window of each head at base window `w`.
    fn windows(self, w: usize, heads: usize) -> Vec<usize> {
        match self {
            Kind::Swa => vec![w; heads],
            Kind::Mswa => {
                let windows =
                    mswa_windows(MswaVariant::Heads, MswaStrategy::Geometric, w, 1, heads);
                windows.expect("MSWA takes at least 4 heads").remove(0)
            }
        }
    }
}

/// One row's shape.
#[derive(Clone, Copy, Debug)]
struct Row {
    kind: Kind,
    precision: Precision,
    n: usize,
    w: usize,
    dim: usize,
    heads: usize,
}

impl Row {
    fn spec(&self) -> WindowSpec {
        WindowSpec::per_head(&self.kind.windows(self.w, self.heads), self.heads)
            .expect("valid windows")
    }

    /// Forward TFLOP of in-window work: `4·N·W_h·d` summed over heads.
    fn forward_tflop(&self) -> f64 {
        let reach: usize =
            self.kind.windows(self.w, self.heads).iter().map(|&w| w.min(self.n)).sum();
        4.0 * (self.n * reach * self.dim) as f64 / 1e12
    }
}

/// Times of one path on one row: the first forward call (seconds, compilation included), and
/// the medians of the forward and the forward+backward (milliseconds).
struct Times {
    first_s: f64,
    forward_ms: f64,
    both_ms: f64,
}

/// `q, k, v: [1, H, N, d]` of standard normal values in the row's dtype.
fn inputs<B: Backend>(row: &Row, device: &B::Device) -> [Tensor<B, 4>; 3] {
    let shape = [1, row.heads, row.n, row.dim];
    std::array::from_fn(|_| {
        Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), device)
            .cast(row.precision.dtype())
    })
}

/// Seconds of one call (each call synchronises the device before it returns).
fn seconds(call: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    call();
    start.elapsed().as_secs_f64()
}

/// The first call's seconds, then the median ms of `runs` calls after two more warm-ups.
fn timed(runs: usize, mut call: impl FnMut()) -> (f64, f64) {
    let first = seconds(&mut call);
    for _ in 0..2 {
        seconds(&mut call);
    }
    (first, median_ms(runs, call))
}

/// The CSV's header: one row per grid point; TFLOP/s over the visible pairs; FlexAttention's
/// columns empty where the anchors have no row.
const CSV_HEADER: &str = "kind,n,w,d,dtype,fwd_ms,fwd_bwd_ms,flex_fwd_ms,flex_fwd_bwd_ms,\
                          fwd_tflops,fwd_bwd_tflops,flex_fwd_tflops,flex_fwd_bwd_tflops,card,date";

/// One CSV row of `row`: our times, FlexAttention's where known, TFLOP/s of each.
fn csv_row(flags: &Flags, row: &Row, ours: &Times, flex: Option<&Anchor>) -> String {
    let tflops = |ms: f64, factor: f64| row.forward_tflop() * factor / (ms / 1e3);
    let field = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    let flex_fwd = flex.map(|a| a.forward_ms);
    let flex_both = flex.and_then(|a| a.both_ms);
    [
        row.kind.name().to_string(),
        row.n.to_string(),
        row.w.to_string(),
        row.dim.to_string(),
        row.precision.name().to_string(),
        field(Some(ours.forward_ms)),
        field(Some(ours.both_ms)),
        field(flex_fwd),
        field(flex_both),
        field(Some(tflops(ours.forward_ms, 1.0))),
        field(Some(tflops(ours.both_ms, 3.5))),
        field(flex_fwd.map(|ms| tflops(ms, 1.0))),
        field(flex_both.map(|ms| tflops(ms, 3.5))),
        flags.card.replace(',', " "),
        flags.date.clone(),
    ]
    .join(",")
}

/// Writes the CSV rows to `path` (atomically: a reader never sees half a file).
fn write_csv(path: &Path, rows: &[String]) {
    let text = format!("{CSV_HEADER}\n{}\n", rows.join("\n"));
    if let Err(e) = swa_zoo::models::files::write_bytes_atomically(path, text.as_bytes()) {
        eprintln!("error: {e}");
    }
}

/// The forward and forward+backward times of `path` on `row`. Each call waits for the device
/// while it still holds its outputs, so that no queued work is skipped or left running.
fn measure<B: ModelBackend>(path: CorePath, row: &Row, device: &B::Device, runs: usize) -> Times {
    let spec = row.spec();
    let sync = || B::sync(device).expect("the device runs the call");
    let x = inputs::<B>(row, device);
    let (first_s, forward_ms) = timed(runs, || {
        let _o = attend(path, x.clone(), &spec);
        sync();
    });
    let x = x.map(|t| Tensor::<Autodiff<B>, 4>::from_inner(t).require_grad());
    let (_, both_ms) = timed(runs, || {
        let grads = attend(path, x.clone(), &spec).backward();
        let _kept = x.clone().map(|t| t.grad(&grads));
        sync();
    });
    Times { first_s, forward_ms, both_ms }
}

/// Anchor rows from the anchors' CSV: `anchor,kind,dtype,n,w,d,forward_ms,forward_backward_ms`.
struct Anchor {
    name: String,
    kind: String,
    dtype: String,
    n: usize,
    w: usize,
    dim: usize,
    forward_ms: f64,
    both_ms: Option<f64>,
}

fn read_anchors(path: &Path) -> Vec<Anchor> {
    let rows = anchor_rows(path)
        .unwrap_or_else(|e| panic!("cannot read the anchors {}: {e}", path.display()));
    rows.iter()
        .filter_map(|fields| {
            let [name, kind, dtype, n, w, d, forward, both] = &fields[..] else { return None };
            Some(Anchor {
                name: name.clone(),
                kind: kind.clone(),
                dtype: dtype.clone(),
                n: n.parse().ok()?,
                w: w.parse().ok()?,
                dim: d.parse().ok()?,
                forward_ms: forward.parse().ok()?,
                both_ms: both.parse().ok(),
            })
        })
        .collect()
}

/// FlexAttention's row for `row`, when the anchors have one.
fn flex_anchor<'a>(anchors: &'a [Anchor], row: &Row) -> Option<&'a Anchor> {
    anchors.iter().find(|a| {
        a.name.contains("flex_attention")
            && a.kind == row.kind.name()
            && a.dtype == row.precision.name()
            && (a.n, a.w, a.dim) == (row.n, row.w, row.dim)
    })
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "—".into(), |v| format!("{v:.digits$}"))
}

/// Runs the grid on backend `B` and prints its tables.
fn run<B: ModelBackend>(flags: &Flags, device: B::Device, gpu: &str) {
    let anchors = flags.anchors.as_deref().map(read_anchors).unwrap_or_default();
    println!("{gpu}, B=1, H={}, causal windows, median of {} calls\n", flags.heads, flags.runs);
    println!(
        "| kind | dtype | N | W | d | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | \
         first call s | blocked fwd ms | blocked fwd+bwd ms | Flex fwd ms | Flex / swa-zoo fwd | \
         Flex fwd+bwd ms | Flex / swa-zoo fwd+bwd |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut csv = Vec::new();
    for &precision in &flags.dtypes {
        if !B::supports_dtype(&device, precision.dtype()) {
            println!("\n({} skipped: this device has no {0} tensors)\n", precision.name());
            continue;
        }
        for &dim in &flags.dims {
            for &n in &flags.lengths {
                for &w in &flags.windows {
                    for kind in [Kind::Swa, Kind::Mswa] {
                        let row = Row { kind, precision, n, w, dim, heads: flags.heads };
                        eprintln!("{} {} N={n} W={w} d={dim}", kind.name(), precision.name());
                        let ours = measure::<B>(CorePath::Kernel, &row, &device, flags.runs);
                        let blocked = flags
                            .blocked
                            .then(|| measure::<B>(CorePath::Blocked, &row, &device, flags.runs));
                        let flex = flex_anchor(&anchors, &row);
                        csv.push(csv_row(flags, &row, &ours, flex));
                        // After every row: a run stopped by a time limit keeps what it measured.
                        if let Some(path) = &flags.csv {
                            write_csv(path, &csv);
                        }
                        let tflops =
                            |ms: f64, factor: f64| row.forward_tflop() * factor / (ms / 1e3);
                        println!(
                            "| {} | {} | {n} | {w} | {dim} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | \
                             {} | {} | {} | {} | {} | {} |",
                            kind.name(),
                            precision.name(),
                            ours.forward_ms,
                            tflops(ours.forward_ms, 1.0),
                            ours.both_ms,
                            tflops(ours.both_ms, 3.5),
                            ours.first_s,
                            cell(blocked.as_ref().map(|b| b.forward_ms), 3),
                            cell(blocked.as_ref().map(|b| b.both_ms), 3),
                            cell(flex.map(|a| a.forward_ms), 3),
                            cell(flex.map(|a| a.forward_ms / ours.forward_ms), 2),
                            cell(flex.and_then(|a| a.both_ms), 3),
                            cell(flex.and_then(|a| a.both_ms).map(|b| b / ours.both_ms), 2),
                        );
                    }
                }
            }
        }
    }
    let others: Vec<_> = anchors.iter().filter(|a| !a.name.contains("flex_attention")).collect();
    if !others.is_empty() {
        println!("\n| anchor | kind | dtype | N | W | d | fwd ms | fwd+bwd ms |");
        println!("|---|---|---|---|---|---|---|---|");
        for a in others {
            println!(
                "| {} | {} | {} | {} | {} | {} | {:.3} | {} |",
                a.name,
                a.kind,
                a.dtype,
                a.n,
                a.w,
                a.dim,
                a.forward_ms,
                cell(a.both_ms, 3)
            );
        }
    }
}

fn main() {
    let flags = Flags::parse();
    match flags.backend {
        #[cfg(feature = "cuda")]
        Gpu::Cuda => run::<burn::backend::Cuda>(&flags, Default::default(), "CUDA"),
        #[cfg(feature = "wgpu")]
        Gpu::Wgpu => run::<burn::backend::Wgpu>(&flags, Default::default(), "wgpu"),
        #[allow(unreachable_patterns)]
        other => {
            eprintln!("error: this binary was built without the `{other:?}` feature");
            std::process::exit(2);
        }
    }
}

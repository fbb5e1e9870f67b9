//! The efficiency benchmarks at full size: decode latency and KV-cache bytes after MSWA §5.3 /
//! Figure 3, time per token against the position up to 16k, SWA/SWAT against a vanilla model
//! run StreamingLLM-style, and training throughput with peak memory (the logic is in
//! `swa_zoo::bench`; `swa-zoo bench` runs a quick version).
//!
//! ```sh
//! cargo bench --bench efficiency                                  # flex, the CPU model
//! cargo bench --bench efficiency -- --parts training --backend ndarray
//! cargo bench --bench efficiency --features wgpu -- --backend wgpu --parts training
//! cargo bench --bench efficiency --features cuda -- --backend cuda --paper
//! ```
//!
//! `cargo bench --bench efficiency -- --help` lists the flags. Prints Markdown tables and writes
//! one CSV per part, `decode_latency.svg` (ms per token against the batch, one line per kind and
//! window, like Figure 3) and `decode_flatness.svg`.

use std::path::{Path, PathBuf};

use clap::Parser;
use swa_zoo::AppError;
use swa_zoo::bench::heap::CountingAllocator;
use swa_zoo::bench::suite::{self, Results, Suite, SuitePart};
use swa_zoo::bench::{BenchAttention, BenchModel, decode, streaming, training};
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;
use swa_zoo::runtime::{BackendChoice, Job, Placement, Precision, TrainingBackend, run_on};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Flags of the efficiency benchmarks.
#[derive(Parser, Debug)]
#[command(about = "The full efficiency suite: decode latency, flatness, StreamingLLM, training")]
struct Flags {
    /// Backend: flex (CPU, default), ndarray (CPU), wgpu or cuda (the last two need their
    /// feature).
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
    /// MSWA's Figure 3 model (32 layers, 16 heads, d = 1024) instead of the CPU model.
    #[arg(long)]
    paper: bool,
    /// The parts to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "decode,flatness,streaming,training"
    )]
    parts: Vec<SuitePart>,
    /// Training lengths, replacing 1k, 4k and 16k.
    #[arg(long, value_delimiter = ',')]
    lengths: Vec<usize>,
    /// Base windows of the decode grid, replacing 128, 256 and 512.
    #[arg(long, value_delimiter = ',')]
    windows: Vec<usize>,
    /// Batch sizes of the decode grid, replacing 1, 8, 16, 64 and 128.
    #[arg(long, value_delimiter = ',')]
    batches: Vec<usize>,
    /// The last position full attention decodes to in the flatness run.
    #[arg(long, default_value_t = 16384)]
    full_max: usize,
    /// Folder of the CSV files and figures. Default: `benches/results/<backend>`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Passed by `cargo bench` to every `harness = false` target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let flags = Flags::parse();
    let place = Placement { backend: flags.backend, devices: vec![0], precision: Precision::F32 };
    if let Err(problem) = run_on(&place, Efficiency(flags)) {
        eprintln!("error: {problem}");
        std::process::exit(1);
    }
}

/// The suite the flags describe, as a job on their backend.
struct Efficiency(Flags);

impl Job for Efficiency {
    fn run<B: TrainingBackend>(self, device: B::Device) -> Result<(), AppError> {
        let flags = self.0;
        // The CPU backends keep their tensors in the counted heap; GPU memory is not counted.
        let host_memory = matches!(flags.backend, BackendChoice::Flex | BackendChoice::Ndarray);
        let model = if flags.paper { BenchModel::paper() } else { BenchModel::cpu() };
        let mut suite = Suite::full(model, flags.full_max);
        if !flags.lengths.is_empty() {
            suite.training.lengths = flags.lengths.clone();
        }
        if !flags.windows.is_empty() {
            suite.decode.windows = flags.windows.clone();
        }
        if !flags.batches.is_empty() {
            suite.decode.batches = flags.batches.clone();
        }
        let backend = flags.backend.name();
        let out = flags.out.clone().unwrap_or_else(|| Path::new("benches/results").join(backend));
        std::fs::create_dir_all(&out)
            .map_err(|source| AppError::Io { path: out.clone(), source })?;
        println!(
            "efficiency suite on {} ({backend}), results in {}\n",
            B::name(&device),
            out.display()
        );
        suite.training.host_memory = host_memory;
        let results = suite::run::<B>(&suite, &flags.parts, &device, |title, table| {
            println!("{title}\n\n{}", table.markdown())
        })?;
        if !results.training.is_empty() {
            let memory = if host_memory {
                "peak MiB: the most heap held above the step's start"
            } else {
                "device memory not counted"
            };
            println!("({memory})\n");
        }
        write(&out, &suite, &results)
    }
}

/// CSV files and plots of the parts that ran.
fn write(out: &Path, suite: &Suite, results: &Results) -> Result<(), AppError> {
    let save = |name: &str, table: Table| -> Result<(), AppError> {
        let path = out.join(name);
        table.write_csv(&path)?;
        println!("wrote {}", path.display());
        Ok(())
    };
    if !results.decode.is_empty() {
        save("decode_latency.csv", decode::table(&results.decode))?;
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for row in &results.decode {
            let name = match row.window {
                Some(w) => format!("{} W={w}", row.attention.name()),
                None => row.attention.name().to_string(),
            };
            match series.iter_mut().find(|(n, _)| *n == name) {
                Some((_, points)) => points.push((row.batch as f64, row.ms)),
                None => series.push((name, vec![(row.batch as f64, row.ms)])),
            }
        }
        let path = out.join("decode_latency.svg");
        let title = format!(
            "Decode latency at positions 500–2000 of 2048 ({})",
            suite.decode.model.describe()
        );
        line_plot(&path, &title, "batch size", "ms per token", &series, true, true)?;
        println!("wrote {}", path.display());
    }
    if !results.flatness.is_empty() {
        save("decode_flatness.csv", decode::flatness_table(&suite.flatness, &results.flatness))?;
        let series: Vec<(String, Vec<(f64, f64)>)> = results
            .flatness
            .iter()
            .map(|row| {
                let points = suite
                    .flatness
                    .positions
                    .iter()
                    .zip(&row.ms)
                    .filter_map(|(&p, t)| t.map(|t| (p as f64, t)))
                    .collect();
                let name = match row.attention {
                    BenchAttention::Full => "full".to_string(),
                    attention => format!("{} W={}", attention.name(), suite.flatness.window),
                };
                (name, points)
            })
            .collect();
        let path = out.join("decode_flatness.svg");
        line_plot(
            &path,
            "Time per token against the position, batch 1",
            "position",
            "ms per token",
            &series,
            true,
            true,
        )?;
        println!("wrote {}", path.display());
    }
    if !results.streaming.is_empty() {
        save("streaming.csv", streaming::table(&results.streaming))?;
    }
    if !results.training.is_empty() {
        save("training.csv", training::table(&results.training))?;
    }
    Ok(())
}

//! The efficiency benchmarks of issue 8, full size: decode latency and KV-cache bytes after MSWA
//! §5.3 / Figure 3, time per token against the position up to 16k, SWA/SWAT against a vanilla
//! model run StreamingLLM-style, and training throughput with peak memory (the logic is in
//! `swa_zoo::bench`; `swa-zoo bench` runs a quick version).
//!
//! ```sh
//! cargo bench --bench efficiency                                  # flex, the CPU model
//! cargo bench --bench efficiency -- --parts training --backend ndarray
//! cargo bench --bench efficiency --features wgpu -- --backend wgpu --parts training
//! cargo bench --bench efficiency --features cuda -- --backend cuda --paper
//! ```
//!
//! Flags: `--backend flex|ndarray|wgpu|cuda`, `--paper` (MSWA's 32 layers, 16 heads, d = 1024,
//! instead of the CPU model), `--parts decode,flatness,streaming,training`, `--lengths` (training
//! lengths), `--windows` and `--batches` (the decode grid's), `--full-max P` (the last position
//! full attention decodes to in the flatness run), `--out DIR` (default `benches/results/<backend>`). Prints Markdown tables and writes one CSV
//! per part, `decode_latency.svg` (ms per token against the batch, one line per kind and
//! window, like Figure 3) and `decode_flatness.svg`.

use std::path::{Path, PathBuf};

use burn::backend::Autodiff;
use burn::tensor::backend::AutodiffBackend;
use swa_zoo::attention::WindowedAttentionBackend;
use swa_zoo::bench::memory::CountingAllocator;
use swa_zoo::bench::suite::{self, Part, Results, Suite};
use swa_zoo::bench::{BenchModel, Family, decode, streaming, training};
use swa_zoo::report::Table;
use swa_zoo::report::plot::line_plot;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

struct Options {
    backend: String,
    paper: bool,
    parts: Vec<Part>,
    lengths: Option<Vec<usize>>,
    windows: Option<Vec<usize>>,
    batches: Option<Vec<usize>>,
    full_max: usize,
    out: Option<PathBuf>,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        backend: "flex".into(),
        paper: false,
        parts: Part::ALL.to_vec(),
        lengths: None,
        windows: None,
        batches: None,
        full_max: 16384,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: &str| {
        value.parse::<usize>().map_err(|_| format!("{flag} takes a number, not `{value}`"))
    };
    let numbers = |flag: &str, value: String| {
        value.split(',').map(|v| number(flag, v)).collect::<Result<Vec<_>, _>>()
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--backend" => options.backend = value()?,
            "--paper" => options.paper = true,
            "--parts" => {
                options.parts = value()?
                    .split(',')
                    .map(|p| match p {
                        "decode" => Ok(Part::Decode),
                        "flatness" => Ok(Part::Flatness),
                        "streaming" => Ok(Part::Streaming),
                        "training" => Ok(Part::Training),
                        other => {
                            Err(format!("no part `{other}`: decode, flatness, streaming, training"))
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
            "--lengths" => options.lengths = Some(numbers("--lengths", value()?)?),
            "--windows" => options.windows = Some(numbers("--windows", value()?)?),
            "--batches" => options.batches = Some(numbers("--batches", value()?)?),
            "--full-max" => options.full_max = number("--full-max", &value()?)?,
            "--out" => options.out = Some(PathBuf::from(value()?)),
            // cargo bench passes --bench to every harness = false target.
            "--bench" => {}
            other => return Err(format!("unknown flag `{other}` (see benches/efficiency.rs)")),
        }
    }
    Ok(options)
}

fn main() {
    if let Err(problem) = parse().and_then(|options| match options.backend.as_str() {
        "flex" => bench::<Autodiff<burn::backend::Flex>>(&options, Default::default(), true),
        "ndarray" => bench::<Autodiff<burn::backend::NdArray>>(&options, Default::default(), true),
        #[cfg(feature = "wgpu")]
        "wgpu" => bench::<Autodiff<burn::backend::Wgpu>>(&options, Default::default(), false),
        #[cfg(feature = "cuda")]
        "cuda" => bench::<Autodiff<burn::backend::Cuda>>(&options, Default::default(), false),
        other => Err(format!("backend `{other}` is not in this build (flex, ndarray; wgpu and cuda need their features)")),
    }) {
        eprintln!("error: {problem}");
        std::process::exit(1);
    }
}

/// Runs the suite on `B`; `host_memory` says whether tensors live in the counted heap.
fn bench<B>(options: &Options, device: B::Device, host_memory: bool) -> Result<(), String>
where
    B: AutodiffBackend + WindowedAttentionBackend,
{
    let model = if options.paper { BenchModel::paper() } else { BenchModel::cpu() };
    let mut suite = Suite::full(model, options.full_max);
    if let Some(lengths) = &options.lengths {
        suite.training.lengths = lengths.clone();
    }
    if let Some(windows) = &options.windows {
        suite.decode.windows = windows.clone();
    }
    if let Some(batches) = &options.batches {
        suite.decode.batches = batches.clone();
    }
    let out =
        options.out.clone().unwrap_or_else(|| Path::new("benches/results").join(&options.backend));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    println!(
        "efficiency suite on {} ({}), results in {}\n",
        B::name(&device),
        options.backend,
        out.display()
    );
    suite.training.host_memory = host_memory;
    let results = suite::run::<B>(&suite, &options.parts, &device, |title, table| {
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

/// CSV files and plots of the parts that ran.
fn write(out: &Path, suite: &Suite, results: &Results) -> Result<(), String> {
    let save = |name: &str, table: Table| -> Result<(), String> {
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
                Some(w) => format!("{} W={w}", row.family.name()),
                None => row.family.name().to_string(),
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
        line_plot(&path, &title, "batch size", "ms per token", &series, true, true)
            .map_err(|e| e.to_string())?;
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
                let name = match row.family {
                    Family::Full => "full".to_string(),
                    family => format!("{} W={}", family.name(), suite.flatness.window),
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
        )
        .map_err(|e| e.to_string())?;
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

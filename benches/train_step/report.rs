//! The medians of each side at each size, as a table on stdout and a CSV.

use serde_json::Value;

use crate::Options;

/// The median measurement of one side at one size.
pub struct Row {
    size: &'static str,
    mode: String,
    params: u64,
    tokens_per_s: f64,
    ms_per_step: f64,
    vmhwm_mib: f64,
    /// Seconds from the process's start to the end of its first step.
    first_step_s: f64,
    /// Device memory the process holds after its timed steps (nvidia-smi), in MiB.
    gpu_mib: f64,
}

impl Row {
    pub fn median(size: &'static str, mode: &str, results: &[Value]) -> Row {
        let field = |key: &str| {
            let values = results.iter().map(|r| r[key].as_f64().unwrap_or(f64::NAN)).collect();
            swa_zoo::bench::median(values)
        };
        Row {
            size,
            mode: mode.to_string(),
            params: results[0]["params"].as_u64().unwrap_or(0),
            tokens_per_s: field("tokens_per_s"),
            ms_per_step: field("ms_per_step"),
            vmhwm_mib: field("vmhwm_kib") / 1024.0,
            first_step_s: field("first_step_s"),
            gpu_mib: field("gpu_mib"),
        }
    }
}

/// The table on stdout (with each side's tokens/s as a ratio to ours) and the CSV.
pub fn report(rows: &[Row], options: &Options) {
    let ours = |size: &str| rows.iter().find(|r| r.size == size && r.mode == "swa-zoo");
    let mut csv = String::from(
        "backend,precision,size,side,params,tokens_per_s,ms_per_step,vmhwm_mib,first_step_s,\
         gpu_mib,ours_over_side\n",
    );
    println!(
        "{:<8} {:<14} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "size", "side", "params", "tokens/s", "ms/step", "VmHWM MiB", "1st s", "GPU MiB", "ours/it"
    );
    for r in rows {
        let ratio = ours(r.size).map_or(f64::NAN, |o| o.tokens_per_s / r.tokens_per_s);
        println!(
            "{:<8} {:<14} {:>10} {:>10.0} {:>9.1} {:>9.0} {:>8.1} {:>8.0} {:>8.2}",
            r.size,
            r.mode,
            r.params,
            r.tokens_per_s,
            r.ms_per_step,
            r.vmhwm_mib,
            r.first_step_s,
            r.gpu_mib,
            ratio
        );
        csv += &format!(
            "{},{},{},{},{},{:.1},{:.2},{:.1},{:.2},{:.0},{:.3}\n",
            options.backend.name(),
            options.precision.name(),
            r.size,
            r.mode,
            r.params,
            r.tokens_per_s,
            r.ms_per_step,
            r.vmhwm_mib,
            r.first_step_s,
            r.gpu_mib,
            ratio
        );
    }
    println!(
        "(median of {} runs each, {} threads, {} in {})",
        options.runs,
        options.threads,
        options.backend.name(),
        options.precision.name()
    );
    if let Some(path) = &options.csv {
        swa_zoo::models::files::write_bytes_atomically(path, csv.as_bytes())
            .expect("the CSV is writable");
        println!("CSV: {}", path.display());
    }
}

//! SWAT's efficiency comparison: decoding with a model trained for its window (SWA, SWAT)
//! against a vanilla full-attention model run StreamingLLM-style, with `S` sinks and the
//! `W − S` most recent keys, the same total cache, and StreamingLLM's position shift
//! ([`CachePositions::Streaming`], docs/semantics.md §7: each key at its slot index, the sinks
//! turned again at every step). The vanilla model without eviction is the last row.

use swa_attention::ModelBackend;
use swa_models::layers::CachePositions;
use swa_training::eval::{rebuild, with_eval_window};

use super::decode::time_steps;
use super::{BenchAttention, BenchModel, median, mib, ms};
use crate::error::AppError;
use crate::report::Table;

/// The StreamingLLM comparison.
#[derive(Clone, Debug)]
pub struct StreamingBench {
    /// The model every variant is built into.
    pub model: BenchModel,
    /// The total cache `W` per head: the window of SWA and SWAT, sinks + recent for StreamingLLM.
    pub window: usize,
    /// StreamingLLM's sinks `S` (4 in its paper).
    pub sinks: usize,
    /// Sequences decoded together.
    pub batch: usize,
    /// Positions whose next-token time is measured (the median over them is reported).
    pub positions: Vec<usize>,
    /// Steps timed from each position on, their median taken.
    pub repeats: usize,
}

/// One variant's decode time.
#[derive(Clone, Debug)]
pub struct StreamingRow {
    /// What ran.
    pub name: String,
    /// Milliseconds per token: the median over the positions.
    pub ms: f64,
    /// Bytes of the KV cache per sequence after the last step.
    pub kv_bytes: usize,
}

/// Runs the comparison: SWA, SWAT, vanilla + StreamingLLM, vanilla with its whole cache.
pub fn run<B: ModelBackend>(
    bench: &StreamingBench,
    device: &B::Device,
) -> Result<Vec<StreamingRow>, AppError> {
    if bench.sinks >= bench.window {
        let problem = format!(
            "StreamingLLM needs fewer sinks ({}) than the total window ({})",
            bench.sinks, bench.window
        );
        return Err(AppError::BenchSettings { problem });
    }
    let (w, s) = (bench.window, bench.sinks);
    let vanilla_config = bench.model.config(BenchAttention::Full, w)?;
    let vanilla = vanilla_config.init::<B>(device)?;
    let streaming_config = with_eval_window(&vanilla_config, w - s, s)?;
    let streaming = rebuild(&vanilla, &streaming_config, device)?;
    let swa = bench.model.config(BenchAttention::Swa, w)?.init::<B>(device)?;
    let swat = bench.model.config(BenchAttention::Swat, w)?.init::<B>(device)?;
    let variants = [
        (format!("SWA, W = {w}"), &swa, CachePositions::Absolute),
        (format!("SWAT, W = {w}"), &swat, CachePositions::Absolute),
        (
            format!("vanilla + StreamingLLM, {s} sinks + {} recent", w - s),
            &streaming,
            CachePositions::Streaming,
        ),
        ("vanilla, full cache".to_string(), &vanilla, CachePositions::Absolute),
    ];
    let steps = bench.positions.iter().max().map_or(0, |p| p + bench.repeats);
    let mut rows = Vec::new();
    for (name, model, positions) in variants {
        let timing = time_steps(
            model,
            bench.batch,
            positions,
            &bench.positions,
            bench.repeats,
            steps,
            device,
        )?;
        rows.push(StreamingRow {
            name,
            ms: median(timing.per_position_ms),
            kv_bytes: timing.cache_bytes / bench.batch,
        });
    }
    Ok(rows)
}

/// The comparison table, with each time relative to StreamingLLM's.
pub fn table(rows: &[StreamingRow]) -> Table {
    let mut table = Table::new(&["model", "ms/token", "vs StreamingLLM", "KV MiB/seq"]);
    let streaming = rows.iter().find(|r| r.name.contains("StreamingLLM")).map(|r| r.ms);
    for r in rows {
        let ratio = streaming.map_or("—".into(), |s| format!("{:.2}×", r.ms / s));
        table.rows.push(vec![r.name.clone(), ms(r.ms), ratio, mib(r.kv_bytes)]);
    }
    table
}

//! The loss curve of a run, read from the Learner's metric logs (`<out>/{train,valid}/epoch-N/
//! Loss.log`, one `value,count` line per step) and drawn with [`crate::report::plot::line_plot`].

use std::path::{Path, PathBuf};

use super::ReportError;
use super::plot::line_plot;

/// The losses logged for `split` ("train" or "valid"), epoch by epoch, as (epoch, values).
fn logged(out: &Path, split: &str) -> Vec<(usize, Vec<f64>)> {
    let Ok(entries) = std::fs::read_dir(out.join(split)) else { return Vec::new() };
    let mut epochs: Vec<(usize, Vec<f64>)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let epoch = entry.file_name().to_str()?.strip_prefix("epoch-")?.parse().ok()?;
            let text = std::fs::read_to_string(entry.path().join("Loss.log")).ok()?;
            let values = text.lines().filter_map(|l| l.split(',').next()?.parse().ok()).collect();
            Some((epoch, values))
        })
        .collect();
    epochs.sort_by_key(|(epoch, _)| *epoch);
    epochs
}

/// Writes `<out>/loss_curve.svg`: the training loss per step, and the validation mean at the
/// end of each epoch (placed at that epoch's last step). Returns the file written.
pub fn plot_loss_curve(out: &Path, steps_per_epoch: usize) -> Result<PathBuf, ReportError> {
    let train: Vec<(f64, f64)> = logged(out, "train")
        .into_iter()
        .flat_map(|(epoch, values)| {
            let first = (epoch - 1) * steps_per_epoch;
            values.into_iter().enumerate().map(move |(i, v)| ((first + i + 1) as f64, v))
        })
        .collect();
    let valid: Vec<(f64, f64)> = logged(out, "valid")
        .into_iter()
        .filter(|(_, values)| !values.is_empty())
        .map(|(epoch, values)| {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            ((epoch * steps_per_epoch) as f64, mean)
        })
        .collect();
    let path = out.join("loss_curve.svg");
    let series = vec![("train".to_string(), train), ("valid".to_string(), valid)];
    line_plot(&path, "Loss (nats per token)", "step", "loss", &series, false, false)?;
    Ok(path)
}

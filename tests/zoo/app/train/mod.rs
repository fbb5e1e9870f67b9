//! `swa-zoo train` as a user runs it (docs/reliability.md): killed and resumed, stopped by a
//! signal, a second writer of one run folder, a full disk; its one-line errors, and what it and
//! `swa-zoo eval` report.

mod errors;
mod full_disk;
mod kill;
mod lock;
mod reports;
mod stop;

/// The logits of the [`crate::tiny_model`] a command-line run saved in `dir/out` (its
/// `model.mpk`).
fn saved_logits(dir: &std::path::Path, out: &str) -> Vec<f32> {
    let path = dir.join(out).join("model.mpk");
    let device = Default::default();
    let load = swa_zoo::models::weights::load_record::<burn::backend::NdArray>;
    crate::logits(&load(&crate::tiny_model(), &path, &device).unwrap())
}

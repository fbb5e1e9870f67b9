//! `check-backends`: the cross-backend equivalence check ([`crate::check`]) on every backend
//! this build has, printed as a table.

use clap::Args;

use crate::check::{Candidate, CheckCase, TOLERANCES, attention_kinds, run};
use crate::error::AppError;

/// Flags of `check-backends`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Check these presets (repeatable; the `-tiny` ones run in seconds) instead of the tiny
    /// model of every attention kind.
    #[arg(long)]
    preset: Vec<String>,
}

/// `check-backends`: prints the tolerances, the comparison table and the skipped backends;
/// fails when any comparison fails.
pub fn check_backends(args: CheckArgs) -> Result<(), AppError> {
    let cases = match args.preset.is_empty() {
        true => attention_kinds(),
        false => args
            .preset
            .iter()
            .map(|name| {
                CheckCase::preset(name)
                    .ok_or_else(|| AppError::UnknownPreset { name: name.clone() })
            })
            .collect::<Result<_, _>>()?,
    };
    println!("reference: ndarray f32; tolerances (max-abs / rel-RMS, per tensor):");
    for (arithmetic, row) in TOLERANCES {
        let cells: Vec<String> =
            row.iter().map(|t| format!("{:.0e} / {:.0e}", t.max_abs, t.rel_rms)).collect();
        println!(
            "  {arithmetic:?}: weights {}, logits {}, loss {}, gradients {}, adamw step {}; decoding identical",
            cells[0], cells[1], cells[2], cells[3], cells[4]
        );
    }
    let report = run(&cases, &Candidate::ALL);
    print!("{}", report.render());
    match report.failures().len() {
        0 => Ok(()),
        count => Err(AppError::ChecksFailed { count }),
    }
}

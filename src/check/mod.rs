//! The cross-backend equivalence check: a model drawn once from a seed, loaded bit for bit onto
//! the reference backend (ndarray, f32) and onto each candidate (flex, wgpu, cuda), must give
//! the same logits, loss, gradients, parameters after one AdamW step and greedy decoding, within
//! the tolerances of [`TOLERANCES`].
//!
//! - [`cases`]: the tiny model of every attention kind, or a named preset;
//! - [`params`]: the seeded weights and reading parameters and gradients back by name;
//! - [`measure`]: what one backend computes for a case;
//! - [`compare`](mod@compare): errors, the tolerance table and the verdicts;
//! - [`candidates`]: the backends the build has, and why the others are skipped.
//!
//! The tests (`tests/zoo/app/check_backends.rs`) and `swa-zoo check-backends` both run [`run`].

pub mod candidates;
pub mod cases;
pub mod compare;
pub mod measure;
pub mod params;

use std::fmt::Write;

pub use candidates::{Candidate, Reference, measure_reference};
pub use cases::{CheckCase, attention_kinds};
pub use compare::{
    Arithmetic, Comparison, MaxErrors, Quantity, TOLERANCES, Tolerance, Verdict, compare, tolerance,
};
pub use measure::{DecodedToken, Outcome};
pub use params::{Named, Weights};

/// The result of a check: one line per case, candidate and quantity, and the candidates that
/// did not run with the reason.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The comparisons, case by case.
    pub rows: Vec<Comparison>,
    /// `(candidate, why it was skipped)`.
    pub skipped: Vec<(&'static str, String)>,
}

impl Report {
    /// The comparisons that failed.
    pub fn failures(&self) -> Vec<&Comparison> {
        self.rows.iter().filter(|r| r.verdict == Verdict::Fail).collect()
    }

    /// The report as a plain-text table, then the skipped candidates.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let header = [
            "case",
            "backend",
            "quantity",
            "max-abs",
            "rel-RMS",
            "tol max-abs",
            "tol rel-RMS",
            "result",
        ];
        let _ = writeln!(
            out,
            "{:<20} {:<7} {:<10} {:>9} {:>9} {:>11} {:>11}  {}",
            header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7]
        );
        for row in &self.rows {
            let verdict = match row.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
                Verdict::NotApplicable => "n/a",
            };
            let numbers = match &row.errors {
                Some((e, t)) => format!(
                    "{:>9.2e} {:>9.2e} {:>11.0e} {:>11.0e}",
                    e.max_abs, e.rel_rms, t.max_abs, t.rel_rms
                ),
                None => format!("{:>9} {:>9} {:>11} {:>11}", "-", "-", "-", "-"),
            };
            let _ = write!(
                out,
                "{:<20} {:<7} {:<10} {numbers}  {verdict}",
                row.case,
                row.backend,
                row.quantity.label()
            );
            let _ = match row.note.is_empty() {
                true => writeln!(out),
                false => writeln!(out, "  {}", row.note),
            };
        }
        for (candidate, reason) in &self.skipped {
            let _ = writeln!(out, "skipped {candidate}: {reason}");
        }
        out
    }
}

/// Compares every case on every available candidate with the reference. A case whose
/// reference or candidate run fails gets one failing line saying why.
pub fn run(cases: &[CheckCase], candidates: &[Candidate]) -> Report {
    let mut report = Report::default();
    let available: Vec<Candidate> = candidates
        .iter()
        .copied()
        .filter(|c| match c.availability() {
            Ok(()) => true,
            Err(reason) => {
                report.skipped.push((c.name(), reason.to_string()));
                false
            }
        })
        .collect();
    for case in cases {
        let failed = |backend, problem: String| Comparison {
            case: case.name.clone(),
            backend,
            quantity: Quantity::Weights,
            errors: None,
            note: problem,
            verdict: Verdict::Fail,
        };
        let weights = match Weights::seeded(&case.config, case.seed) {
            Ok(weights) => weights,
            Err(problem) => {
                report
                    .rows
                    .push(failed("ndarray", format!("the model cannot be built: {problem}")));
                continue;
            }
        };
        let reference = match measure_reference(case, &weights) {
            Ok(outcome) => outcome,
            Err(problem) => {
                report.rows.push(failed("ndarray", format!("the reference run failed: {problem}")));
                continue;
            }
        };
        for candidate in &available {
            let started = std::time::Instant::now();
            let measured = candidate.measure(case, &weights);
            eprintln!(
                "checked {} on {} in {:.1} s",
                case.name,
                candidate.name(),
                started.elapsed().as_secs_f64()
            );
            match measured {
                Ok(outcome) => report.rows.extend(compare(
                    &case.name,
                    candidate.name(),
                    candidate.arithmetic(),
                    &reference,
                    &outcome,
                )),
                Err(problem) => {
                    report.rows.push(failed(candidate.name(), format!("the run failed: {problem}")))
                }
            }
        }
    }
    report
}

//! Comparing a candidate's [`Outcome`] with the reference's: max-abs and relative-RMS errors
//! (the measures of FlashAttention's and fla's tests) against the one tolerance table
//! [`TOLERANCES`], and greedy decodings token by token.

use std::sync::Arc;

use swa_models::ModelError;

use super::measure::{DecodedToken, Outcome};
use super::params::Named;

/// How a candidate computes its f32 tensors (its matmuls in particular).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arithmetic {
    /// IEEE f32 throughout (ndarray, flex, wgpu).
    F32,
    /// f32 tensors whose matmuls run on TF32 tensor cores (10-bit mantissa): Burn's CUDA backend.
    Tf32,
}

/// What is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// The parameters after loading: the copy must be exact.
    Weights,
    /// Forward logits.
    Logits,
    /// The loss.
    Loss,
    /// The gradient of every parameter after one backward pass.
    Gradients,
    /// Every parameter after one AdamW step.
    Stepped,
    /// Greedily decoded tokens: must be identical.
    Decoding,
}

impl Quantity {
    /// The name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Self::Weights => "weights",
            Self::Logits => "logits",
            Self::Loss => "loss",
            Self::Gradients => "gradients",
            Self::Stepped => "adamw step",
            Self::Decoding => "decoding",
        }
    }
}

/// Largest accepted errors of a quantity; both must hold, for every tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Largest `|candidate − reference|` of any element.
    pub max_abs: f32,
    /// Largest `‖candidate − reference‖₂ / ‖reference‖₂` of any tensor.
    pub rel_rms: f32,
}

const fn tol(max_abs: f32, rel_rms: f32) -> Tolerance {
    Tolerance { max_abs, rel_rms }
}

/// The tolerance table, per arithmetic and quantity: weights, logits, loss, gradients, the
/// parameters after one AdamW step (decodings have no tolerance: identical tokens).
///
/// - f32: about 10× the largest errors that flex and wgpu (lavapipe) showed on the tiny model
///   of every attention kind (logits 1.6e-6, loss 4.8e-7, gradients 1.3e-6 and rel-RMS 1.2e-5,
///   AdamW step 1.4e-5). The step's max-abs is the loosest: Adam's first update is
///   `lr·g/(|g| + ε)`, which turns a tiny gradient's rounding error into an update error of up to
///   `lr` where `|g|` is near ε (bounded by 2·lr = 2e-3 in all).
/// - TF32 (CUDA): provisional, not yet measured on a device; scaled from the core's CUDA
///   tolerances (README, "Tolerances") for a 2-layer model.
pub const TOLERANCES: [(Arithmetic, [Tolerance; 5]); 2] = [
    (
        Arithmetic::F32,
        [tol(0.0, 0.0), tol(2e-5, 1e-5), tol(5e-6, 5e-6), tol(2e-5, 1e-4), tol(1e-4, 3e-5)],
    ),
    (
        Arithmetic::Tf32,
        [tol(0.0, 0.0), tol(2e-2, 5e-3), tol(5e-3, 5e-3), tol(5e-2, 5e-2), tol(2e-3, 5e-3)],
    ),
];

/// The tolerance of `quantity` under `arithmetic`; `None` for decodings.
pub fn tolerance(arithmetic: Arithmetic, quantity: Quantity) -> Option<Tolerance> {
    let row = TOLERANCES.iter().find(|(a, _)| *a == arithmetic).map(|(_, row)| row)?;
    match quantity {
        Quantity::Weights => Some(row[0]),
        Quantity::Logits => Some(row[1]),
        Quantity::Loss => Some(row[2]),
        Quantity::Gradients => Some(row[3]),
        Quantity::Stepped => Some(row[4]),
        Quantity::Decoding => None,
    }
}

/// The errors of a list of tensors: the largest over tensors, with the tensor it occurs in.
#[derive(Clone, Debug, PartialEq)]
pub struct MaxErrors {
    /// Largest absolute error of any element (∞ for a NaN).
    pub max_abs: f32,
    /// Where it occurs.
    pub max_abs_in: String,
    /// Largest relative RMS error of any tensor.
    pub rel_rms: f32,
    /// Where it occurs.
    pub rel_rms_in: String,
}

impl MaxErrors {
    /// The errors of `candidate` against `reference`, tensor by tensor (same names and sizes).
    pub fn of(reference: &[Named], candidate: &[Named]) -> Self {
        let mut errors = Self {
            max_abs: 0.0,
            max_abs_in: String::new(),
            rel_rms: 0.0,
            rel_rms_in: String::new(),
        };
        for (r, c) in reference.iter().zip(candidate) {
            let (max_abs, rel_rms) = tensor_errors(&r.values, &c.values);
            if max_abs > errors.max_abs || errors.max_abs_in.is_empty() {
                (errors.max_abs, errors.max_abs_in) = (max_abs, r.name.clone());
            }
            if rel_rms > errors.rel_rms || errors.rel_rms_in.is_empty() {
                (errors.rel_rms, errors.rel_rms_in) = (rel_rms, r.name.clone());
            }
        }
        errors
    }

    /// Whether both errors are within `tol` (a NaN never is).
    pub fn within(&self, tol: Tolerance) -> bool {
        self.max_abs <= tol.max_abs && self.rel_rms <= tol.rel_rms
    }
}

/// Max-abs and relative-RMS error of one tensor; a mismatch in size or a NaN counts as ∞.
fn tensor_errors(reference: &[f32], candidate: &[f32]) -> (f32, f32) {
    if reference.len() != candidate.len() {
        return (f32::INFINITY, f32::INFINITY);
    }
    let (mut max_abs, mut diff_sq, mut ref_sq) = (0f32, 0f64, 0f64);
    for (&r, &c) in reference.iter().zip(candidate) {
        let diff = if r == c { 0.0 } else { (c - r).abs() };
        let diff = if diff.is_nan() { f32::INFINITY } else { diff };
        max_abs = max_abs.max(diff);
        diff_sq += f64::from(diff) * f64::from(diff);
        ref_sq += f64::from(r) * f64::from(r);
    }
    let rel_rms = match (diff_sq, ref_sq) {
        (0.0, _) => 0.0,
        (_, 0.0) => f64::INFINITY,
        (d, r) => (d / r).sqrt(),
    };
    (max_abs, rel_rms as f32)
}

/// The verdict on one quantity.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Within tolerance (or identical tokens).
    Pass,
    /// Outside tolerance, different tokens, or the run failed.
    Fail,
    /// The quantity does not exist for this case (an encoder does not decode).
    NotApplicable,
}

/// One line of the report: a quantity of a case on a candidate.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// The case's name.
    pub case: String,
    /// The candidate backend.
    pub backend: &'static str,
    /// What was compared.
    pub quantity: Quantity,
    /// The errors and tolerance, for numeric quantities.
    pub errors: Option<(MaxErrors, Tolerance)>,
    /// What the numbers do not say: the decoding's result, or why the quantity failed or
    /// does not apply.
    pub note: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// Compares every quantity of `candidate` with `reference`.
pub fn compare(
    case: &str,
    backend: &'static str,
    arithmetic: Arithmetic,
    reference: &Outcome,
    candidate: &Outcome,
) -> Vec<Comparison> {
    let loss = |o: &Outcome| vec![Named { name: "loss".into(), values: vec![o.loss] }];
    let logits = |o: &Outcome| vec![Named { name: "logits".into(), values: o.logits.clone() }];
    let numeric = [
        (Quantity::Weights, reference.weights.clone(), candidate.weights.clone()),
        (Quantity::Logits, logits(reference), logits(candidate)),
        (Quantity::Loss, loss(reference), loss(candidate)),
        (Quantity::Gradients, reference.gradients.clone(), candidate.gradients.clone()),
        (Quantity::Stepped, reference.stepped.clone(), candidate.stepped.clone()),
    ];
    let mut rows: Vec<Comparison> = numeric
        .into_iter()
        .map(|(quantity, r, c)| {
            let tol = tolerance(arithmetic, quantity).expect("numeric quantities have tolerances");
            let errors = MaxErrors::of(&r, &c);
            let verdict = if errors.within(tol) { Verdict::Pass } else { Verdict::Fail };
            let note = match verdict {
                Verdict::Pass => String::new(),
                _ => format!(
                    "worst: {} (max-abs), {} (rel-RMS)",
                    errors.max_abs_in, errors.rel_rms_in
                ),
            };
            Comparison {
                case: case.into(),
                backend,
                quantity,
                errors: Some((errors, tol)),
                note,
                verdict,
            }
        })
        .collect();
    let (note, verdict) = compare_decodings(&reference.decoded, &candidate.decoded);
    rows.push(Comparison {
        case: case.into(),
        backend,
        quantity: Quantity::Decoding,
        errors: None,
        note,
        verdict,
    });
    rows
}

/// Identical tokens pass; otherwise the first divergent step and the margins there.
fn compare_decodings(
    reference: &Result<Vec<DecodedToken>, Arc<ModelError>>,
    candidate: &Result<Vec<DecodedToken>, Arc<ModelError>>,
) -> (String, Verdict) {
    match (reference, candidate) {
        (Err(r), Err(c)) if r.to_string() == c.to_string() => {
            (format!("does not decode: {r}"), Verdict::NotApplicable)
        }
        (Err(r), _) | (_, Err(r)) => (format!("only one backend decodes: {r}"), Verdict::Fail),
        (Ok(r), Ok(c)) => match r.iter().zip(c).position(|(a, b)| a.token != b.token) {
            None if r.len() == c.len() => {
                let margin = r.iter().map(|t| t.margin).fold(f32::INFINITY, f32::min);
                (
                    format!("{0}/{0} tokens identical; smallest margin {margin:.2e}", r.len()),
                    Verdict::Pass,
                )
            }
            None => (format!("{} tokens against {}", c.len(), r.len()), Verdict::Fail),
            Some(step) => (
                format!(
                    "first divergence at step {step}: reference token {} (margin {:.2e}), \
                     candidate token {} (margin {:.2e})",
                    r[step].token, r[step].margin, c[step].token, c[step].margin
                ),
                Verdict::Fail,
            ),
        },
    }
}

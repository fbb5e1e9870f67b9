//! The cross-backend equivalence suite (`swa_zoo::check`): the tiny model of every
//! attention kind, drawn once and loaded bit for bit, on ndarray (the f32 reference) against
//! flex, wgpu and cuda, each when compiled in and a device answers (otherwise the test says why
//! it skipped). Build with `--features flex,wgpu` to compare wgpu (lavapipe on a CPU machine).

use swa_zoo::check::{
    Candidate, CheckCase, DecodedToken, Quantity, Verdict, Weights, attention_kinds, compare,
    measure_reference, run,
};

/// The kinds whose wgpu comparison compiles kernels no other kind uses, on lavapipe for minutes
/// (docs/testing.md, CI): Taylor linear attention (alone and in the hybrid), Longformer's
/// global tokens in a decoder, and relative positions. CI compares the other kinds on wgpu; an
/// ignored test compares these.
const SLOW_ON_LAVAPIPE: [&str; 4] = ["linear", "hybrid", "longformer-decoder", "mswa-relative"];

/// Runs every attention kind on `candidate`; fails listing every comparison outside tolerance.
fn every_kind_matches_the_reference(candidate: Candidate) {
    kinds_match_the_reference(candidate, attention_kinds());
}

/// Runs `kinds` on `candidate`; fails listing every comparison outside tolerance.
fn kinds_match_the_reference(candidate: Candidate, kinds: Vec<CheckCase>) {
    let report = run(&kinds, &[candidate]);
    eprint!("{}", report.render());
    let failures: Vec<String> = report
        .failures()
        .iter()
        .map(|r| format!("{} {}: {}", r.case, r.quantity.label(), r.note))
        .collect();
    assert!(
        failures.is_empty(),
        "{} differs from ndarray:\n{}",
        candidate.name(),
        failures.join("\n")
    );
    if report.skipped.is_empty() {
        assert_eq!(report.rows.len(), kinds.len() * 6, "six quantities per kind");
    }
}

#[test]
fn every_attention_kind_on_flex_matches_ndarray() {
    every_kind_matches_the_reference(Candidate::Flex);
}

/// The kinds on wgpu, `slow` those of [`SLOW_ON_LAVAPIPE`] or the others, on the default wgpu
/// device (the check's own), held while it runs so that the tests running beside this one take
/// the second (`crate::wgpu_devices::lease`).
fn kinds_on_wgpu_match_ndarray(slow: bool) {
    #[cfg(feature = "wgpu")]
    let _held = crate::wgpu_devices::lease_default();
    let kinds = attention_kinds();
    let (slow_kinds, others) =
        kinds.into_iter().partition(|case| SLOW_ON_LAVAPIPE.contains(&case.name.as_str()));
    kinds_match_the_reference(Candidate::Wgpu, if slow { slow_kinds } else { others });
}

#[test]
fn the_attention_kinds_on_wgpu_match_ndarray() {
    kinds_on_wgpu_match_ndarray(false);
}

#[test]
#[ignore = "about 8 minutes of lavapipe's shader compiles: `-- --ignored slow_attention_kinds`"]
fn the_slow_attention_kinds_on_wgpu_match_ndarray() {
    kinds_on_wgpu_match_ndarray(true);
}

#[test]
fn every_attention_kind_on_cuda_matches_ndarray() {
    every_kind_matches_the_reference(Candidate::Cuda);
}

/// The encoder and relative positions (no KV cache scores them yet) are reported as not
/// decoding, not hidden; every other kind decodes.
#[test]
fn only_the_encoder_and_relative_positions_do_not_decode() {
    for case in attention_kinds() {
        let weights = Weights::seeded(&case.config, case.seed).unwrap();
        let outcome = measure_reference(&case, &weights).unwrap();
        let cannot_decode = ["longformer-encoder", "mswa-relative"].contains(&case.name.as_str());
        assert_eq!(outcome.decoded.is_err(), cannot_decode, "{}", case.name);
        let rows = compare(&case.name, "ndarray", Candidate::Flex.arithmetic(), &outcome, &outcome);
        let decoding = rows.iter().find(|r| r.quantity == Quantity::Decoding).unwrap();
        let expected =
            if outcome.decoded.is_err() { Verdict::NotApplicable } else { Verdict::Pass };
        assert_eq!(decoding.verdict, expected, "{}: {}", case.name, decoding.note);
    }
}

/// The check is not vacuous: a changed logit, gradient, weight or decoded token fails it, and a
/// divergent decoding names its first step and the margins there.
#[test]
fn the_check_catches_differences() {
    let case = CheckCase { decode_steps: 8, ..attention_kinds().remove(1) };
    let weights = Weights::seeded(&case.config, case.seed).unwrap();
    let reference = measure_reference(&case, &weights).unwrap();
    let verdict = |candidate: &swa_zoo::check::Outcome, quantity| {
        let rows = compare(&case.name, "test", Candidate::Flex.arithmetic(), &reference, candidate);
        rows.into_iter().find(|r| r.quantity == quantity).unwrap()
    };
    let mut changed = reference.clone();
    changed.logits[5] += 1e-3;
    assert_eq!(verdict(&changed, Quantity::Logits).verdict, Verdict::Fail);
    let mut changed = reference.clone();
    changed.weights[2].values[0] = f32::from_bits(changed.weights[2].values[0].to_bits() ^ 1);
    assert_eq!(verdict(&changed, Quantity::Weights).verdict, Verdict::Fail);
    let mut changed = reference.clone();
    changed.gradients[3].values[1] = f32::NAN;
    let row = verdict(&changed, Quantity::Gradients);
    assert_eq!(row.verdict, Verdict::Fail);
    assert!(row.note.contains(&reference.gradients[3].name), "{}", row.note);
    let mut changed = reference.clone();
    let tokens = changed.decoded.as_mut().unwrap();
    tokens[3] = DecodedToken { token: tokens[3].token + 1, margin: 0.5 };
    let row = verdict(&changed, Quantity::Decoding);
    assert_eq!(row.verdict, Verdict::Fail);
    assert!(row.note.contains("first divergence at step 3"), "{}", row.note);
}

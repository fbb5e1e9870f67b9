//! Rows that see no key give `o = 0` and `lse = −∞` with no NaN, forward and backward (§1).

use swa_attention::{ScoreOptions, WindowSpec};

use crate::common::{Case, Outputs, Path, Reference, run};

fn check_empty_rows(case: &Case, empty_rows: &[usize]) {
    for path in [Path::Dense, Path::Blocked] {
        let Outputs { out, lse, grads } = run::<Reference>(case, path, &Default::default());
        let all = out.iter().chain(&lse).chain(grads.iter().flatten());
        assert!(all.clone().all(|x| !x.is_nan()), "{path:?}: NaN in {case:?}");
        assert!(grads.iter().flatten().all(|x| x.is_finite()), "{path:?}: non-finite gradient");
        let (heads, dim) = (case.spec.num_heads(), case.dim);
        for b in 0..case.batch {
            for h in 0..heads {
                for &i in empty_rows {
                    let row = (b * heads + h) * case.q_len + i;
                    assert_eq!(lse[row], f32::NEG_INFINITY, "{path:?}: lse of empty row {i}");
                    assert!(out[row * dim..(row + 1) * dim].iter().all(|&x| x == 0.0));
                }
            }
        }
    }
}

#[test]
fn all_keys_padded_gives_zero_rows() {
    for opts in [ScoreOptions::softmax(), ScoreOptions::sigmoid(0.0)] {
        let spec = WindowSpec::sliding(2, 1, 3).unwrap().with_kv_len(0);
        let case = Case::new(6, 4, spec, opts);
        check_empty_rows(&case, &[0, 1, 2, 3, 4, 5]);
    }
}

#[test]
fn queries_past_the_valid_keys_see_nothing() {
    let spec = WindowSpec::sliding(2, 2, 2).unwrap().with_kv_len(4);
    let case = Case::new(9, 4, spec, ScoreOptions::softmax());
    check_empty_rows(&case, &[6, 7, 8]);
}

#[test]
fn longnet_rows_at_another_offset_are_uncovered() {
    // Segment 4, dilation 2: head 0 takes offsets 0 mod 2, head 1 offsets 1 mod 2; a single
    // head 0 leaves rows 1, 3, 5, 7 uncovered (docs/semantics.md §5).
    let spec = WindowSpec::longnet_branch(1, 1, 4, 2).unwrap();
    let case = Case::new(8, 4, spec, ScoreOptions::softmax());
    check_empty_rows(&case, &[1, 3, 5, 7]);
}

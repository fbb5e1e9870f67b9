//! The blocked path against the dense reference over the spec matrix, forward and backward.

use crate::cases::{LENGTHS, matrix, relative_cases};
use crate::common::{Case, Path, Reference, check_against_reference};

fn check_matrix(path: Path) {
    for n in LENGTHS {
        for (name, spec, opts) in matrix(n) {
            let dim = if n > 64 { 8 } else { 16 };
            let case = Case { batch: 2, ..Case::new(n, dim, spec, opts) };
            eprintln!("{name} n={n}");
            check_against_reference::<Reference>(&case, path, &Default::default());
        }
    }
}

#[test]
fn blocked_matches_dense_over_the_spec_matrix() {
    check_matrix(Path::Blocked);
}

#[test]
fn dispatch_on_ndarray_is_the_blocked_path_and_matches_dense() {
    check_matrix(Path::Dispatch);
}

#[test]
fn chunked_blocks_match_dense() {
    // 1 score per chunk forces one block per chunk; 5000 a few blocks per chunk.
    for chunk in [1, 5000] {
        for (name, spec, opts) in matrix(257).into_iter().step_by(3) {
            eprintln!("{name} chunk={chunk}");
            let case = Case::new(257, 8, spec, opts);
            check_against_reference::<Reference>(&case, Path::Chunked(chunk), &Default::default());
        }
    }
}

/// Relative scores (docs/semantics.md §4) on the blocked path, in chunks, and through the
/// dispatch, outputs and the gradients of q, k, v and the table.
#[test]
fn relative_scores_on_the_blocked_path_match_dense() {
    for n in LENGTHS {
        for (name, case) in relative_cases(n, 8) {
            eprintln!("{name} n={n}");
            for path in [Path::Blocked, Path::Chunked(3000), Path::Dispatch] {
                check_against_reference::<Reference>(&case, path, &Default::default());
            }
        }
    }
}

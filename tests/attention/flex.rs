//! The flex backend runs the same core: blocked path on flex vs the dense reference on ndarray.

#[cfg(feature = "flex")]
#[test]
fn blocked_on_flex_matches_dense_on_ndarray() {
    use burn::backend::{Autodiff, Flex};

    use crate::cases::{LENGTHS, matrix};
    use crate::common::{Case, Path, check_against_reference};

    for n in LENGTHS {
        for (name, spec, opts) in matrix(n) {
            eprintln!("{name} n={n}");
            let case = Case::new(n, 8, spec, opts);
            check_against_reference::<Autodiff<Flex>>(&case, Path::Dispatch, &Default::default());
        }
    }
}

#[cfg(not(feature = "flex"))]
#[test]
fn blocked_on_flex_matches_dense_on_ndarray() {
    eprintln!("skipped: built without the `flex` feature (cargo test --features flex)");
}

//! Property-style check: many random specs from fixed seeds, blocked vs dense.

use crate::cases::random_case;
use crate::common::{Path, Reference, Rng, check_against_reference};

#[test]
fn blocked_matches_dense_on_random_specs() {
    let mut rng = Rng::new(0x5EED_2026);
    for _ in 0..150 {
        let n = rng.pick(&[1, 2, 5, 17, 40, 63, 64, 65, 100]);
        let case = random_case(&mut rng, n);
        check_against_reference::<Reference>(&case, Path::Blocked, &Default::default());
    }
}

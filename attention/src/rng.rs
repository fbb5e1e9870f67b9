//! SplitMix64 (Steele, Lea & Flood 2014): the zoo's seeded generator, for everything that must
//! draw the same values on every run and machine whatever else the process draws from Burn's
//! generators: token sampling, synthetic tasks, data order, and test inputs.

/// A SplitMix64 generator: a 64-bit state advanced by a fixed odd increment, each output a mix
/// of the new state. Tiny, fast and well mixed; not for cryptography.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The increment of the state, `2⁶⁴/φ` rounded to odd.
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The generator of item `index` under `seed` (a synthetic example, a data window):
    /// independent streams for every pair, without drawing the items before it.
    pub fn for_index(seed: u64, index: u64) -> Self {
        Self::new(Self::mix(seed ^ Self::mix(index ^ 0x5851_F42D_4C95_7F2D)))
    }

    /// A stateless hash of `value`: the first output of a generator seeded with it.
    pub fn mix(value: u64) -> u64 {
        Self::new(value).next_u64()
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1): the top 53 bits of the next output, every value a multiple of
    /// 2⁻⁵³.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform draw in [−1, 1): the top 24 bits of the next output, every value a multiple of
    /// 2⁻²³.
    pub fn next_signed_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// A number in `0..n` (`n > 0`), by multiply-shift: the top bits of `next · n`.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// `k` distinct numbers of `0..n` in random order (`k ≤ n`), by a partial Fisher-Yates
    /// shuffle.
    pub fn distinct(&mut self, k: usize, n: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = i + self.below(n - i);
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    /// The first outputs from seed 0 of the reference implementation (Vigna's `splitmix64.c`).
    #[test]
    fn reference_outputs() {
        let mut rng = SplitMix64::new(0);
        let outputs: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(outputs, [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F]);
        assert_eq!(SplitMix64::mix(0), outputs[0]);
    }

    #[test]
    fn pinned_draws_from_seed_42() {
        let mut rng = SplitMix64::new(42);
        assert_eq!(rng.next_f64(), 6_679_422_623_415_661.0 / (1u64 << 53) as f64);
        assert_eq!(rng.next_signed_f32(), 2_682_851.0 / (1u64 << 23) as f32 - 1.0);
        assert_eq!(rng.below(10), 2);
    }

    #[test]
    fn pinned_streams() {
        assert_eq!(SplitMix64::for_index(7, 3).next_u64(), 0x7E5B_59A7_8C82_FAA0);
        assert_eq!(SplitMix64::new(5).distinct(3, 10), [3, 7, 0]);
    }

    #[test]
    fn distinct_draws_are_distinct_and_in_range() {
        let mut rng = SplitMix64::new(1);
        let mut drawn = rng.distinct(20, 20);
        drawn.sort_unstable();
        assert_eq!(drawn, (0..20).collect::<Vec<_>>());
    }
}

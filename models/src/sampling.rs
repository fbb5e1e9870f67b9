//! Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p,
//! from a seeded generator so that a run can be repeated exactly.

use swa_attention::rng::SplitMix64;

/// A seeded token sampler.
#[derive(Clone, Debug)]
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    rng: SplitMix64,
}

impl Sampler {
    /// `temperature` 0 is greedy; `top_k` 0 keeps every token; `top_p` 1 keeps every token.
    /// The arguments are checked by [`crate::GenerateConfig::validate`].
    pub fn new(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Self {
        Self { temperature, top_k, top_p, rng: SplitMix64::new(seed) }
    }

    /// The next token for one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> usize {
        // Most likely first; NaN logits sort last, ties keep the lower token id.
        let likelier =
            |&a: &usize, &b: &usize| logit(logits[b]).total_cmp(&logit(logits[a])).then(a.cmp(&b));
        if self.temperature == 0.0 {
            // The first of that order, without sorting the vocabulary at every step.
            return (0..logits.len()).min_by(likelier).unwrap_or(0);
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(likelier);
        if self.top_k > 0 {
            order.truncate(self.top_k);
        }
        let best = logit(logits[order[0]]);
        let mut weights: Vec<f64> = order
            .iter()
            .map(|&t| (((logit(logits[t]) - best) / self.temperature) as f64).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        // Nucleus: the shortest prefix whose probability reaches top_p.
        let mut kept = 0.0;
        let cut = weights
            .iter()
            .position(|w| {
                kept += w / total;
                kept >= self.top_p as f64
            })
            .map_or(weights.len(), |i| i + 1);
        weights.truncate(cut);
        let total: f64 = weights.iter().sum();
        let mut u = self.rng.next_f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return order[i];
            }
            u -= w;
        }
        order[weights.len() - 1]
    }
}

/// A logit, with NaN read as −∞ so that it is never chosen over a number.
fn logit(x: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { x }
}

#[cfg(test)]
mod tests {
    use super::Sampler;

    #[test]
    fn greedy_takes_the_largest_logit_and_never_nan() {
        let mut greedy = Sampler::new(0.0, 0, 1.0, 0);
        assert_eq!(greedy.sample(&[0.5, f32::NAN, 2.0, 2.0, -1.0]), 2);
        assert_eq!(greedy.sample(&[f32::NAN, -3.0]), 1);
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [1.0, 3.0, 2.0, 0.0];
        let mut top_one = Sampler::new(1.0, 1, 1.0, 7);
        assert!((0..20).all(|_| top_one.sample(&logits) == 1));
        // Token 0 holds about 98% of the probability: a nucleus of 0.9 is token 0 alone.
        let mut nucleus = Sampler::new(1.0, 0, 0.9, 7);
        assert!((0..20).all(|_| nucleus.sample(&[5.0, 1.0, 0.0, 0.0]) == 0));
        let mut top_two = Sampler::new(1.0, 2, 1.0, 7);
        assert!((0..50).all(|_| [1, 2].contains(&top_two.sample(&logits))));
    }

    #[test]
    fn a_seed_repeats_its_draws() {
        let draws = |seed| {
            let mut sampler = Sampler::new(1.0, 0, 1.0, seed);
            (0..32).map(|_| sampler.sample(&[0.0; 8])).collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
    }
}

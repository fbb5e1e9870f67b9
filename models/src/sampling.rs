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

    /// The next token for one row of logits: among the most likely tokens, in order, the
    /// first `top_k` (all for 0), cut to the shortest prefix whose probability reaches
    /// `top_p`, one drawn in proportion to `exp((logit − best) / temperature)`. The order is
    /// found a block at a time (the next likeliest tokens selected, then sorted) until the
    /// prefix is known: a peaked distribution never sorts the vocabulary.
    pub fn sample(&mut self, logits: &[f32]) -> usize {
        // Most likely first; NaN logits sort last, ties keep the lower token id.
        let likelier =
            |&a: &usize, &b: &usize| logit(logits[b]).total_cmp(&logit(logits[a])).then(a.cmp(&b));
        let Some(first) = (0..logits.len()).min_by(likelier) else { return 0 };
        if self.temperature == 0.0 {
            return first;
        }
        let best = logit(logits[first]);
        let weight = |t: usize| (((logit(logits[t]) - best) / self.temperature) as f64).exp();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let keep = if self.top_k > 0 { self.top_k.min(order.len()) } else { order.len() };
        if keep < order.len() {
            order.select_nth_unstable_by(keep - 1, likelier);
            order.truncate(keep);
        }
        let total: f64 = order.iter().map(|&t| weight(t)).sum();
        // Nucleus: the shortest prefix whose probability reaches top_p, sorted block by block.
        let (mut sorted, mut kept, mut cut) = (0, 0.0, order.len());
        'blocks: while sorted < order.len() {
            let block = sorted.max(64).min(order.len() - sorted);
            let rest = &mut order[sorted..];
            if block < rest.len() {
                rest.select_nth_unstable_by(block - 1, likelier);
            }
            rest[..block].sort_by(likelier);
            for (i, &t) in order.iter().enumerate().skip(sorted).take(block) {
                kept += weight(t) / total;
                if kept >= self.top_p as f64 {
                    cut = i + 1;
                    break 'blocks;
                }
            }
            sorted += block;
        }
        let weights: Vec<f64> = order[..cut].iter().map(|&t| weight(t)).collect();
        let total: f64 = weights.iter().sum();
        let mut u = self.rng.next_f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return order[i];
            }
            u -= w;
        }
        order[cut - 1]
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

    /// Tokens drawn from a vocabulary larger than a block (sorted a block at a time) stay in
    /// the nucleus, the sorted order's shortest prefix reaching `top_p`.
    #[test]
    fn the_nucleus_of_a_large_vocabulary_is_its_likeliest_prefix() {
        // Logits falling by 0.01 a token, shuffled: token t's rank is its position in `ranked`.
        let ranked: Vec<usize> = (0..1000).map(|i| (i * 617) % 1000).collect();
        let mut logits = vec![0.0f32; 1000];
        for (rank, &t) in ranked.iter().enumerate() {
            logits[t] = -0.01 * rank as f32;
        }
        let weights: Vec<f64> = (0..1000).map(|rank| (-0.01 * rank as f64).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut kept = 0.0;
        let cut = weights.iter().position(|w| {
            kept += w / total;
            kept >= 0.9
        });
        let nucleus = &ranked[..cut.unwrap() + 1];
        let mut sampler = Sampler::new(1.0, 0, 0.9, 11);
        let draws: Vec<usize> = (0..300).map(|_| sampler.sample(&logits)).collect();
        assert!(draws.iter().all(|t| nucleus.contains(t)), "a draw outside the nucleus");
        assert!(draws.iter().any(|t| !ranked[..64].contains(t)), "never past the first block");
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

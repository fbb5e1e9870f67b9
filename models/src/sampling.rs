//! Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p,
//! from a seeded generator so that a run can be repeated exactly.

/// A seeded token sampler.
#[derive(Clone, Debug)]
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    state: u64,
}

impl Sampler {
    /// `temperature` 0 is greedy; `top_k` 0 keeps every token; `top_p` 1 keeps every token.
    /// The arguments are checked by [`crate::GenerateConfig::validate`].
    pub fn new(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Self {
        Self { temperature, top_k, top_p, state: seed }
    }

    /// The next token for one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> usize {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Most likely first; NaN logits sort last, ties keep the lower token id.
        order.sort_by(|&a, &b| logit(logits[b]).total_cmp(&logit(logits[a])).then(a.cmp(&b)));
        if self.temperature == 0.0 {
            return order[0];
        }
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
        let mut u = self.uniform() * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return order[i];
            }
            u -= w;
        }
        order[weights.len() - 1]
    }

    /// A uniform draw in [0, 1) (SplitMix64).
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A logit, with NaN read as −∞ so that it is never chosen over a number.
fn logit(x: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { x }
}

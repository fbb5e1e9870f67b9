//! The colour scale of an attention map: weights to colours, on a linear scale from 0 to the
//! largest weight or on a log scale from [`LOG_FLOOR`] to it, and the colour bar's values.
//! A trained head puts most of its weight on a few keys, so on the linear scale most of its
//! window reads as one dark colour; the log scale separates the small weights.

use crate::report::plot::tidy;

/// The log scale's floor: weights below it, masked keys' zeros included, take its colour.
pub const LOG_FLOOR: f32 = 1e-4;

/// Viridis at 0, ¼, ½, ¾ and 1: perceptually even from dark to light, and readable in grey.
const RAMP: [[f32; 3]; 5] = [
    [68.0, 1.0, 84.0],
    [59.0, 82.0, 139.0],
    [33.0, 145.0, 140.0],
    [94.0, 201.0, 98.0],
    [253.0, 231.0, 37.0],
];

/// The ramp's colour at `t ∈ [0, 1]`, dark to light (clamped; NaN is 0).
pub fn colour(t: f32) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) } * (RAMP.len() - 1) as f32;
    let low = (t.floor() as usize).min(RAMP.len() - 2);
    let f = t - low as f32;
    std::array::from_fn(|k| (RAMP[low][k] * (1.0 - f) + RAMP[low + 1][k] * f).round() as u8)
}

/// Where weights fall on the ramp: the value (the weight, or its `log10`) at its two ends.
pub(super) struct RampScale {
    log: bool,
    low: f32,
    high: f32,
}

impl RampScale {
    /// The scale of `weights`: up to the largest finite one, from 0 or (`log`) from the floor.
    pub(super) fn new(weights: &[f32], log: bool) -> Self {
        let max = weights.iter().copied().filter(|w| w.is_finite()).fold(0.0f32, f32::max);
        match log {
            false => Self { log, low: 0.0, high: if max > 0.0 { max } else { 1.0 } },
            true => {
                let low = LOG_FLOOR.log10().round();
                Self { log, low, high: max.log10().max(low + 1.0) }
            }
        }
    }

    /// The colour of weight `w`.
    pub(super) fn colour(&self, w: f32) -> [u8; 3] {
        colour(self.position(w))
    }

    /// Where `w` lies between the two ends, 0 to 1 (NaN stays NaN, drawn as 0).
    fn position(&self, w: f32) -> f32 {
        let value = if self.log { w.max(LOG_FLOOR).log10() } else { w };
        (value - self.low) / (self.high - self.low)
    }

    /// The colour bar's labels, `(position from 0 to 1, text)`: five even steps on the linear
    /// scale; on the log scale the floor (`≤1e-4`), each decade above it, and the largest
    /// weight when it is not near a decade.
    pub(super) fn ticks(&self) -> Vec<(f32, String)> {
        if !self.log {
            let step = |k: usize| (k as f32 / 4.0, tidy(&f64::from(self.high * k as f32 / 4.0)));
            return (0..=4).map(step).collect();
        }
        let mut ticks = vec![(0.0, format!("≤{}", decade(self.low)))];
        let decades = (self.low as i32 + 1)..=(self.high.floor() as i32);
        ticks.extend(decades.map(|d| (self.position(10f32.powi(d)), decade(d as f32))));
        if self.high - self.high.floor() > 0.25 {
            ticks.push((1.0, tidy(&f64::from(10f32.powf(self.high)))));
        }
        ticks
    }

    /// The colour bar's caption, stating the floor on the log scale.
    pub(super) fn caption(&self) -> String {
        match self.log {
            false => "attention weight".into(),
            true => format!("attention weight, log scale (floor {})", decade(self.low)),
        }
    }
}

/// `10^d` written briefly: `1`, `1e-2`.
fn decade(d: f32) -> String {
    match d as i32 {
        0 => "1".into(),
        d => format!("1e{d}"),
    }
}

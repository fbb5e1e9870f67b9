//! The switch that turns every fused op off, for comparisons with the tensor ops.

/// The environment variable that turns the fused ops off: `SWA_FUSED_OPS=off` runs every op as
/// Burn tensor ops (the core's blocked path, the caches' tensor ops in place of a fused decode
/// step and cache write, and the tensor ops of RoPE, RMSNorm, the MLP's gate, the cross-entropy
/// and the few-row linear product), to compare them with the fused kernels. Unset, or any other
/// value, lets each backend choose. Read once, at the first op that asks.
pub const FUSED_OPS_VARIABLE: &str = "SWA_FUSED_OPS";

/// Whether [`FUSED_OPS_VARIABLE`] turns the fused ops off (read at the first call).
pub fn fused_ops_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var(FUSED_OPS_VARIABLE).is_ok_and(|value| value == "off"))
}

//! Calls into libraries that panic on some malformed inputs, made errors (docs/reliability.md):
//! the tokenizers library's deserializers unwrap, and Burn's record loader builds tensors whose
//! shape disagrees with their data (both found by `tests/zoo/mutations.rs`). A bad file must
//! end in an error naming it, not a crash.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `call`, a call into `library` on data read from a file, turning a panic into an error
/// that names the library and carries the panic's message. The message is not printed: the
/// panic hook is silenced for the call.
pub fn without_panics<T>(library: &str, call: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = catch_unwind(AssertUnwindSafe(call));
    std::panic::set_hook(hook);
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{library} failed on it: {message}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        assert_eq!(without_panics("a library", || 4), Ok(4));
        let failed = without_panics("a library", || -> u8 { panic!("bad input") });
        assert_eq!(failed, Err("a library failed on it: bad input".into()));
    }
}

//! Calls into libraries that panic on some malformed inputs, made errors (docs/reliability.md):
//! the tokenizers library's deserializers unwrap, and Burn's record loader builds tensors whose
//! shape disagrees with their data (both found by `tests/zoo/mutations.rs`). A bad file must
//! end in an error naming it, not a crash.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`without_panics`], whose panics the hook keeps quiet.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call`, a call into `library` on data read from a file, turning a panic into an error
/// that names the library and carries the panic's message. The message is not printed: a
/// panic hook installed once around the process's own keeps this thread quiet for the call,
/// and every other thread's panics are reported as before (swapping the process's hook for
/// the call would silence them, and two calls at once could leave it silent for good).
pub fn without_panics<T>(library: &str, call: impl FnOnce() -> T) -> Result<T, String> {
    static QUIET_HOOK: Once = Once::new();
    QUIET_HOOK.call_once(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                hook(info);
            }
        }));
    });
    let outer = QUIET.with(|quiet| quiet.replace(true));
    let result = catch_unwind(AssertUnwindSafe(call));
    QUIET.with(|quiet| quiet.set(outer));
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

    /// Calls on several threads at once, nested ones included, each end in their own error,
    /// and leave the thread able to report its panics.
    #[test]
    fn calls_at_once_keep_to_their_threads() {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let nested = without_panics("outer", || {
                        without_panics("inner", || -> u8 { panic!("bad {t}") })
                    });
                    let failed = nested.unwrap();
                    assert_eq!(failed, Err(format!("inner failed on it: bad {t}")));
                    QUIET.with(Cell::get)
                })
            })
            .collect();
        for thread in threads {
            assert!(!thread.join().unwrap(), "a thread stays quiet after its calls");
        }
    }
}

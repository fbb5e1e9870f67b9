//! The cube-side twin of THE visibility rule (docs/semantics.md §2): [`visible`] is
//! [`crate::WindowSpec::visible`] and [`contains`] is [`crate::HeadWindow::contains`], clause for
//! clause, on `u32` positions. Global tokens are not part of it: calls with globals run the
//! blocked path ([`crate::WindowedKernel::runs`]). `attention/tests/attention/kernel.rs` checks
//! this rule against `WindowSpec::visible` exhaustively on small shapes through
//! [`crate::kernel::probe`].

use cubecl::prelude::*;

use crate::kernel::config::{Call, WINDOW_WORDS};

/// One head's window (the words of [`WINDOW_WORDS`]).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Window {
    /// Steps back; `u32::MAX` for unbounded.
    pub left: u32,
    /// Steps forward; `u32::MAX` for unbounded.
    pub right: u32,
    /// `δ ≥ 1`.
    pub dilation: u32,
    /// LongNet segment length, 0 for none.
    pub segment: u32,
    /// LongNet offset.
    pub phase: u32,
    /// `δ·left`, saturated: how far back the window reaches.
    pub back: u32,
    /// `δ·right`, saturated: how far forward it reaches.
    pub forward: u32,
}

/// Head `head`'s window from the windows array.
#[cube]
pub(crate) fn load_window(windows: &Array<u32>, head: usize) -> Window {
    let base = head * WINDOW_WORDS;
    Window {
        left: windows[base],
        right: windows[base + 1],
        dilation: windows[base + 2],
        segment: windows[base + 3],
        phase: windows[base + 4],
        back: windows[base + 5],
        forward: windows[base + 6],
    }
}

/// The window part of the rule: is key `j` in the window of the query at position `i`?
/// As `HeadWindow::contains`: `j = i + δ·m` for `m ∈ [−left, right]`, and with a segment, `i`
/// and `j` in one segment with `i` at the head's offset.
#[cube]
pub(crate) fn contains(window: &Window, i: u32, j: u32) -> bool {
    let before = j <= i;
    let distance = if before { i - j } else { j - i };
    let limit = if before { window.left } else { window.right };
    let mut on_grid = true;
    let mut steps = distance;
    if window.dilation != 1 {
        on_grid = distance % window.dilation == 0;
        steps = distance / window.dilation;
    }
    let mut in_segment = true;
    if window.segment != 0 {
        let segment = window.segment;
        in_segment = i / segment == j / segment && (i % segment) % window.dilation == window.phase;
    }
    on_grid && steps <= limit && in_segment
}

/// THE rule without globals: `j < kv_len ∧ (¬causal ∨ j ≤ i) ∧ (window(i, j) ∨ j < S)`. With
/// `plain` (the call's every window undilated and unsegmented, [`crate::kernel::config::Variant`])
/// it reads the rule as [`in_span`] of the query's [`plain_span`], which is the same set for such
/// windows and a few instructions per pair; kernels that ask it for many pairs of one query
/// (or one key) compute the span once and ask [`visible_by_span`].
#[cube]
pub(crate) fn visible(
    window: &Window,
    i: u32,
    j: u32,
    call: &Call,
    #[comptime] causal: bool,
    #[comptime] plain: bool,
) -> bool {
    if comptime![plain] {
        in_span(&plain_span(window, i, call, causal, true), j)
    } else {
        let mut seen = j < call.kv_len && (contains(window, i, j) || j < call.sinks);
        if causal {
            seen = seen && j <= i;
        }
        seen
    }
}

/// The keys a query sees in an undilated, unsegmented window: `lo ≤ j < lo + width`, or
/// `j < sinks` (the sinks it may see: valid, and not after it under causal attention).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Span {
    /// First key of the window.
    pub lo: u32,
    /// Keys of the window, 0 for none.
    pub width: u32,
    /// Keys below it are seen as sinks: `min(S, kv_len)`, and at most `i + 1` under causal.
    pub sinks: u32,
}

/// The [`Span`] of the query at position `i` under `window` (dilation 1, no segment):
/// `i − left ≤ j ≤ i + right`, below `kv_len`, and `j ≤ i` under `causal`; an empty span,
/// computing nothing, where the windows are not `plain` (the span is then not asked).
#[cube]
pub(crate) fn plain_span(
    window: &Window,
    i: u32,
    call: &Call,
    #[comptime] causal: bool,
    #[comptime] plain: bool,
) -> Span {
    let mut span = Span { lo: 0, width: 0, sinks: 0 };
    if comptime![plain] {
        // Field by field: CubeCL assigns primitives, not structs.
        let found = query_span(window, i, call, causal);
        span.lo = found.lo;
        span.width = found.width;
        span.sinks = found.sinks;
    }
    span
}

/// [`plain_span`]'s span.
#[cube]
fn query_span(window: &Window, i: u32, call: &Call, #[comptime] causal: bool) -> Span {
    let lo = i - min(i, window.left);
    let mut end = min(i + min(window.right, u32::MAX - i), call.kv_len - min(call.kv_len, 1));
    let mut sinks = min(call.sinks, call.kv_len);
    if causal {
        end = min(end, i);
        if sinks > i {
            sinks = i + 1;
        }
    }
    // `end` is the last key; none when it lies before `lo` or no key is valid.
    let some = lo <= end && call.kv_len > 0;
    Span { lo, width: select(some, end - min(end, lo) + 1, 0), sinks }
}

/// The queries that see key `j` in an undilated, unsegmented window, as a [`Span`] of query
/// positions (no separate sinks: every query sees a sink, from the sink on under causal):
/// `j − right ≤ i ≤ j + left`, `i ≥ j` under `causal`, none when `j ≥ kv_len`. THE rule
/// [`visible`] read from the key's side, for kernels that walk the queries of fixed keys; an
/// empty span, computing nothing, where the windows are not `plain`.
#[cube]
pub(crate) fn key_span(
    window: &Window,
    j: u32,
    call: &Call,
    #[comptime] causal: bool,
    #[comptime] plain: bool,
) -> Span {
    let mut span = Span { lo: 0, width: 0, sinks: 0 };
    if comptime![plain] {
        // Field by field: CubeCL assigns primitives, not structs.
        let found = queries_of_key(window, j, call, causal);
        span.lo = found.lo;
        span.width = found.width;
        span.sinks = found.sinks;
    }
    span
}

/// [`key_span`]'s span.
#[cube]
fn queries_of_key(window: &Window, j: u32, call: &Call, #[comptime] causal: bool) -> Span {
    let mut lo = j - min(j, window.right);
    let mut hi = j + min(window.left, u32::MAX - j);
    if j < call.sinks {
        lo = 0;
        hi = u32::MAX;
    }
    if causal {
        lo = max(lo, j);
    }
    // `hi − lo + 1` queries, saturated at `u32::MAX` (position `u32::MAX` is no real query).
    let width = hi - lo + min(1, u32::MAX - (hi - lo));
    Span { lo, width: select(j < call.kv_len, width, 0), sinks: 0 }
}

/// [`visible`] of the pair `(i, j)` for a kernel that asks it of many pairs sharing a query,
/// or with `by_key` a key: `span` is that query's [`plain_span`] (that key's [`key_span`]),
/// computed once, where the windows are `plain`; otherwise the rule is asked per pair.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn visible_by_span(
    span: &Span,
    window: &Window,
    i: u32,
    j: u32,
    call: &Call,
    #[comptime] causal: bool,
    #[comptime] plain: bool,
    #[comptime] by_key: bool,
) -> bool {
    if comptime![plain] {
        let other = if comptime![by_key] { i } else { j };
        in_span(span, other)
    } else {
        visible(window, i, j, call, causal, false)
    }
}

/// Is key `j` in `span`? One subtraction and two comparisons.
#[cube]
pub(crate) fn in_span(span: &Span, j: u32) -> bool {
    // `j − lo` wraps past `width` for keys before the window.
    j - span.lo < span.width || j < span.sinks
}

/// Does the query at every position of `first ..= last` see every key of `j0 ..= j_last`?
/// Implied by [`visible`], never more: the keys are valid, before or at the first query under
/// `causal`, and either sinks or inside an undilated, unsegmented window of every query (a
/// dilated or segmented window skips keys, so no block of it is whole). The tensor-core
/// kernels skip the per-pair rule on such blocks.
#[cube]
pub(crate) fn sees_whole_block(
    window: &Window,
    first: u32,
    last: u32,
    j0: u32,
    j_last: u32,
    call: &Call,
    #[comptime] causal: bool,
) -> bool {
    let mut whole = j_last < call.kv_len;
    if causal {
        whole = whole && j_last <= first;
    }
    let plain = window.dilation == 1 && window.segment == 0;
    // The farthest pair back (`last`, `j0`) and forward (`first`, `j_last`), 0 for none.
    let back = max(last, j0) - j0;
    let forward = max(j_last, first) - first;
    let windowed = plain && back <= window.left && forward <= window.right;
    whole && (j_last < call.sinks || windowed)
}

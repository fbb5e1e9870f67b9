//! The window spec: the single definition of which keys a query sees (docs/semantics.md §2, §3, §5,
//! §7).
//!
//! Every implementation of the core asks [`WindowSpec::visible`]: the dense reference, the
//! blocked path's blocks and the KV cache build their masks from it through
//! [`WindowSpec::mask`], and the KV cache sizes its buffers from [`HeadWindow::reach`].
//! [`WindowSpec::window_range`] and [`WindowSpec::stride_class`] are conservative summaries of
//! the same rule that let the blocked path skip keys that can never be visible; a test checks
//! that they never exclude a visible key.

use serde::{Deserialize, Serialize};

use crate::AttentionError;

/// One head's window: the keys `j = i + dilation·m` for `m ∈ [−left, right]` (docs/semantics.md
/// §2), optionally confined to LongNet segments (docs/semantics.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeadWindow {
    /// Steps back from the query; [`HeadWindow::UNBOUNDED`] for no limit.
    pub left: usize,
    /// Steps forward from the query (0 in causal models); [`HeadWindow::UNBOUNDED`] for no limit.
    pub right: usize,
    /// Distance between two consecutive keys of the window, `δ ≥ 1`.
    pub dilation: usize,
    /// LongNet segment length `w_b`: queries and keys must share a segment (docs/semantics.md §5).
    pub segment: Option<usize>,
    /// LongNet head offset `o_b(h) = h mod r_b`: only queries and keys at this offset (relative
    /// to the segment start, modulo the dilation) take part. Ignored without a segment.
    pub phase: usize,
}

impl HeadWindow {
    /// A `left` or `right` that never limits the window.
    pub const UNBOUNDED: usize = usize::MAX;

    /// Causal sliding window of `w ≥ 1` keys, self included: `left = w − 1` (docs/semantics.md §2).
    pub fn sliding(w: usize) -> Self {
        Self::dilated(w, 1)
    }

    /// Causal window of `w ≥ 1` keys spaced `dilation` apart, spanning `dilation·(w−1)+1`
    /// positions.
    pub fn dilated(w: usize, dilation: usize) -> Self {
        Self { left: w.saturating_sub(1), right: 0, dilation, segment: None, phase: 0 }
    }

    /// Every key (subject to causality): full attention.
    pub fn full() -> Self {
        Self { left: Self::UNBOUNDED, right: Self::UNBOUNDED, dilation: 1, segment: None, phase: 0 }
    }

    /// Longformer's one-sided window `w`: `left = right = w`, so `2w+1` keys (docs/semantics.md
    /// §2).
    pub fn longformer(w: usize, dilation: usize) -> Self {
        Self { left: w, right: w, dilation, segment: None, phase: 0 }
    }

    /// One LongNet branch for one head: segment `w_b`, dilation `r_b`, offset `phase`
    /// (docs/semantics.md §5).
    pub fn longnet(segment: usize, dilation: usize, phase: usize) -> Self {
        Self {
            left: Self::UNBOUNDED,
            right: Self::UNBOUNDED,
            dilation,
            segment: Some(segment),
            phase,
        }
    }

    /// How many consecutive positions back the window reaches, the query included:
    /// `δ·left + 1` (docs/semantics.md §7: the ring-buffer size of a causal head).
    pub fn span(&self) -> usize {
        self.dilation.saturating_mul(self.left).saturating_add(1)
    }

    /// How many consecutive positions back a causal query can see through this window, itself
    /// included: the span, cut to the segment for LongNet heads (whose current segment is all
    /// a query can reach; docs/semantics.md §7). `None` when unbounded, as for full attention.
    pub fn reach(&self) -> Option<usize> {
        let span = match self.segment {
            Some(segment) => self.span().min(segment),
            None => self.span(),
        };
        (span != usize::MAX).then_some(span)
    }

    /// The window part of the rule: is key `j` in the window of the query at position `i`?
    pub fn contains(&self, i: usize, j: usize) -> bool {
        let (distance, limit) = if j <= i { (i - j, self.left) } else { (j - i, self.right) };
        let steps = match self.dilation {
            1 => distance,
            d if distance % d == 0 => distance / d,
            _ => return false,
        };
        steps <= limit
            && match self.segment {
                None => true,
                Some(s) => i / s == j / s && (i % s) % self.dilation == self.phase,
            }
    }

    /// The residue class of a position: the window only pairs a query and a key of one class.
    pub fn stride_class(&self, pos: usize) -> usize {
        match self.segment {
            None => pos % self.dilation,
            Some(s) => (pos % s) % self.dilation,
        }
    }

    fn validate(&self, head: usize) -> Result<(), AttentionError> {
        if self.dilation == 0 {
            return Err(AttentionError::ZeroDilation { head });
        }
        if let Some(s) = self.segment {
            if s == 0 {
                return Err(AttentionError::ZeroSegment { head });
            }
            if self.phase >= self.dilation {
                return Err(AttentionError::PhaseOutOfRange {
                    head,
                    phase: self.phase,
                    dilation: self.dilation,
                });
            }
        }
        Ok(())
    }
}

/// Which keys each query head sees: per-head windows, sinks, global positions, causality, and
/// the query offset and valid key length used while decoding (docs/semantics.md §2).
///
/// Query `i` of a call sits at absolute position `query_offset + i`; keys sit at positions
/// `0 … N_k − 1`, and those at or past `kv_len` are padding, never visible.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowSpec {
    heads: Vec<HeadWindow>,
    kv_heads: usize,
    causal: bool,
    sinks: usize,
    globals: Vec<usize>,
    query_offset: usize,
    kv_len: Option<usize>,
}

impl WindowSpec {
    /// A causal spec from one window per query head, sharing `kv_heads` key/value heads.
    pub fn new(heads: Vec<HeadWindow>, kv_heads: usize) -> Result<Self, AttentionError> {
        if heads.is_empty() || kv_heads == 0 {
            return Err(AttentionError::NoHeads);
        }
        if !heads.len().is_multiple_of(kv_heads) {
            return Err(AttentionError::HeadsNotDivisible { heads: heads.len(), kv_heads });
        }
        for (h, w) in heads.iter().enumerate() {
            w.validate(h)?;
        }
        Ok(Self {
            heads,
            kv_heads,
            causal: true,
            sinks: 0,
            globals: Vec::new(),
            query_offset: 0,
            kv_len: None,
        })
    }

    /// Full causal attention, the baseline.
    pub fn full(heads: usize, kv_heads: usize) -> Result<Self, AttentionError> {
        Self::new(vec![HeadWindow::full(); heads], kv_heads)
    }

    /// Sliding window of `w` keys on every head (Mistral, SWAT, MSWA's SWA; docs/semantics.md §2).
    pub fn sliding(heads: usize, kv_heads: usize, w: usize) -> Result<Self, AttentionError> {
        Self::per_head(&vec![w; heads], kv_heads)
    }

    /// A sliding window per head, `windows[h]` keys for head `h` (MSWA; docs/semantics.md §3).
    pub fn per_head(windows: &[usize], kv_heads: usize) -> Result<Self, AttentionError> {
        Self::dilated(windows, &vec![1; windows.len()], kv_heads)
    }

    /// `windows[h]` keys spaced `dilations[h]` apart for head `h` (docs/semantics.md §2).
    pub fn dilated(
        windows: &[usize],
        dilations: &[usize],
        kv_heads: usize,
    ) -> Result<Self, AttentionError> {
        if dilations.len() != windows.len() {
            return Err(AttentionError::ShapeMismatch {
                what: "dilations per head",
                expected: windows.len(),
                got: dilations.len(),
            });
        }
        if let Some(head) = windows.iter().position(|&w| w == 0) {
            return Err(AttentionError::ZeroWindow { head });
        }
        let heads = windows.iter().zip(dilations).map(|(&w, &d)| HeadWindow::dilated(w, d));
        Self::new(heads.collect(), kv_heads)
    }

    /// Longformer: one-sided window `w` (2w+1 keys) with a dilation per head; bidirectional for
    /// the encoder, causal for the decoder (docs/semantics.md §2). Add global tokens with
    /// [`WindowSpec::with_globals`].
    pub fn longformer(
        w: usize,
        dilations: &[usize],
        kv_heads: usize,
        causal: bool,
    ) -> Result<Self, AttentionError> {
        let heads = dilations.iter().map(|&d| HeadWindow::longformer(w, d)).collect();
        Ok(Self::new(heads, kv_heads)?.with_causal(causal))
    }

    /// One LongNet branch: segment `w_b`, dilation `r_b`, head `h` at offset `h mod r_b`
    /// (docs/semantics.md §5). The caller clips `w_b` to N.
    pub fn longnet_branch(
        heads: usize,
        kv_heads: usize,
        segment: usize,
        dilation: usize,
    ) -> Result<Self, AttentionError> {
        let phase = |h: usize| if dilation == 0 { 0 } else { h % dilation };
        let windows = (0..heads).map(|h| HeadWindow::longnet(segment, dilation, phase(h)));
        Self::new(windows.collect(), kv_heads)
    }

    /// Keeps positions `0 … sinks−1` visible to every later query (StreamingLLM; docs/semantics.md
    /// §2).
    pub fn with_sinks(mut self, sinks: usize) -> Self {
        self.sinks = sinks;
        self
    }

    /// Adds global positions: they see every key and every query sees them (docs/semantics.md §2).
    pub fn with_globals(mut self, globals: impl IntoIterator<Item = usize>) -> Self {
        self.globals.extend(globals);
        self.globals.sort_unstable();
        self.globals.dedup();
        self
    }

    /// Replaces the global positions with `globals` (a layer reading a stream with memory keeps
    /// its global tokens' rows elsewhere than at their stream positions; docs/semantics.md §10).
    pub fn with_globals_replaced(mut self, globals: impl IntoIterator<Item = usize>) -> Self {
        self.globals.clear();
        self.with_globals(globals)
    }

    /// Causal (`j ≤ i`, decoders) or bidirectional (encoders).
    pub fn with_causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Absolute position of the first query of a call (decoding after a prefix).
    pub fn with_query_offset(mut self, offset: usize) -> Self {
        self.query_offset = offset;
        self
    }

    /// Number of valid keys; keys past it are padding and never visible (docs/semantics.md §2).
    pub fn with_kv_len(mut self, kv_len: usize) -> Self {
        self.kv_len = Some(kv_len);
        self
    }

    /// The window of each query head.
    pub fn heads(&self) -> &[HeadWindow] {
        &self.heads
    }

    /// Number of query heads.
    pub fn num_heads(&self) -> usize {
        self.heads.len()
    }

    /// Number of key/value heads (GQA).
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }

    /// The kv head that query head `h` reads: `h / (H / H_kv)`.
    pub fn kv_head_of(&self, h: usize) -> usize {
        h / (self.heads.len() / self.kv_heads)
    }

    /// Whether queries are restricted to keys at or before their own position.
    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// Number of sink positions.
    pub fn sinks(&self) -> usize {
        self.sinks
    }

    /// Global positions, sorted.
    pub fn globals(&self) -> &[usize] {
        &self.globals
    }

    /// Absolute position of the first query.
    pub fn query_offset(&self) -> usize {
        self.query_offset
    }

    /// Number of valid keys in a call with `keys` key rows: the [`WindowSpec::with_kv_len`]
    /// value, else all of them.
    pub fn valid_keys(&self, keys: usize) -> usize {
        self.kv_len.unwrap_or(keys)
    }

    /// Whether position `i` is a global token.
    pub fn is_global(&self, i: usize) -> bool {
        self.globals.binary_search(&i).is_ok()
    }

    /// Sinks and global keys, sorted: the keys visible outside of the windows.
    pub fn extra_keys(&self, kv_len: usize) -> Vec<usize> {
        let mut keys: Vec<usize> = (0..self.sinks.min(kv_len)).collect();
        keys.extend(self.globals.iter().copied().filter(|&g| g < kv_len));
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Checks the spec against a call's shapes and returns the number of valid keys.
    pub fn check(
        &self,
        heads: usize,
        kv_heads: usize,
        keys: usize,
    ) -> Result<usize, AttentionError> {
        let mismatch = |what, expected, got| AttentionError::ShapeMismatch { what, expected, got };
        if heads != self.heads.len() {
            return Err(mismatch("query heads", self.heads.len(), heads));
        }
        if kv_heads != self.kv_heads {
            return Err(mismatch("kv heads", self.kv_heads, kv_heads));
        }
        let kv_len = self.valid_keys(keys);
        if kv_len > keys {
            return Err(AttentionError::KvLenTooLong { kv_len, keys });
        }
        if let Some(&position) = self.globals.iter().find(|&&g| g >= kv_len) {
            return Err(AttentionError::GlobalOutOfRange { position, len: kv_len });
        }
        Ok(kv_len)
    }

    /// THE visibility rule (docs/semantics.md §2): does query head `h` at absolute position `i` see
    /// the key at position `j`, given `kv_len` valid keys?
    pub fn visible(&self, h: usize, i: usize, j: usize, kv_len: usize) -> bool {
        j < kv_len
            && (!self.causal || j <= i)
            && (self.heads[h].contains(i, j)
                || j < self.sinks
                || self.is_global(j)
                || self.is_global(i))
    }

    /// Inclusive bounds of the keys that head `h`'s window (sinks and globals aside) can show
    /// the query at absolute position `i`, or `None` when it shows none. A superset: every
    /// window key `j` that [`WindowSpec::visible`] accepts lies inside.
    pub fn window_range(&self, h: usize, i: usize, kv_len: usize) -> Option<(usize, usize)> {
        let w = &self.heads[h];
        if kv_len == 0 {
            return None;
        }
        let mut lo = i.saturating_sub(w.dilation.saturating_mul(w.left));
        let mut hi = match self.causal {
            true => i,
            false => i.saturating_add(w.dilation.saturating_mul(w.right)),
        }
        .min(kv_len - 1);
        if let Some(s) = w.segment {
            let start = i / s * s;
            if (i - start) % w.dilation != w.phase {
                return None;
            }
            lo = lo.max(start);
            hi = hi.min(start.saturating_add(s - 1));
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// The residue class of position `pos` for head `h`: a window pairs only equal classes.
    pub fn stride_class(&self, h: usize, pos: usize) -> usize {
        self.heads[h].stride_class(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dilated_and_segmented_windows() {
        let dilated = HeadWindow::dilated(3, 2);
        assert_eq!(dilated.span(), 5);
        assert_eq!((0..=6).filter(|&j| dilated.contains(6, j)).collect::<Vec<_>>(), [2, 4, 6]);
        // Segment 4, dilation 2, offset 1: positions 1 and 3 of each segment.
        let branch = HeadWindow::longnet(4, 2, 1);
        assert_eq!(branch.reach(), Some(4));
        assert_eq!((0..8).filter(|&j| branch.contains(7, j)).collect::<Vec<_>>(), [5, 7]);
        assert!(!branch.contains(6, 6), "offset 2 of its segment is not the head's");
    }

    #[test]
    fn window_range_holds_every_visible_window_key() {
        let specs = [
            WindowSpec::dilated(&[3, 2], &[1, 3], 1).unwrap(),
            WindowSpec::longnet_branch(2, 1, 4, 2).unwrap(),
            WindowSpec::longformer(2, &[1, 2], 2, false).unwrap(),
        ];
        for spec in &specs {
            for (h, i) in (0..spec.num_heads()).flat_map(|h| (0..12).map(move |i| (h, i))) {
                for j in (0..12).filter(|&j| spec.visible(h, i, j, 12)) {
                    let (lo, hi) = spec.window_range(h, i, 12).expect("a visible key");
                    assert!((lo..=hi).contains(&j), "{spec:?}: head {h}, ({i}, {j})");
                    assert_eq!(spec.stride_class(h, i), spec.stride_class(h, j));
                }
            }
        }
    }
}

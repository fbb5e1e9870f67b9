//! Which tiles a cube visits: the skipping rule that keeps the kernels O(N·w).
//!
//! A cube of query rows reads only the key tiles that hold a key its rows' windows can reach,
//! plus the sink tiles; a cube of key rows reads only the query tiles whose windows can reach
//! one of its keys (every query when it holds a sink). Both ranges are supersets, from the
//! window's reach `δ·left` back and `δ·right` forward and its LongNet segment;
//! [`crate::kernel::visibility`] then decides each pair. Dilated heads read the whole reach, `δ`
//! times the keys they see.

use cubecl::prelude::*;

use crate::kernel::config::Call;
use crate::kernel::visibility::Window;

/// Tiles `0 … before − 1` (sink tiles left of the band), then `first … first + count − 1` (the
/// band, which starts at tile 0 and takes in the sink tiles when they reach it).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Tiles {
    /// Sink tiles visited before the band.
    pub before: u32,
    /// First tile of the band.
    pub first: u32,
    /// Tiles in the band.
    pub count: u32,
}

/// The `t`-th tile of `tiles`, for `t < tiles.before + tiles.count`.
#[cube]
pub(crate) fn nth_tile(tiles: &Tiles, t: u32) -> u32 {
    if t < tiles.before { t } else { tiles.first + t - tiles.before }
}

/// The key tiles of `tile` keys that queries at absolute positions `first ..= last` of a head
/// with `window` can see. Needs `kv_len ≥ 1`.
#[cube]
pub(crate) fn key_tiles(
    window: &Window,
    first: u32,
    last: u32,
    call: &Call,
    #[comptime] tile: usize,
    #[comptime] causal: bool,
) -> Tiles {
    let tile = comptime!(tile as u32);
    let mut lo = first - min(first, window.back);
    let mut hi = last;
    if !causal {
        hi = last + min(window.forward, u32::MAX - last);
    }
    hi = min(hi, call.kv_len - 1);
    if window.segment != 0 {
        let segment = window.segment;
        let end_start = last / segment * segment;
        lo = max(lo, first / segment * segment);
        hi = min(hi, end_start + min(segment - 1, u32::MAX - end_start));
    }
    let sink_tiles = min(call.sinks, call.kv_len).div_ceil(tile);
    let mut tiles = Tiles { before: sink_tiles, first: 0, count: 0 };
    if lo <= hi {
        let band_first = lo / tile;
        let band_end = hi / tile + 1;
        if sink_tiles < band_first {
            tiles.first = band_first;
            tiles.count = band_end - band_first;
        } else {
            // The sink tiles reach the band (or, bidirectional, past its end): one run from
            // tile 0 covers both, each tile once.
            tiles.before = 0;
            tiles.count = max(band_end, sink_tiles);
        }
    }
    tiles
}

/// The query tiles of `tile` rows (query indices, not positions) among `q_len` whose windows
/// can reach a key at positions `first ..= last`. Needs `first ≤ last < kv_len`.
#[cube]
pub(crate) fn query_tiles(
    window: &Window,
    first: u32,
    last: u32,
    q_len: u32,
    call: &Call,
    #[comptime] tile: usize,
    #[comptime] causal: bool,
) -> Tiles {
    let tile = comptime!(tile as u32);
    let mut lo = first;
    if !causal {
        lo = first - min(first, window.forward);
    }
    let mut hi = last + min(window.back, u32::MAX - last);
    if window.segment != 0 {
        let segment = window.segment;
        let end_start = last / segment * segment;
        lo = max(lo, first / segment * segment);
        hi = min(hi, end_start + min(segment - 1, u32::MAX - end_start));
    }
    if first < call.sinks {
        hi = u32::MAX;
        if !causal {
            lo = 0;
        }
    }
    let offset = call.query_offset;
    let mut tiles = Tiles { before: 0, first: 0, count: 0 };
    if hi >= offset {
        let row_lo = max(lo, offset) - offset;
        let row_hi = min(hi - offset, q_len - 1);
        if row_lo <= row_hi {
            tiles.first = row_lo / tile;
            tiles.count = row_hi / tile - tiles.first + 1;
        }
    }
    tiles
}

//! Which keys each tile reads: the skipping rule that keeps the CPU kernel O(N·w), shared by the
//! forward and both backward passes (docs/semantics.md §2, §5).
//!
//! The query heads that share a kv head and a window form a [`Group`]. Their rows are stacked in
//! the same tiles, so the group reads each key chunk once for all of them (GQA). A group sorts
//! its queries and keys into lists:
//! - one per stride class ([`WindowSpec::stride_class`]): a window pairs a query only with keys
//!   of its own class, so a dilated head reads its class's keys and none of the δ − 1 others;
//! - the extra keys, sinks and global keys ([`WindowSpec::extra_keys`]), which any query may
//!   see; the class lists leave them out, so each is counted once;
//! - the queries whose window is empty (a LongNet offset that does not match), which read the
//!   extra keys alone, and the global queries, which read every key.
//!
//! A query at position `p` of class `c` sees, among the keys of class `c`, exactly those at
//! positions in [`WindowSpec::window_range`]: that range is `p − δ·left … p + δ·right` (`… p`
//! when causal) cut to the valid keys and to `p`'s LongNet segment, and a key of `p`'s class in
//! it lies a multiple of `δ` away, in the same segment: [`crate::HeadWindow::contains`] clause for
//! clause. So each class row sees one interval of its class's key list ([`QueryList::intervals`]);
//! the test `class_rows_see_their_intervals` checks this against [`WindowSpec::visible`] pair by
//! pair. Extra keys, and the keys of global queries, are decided by [`WindowSpec::visible`]
//! itself, pair by pair.

use std::ops::Range;

use super::block::ScoreBlock;
use crate::WindowSpec;
use crate::plan::head_groups;

/// Query rows of one tile (positions × the group's heads), a dimension of its matrix products.
/// Fewer rows read fewer keys outside their windows (a causal window of `w` keys makes a tile
/// of `r` rows read `w + r − 1`), more rows use gemm better. 36, the fastest of 24 to 64 on
/// the causal W = 256 forward, is a multiple of 6, which fills gemm's 16×6 microkernel.
pub(crate) const TILE_ROWS: usize = 36;
/// Keys of one tile of the dK/dV pass.
pub(crate) const KEY_TILE: usize = 64;
/// Most keys (forward, dQ) or query rows (dK/dV) streamed through a tile at once: the score
/// block stays in L2 (the time is flat from 128 to 512).
pub(crate) const CHUNK: usize = 256;

/// A run of one list of a [`Group`]: `range` indexes the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// Index of the list among the group's query lists or key lists.
    pub list: usize,
    /// The run within that list.
    pub range: Range<usize>,
}

/// One unit of work: a run of one side's list, and the runs of the other side it pairs with.
#[derive(Clone, Debug)]
pub(crate) struct Tile {
    /// The rows (queries or keys) whose outputs the tile owns.
    pub own: Span,
    /// The runs of the other side it reads.
    pub reads: Vec<Span>,
}

/// The queries of one list.
#[derive(Clone, Debug, Default)]
pub(crate) struct QueryList {
    /// Query indices (position − query offset), increasing.
    pub queries: Vec<usize>,
    /// For a class list: per row, the indices `start..end` of the class's key list that its
    /// window sees. Both ends never decrease from row to row.
    pub intervals: Option<Vec<(usize, usize)>>,
}

/// The query heads sharing one kv head and one window, and their lists.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// The kv head every member reads.
    pub kv_head: usize,
    /// The member query heads, increasing.
    pub heads: Vec<usize>,
    /// Stride classes `δ`: lists `0 … δ − 1` of either side are the classes.
    pub classes: usize,
    /// The classes, then the queries with an empty window, then the global queries.
    pub queries: Vec<QueryList>,
    /// Key positions: the classes, then the extra keys, then every key a global query reaches.
    pub keys: Vec<Vec<usize>>,
}

/// The runs of `reads`, cut into pieces of at most `size`.
pub(crate) fn chunks(reads: &[Span], size: usize) -> impl Iterator<Item = Span> + '_ {
    reads.iter().flat_map(move |span| {
        let end = span.range.end;
        let starts = span.range.clone().step_by(size);
        starts.map(move |start| Span { list: span.list, range: start..(start + size).min(end) })
    })
}

/// The groups of a call with `q_len` queries and `kv_len` valid keys: the heads sharing a window
/// ([`head_groups`]), split by kv head.
pub(crate) fn groups(spec: &WindowSpec, q_len: usize, kv_len: usize) -> Vec<Group> {
    let mut groups = Vec::new();
    for heads in head_groups(spec) {
        for members in heads.chunk_by(|&a, &b| spec.kv_head_of(a) == spec.kv_head_of(b)) {
            groups.push(Group::new(spec, members.to_vec(), q_len, kv_len));
        }
    }
    groups
}

impl Group {
    fn new(spec: &WindowSpec, heads: Vec<usize>, q_len: usize, kv_len: usize) -> Self {
        let h = heads[0];
        let classes = spec.heads()[h].dilation;
        let offset = spec.query_offset();
        let mut queries = vec![Vec::new(); classes + 2];
        // The union of the window ranges of each class's queries: the keys worth listing.
        let mut reach: Vec<Option<(usize, usize)>> = vec![None; classes];
        for i in 0..q_len {
            let p = offset + i;
            let list = if spec.is_global(p) {
                classes + 1
            } else if let Some((lo, hi)) = spec.window_range(h, p, kv_len) {
                let c = spec.stride_class(h, p);
                reach[c] = Some(reach[c].map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                c
            } else {
                classes
            };
            queries[list].push(i);
        }
        let extras = spec.extra_keys(kv_len);
        let mut keys: Vec<Vec<usize>> = (0..classes)
            .map(|c| match reach[c] {
                Some((lo, hi)) => (lo..=hi)
                    .filter(|&j| spec.stride_class(h, j) == c && extras.binary_search(&j).is_err())
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        keys.push(extras);
        let global_reach = match queries[classes + 1].last() {
            Some(&i) if spec.is_causal() => (offset + i + 1).min(kv_len),
            Some(_) => kv_len,
            None => 0,
        };
        keys.push((0..global_reach).collect());
        let queries = queries
            .into_iter()
            .enumerate()
            .map(|(list, queries)| {
                let intervals = (list < classes).then(|| {
                    let keys = &keys[list];
                    let interval = |i: usize| {
                        let (lo, hi) = spec.window_range(h, offset + i, kv_len).expect("class row");
                        (keys.partition_point(|&j| j < lo), keys.partition_point(|&j| j <= hi))
                    };
                    queries.iter().map(|&i| interval(i)).collect::<Vec<_>>()
                });
                debug_assert!(intervals.as_ref().is_none_or(|iv| {
                    iv.is_sorted_by(|x: &(usize, usize), y| x.0 <= y.0 && x.1 <= y.1)
                }));
                QueryList { queries, intervals }
            })
            .collect();
        Self { kv_head: spec.kv_head_of(h), heads, classes, queries, keys }
    }

    /// The key list of the extra keys.
    fn extras(&self) -> usize {
        self.classes
    }

    /// The query list of the global queries, and the key list of every key they reach.
    fn globals(&self) -> usize {
        self.classes + 1
    }

    /// The whole of list `list`, of length `len`, or nothing when it is empty.
    fn whole(list: usize, len: usize) -> Option<Span> {
        (len > 0).then_some(Span { list, range: 0..len })
    }

    /// The block pairing the query run `queries` with the key run `keys`: a class run meets its
    /// own class's keys through the rows' intervals, every other pair through
    /// [`WindowSpec::visible`].
    pub fn block(&self, queries: &Span, keys: &Span) -> ScoreBlock<'_> {
        let rows = &self.queries[queries.list];
        let intervals = match &rows.intervals {
            Some(intervals) if keys.list < self.classes => Some(&intervals[queries.range.clone()]),
            _ => None,
        };
        ScoreBlock {
            queries: &rows.queries[queries.range.clone()],
            intervals,
            keys: &self.keys[keys.list][keys.range.clone()],
            first_key: keys.range.start,
        }
    }

    /// The tiles of the forward and of the dQ pass: runs of each query list, [`TILE_ROWS`] rows
    /// in all, each with the key runs its rows can see.
    pub fn query_tiles(&self) -> Vec<Tile> {
        let per_tile = (TILE_ROWS / self.heads.len()).max(1);
        let mut tiles = Vec::new();
        for (list, rows) in self.queries.iter().enumerate() {
            for start in (0..rows.queries.len()).step_by(per_tile) {
                let own = Span { list, range: start..(start + per_tile).min(rows.queries.len()) };
                let mut reads = Vec::new();
                if let Some(intervals) = &rows.intervals {
                    let (lo, hi) = (intervals[own.range.start].0, intervals[own.range.end - 1].1);
                    if lo < hi {
                        reads.push(Span { list, range: lo..hi });
                    }
                }
                let keys = if list == self.globals() { self.globals() } else { self.extras() };
                reads.extend(Self::whole(keys, self.keys[keys].len()));
                tiles.push(Tile { own, reads });
            }
        }
        tiles
    }

    /// The tiles of the dK/dV pass: runs of [`KEY_TILE`] keys of each key list, each with the
    /// query runs that can see them.
    pub fn key_tiles(&self) -> Vec<Tile> {
        let whole_queries = |list: usize| Self::whole(list, self.queries[list].queries.len());
        let mut tiles = Vec::new();
        for (list, keys) in self.keys.iter().enumerate() {
            for start in (0..keys.len()).step_by(KEY_TILE) {
                let own = Span { list, range: start..(start + KEY_TILE).min(keys.len()) };
                let reads = if list < self.classes {
                    // The rows whose interval meets the run: a range, as intervals never go back.
                    let intervals = self.queries[list].intervals.as_deref().expect("class list");
                    let first = intervals.partition_point(|&(_, end)| end <= own.range.start);
                    let last = intervals.partition_point(|&(start, _)| start < own.range.end);
                    (first < last)
                        .then_some(Span { list, range: first..last })
                        .into_iter()
                        .collect()
                } else if list == self.extras() {
                    (0..=self.classes).filter_map(whole_queries).collect()
                } else {
                    whole_queries(self.globals()).into_iter().collect()
                };
                tiles.push(Tile { own, reads });
            }
        }
        tiles
    }
}

//! The blocked path's schedule, computed on the host from the window spec.
//!
//! Longformer's "sliding chunks", generalised: queries are sorted by stride class (dilation
//! residue, LongNet offset), cut into blocks, and each block reads only the keys of its class
//! that its window range can reach, plus the sinks and global keys as extra columns. Every
//! block's mask is [`WindowSpec::mask`], entry by entry [`WindowSpec::visible`]; the ranges only
//! decide which keys are worth reading.
//! Global queries see every key, so they form one dense block of their own (O(|G|·N)), and
//! queries whose window is empty (a LongNet offset that does not match) read the extra keys
//! alone. The schedule has O(N·w) entries.

use crate::index::inverse_permutation;
use crate::{HeadWindow, WindowSpec};

/// Largest number of query rows in one block.
const MAX_BLOCK_ROWS: usize = 128;
/// Smallest number of query rows in one block: tiny blocks only add overhead.
const MIN_BLOCK_ROWS: usize = 16;

/// A batch of equally shaped blocks: `blocks` blocks of `block_rows` query slots, each reading
/// `block_cols` key slots.
pub(crate) struct BlockSet {
    /// Number of blocks.
    pub blocks: usize,
    /// Query slots per block.
    pub block_rows: usize,
    /// Key slots per block; 0 when no row of the set can see any key.
    pub block_cols: usize,
    /// The query (local index) of each of the `blocks × block_rows` slots, or [`PAD`].
    pub rows: Vec<i64>,
    /// The key of each of the `blocks × block_cols` slots, or [`PAD`].
    pub cols: Vec<i64>,
    /// Visibility per block, row slot and key slot (`blocks × block_rows × block_cols`).
    pub mask: Vec<bool>,
    /// `i − j` per mask entry, when ALiBi needs it.
    pub distance: Option<Vec<f32>>,
}

/// The schedule of one group of heads that share a window.
pub(crate) struct GroupPlan {
    /// The block sets, in slot order.
    pub sets: Vec<BlockSet>,
    /// For each query, its slot in the concatenation of the sets' row slots.
    pub inverse: Vec<usize>,
}

/// Groups the heads that share a window, each group in head order, groups in order of their
/// first head.
pub(crate) fn head_groups(spec: &WindowSpec) -> Vec<Vec<usize>> {
    let mut groups: Vec<(HeadWindow, Vec<usize>)> = Vec::new();
    for (h, w) in spec.heads().iter().enumerate() {
        match groups.iter_mut().find(|(gw, _)| gw == w) {
            Some((_, heads)) => heads.push(h),
            None => groups.push((*w, vec![h])),
        }
    }
    groups.into_iter().map(|(_, heads)| heads).collect()
}

/// Plans the blocks of the heads that share head `h`'s window, for `q_len` queries and
/// `kv_len` valid keys.
pub(crate) fn plan_group(
    spec: &WindowSpec,
    h: usize,
    q_len: usize,
    kv_len: usize,
    with_distance: bool,
) -> GroupPlan {
    let offset = spec.query_offset();
    let window = spec.heads()[h];
    let extra = spec.extra_keys(kv_len);
    let classes = window.dilation;
    let (mut windowed, mut global_rows, mut orphan_rows) =
        (vec![Vec::new(); classes], vec![], vec![]);
    for i in 0..q_len {
        let p = offset + i;
        if spec.is_global(p) {
            global_rows.push(i);
        } else if spec.window_range(h, p, kv_len).is_some() {
            windowed[spec.stride_class(h, p)].push(i);
        } else {
            orphan_rows.push(i);
        }
    }
    // Extra keys are read through their own columns, so the windows skip them.
    let mut class_keys = vec![Vec::new(); classes];
    for j in (0..kv_len).filter(|j| extra.binary_search(j).is_err()) {
        class_keys[spec.stride_class(h, j)].push(j);
    }
    let block_rows = block_rows(&window, spec.is_causal(), q_len);
    let mut blocks = Vec::new();
    for (class, rows) in windowed.iter().enumerate() {
        for chunk in rows.chunks(block_rows) {
            let (lo, hi) = chunk
                .iter()
                .filter_map(|&i| spec.window_range(h, offset + i, kv_len))
                .fold((usize::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
            let keys = &class_keys[class];
            let span = &keys[keys.partition_point(|&j| j < lo)..keys.partition_point(|&j| j <= hi)];
            let cols = span.iter().chain(&extra).copied().collect();
            blocks.push((chunk.to_vec(), cols));
        }
    }
    let builder = SetBuilder { spec, h, kv_len, with_distance };
    let mut sets = Vec::new();
    if !blocks.is_empty() {
        sets.push(builder.build(block_rows, blocks));
    }
    if !global_rows.is_empty() {
        sets.push(builder.build(global_rows.len(), vec![(global_rows, (0..kv_len).collect())]));
    }
    if !orphan_rows.is_empty() {
        sets.push(builder.build(orphan_rows.len(), vec![(orphan_rows, extra)]));
    }
    let slots = sets.iter().flat_map(|set| set.rows.iter().map(|&row| usize::try_from(row).ok()));
    GroupPlan { inverse: inverse_permutation(q_len, slots), sets }
}

/// Query rows per block: about the window's reach, so that a block reads at most about twice
/// the keys its rows need, and no more than the number of queries.
fn block_rows(window: &HeadWindow, causal: bool, q_len: usize) -> usize {
    let right = if causal { 0 } else { window.right };
    let reach = window.left.saturating_add(right).saturating_add(1);
    let rows = reach.min(MAX_BLOCK_ROWS).next_power_of_two().max(MIN_BLOCK_ROWS);
    rows.min(q_len.max(1))
}

/// Lays blocks of (query rows, key columns) out as one [`BlockSet`], padding rows and columns.
struct SetBuilder<'a> {
    spec: &'a WindowSpec,
    h: usize,
    kv_len: usize,
    with_distance: bool,
}

impl SetBuilder<'_> {
    fn build(&self, block_rows: usize, blocks: Vec<(Vec<usize>, Vec<usize>)>) -> BlockSet {
        let block_cols = blocks.iter().map(|(_, cols)| cols.len()).max().unwrap_or(0);
        let offset = self.spec.query_offset();
        let entries = blocks.len() * block_rows * block_cols;
        let mut set = BlockSet {
            blocks: blocks.len(),
            block_rows,
            block_cols,
            rows: Vec::with_capacity(blocks.len() * block_rows),
            cols: Vec::with_capacity(blocks.len() * block_cols),
            mask: Vec::with_capacity(entries),
            distance: self.with_distance.then(|| Vec::with_capacity(entries)),
        };
        let padded = |v: &[usize], len: usize| -> Vec<Option<usize>> {
            v.iter().map(|&x| Some(x)).chain(std::iter::repeat(None)).take(len).collect()
        };
        for (rows, cols) in &blocks {
            let positions = rows.iter().map(|&i| offset + i);
            // A padding key slot is given as `kv_len`, which no query sees; padding rows see
            // nothing.
            let keys = cols.iter().copied().chain(std::iter::repeat(self.kv_len)).take(block_cols);
            set.mask.extend(self.spec.mask([self.h], positions, keys, self.kv_len));
            set.mask.resize(set.mask.len() + (block_rows - rows.len()) * block_cols, false);
            let (rows, cols) = (padded(rows, block_rows), padded(cols, block_cols));
            set.rows.extend(rows.iter().map(|r| r.map_or(PAD, |r| r as i64)));
            set.cols.extend(cols.iter().map(|c| c.map_or(PAD, |c| c as i64)));
            if let Some(distance) = set.distance.as_mut() {
                for row in &rows {
                    let pairs = cols.iter().map(|col| row.zip(*col));
                    distance.extend(
                        pairs.map(|pair| pair.map_or(0.0, |(i, j)| (offset + i) as f32 - j as f32)),
                    );
                }
            }
        }
        set
    }
}

/// Marks a padding slot in [`BlockSet::rows`] and [`BlockSet::cols`].
pub(crate) const PAD: i64 = -1;

impl BlockSet {
    /// Gather indices for a slot list: padding slots read index 0, and the mask hides them.
    pub fn gather(slots: &[i64]) -> impl Iterator<Item = usize> + '_ {
        slots.iter().map(|&s| usize::try_from(s).unwrap_or(0))
    }
}

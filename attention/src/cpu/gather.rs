//! Moving rows between the call's buffers and a group's lists: the lists gathered into
//! contiguous rows for the tiles to read, and the tiles' rows put back.
//!
//! A slab holds the rows of one (batch, kv head): `[G_kv, len, width]` for the query heads
//! sharing the kv head, `[len, width]` for the kv head itself. Queries are gathered as the tiles
//! stack them, `[rows, G, width]` for a group of `G` heads.

use std::borrow::Cow;

use super::Dims;
use super::schedule::{Group, Span};

/// A group's lists gathered from one (batch, kv head) slab.
pub(crate) struct GroupInputs<'a> {
    /// The group's heads as indices into the slab's `G_kv` heads.
    pub slab_heads: Vec<usize>,
    /// Per query list, `[rows, G, d]`.
    pub queries: Vec<Cow<'a, [f32]>>,
    /// Per key list, `[keys, d]`.
    pub keys: Vec<Cow<'a, [f32]>>,
    /// Per key list, `[keys, d]`.
    pub values: Vec<Cow<'a, [f32]>>,
}

impl<'a> GroupInputs<'a> {
    /// Gathers `group`'s lists from the slabs `q: [G_kv, N_q, d]` and `k, v: [N_k, d]`.
    pub fn gather(group: &Group, [q, k, v]: [&'a [f32]; 3], dims: Dims) -> Self {
        let slab_heads: Vec<usize> = group.heads.iter().map(|h| h % dims.group()).collect();
        let key_lists = |slab: &'a [f32]| -> Vec<Cow<'a, [f32]>> {
            group.keys.iter().map(|positions| rows(slab, positions, dims.dim)).collect()
        };
        Self {
            queries: query_lists(group, &slab_heads, q, dims.q_len, dims.dim),
            keys: key_lists(k),
            values: key_lists(v),
            slab_heads,
        }
    }
}

/// Every query list of `group` gathered from `slab` (`[G_kv, len, width]`) as `[rows, G, width]`;
/// `slab_heads` are the group's heads as indices into the slab.
pub(crate) fn query_lists<'a>(
    group: &Group,
    slab_heads: &[usize],
    slab: &'a [f32],
    len: usize,
    width: usize,
) -> Vec<Cow<'a, [f32]>> {
    let lists = group.queries.iter();
    lists.map(|rows| head_rows(slab, slab_heads, len, &rows.queries, width)).collect()
}

/// The rows of run `span` in its gathered list: `lists[span.list]` holds rows of `width` floats
/// (`G·d` for queries stacked over a group's heads, `d` for keys).
pub(crate) fn span_rows<'a>(lists: &'a [Cow<'_, [f32]>], span: &Span, width: usize) -> &'a [f32] {
    &lists[span.list][span.range.start * width..span.range.end * width]
}

/// Slab `index` of `buffer`, slabs of `len` floats one after another.
pub(crate) fn slab(buffer: &[f32], index: usize, len: usize) -> &[f32] {
    &buffer[index * len..(index + 1) * len]
}

/// Rows `indices` of `source` (rows of `width` floats), one after another: borrowed when the
/// indices are consecutive, copied otherwise.
pub(crate) fn rows<'a>(source: &'a [f32], indices: &[usize], width: usize) -> Cow<'a, [f32]> {
    match (indices.first(), indices.last()) {
        (Some(&first), Some(&last)) if last + 1 - first == indices.len() => {
            Cow::Borrowed(&source[first * width..(last + 1) * width])
        }
        _ => Cow::Owned(indices.iter().flat_map(|&i| row(source, i, width)).copied().collect()),
    }
}

/// Rows `indices` of each of the slab's heads `heads` (`slab: [G_kv, len, width]`), interleaved
/// as `[indices, heads, width]`.
pub(crate) fn head_rows<'a>(
    slab: &'a [f32],
    heads: &[usize],
    len: usize,
    indices: &[usize],
    width: usize,
) -> Cow<'a, [f32]> {
    if let &[head] = heads {
        return rows(&slab[head * len * width..(head + 1) * len * width], indices, width);
    }
    let heads_rows = indices.iter().flat_map(|&i| heads.iter().map(move |&h| h * len + i));
    Cow::Owned(heads_rows.flat_map(|at| row(slab, at, width)).copied().collect())
}

/// Puts tile rows back: row `r·G + g` of `rows` goes to row `indices[r]` of head `heads[g]` of
/// `slab` (`[G_kv, len, width]`).
pub(crate) fn scatter(
    slab: &mut [f32],
    heads: &[usize],
    len: usize,
    indices: &[usize],
    width: usize,
    rows: &[f32],
) {
    let targets = indices.iter().flat_map(|&i| heads.iter().map(move |&h| h * len + i));
    for (at, values) in targets.zip(rows.chunks_exact(width)) {
        slab[at * width..(at + 1) * width].copy_from_slice(values);
    }
}

/// Adds tile rows in: row `r` of `rows` to row `indices[r]` of `slab` (`[len, width]`).
pub(crate) fn add(slab: &mut [f32], indices: &[usize], width: usize, rows: &[f32]) {
    for (&at, values) in indices.iter().zip(rows.chunks_exact(width)) {
        for (x, &y) in slab[at * width..(at + 1) * width].iter_mut().zip(values) {
            *x += y;
        }
    }
}

fn row(source: &[f32], at: usize, width: usize) -> &[f32] {
    &source[at * width..(at + 1) * width]
}

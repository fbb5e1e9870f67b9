//! One ring buffer of a layer's bounded KV cache (`super::cache`, docs/semantics.md §7): the
//! keys and values of the kv heads that share a reach, the position each slot holds, and which
//! slot the next unpinned position overwrites.

use std::collections::VecDeque;

use burn::tensor::{Tensor, backend::Backend};

use swa_attention::layer_support::{index_tensor, inverse_permutation};

/// The keys and values of the kv heads that share one reach.
#[derive(Clone)]
pub(super) struct Buffer<B: Backend> {
    /// The kv heads kept here, and the query heads that read them (GQA), in order.
    pub(super) kv_heads: Vec<usize>,
    pub(super) heads: Vec<usize>,
    /// How many recent (unpinned) positions to keep; `None` keeps them all.
    pub(super) reach: Option<usize>,
    /// `[batch, kv_heads, slots, d]`: keys rotated at their absolute position, or not rotated
    /// under [`CachePositions::Streaming`] or without RoPE. `None` before the first token.
    pub(super) keys: Option<Tensor<B, 4>>,
    pub(super) values: Option<Tensor<B, 4>>,
    /// The position held by each slot.
    pub(super) slots: Vec<usize>,
    /// The slots of the recent positions, oldest first.
    pub(super) recent: VecDeque<usize>,
}

impl<B: Backend> Buffer<B> {
    pub(super) fn new(reach: Option<usize>) -> Self {
        let (keys, values) = (None, None);
        Self {
            kv_heads: Vec::new(),
            heads: Vec::new(),
            reach,
            keys,
            values,
            slots: Vec::new(),
            recent: VecDeque::new(),
        }
    }

    /// Writes position `position` into a new slot, or over the oldest recent one once `reach`
    /// recent positions are kept.
    pub(super) fn store(
        &mut self,
        position: usize,
        pinned: bool,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
    ) {
        match self.reusable_slot(pinned) {
            Some(slot) => {
                let [batch, heads, _, d] = k.dims();
                let range = [0..batch, 0..heads, slot..slot + 1, 0..d];
                self.keys = self.keys.take().map(|keys| keys.slice_assign(range.clone(), k));
                self.values = self.values.take().map(|values| values.slice_assign(range, v));
                self.reuse(position);
            }
            None => {
                let grow = |cache: Option<Tensor<B, 4>>, x| match cache {
                    Some(cache) => Tensor::cat(vec![cache, x], 2),
                    None => x,
                };
                self.keys = Some(grow(self.keys.take(), k));
                self.values = Some(grow(self.values.take(), v));
                self.slots.push(position);
                if !pinned {
                    self.recent.push_back(self.slots.len() - 1);
                }
            }
        }
    }

    /// The slot an unpinned position overwrites once `reach` recent positions are kept: the
    /// oldest recent one. `None` while the ring grows, and for a pinned position.
    pub(super) fn reusable_slot(&self, pinned: bool) -> Option<usize> {
        let full = self.reach.is_some_and(|reach| self.recent.len() >= reach);
        if pinned || !full { None } else { self.recent.front().copied() }
    }

    /// The bookkeeping of writing `position` over the slot of [`Buffer::reusable_slot`].
    pub(super) fn reuse(&mut self, position: usize) {
        let slot = self.recent.pop_front().expect("a reusable slot is a recent one");
        self.slots[slot] = position;
        self.recent.push_back(slot);
    }

    /// StreamingLLM positions: the query's slot index and each slot's index in position order.
    pub(super) fn slot_ranks(&self) -> (usize, Vec<usize>) {
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        order.sort_by_key(|&s| self.slots[s]);
        let ranks = inverse_permutation(self.slots.len(), order.into_iter().map(Some));
        (self.slots.len() - 1, ranks)
    }
}

/// The heads `heads` (sorted, distinct) of `x: [batch, all, rows, d]`: `x` itself when they are
/// all of them, a view when they are consecutive (an MSWA buffer's heads usually are), else a
/// gathered copy.
pub(super) fn select_heads<B: Backend>(x: Tensor<B, 4>, heads: &[usize]) -> Tensor<B, 4> {
    if heads.len() == x.dims()[1] {
        return x;
    }
    match (heads.first(), heads.last()) {
        (Some(&first), Some(&last)) if last + 1 - first == heads.len() => {
            x.narrow(1, first, heads.len())
        }
        _ => {
            let index = index_tensor::<B>(heads.iter().copied(), &x.device());
            x.select(1, index)
        }
    }
}

//! One ring buffer of a layer's bounded KV cache (`super::cache`, docs/semantics.md §7): the
//! keys and values of the kv heads that share a reach, the position each slot holds, and which
//! slot the next unpinned position overwrites.
//!
//! Under absolute positions the ring grows by doubling ([`Buffer::reserve`]): empty slots,
//! holding [`EMPTY`], wait for the next positions, so that a growing ring is not copied whole
//! for every new position and keeps one shape for many steps (on a GPU, fusion reuses its
//! plans and the fused append writes in place). Once full it holds exactly its pinned
//! positions and `reach` others, as a ring grown one slot at a time would.

use std::collections::VecDeque;
use std::iter::repeat_n;

use burn::tensor::{Tensor, backend::Backend};

use swa_attention::index::index_tensor;

/// The keys and values of the kv heads that share one reach.
#[derive(Clone)]
pub(super) struct Buffer<B: Backend> {
    /// The kv heads kept here, and the query heads that read them (GQA), in order.
    pub(super) kv_heads: Vec<usize>,
    pub(super) heads: Vec<usize>,
    /// How many recent (unpinned) positions to keep; `None` keeps them all.
    pub(super) reach: Option<usize>,
    /// `[batch, kv_heads, slots, d]`: keys rotated at their absolute position (pinned ones at
    /// their shifted position under [`CachePositions::Streaming`]), or not rotated without RoPE.
    /// `None` before the first token.
    pub(super) keys: Option<Tensor<B, 4>>,
    pub(super) values: Option<Tensor<B, 4>>,
    /// The position held by each slot.
    pub(super) slots: Vec<usize>,
    /// The slots of the recent positions, oldest first.
    pub(super) recent: VecDeque<usize>,
    /// Empty slots (holding [`EMPTY`]), the next one to fill last.
    pub(super) free: Vec<usize>,
}

/// The position an empty slot holds: past every query's keys (`kv_len`), so no path shows it.
pub(super) const EMPTY: usize = usize::MAX;

/// Slots a ring reserves first; later it doubles.
const FIRST_RESERVE: usize = 8;

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
            free: Vec::new(),
        }
    }

    /// Positions held: the slots but the empty ones.
    pub(super) fn held(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Makes room for the next position when no slot can take it ([`Buffer::reusable_slot`]):
    /// as many empty slots as the ring has (at least [`FIRST_RESERVE`]), zeros in `like`'s
    /// dtype (`[batch, kv heads of this buffer, 1, d]`), but never more than the ring will hold
    /// (one for a pinned position, up to `reach` recent ones for the others).
    pub(super) fn reserve(&mut self, pinned: bool, like: &Tensor<B, 4>) {
        let len = self.slots.len();
        let extra = match (pinned, self.reach) {
            (true, _) => 1,
            (false, Some(reach)) => len.max(FIRST_RESERVE).min(reach - self.recent.len()),
            (false, None) => len.max(FIRST_RESERVE),
        };
        let [batch, heads, _, d] = like.dims();
        let zeros = Tensor::<B, 4>::zeros([batch, heads, extra, d], &like.device());
        let zeros = zeros.cast(like.dtype());
        let grow = |cache: Option<Tensor<B, 4>>| match cache {
            Some(cache) => Tensor::cat(vec![cache, zeros.clone()], 2),
            None => zeros.clone(),
        };
        self.keys = Some(grow(self.keys.take()));
        self.values = Some(grow(self.values.take()));
        self.slots.extend(repeat_n(EMPTY, extra));
        self.free.extend((len..len + extra).rev());
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
                self.overwrite(slot, k, v);
                self.occupy(slot, position, pinned);
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

    /// Writes `k, v: [batch, kv heads of this buffer, 1, d]` into slot `slot`, with tensor ops.
    pub(super) fn overwrite(&mut self, slot: usize, k: Tensor<B, 4>, v: Tensor<B, 4>) {
        let [batch, heads, _, d] = k.dims();
        let range = [0..batch, 0..heads, slot..slot + 1, 0..d];
        self.keys = self.keys.take().map(|keys| keys.slice_assign(range.clone(), k));
        self.values = self.values.take().map(|values| values.slice_assign(range, v));
    }

    /// The slot the next position goes to without growing the ring: an empty one, else (an
    /// unpinned position once `reach` recent positions are kept) the oldest recent one. `None`
    /// when the ring must grow.
    pub(super) fn reusable_slot(&self, pinned: bool) -> Option<usize> {
        if let Some(&slot) = self.free.last() {
            return Some(slot);
        }
        let full = self.reach.is_some_and(|reach| self.recent.len() >= reach);
        if pinned || !full { None } else { self.recent.front().copied() }
    }

    /// The bookkeeping of writing `position` into the slot of [`Buffer::reusable_slot`].
    pub(super) fn occupy(&mut self, slot: usize, position: usize, pinned: bool) {
        match self.free.last() == Some(&slot) {
            true => self.free.pop(),
            false => self.recent.pop_front(),
        };
        self.slots[slot] = position;
        if !pinned {
            self.recent.push_back(slot);
        }
    }

    /// StreamingLLM's positions, for the query at `t`: the position each slot's key is turned
    /// to so that its distance to the query is its distance in slots (the query at the last
    /// slot, every held position in order). That is `t` less the held positions after it: a
    /// recent key keeps its own position (the recent ones run without a gap up to `t`), a pinned
    /// one moves up by the positions evicted after it. Empty slots stay [`EMPTY`].
    pub(super) fn shifted_positions(&self, t: usize) -> Vec<usize> {
        let mut held: Vec<usize> = self.slots.iter().copied().filter(|&p| p <= t).collect();
        held.sort_unstable();
        let after = |j: usize| held.len() - held.partition_point(|&p| p <= j);
        self.slots.iter().map(|&j| if j == EMPTY { EMPTY } else { t - after(j) }).collect()
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

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use burn::tensor::Tensor;

    use super::{Buffer, EMPTY};

    /// A ring of reach 20 with 2 pinned positions (sinks), fed 50 positions as the cache's
    /// append feeds it: it grows by one slot per pinned position, then doubles (8, then as many
    /// as it holds) up to its 2 pinned and 20 recent slots, and then holds exactly positions 0,
    /// 1 and 30 … 49, each slot the key written for its position, no slot empty.
    #[test]
    fn a_ring_grows_by_doubling_up_to_its_reach() {
        let device = Default::default();
        let mut ring = Buffer::<NdArray>::new(Some(20));
        let mut capacities = Vec::new();
        for position in 0..50 {
            let pinned = position < 2;
            let k = Tensor::<NdArray, 4>::full([1, 1, 1, 2], position as f32, &device);
            if ring.reusable_slot(pinned).is_none() {
                ring.reserve(pinned, &k);
            }
            ring.store(position, pinned, k.clone(), k);
            let capacity = ring.slots.len();
            assert!(capacity <= (2 * ring.held()).max(10), "{capacity} slots hold {}", ring.held());
            assert_eq!(ring.slots.iter().filter(|&&p| p == EMPTY).count(), ring.free.len());
            if capacities.last() != Some(&capacity) {
                capacities.push(capacity);
            }
        }
        assert_eq!(capacities, [1, 2, 10, 20, 22]);
        assert!(ring.free.is_empty());
        let mut held = ring.slots.clone();
        held.sort_unstable();
        assert_eq!(held, [0, 1].into_iter().chain(30..50).collect::<Vec<_>>());
        let keys = ring.keys.expect("keys").into_data().to_vec::<f32>().expect("f32 keys");
        for (slot, &position) in ring.slots.iter().enumerate() {
            assert_eq!(keys[2 * slot], position as f32, "slot {slot}");
        }
    }
}

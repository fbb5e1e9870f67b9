//! Index lists for `select`: the inverse of a placement of rows or heads into slots, and the
//! Int tensor of an index list. The blocked path, its schedule, the KV cache and Longformer's
//! global rows compute a result in some slot order and use these to put it back in place.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

/// The inverse of a placement of `len` items into slots: `slots` gives the item each slot holds
/// (`None` for a padding slot), and the result gives, for each item, the index of its slot, so
/// that selecting the slots with it puts every item back in order. An item that several slots
/// hold reads the last of them; one that no slot holds reads slot 0.
pub fn inverse_permutation(
    len: usize,
    slots: impl IntoIterator<Item = Option<usize>>,
) -> Vec<usize> {
    let mut inverse = vec![0; len];
    for (slot, item) in slots.into_iter().enumerate() {
        if let Some(item) = item {
            inverse[item] = slot;
        }
    }
    inverse
}

/// An index list as a 1-D Int tensor on `device`, for `select`.
pub fn index_tensor<B: Backend>(
    indices: impl IntoIterator<Item = usize>,
    device: &B::Device,
) -> Tensor<B, 1, Int> {
    let indices: Vec<i64> = indices.into_iter().map(|i| i as i64).collect();
    let len = indices.len();
    Tensor::from_data(TensorData::new(indices, [len]), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverts_a_permutation() {
        let order = [2, 0, 3, 1];
        let inverse = inverse_permutation(4, order.iter().map(|&h| Some(h)));
        assert_eq!(inverse, [1, 3, 0, 2]);
        for (slot, &item) in order.iter().enumerate() {
            assert_eq!(inverse[item], slot);
        }
    }

    #[test]
    fn skips_padding_slots() {
        let slots = [Some(1), None, Some(0), None, Some(2)];
        assert_eq!(inverse_permutation(3, slots), [2, 0, 4]);
    }

    #[test]
    fn the_last_slot_of_an_item_wins() {
        // Longformer: rows 0..4 of the local result, then global rows 0 and 2 appended.
        let slots = (0..4).chain([0, 2]).map(Some);
        assert_eq!(inverse_permutation(4, slots), [4, 1, 5, 3]);
    }

    #[test]
    fn an_empty_placement_reads_slot_zero() {
        assert_eq!(inverse_permutation(2, []), [0, 0]);
    }
}

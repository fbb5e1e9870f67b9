//! Visibility masks: [`WindowSpec::visible`] over heads × queries × keys. Every host-side mask
//! of the crate (the dense reference's, the blocked schedule's per block, the KV cache's per
//! step, Longformer's global rows) is built here, so none re-derives the rule
//! (docs/semantics.md §2).

use crate::WindowSpec;

impl WindowSpec {
    /// The mask of query heads `heads` × query positions `queries` × key positions `keys`,
    /// keys fastest: entry `(h, i, j)` is [`WindowSpec::visible`] of the `h`-th head, `i`-th
    /// query and `j`-th key, given `kv_len` valid keys. Positions are absolute. A key at or past
    /// `kv_len` is never visible, so a padding key slot can be given as `kv_len`.
    pub fn mask(
        &self,
        heads: impl IntoIterator<Item = usize>,
        queries: impl IntoIterator<Item = usize, IntoIter: Clone>,
        keys: impl IntoIterator<Item = usize, IntoIter: Clone>,
        kv_len: usize,
    ) -> Vec<bool> {
        let (queries, keys) = (queries.into_iter(), keys.into_iter());
        let mut mask = Vec::new();
        for h in heads {
            for i in queries.clone() {
                mask.extend(keys.clone().map(|j| self.visible(h, i, j, kv_len)));
            }
        }
        mask
    }
}

#[cfg(test)]
mod tests {
    use crate::WindowSpec;

    /// Renders one head's mask as rows of `1` (visible) and `.`.
    fn rows(mask: &[bool], keys: usize) -> Vec<String> {
        let cell = |&seen: &bool| if seen { '1' } else { '.' };
        mask.chunks(keys).map(|row| row.iter().map(cell).collect()).collect()
    }

    #[test]
    fn sliding_window_of_three() {
        let spec = WindowSpec::sliding(1, 1, 3).unwrap();
        let mask = spec.mask([0], 0..5, 0..5, 5);
        assert_eq!(rows(&mask, 5), ["1....", "11...", "111..", ".111.", "..111"]);
    }

    #[test]
    fn heads_then_queries_then_keys() {
        let spec = WindowSpec::per_head(&[1, 2], 1).unwrap();
        let mask = spec.mask(0..2, [2, 3], 0..4, 4);
        assert_eq!(rows(&mask, 4), ["..1.", "...1", ".11.", "..11"]);
    }

    #[test]
    fn sinks_and_globals_are_seen_by_every_later_query() {
        let spec = WindowSpec::sliding(1, 1, 1).unwrap().with_sinks(1).with_globals([2]);
        let mask = spec.mask([0], 0..5, 0..5, 5);
        assert_eq!(rows(&mask, 5), ["1....", "11...", "111..", "1.11.", "1.1.1"]);
    }

    #[test]
    fn keys_at_or_past_kv_len_are_padding() {
        let spec = WindowSpec::full(1, 1).unwrap();
        let mask = spec.mask([0], [6], [0, 3, 4, 4], 4);
        assert_eq!(rows(&mask, 4), ["11.."]);
    }

    #[test]
    fn agrees_with_visible_entry_by_entry() {
        let spec = WindowSpec::dilated(&[2, 3], &[2, 1], 1).unwrap();
        let (queries, keys) = ([3, 4, 7], [0, 1, 2, 5, 6, 7]);
        let mask = spec.mask(0..2, queries, keys, 7);
        let mut entries = mask.into_iter();
        for h in 0..2 {
            for i in queries {
                for j in keys {
                    assert_eq!(entries.next(), Some(spec.visible(h, i, j, 7)), "({h}, {i}, {j})");
                }
            }
        }
        assert_eq!(entries.next(), None);
    }
}

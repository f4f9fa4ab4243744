//! Stable sorts and ordered collections, compiled once for the whole crate.
//!
//! std's sorts are compiled again for every element type and every
//! comparison closure, about 4.6 KB of wasm each for the stable one;
//! `collect()` into a `BTreeSet` or `BTreeMap` sorts its items first, one
//! more copy per item type. In the JS package that was 22 copies, 101 KB of
//! its code (wasm-tests/README.md, "Size"). Here one sort of positions does
//! every comparison through a `dyn` closure. The clippy.toml beside this
//! crate refuses std's sorts, stable and unstable, in it. Sets and maps are
//! built by inserting ([`set`], [`map`]) where the JS package builds them
//! (injection, the CloneSet planner); `collect()` elsewhere is not refused,
//! since only a new item type in those paths costs another copy.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Sorts `items` stably by `compare`, as `slice::sort_by` does.
pub fn sort_by<T>(items: &mut [T], compare: impl Fn(&T, &T) -> Ordering) {
    let mut order: Vec<usize> = (0..items.len()).collect();
    sort_positions(&mut order, &|a, b| compare(&items[a], &items[b]));
    permute(items, order);
}

/// Sorts `items` stably by the key `key` gives, as `slice::sort_by_key`.
pub fn sort_by_key<T, K: Ord>(items: &mut [T], key: impl Fn(&T) -> K) {
    sort_by(items, |a, b| key(a).cmp(&key(b)));
}

/// Sorts `items` stably, as `slice::sort`.
pub fn sort<T: Ord>(items: &mut [T]) {
    sort_by(items, T::cmp);
}

/// The set of `items`, built by inserting them one by one.
pub fn set<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut set = BTreeSet::new();
    set.extend(items);
    set
}

/// The map of `entries`, built by inserting them one by one: of two
/// entries with the same key the later one's value stays, as with
/// `collect()`.
pub fn map<K: Ord, V>(entries: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    map.extend(entries);
    map
}

// The one compiled sort: of positions, comparing what sits there.
#[inline(never)]
#[allow(clippy::disallowed_methods)]
fn sort_positions(order: &mut [usize], compare: &dyn Fn(usize, usize) -> Ordering) {
    order.sort_by(|&a, &b| compare(a, b));
}

/// Moves the items so that position `k` holds what was at `order[k]`,
/// following each cycle of the permutation once.
fn permute<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..items.len() {
        let mut current = start;
        loop {
            let source = order[current];
            // Marks the position as placed, so a later start skips it.
            order[current] = current;
            if source == start {
                break;
            }
            items.swap(current, source);
            current = source;
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Equal keys with different tags show whether the order is stable.
        #[test]
        fn sorts_as_std_stable_sort(items in proptest::collection::vec((0u8..6, any::<u16>()), 0..60)) {
            let mut ours = items.clone();
            sort_by_key(&mut ours, |&(key, _)| key);
            let mut std = items.clone();
            std.sort_by_key(|&(key, _)| key);
            prop_assert_eq!(ours, std);
        }

        #[test]
        fn sorts_whole_items_as_std(items in proptest::collection::vec("[a-c]{0,3}", 0..60)) {
            let mut ours = items.clone();
            sort(&mut ours);
            let mut std = items;
            std.sort();
            prop_assert_eq!(ours, std);
        }

        #[test]
        fn builds_sets_and_maps_as_collect(entries in proptest::collection::vec((0u8..10, any::<u8>()), 0..40)) {
            prop_assert_eq!(map(entries.clone()), entries.iter().copied().collect::<BTreeMap<_, _>>());
            prop_assert_eq!(set(entries.clone()), entries.into_iter().collect::<BTreeSet<_>>());
        }
    }

    #[test]
    fn sorts_by_a_comparison_with_ties_in_input_order() {
        let mut words = vec!["pear", "fig", "apple", "kiwi", "plum", "date"];
        sort_by(&mut words, |a, b| a.len().cmp(&b.len()));
        assert_eq!(words, ["fig", "pear", "kiwi", "plum", "date", "apple"]);
    }
}

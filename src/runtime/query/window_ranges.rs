//! Key ranges over a window store.
//!
//! A window store's keys are a group key's length (four bytes, big
//! endian), the group key and a window start, so its order is by length
//! first: the group keys within `[from, to]` (or under a prefix) are not
//! one run of store keys but one run per length. A scan walks them with
//! one iterator (one committed state), taking the keys in bounds and
//! seeking past the rest: at most two seeks per distinct key length the
//! store holds, whatever its size.

use super::keys::ScanBounds;
use crate::operators::keyed::entity_prefix;
use crate::operators::window::window_group;

/// What a window-store scan does with the store key it is at.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    Take,
    /// Go on from this store key (always past the current one).
    Seek(Vec<u8>),
}

/// For the windows of the group keys `bounds` leaves (its `prefix`, `from`
/// and `to` are group keys, both ends inclusive): what to do at `at`.
pub(crate) fn step(bounds: &ScanBounds, at: &[u8]) -> Step {
    let Some(group) = window_group(at) else {
        // Not a window's key: nothing of the store's own; skip it.
        let mut next = at.to_vec();
        next.push(0);
        return Step::Seek(next);
    };
    match group_bounds(bounds, group.len()) {
        Some((first, _)) if group < first.as_slice() => Step::Seek(entity_prefix(&first)),
        Some((_, last)) if group <= last.as_slice() => Step::Take,
        _ => Step::Seek(length_start(group.len() + 1)),
    }
}

/// The first store key of group keys `len` bytes long.
fn length_start(len: usize) -> Vec<u8> {
    match u32::try_from(len) {
        Ok(len) => len.to_be_bytes().to_vec(),
        // Past every key a store holds.
        Err(_) => vec![0xff; 5],
    }
}

/// The first and last group key `len` bytes long within `bounds`, if any.
fn group_bounds(bounds: &ScanBounds, len: usize) -> Option<(Vec<u8>, Vec<u8>)> {
    let prefix = &bounds.prefix;
    if len < prefix.len() {
        return None;
    }
    let mut first = prefix.clone();
    first.resize(len, 0);
    let mut last = prefix.clone();
    last.resize(len, 0xff);
    if let Some(from) = &bounds.from {
        // The least `len`-byte key at or after `from`: `from` padded with
        // zeros, or, when `from` is longer, the key after its first `len`
        // bytes (which sort before `from` itself).
        let least = if from.len() <= len {
            let mut least = from.clone();
            least.resize(len, 0);
            least
        } else {
            increment(&from[..len])?
        };
        first = first.max(least);
    }
    if let Some(to) = &bounds.to {
        // The greatest `len`-byte key at or before `to`: its first `len`
        // bytes, or, when `to` is shorter, the key before it padded with
        // 0xff (keys that begin with `to` sort after it).
        let greatest = if to.len() >= len {
            to[..len].to_vec()
        } else {
            let mut greatest = decrement(to)?;
            greatest.resize(len, 0xff);
            greatest
        };
        last = last.min(greatest);
    }
    (first <= last).then_some((first, last))
}

/// The next key of the same length, if any.
fn increment(key: &[u8]) -> Option<Vec<u8>> {
    let mut next = key.to_vec();
    for byte in next.iter_mut().rev() {
        if *byte == 0xff {
            *byte = 0;
        } else {
            *byte += 1;
            return Some(next);
        }
    }
    None
}

/// The previous key of the same length, if any.
fn decrement(key: &[u8]) -> Option<Vec<u8>> {
    let mut previous = key.to_vec();
    for byte in previous.iter_mut().rev() {
        if *byte == 0 {
            *byte = 0xff;
        } else {
            *byte -= 1;
            return Some(previous);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// A store key of `group`'s window starting at `start`.
    fn store_key(group: &[u8], start: u8) -> Vec<u8> {
        let mut key = entity_prefix(group);
        key.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, start]);
        key
    }

    /// What a walk of `keys` by [`step`] takes, from the first key.
    fn walk(keys: &BTreeSet<Vec<u8>>, bounds: &ScanBounds) -> Vec<Vec<u8>> {
        let mut taken = Vec::new();
        let mut at = keys.iter().next().cloned();
        let mut moves = 0;
        while let Some(key) = at {
            moves += 1;
            assert!(moves < 10_000, "the walk does not end");
            at = match step(bounds, &key) {
                Step::Take => {
                    taken.push(key.clone());
                    keys.range(key.clone()..).nth(1).cloned()
                }
                Step::Seek(next) => {
                    assert!(next > key, "a seek back from {key:?} to {next:?}");
                    keys.range(next..).next().cloned()
                }
            };
        }
        taken
    }

    #[test]
    fn a_key_range_takes_every_length_s_keys_within_it() {
        let groups: [&[u8]; 8] = [b"a", b"b", b"c", b"ab", b"bz", b"ca", b"b\xff", b"abc"];
        let keys: BTreeSet<Vec<u8>> = groups
            .iter()
            .flat_map(|g| [store_key(g, 1), store_key(g, 2)])
            .collect();
        let groups_of = |taken: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
            let mut groups: Vec<Vec<u8>> = taken
                .iter()
                .map(|k| window_group(k).unwrap().to_vec())
                .collect();
            groups.dedup();
            groups
        };
        let b = |s: &str| s.as_bytes().to_vec();
        assert_eq!(
            groups_of(walk(&keys, &ScanBounds::of(b"", Some(b"ab"), Some(b"b")))),
            vec![b("b"), b("ab"), b("abc")]
        );
        assert_eq!(
            groups_of(walk(&keys, &ScanBounds::of(b"b", None, None))),
            vec![b("b"), b("bz"), b"b\xff".to_vec()]
        );
        assert_eq!(
            groups_of(walk(&keys, &ScanBounds::of(b"", Some(b"bz"), None))),
            vec![b("c"), b("bz"), b"b\xff".to_vec(), b("ca")]
        );
        assert!(walk(&keys, &ScanBounds::of(b"", Some(b"d"), Some(b"a"))).is_empty());
    }

    proptest! {
        /// A walk takes exactly the windows whose group key is within the
        /// bounds, each once, in store order.
        #[test]
        fn a_walk_takes_what_a_filter_of_the_whole_store_takes(
            groups in prop::collection::btree_set(prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', b'b', 0xfe, 0xff]), 0..4), 0..20),
            prefix in prop::collection::vec(prop::sample::select(vec![0u8, b'a', 0xff]), 0..2),
            from in prop::option::of(prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..4)),
            to in prop::option::of(prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', b'b', 0xff]), 0..4)),
        ) {
            let keys: BTreeSet<Vec<u8>> = groups
                .iter()
                .flat_map(|g| [store_key(g, 1), store_key(g, 7)])
                .collect();
            let bounds = ScanBounds::of(&prefix, from.as_deref(), to.as_deref());
            let filtered: Vec<Vec<u8>> = keys
                .iter()
                .filter(|k| {
                    let g = window_group(k).unwrap();
                    g.starts_with(&prefix)
                        && from.as_ref().is_none_or(|f| g >= f.as_slice())
                        && to.as_ref().is_none_or(|t| g <= t.as_slice())
                })
                .cloned()
                .collect();
            prop_assert_eq!(walk(&keys, &bounds), filtered);
        }
    }
}

use super::memory::MemoryBackend;
use super::overlay::{DECODED_PER_ENCODED_BYTE, SLOT_BYTES, WALK_RATIO};
use super::*;

impl JsonState for u64 {}

fn state() -> (StateSet, StoreHandle<u64>) {
    let mut state = StateSet::new(Box::new(MemoryBackend::new(1)), vec!["counts".into()]);
    let handle = state.declare::<u64>("counts").unwrap();
    (state, handle)
}

fn keys(entries: &[(Box<[u8]>, u64)]) -> Vec<(String, u64)> {
    entries
        .iter()
        .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), *v))
        .collect()
}

#[test]
fn writes_are_collapsed_per_key_and_reach_the_backend_only_when_committed() {
    let (mut state, h) = state();
    let mut view = state.view(h);
    view.put(b"a", 1);
    view.put(b"a", 2);
    view.put(b"b", 5);
    view.delete(b"b");
    let changelog = state.changelog().unwrap();
    assert_eq!(changelog.len(), 2, "one entry per key");
    assert_eq!(changelog[0].value.as_deref(), Some(&b"2"[..]));
    assert_eq!(changelog[1].value, None);
    assert_eq!(
        state.backend.get(0, b"a").unwrap(),
        None,
        "nothing applied before commit"
    );
    state
        .committed(changelog, &[("offsets".into(), b"7".to_vec())])
        .unwrap();
    assert_eq!(
        state.backend.get(0, b"a").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    assert_eq!(state.meta("offsets").unwrap(), Some(b"7".to_vec()));
    assert!(!state.has_pending());
}

/// The runtime may commit an entry other than the one the overlay
/// wrote (a state value too large for its changelog goes as a
/// deletion); forgetting the key makes reads agree with the backend.
#[test]
fn a_forgotten_key_is_read_from_the_backend_again() {
    let (mut state, h) = state();
    state.view(h).put(b"a", 1);
    state.view(h).put(b"b", 2);
    let mut entries = state.changelog().unwrap();
    entries[0].value = None;
    state.committed(entries, &[]).unwrap();
    assert_eq!(state.view(h).get(b"a").unwrap(), Some(&1), "cached");
    state.forget(0, b"a");
    assert_eq!(state.view(h).get(b"a").unwrap(), None);
    assert_eq!(state.view(h).get(b"b").unwrap(), Some(&2));
    assert!(!state.has_pending());
}

/// `update` writes as `get_mut` does, whether the key is cached,
/// only in the backend, deleted or absent.
#[test]
fn update_writes_cached_and_stored_values_and_sees_deleted_ones_absent() {
    let (mut state, h) = state();
    let mut view = state.view(h);
    view.put(b"cached", 1);
    view.put(b"stored", 2);
    view.put(b"deleted", 3);
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    state.forget(0, b"stored");
    let mut view = state.view(h);
    view.delete(b"deleted");
    let add = |n: Option<&mut u64>| {
        n.map(|n| {
            *n += 10;
            *n
        })
    };
    assert_eq!(view.update(b"cached", add).unwrap(), Some(11));
    assert_eq!(view.update(b"stored", add).unwrap(), Some(12));
    assert_eq!(view.update(b"deleted", add).unwrap(), None);
    assert_eq!(view.update(b"absent", add).unwrap(), None);
    let entries = state.changelog().unwrap();
    let written: Vec<(&[u8], Option<&[u8]>)> = entries
        .iter()
        .map(|e| (&e.key[..], e.value.as_deref()))
        .collect();
    assert_eq!(
        written,
        [
            (&b"cached"[..], Some(&b"11"[..])),
            (b"deleted", None),
            (b"stored", Some(b"12")),
        ]
    );
}

#[test]
fn abort_drops_pending_writes_and_keeps_committed_state() {
    let (mut state, h) = state();
    state.view(h).put(b"a", 1);
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    let mut view = state.view(h);
    *view.get_mut(b"a").unwrap().unwrap() = 10;
    view.put(b"b", 2);
    state.abort();
    let mut view = state.view(h);
    assert_eq!(view.get(b"a").unwrap(), Some(&1));
    assert_eq!(view.get(b"b").unwrap(), None);
    assert!(!state.has_pending());
}

#[test]
fn ranges_merge_pending_writes_over_committed_entries() {
    let (mut state, h) = state();
    let mut view = state.view(h);
    for (k, v) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        view.put(k.as_bytes(), v);
    }
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    // Drop the cache so reads go to the backend.
    state.overlays[0].as_mut().unwrap().committed(0);
    let mut view = state.view(h);
    view.delete(b"b");
    view.put(b"c", 30);
    view.put(b"bb", 22);
    let all = view.range(Bound::Unbounded, Bound::Unbounded, 10).unwrap();
    assert_eq!(
        keys(&all),
        vec![
            ("a".into(), 1),
            ("bb".into(), 22),
            ("c".into(), 30),
            ("d".into(), 4)
        ]
    );
    let limited = view
        .range(Bound::Included(b"b"), Bound::Unbounded, 2)
        .unwrap();
    assert_eq!(keys(&limited), vec![("bb".into(), 22), ("c".into(), 30)]);
    let prefixed = view.prefix(b"b", 10).unwrap();
    assert_eq!(keys(&prefixed), vec![("bb".into(), 22)]);
}

#[test]
fn last_finds_the_greatest_live_key_over_pending_and_committed_entries() {
    let (mut state, h) = state();
    let mut view = state.view(h);
    for (k, v) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        view.put(k.as_bytes(), v);
    }
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    state.overlays[0].as_mut().unwrap().committed(0);
    let mut view = state.view(h);
    let last = |view: &mut StoreView<'_, u64>, from: Bound<&[u8]>, to: Bound<&[u8]>| {
        view.last(from, to)
            .unwrap()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
    };
    assert_eq!(
        last(&mut view, Bound::Unbounded, Bound::Unbounded),
        Some(("d".into(), 4)),
        "committed only"
    );
    view.delete(b"d");
    view.put(b"c", 30);
    assert_eq!(
        last(&mut view, Bound::Unbounded, Bound::Unbounded),
        Some(("c".into(), 30)),
        "a pending delete hides the committed key, a pending write shadows one"
    );
    view.put(b"bb", 22);
    assert_eq!(
        last(&mut view, Bound::Included(b"a"), Bound::Excluded(b"c")),
        Some(("bb".into(), 22))
    );
    view.delete(b"bb");
    view.delete(b"b");
    assert_eq!(
        last(&mut view, Bound::Unbounded, Bound::Excluded(b"c")),
        Some(("a".into(), 1))
    );
    assert_eq!(
        last(&mut view, Bound::Excluded(b"a"), Bound::Excluded(b"c")),
        None
    );
}

#[test]
fn an_uncached_store_keeps_only_pending_writes_in_memory() {
    let mut state = StateSet::new(Box::new(MemoryBackend::new(1)), vec!["log".into()]);
    let h = state.declare_uncached::<u64>("log").unwrap();
    state.view(h).put(b"a", 1);
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    assert!(state.overlays[0].as_mut().unwrap().dirty() == 0);
    let overlay = state.overlays[0]
        .as_mut()
        .unwrap()
        .as_any_mut()
        .downcast_mut::<Overlay<u64>>()
        .unwrap();
    assert!(overlay.slots.is_empty(), "nothing cached after the commit");
    assert_eq!(
        state.view(h).get(b"a").unwrap(),
        Some(&1),
        "read from the backend"
    );
}

/// Commits `n` keys `<prefix>0`, `<prefix>1`, ... of 4-byte values.
fn commit_keys(state: &mut StateSet, h: StoreHandle<u64>, prefix: &str, n: u64) {
    for i in 0..n {
        state
            .view(h)
            .put(format!("{prefix}{i:04}").as_bytes(), 1000 + i);
    }
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
}

#[test]
fn the_record_cache_budget_is_shared_by_every_cached_store_of_the_instance() {
    // A key of 5 bytes and a value of 4: an entry is taken to cost
    // 96 + 2 * 5 + 4 * 4 = 122 bytes.
    let entry = SLOT_BYTES + 2.0 * 5.0 + DECODED_PER_ENCODED_BYTE * 4.0;
    let budget = CacheBudget::new((100.0 * entry) as usize);
    let (mut a, ha) = state();
    a.share_cache(Arc::clone(&budget));
    commit_keys(&mut a, ha, "a", 300);
    assert_eq!(
        overlay(&mut a).slots.len(),
        100,
        "alone, one store has it all"
    );
    let full = (100.0 * entry) as usize;
    assert_eq!(budget.used(), full, "the estimate of what is cached");

    // A second task's store, and an uncached one that does not count.
    let mut b = StateSet::new(
        Box::new(MemoryBackend::new(2)),
        vec!["counts".into(), "log".into()],
    );
    let hb = b.declare::<u64>("counts").unwrap();
    b.declare_uncached::<u64>("log").unwrap();
    b.share_cache(Arc::clone(&budget));
    assert_eq!(budget.stores.load(Ordering::Relaxed), 2);
    commit_keys(&mut b, hb, "b", 300);
    commit_keys(&mut a, ha, "c", 1);
    assert_eq!(overlay(&mut a).slots.len(), 50, "half each");
    assert_eq!(overlay(&mut b).slots.len(), 50);
    assert_eq!(budget.used(), 2 * (50.0 * entry) as usize);
    // What was evicted is still there, from the backend.
    assert_eq!(a.view(ha).get(b"a0000").unwrap(), Some(&1000));

    drop(b);
    assert_eq!(budget.stores.load(Ordering::Relaxed), 1);
    assert_eq!(budget.used(), (50.0 * entry) as usize, "b's cache is gone");
    commit_keys(&mut a, ha, "d", 100);
    assert_eq!(overlay(&mut a).slots.len(), 100, "the share grows back");
    assert_eq!(budget.used(), full);
    drop(a);
    assert_eq!(budget.used(), 0);

    // The per-store count still bounds each store, budget or not.
    let mut c = StateSet::new(Box::new(MemoryBackend::new(1)), vec!["counts".into()])
        .with_cache_entries(10);
    let hc = c.declare::<u64>("counts").unwrap();
    c.share_cache(CacheBudget::new(usize::MAX));
    commit_keys(&mut c, hc, "e", 30);
    assert_eq!(overlay(&mut c).slots.len(), 10);
}

#[test]
fn a_record_cache_of_zero_caches_nothing_and_loses_nothing() {
    let (mut state, h) = state();
    state.share_cache(CacheBudget::new(0));
    commit_keys(&mut state, h, "k", 10);
    assert!(overlay(&mut state).slots.is_empty());
    assert_eq!(state.view(h).get(b"k0009").unwrap(), Some(&1009));
}

fn overlay(state: &mut StateSet) -> &mut Overlay<u64> {
    state.overlays[0]
        .as_mut()
        .unwrap()
        .as_any_mut()
        .downcast_mut::<Overlay<u64>>()
        .unwrap()
}

/// `cached` committed keys `k0`, `k1`, ..., then a change (`k3`), a
/// deletion (`k1`) and a forgotten write (`new`): checks which way the
/// commit will walk, what it keeps of the keys written, and the
/// changelog (one entry per key written, in key order), and returns it
/// uncommitted.
fn a_few_writes_over(
    cached: u64,
    walks_slots: bool,
) -> (StateSet, StoreHandle<u64>, Vec<ChangelogEntry>) {
    let (mut state, h) = state();
    for i in 0..cached {
        state.view(h).put(format!("k{i}").as_bytes(), i);
    }
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    assert!(overlay(&mut state).written.len() == 0);
    assert_eq!(overlay(&mut state).slots.len() as u64, cached, "cached");

    let mut view = state.view(h);
    *view.get_mut(b"k3").unwrap().unwrap() = 30;
    view.delete(b"k1");
    view.put(b"new", 1);
    state.forget(0, b"new");
    assert_eq!(overlay(&mut state).walk_slots(), walks_slots);
    // Walking, the keys written are not copied.
    let tracked = if walks_slots { 0 } else { 3 };
    assert_eq!(overlay(&mut state).written.len(), tracked);
    let entries = state.changelog().unwrap();
    let written: Vec<(&[u8], Option<&[u8]>)> = entries
        .iter()
        .map(|e| (&*e.key, e.value.as_deref()))
        .collect();
    assert_eq!(
        written,
        vec![(&b"k1"[..], None), (&b"k3"[..], Some(&b"30"[..]))]
    );
    (state, h, entries)
}

/// Writes a few keys over `cached` committed ones (a change, a deletion,
/// a forgotten write) and checks the changelog and the cache after the
/// commit, whichever way the commit walks.
fn commit_a_few_writes_over(cached: u64, walks_slots: bool) {
    let (mut state, h, entries) = a_few_writes_over(cached, walks_slots);
    state.committed(entries, &[]).unwrap();
    {
        let overlay = overlay(&mut state);
        assert!(overlay.written.len() == 0);
        assert_eq!(overlay.dirty, 0);
        assert_eq!(overlay.slots.len() as u64, cached - 1, "k1 is gone");
        assert!(
            overlay
                .slots
                .values()
                .all(|s| matches!(s, CacheEntry::Clean(_)))
        );
        assert!(matches!(
            overlay.slots.get(&b"k3"[..]),
            Some(CacheEntry::Clean(30))
        ));
    }

    // An abort drops what was written since, whichever way it walks.
    let mut view = state.view(h);
    *view.get_mut(b"k3").unwrap().unwrap() = 31;
    view.delete(b"k2");
    view.put(b"other", 2);
    assert_eq!(overlay(&mut state).walk_slots(), walks_slots);
    state.abort();
    assert_eq!(state.view(h).get(b"k3").unwrap(), Some(&30));
    assert_eq!(state.view(h).get(b"k2").unwrap(), Some(&2));
    assert_eq!(state.view(h).get(b"other").unwrap(), None);
    let overlay = overlay(&mut state);
    assert_eq!((overlay.dirty, overlay.written.len()), (0, 0));
    assert!(
        overlay
            .slots
            .values()
            .all(|s| matches!(s, CacheEntry::Clean(_)))
    );
}

#[test]
fn written_keys_come_back_as_they_went_in() {
    let mut written = Written::default();
    let keys: [&[u8]; 4] = [b"first", b"", b"k", b"\xff\x00long key"];
    for key in keys {
        written.mark(key, 1000);
    }
    assert_eq!(written.keys().collect::<Vec<_>>(), keys);
    // Four keys written of 64 cached (1/16): the commit will walk.
    written.mark(b"k5", 4 * WALK_RATIO);
    assert!(written.walk(0) && written.len() == 0);
    written.clear();
    written.mark(b"again", 1000);
    assert_eq!(written.keys().collect::<Vec<_>>(), [b"again"]);
}

/// A commit over a large cache looks up the keys written since the last
/// one instead of walking the cache; over a small one it walks it. Both
/// give the same changelog and leave the same cache.
#[test]
fn a_commit_looks_up_few_writes_and_walks_many() {
    commit_a_few_writes_over(10, true);
    commit_a_few_writes_over(3 * WALK_RATIO as u64 + 1, false);
}

/// A commit walks the keys written since the last one, not the cache,
/// and a cache over its bound loses its excess, not everything, a
/// different range each round.
#[test]
fn a_commit_costs_what_was_written_and_a_full_cache_loses_only_its_excess() {
    // One key changed among ten cached, one deleted, one written and
    // forgotten: two changelog entries, in key order.
    let (mut state, h, _) = a_few_writes_over(10, true);

    // Nine cached (k1 was deleted), the bound is 6: the first three
    // go.
    overlay(&mut state).committed(6);
    let cached = |state: &mut StateSet| -> Vec<String> {
        overlay(state)
            .slots
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    };
    assert_eq!(cached(&mut state), vec!["k4", "k5", "k6", "k7", "k8", "k9"]);
    // The next round starts after the last one dropped (k3).
    state.view(h).get(b"k0").unwrap();
    state.view(h).get(b"k2").unwrap();
    overlay(&mut state).committed(6);
    assert_eq!(cached(&mut state), vec!["k0", "k2", "k6", "k7", "k8", "k9"]);
}

#[test]
fn take_returns_the_value_and_deletes_it() {
    let (mut state, h) = state();
    state.view(h).put(b"k", 4);
    let entries = state.changelog().unwrap();
    state.committed(entries, &[]).unwrap();
    let mut view = state.view(h);
    assert_eq!(view.take(b"k").unwrap(), Some(4));
    assert_eq!(view.get(b"k").unwrap(), None);
    assert_eq!(state.changelog().unwrap()[0].value, None);
}

#[test]
fn prefix_end_handles_trailing_max_bytes() {
    assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
    assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
    assert_eq!(prefix_end(&[0xff, 0xff]), None);
}

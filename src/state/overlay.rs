//! The stores' overlays: what was written since the last commit (dirty
//! and deleted entries, typed), and the read cache of committed entries
//! within the instance's byte budget.

use std::any::Any;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{ChangelogEntry, StateError, StateValue};

pub(super) enum CacheEntry<V> {
    /// Same as the backend; kept as a read cache.
    Clean(V),
    /// Written since the last commit.
    Dirty(V),
    /// Deleted since the last commit.
    Deleted,
}

/// The live value of a slot, which becomes dirty if it was clean.
pub(super) fn dirty_value<'s, V>(
    slot: &'s mut CacheEntry<V>,
    dirty: &mut usize,
    written: &mut Written,
    key: &[u8],
    cached: usize,
) -> Option<&'s mut V> {
    if let CacheEntry::Clean(_) = slot
        && let CacheEntry::Clean(value) = std::mem::replace(slot, CacheEntry::Deleted)
    {
        *slot = CacheEntry::Dirty(value);
        *dirty += 1;
        written.mark(key, cached);
    }
    match slot {
        CacheEntry::Dirty(v) => Some(v),
        _ => None,
    }
}

/// A commit walks every slot when at least `slots / WALK_RATIO` keys were
/// written since the last one, and looks up the written keys otherwise (see
/// [`Overlay::walk_slots`]); 16 is log2 of a cache of 65,536 entries.
pub(super) const WALK_RATIO: usize = 16;

/// The instance-wide bound of the stores' read caches, in bytes
/// (`state.record_cache`): every cached store of every open task gets an
/// equal share, as Kafka Streams splits `statestore.cache.max.bytes`
/// between its threads, so the bound holds whatever the number of
/// partitions, stores or keys.
#[derive(Debug)]
pub struct CacheBudget {
    pub(super) bytes: usize,
    /// Cached stores of the open tasks.
    pub(super) stores: AtomicUsize,
    /// The estimated bytes their caches held after their last commits.
    pub(super) used: AtomicUsize,
}

impl CacheBudget {
    pub fn new(bytes: usize) -> Arc<CacheBudget> {
        Arc::new(CacheBudget {
            bytes,
            stores: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
        })
    }

    /// The estimated bytes the caches of every open task held after their
    /// last commits (`streamfold_state_record_cache_bytes`).
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// One store's share.
    pub(super) fn share(&self) -> usize {
        self.bytes / self.stores.load(Ordering::Relaxed).max(1)
    }
}

/// What one cached entry is taken to cost in memory: a decoded value
/// takes more than its encoding (a JSON object's map, its strings' own
/// allocations), and a slot of the overlay's map more than its key. An
/// estimate, not an allocator's count, chosen on the high side: with 2.5M
/// open social-metrics folds over 4 tasks, a `record_cache` of 64 MiB
/// raised the instance's peak RSS by 39 MiB over a `record_cache` of 0
/// (BENCHMARKS.md, "Memory with 10M keys").
pub(super) const DECODED_PER_ENCODED_BYTE: f64 = 4.0;
pub(super) const SLOT_BYTES: f64 = 96.0;

/// The mean size of a store's entries as encoded (key and value), over
/// the entries committed or read lately.
#[derive(Default)]
pub(super) struct EntrySize {
    pub(super) key: f64,
    pub(super) value: f64,
    pub(super) seen: u32,
}

impl EntrySize {
    /// Entries after which the mean becomes a moving one.
    const WINDOW: u32 = 1024;

    pub(super) fn observe(&mut self, key: usize, value: usize) {
        self.seen = (self.seen + 1).min(Self::WINDOW);
        let n = f64::from(self.seen);
        self.key += (key as f64 - self.key) / n;
        self.value += (value as f64 - self.value) / n;
    }

    /// The estimated memory of one cached entry, none before any was seen.
    pub(super) fn in_memory(&self) -> Option<f64> {
        (self.seen > 0)
            .then_some(SLOT_BYTES + 2.0 * self.key + DECODED_PER_ENCODED_BYTE * self.value)
    }
}

pub(super) struct Overlay<V> {
    pub(super) name: String,
    pub(super) slots: BTreeMap<Box<[u8]>, CacheEntry<V>>,
    /// What was written since the last commit, so a commit costs what was
    /// written, not what is cached.
    pub(super) written: Written,
    pub(super) dirty: usize,
    /// Where the next eviction of clean entries starts: evictions sweep the
    /// key space round by round instead of dropping the cache at once.
    pub(super) evict_from: Box<[u8]>,
    /// Whether committed entries stay as a read cache (see
    /// [`StateSet::declare_uncached`]).
    pub(super) cached: bool,
    /// The size of its entries, for the byte budget.
    pub(super) size: EntrySize,
}

pub(super) trait ErasedOverlay: Send {
    fn changelog(&self, store: usize, out: &mut Vec<ChangelogEntry>) -> Result<(), StateError>;
    /// The entries it may keep cached within `bytes`, if it knows their
    /// size.
    fn entries_within(&self, bytes: usize) -> Option<usize>;
    /// The estimated memory of its cached entries.
    fn cached_bytes(&self) -> usize;
    fn observe(&mut self, key: usize, value: usize);
    fn cached(&self) -> bool;
    fn committed(&mut self, cache_entries: usize);
    fn forget(&mut self, key: &[u8]);
    fn abort(&mut self);
    fn dirty(&self) -> usize;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The keys whose slot became dirty or deleted since the last commit (a key
/// appears again after a `forget`), until so many were written that the
/// commit walks every slot anyway.
#[derive(Default)]
pub(super) struct Written {
    /// The keys end to end in one buffer, so remembering a key allocates
    /// nothing once the buffer has grown (it keeps its capacity across
    /// commits); `ends[i]` is where key `i` ends.
    pub(super) bytes: Vec<u8>,
    pub(super) ends: Vec<usize>,
    /// Keys are no longer kept: the commit walks every slot.
    pub(super) all: bool,
}

impl Written {
    /// Whether a commit should walk every slot in key order rather than
    /// look up each written key: a lookup costs a search of the map (about
    /// log2(slots) key comparisons), a slot in the walk one step, so the
    /// walk wins unless the writes are a small share of the `cached`
    /// slots. Either way sees the same slots: every dirty or deleted
    /// slot's key is in `keys` unless `all` is set.
    pub(super) fn walk(&self, cached: usize) -> bool {
        self.all || self.len().saturating_mul(WALK_RATIO) >= cached
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.bytes[start..end])
    }

    /// Remembers a key whose slot became dirty or deleted, unless the
    /// commit will walk every slot anyway.
    pub(super) fn mark(&mut self, key: &[u8], cached: usize) {
        if self.all {
            return;
        }
        if self.walk(cached) {
            self.bytes.clear();
            self.ends.clear();
            self.all = true;
            return;
        }
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.all = false;
    }
}

impl<V> Overlay<V> {
    pub(super) fn walk_slots(&self) -> bool {
        self.written.walk(self.slots.len())
    }

    /// Commit or abort done: nothing is pending.
    pub(super) fn clear_written(&mut self) {
        self.written.clear();
        self.dirty = 0;
    }

    /// Drops clean entries beyond `cache_entries`, the next ones in key
    /// order after the last round's, wrapping around: a full cache loses
    /// its excess, not everything, and no key range is always the one
    /// dropped. Called after a commit, when every entry is clean.
    pub(super) fn evict(&mut self, cache_entries: usize) {
        let excess = self.slots.len().saturating_sub(cache_entries);
        if excess == 0 {
            return;
        }
        let from = Bound::Excluded(&*self.evict_from);
        let mut victims: Vec<Box<[u8]>> = self
            .slots
            .range::<[u8], _>((from, Bound::Unbounded))
            .chain(self.slots.iter())
            .filter(|(_, slot)| matches!(slot, CacheEntry::Clean(_)))
            .map(|(key, _)| key.clone())
            .take(excess)
            .collect();
        for key in &victims {
            self.slots.remove(key);
        }
        if let Some(last) = victims.pop() {
            self.evict_from = last;
        }
    }
}

impl<V: StateValue> ErasedOverlay for Overlay<V> {
    fn changelog(&self, store: usize, out: &mut Vec<ChangelogEntry>) -> Result<(), StateError> {
        if self.dirty == 0 {
            return Ok(());
        }
        let pending: Box<dyn Iterator<Item = (&[u8], &CacheEntry<V>)>> = if self.walk_slots() {
            Box::new(self.slots.iter().map(|(key, slot)| (&**key, slot)))
        } else {
            let mut keys: Vec<&[u8]> = self.written.keys().collect();
            keys.sort_unstable();
            keys.dedup();
            // A key not found was written and then forgotten.
            Box::new(
                keys.into_iter()
                    .filter_map(|key| self.slots.get(key).map(|slot| (key, slot))),
            )
        };
        for (key, slot) in pending {
            let value = match slot {
                // Cached, or written, forgotten and read again: nothing
                // pending.
                CacheEntry::Clean(_) => continue,
                CacheEntry::Dirty(value) => Some(
                    value
                        .encode()
                        .map_err(|message| StateError::Codec {
                            store: self.name.clone(),
                            message,
                        })?
                        .into_boxed_slice(),
                ),
                CacheEntry::Deleted => None,
            };
            out.push(ChangelogEntry {
                store,
                key: key.into(),
                value,
            });
        }
        Ok(())
    }

    fn entries_within(&self, bytes: usize) -> Option<usize> {
        self.size
            .in_memory()
            .map(|entry| (bytes as f64 / entry) as usize)
    }

    fn cached_bytes(&self) -> usize {
        match (self.cached, self.size.in_memory()) {
            (true, Some(entry)) => (self.slots.len() as f64 * entry) as usize,
            _ => 0,
        }
    }

    fn observe(&mut self, key: usize, value: usize) {
        self.size.observe(key, value);
    }

    fn cached(&self) -> bool {
        self.cached
    }

    fn committed(&mut self, cache_entries: usize) {
        if !self.cached {
            // Everything here was just written to the backend.
            self.slots.clear();
            self.clear_written();
            return;
        }
        if self.walk_slots() {
            self.slots.retain(|_, slot| {
                if let CacheEntry::Dirty(_) = slot
                    && let CacheEntry::Dirty(value) = std::mem::replace(slot, CacheEntry::Deleted)
                {
                    *slot = CacheEntry::Clean(value);
                }
                !matches!(slot, CacheEntry::Deleted)
            });
        } else {
            for key in self.written.keys() {
                match self.slots.get_mut(key) {
                    Some(CacheEntry::Deleted) => {
                        self.slots.remove(key);
                    }
                    Some(slot @ CacheEntry::Dirty(_)) => {
                        if let CacheEntry::Dirty(value) =
                            std::mem::replace(slot, CacheEntry::Deleted)
                        {
                            *slot = CacheEntry::Clean(value);
                        }
                    }
                    None | Some(CacheEntry::Clean(_)) => {}
                }
            }
        }
        self.clear_written();
        self.evict(cache_entries);
    }

    fn forget(&mut self, key: &[u8]) {
        if let Some(slot) = self.slots.remove(key)
            && !matches!(slot, CacheEntry::Clean(_))
        {
            self.dirty -= 1;
        }
    }

    fn abort(&mut self) {
        if self.walk_slots() {
            self.slots
                .retain(|_, slot| matches!(slot, CacheEntry::Clean(_)));
        } else {
            for key in self.written.keys() {
                if let Some(CacheEntry::Dirty(_) | CacheEntry::Deleted) = self.slots.get(key) {
                    self.slots.remove(key);
                }
            }
        }
        self.clear_written();
    }

    fn dirty(&self) -> usize {
        self.dirty
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

//! Task state: typed key-value stores over a byte-oriented backend.
//!
//! Operators declare their stores up front and reach them only through
//! [`StoreView`]s handed out by the task context. Every store of a task
//! lives in one [`StateSet`]:
//!
//! - reads go to a per-store overlay first, then to the backend (RocksDB in
//!   production, [`memory::MemoryBackend`] offline);
//! - writes stay in the overlay, typed, until the runtime commits. At commit
//!   the overlay yields one changelog entry per dirty key (mutations are
//!   collapsed per key, last write wins, as in Kafka Streams' record cache),
//!   and only after the Kafka transaction commits are they applied to the
//!   backend in one atomic batch together with the changelog offsets. On
//!   abort the dirty entries are dropped, so local state never holds
//!   uncommitted data;
//! - committed entries stay in the overlay as a read cache, bounded by
//!   [`StateSet::with_cache_entries`] per store (the topology's
//!   `state.cache_entries`) and by the instance's [`CacheBudget`] in bytes
//!   (`state.record_cache`), which every cached store of every open task
//!   shares.
//!
//! Keys are ordered bytes, so range and prefix scans work the same on every
//! backend.

pub mod global;
pub mod memory;
mod overlay;
pub mod rocks;
pub mod timers;

pub use overlay::CacheBudget;
use overlay::{CacheEntry, EntrySize, ErasedOverlay, Overlay, Written, dirty_value};

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Errors of the state layer. All of them are internal: state that cannot
/// be read or written stops the task.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The storage engine failed (I/O, corruption, a closed database).
    #[error("state backend: {0}")]
    Backend(String),
    /// A stored value could not be decoded or encoded.
    #[error("store `{store}`: {message}")]
    Codec { store: String, message: String },
    /// A store name that the task was not opened with.
    #[error("store `{0}` was not declared for this task")]
    UnknownStore(String),
}

/// A store of a task, with the changelog topic that makes it durable. The
/// one naming rule for stores: the topology compiler, the task and the
/// operators' test harness all name stores through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreDef {
    /// `<node>-<store>`, unique in a topology.
    pub name: String,
    /// `<app>-<node>-<store>-changelog`.
    pub changelog_topic: String,
}

impl StoreDef {
    /// The store of a node's timers.
    pub(crate) const TIMERS: &'static str = "timers";
    /// The store of the highest upstream offset seen per source partition,
    /// of a node that reads through a repartition topic.
    pub(crate) const REPARTITION_SEEN: &'static str = "repartition-seen";

    /// The store `store` (a short name such as `open`) of node `node` of
    /// application `app`.
    pub(crate) fn new(app: &str, node: &str, store: &str) -> StoreDef {
        let name = StoreDef::store_name(node, store);
        StoreDef {
            changelog_topic: format!("{app}-{name}-changelog"),
            name,
        }
    }

    /// The full name of store `store` of node `node`: `<node>-<store>`.
    pub(crate) fn store_name(node: &str, store: &str) -> String {
        format!("{node}-{store}")
    }
}

/// One key-value pair as stored: ordered bytes.
pub(crate) type RawEntry = (Box<[u8]>, Box<[u8]>);

/// One live entry of a typed store.
pub(crate) type Entry<V> = (Box<[u8]>, V);

/// Live entries of a typed store, in key order.
pub(crate) type Entries<V> = Vec<Entry<V>>;

/// Ordered iteration over one store's committed entries.
pub(crate) type RawIter<'a> = Box<dyn Iterator<Item = Result<RawEntry, StateError>> + 'a>;

/// A write to apply atomically: store index, key, value (`None` deletes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawWrite {
    pub store: usize,
    pub key: Box<[u8]>,
    pub value: Option<Box<[u8]>>,
}

/// The storage engine under a task's stores. Store `i` is the `i`-th name
/// the backend was opened with; metadata (changelog offsets) lives apart
/// from every store and is written in the same atomic batch.
pub trait StateBackend: Send {
    fn get(&self, store: usize, key: &[u8]) -> Result<Option<Box<[u8]>>, StateError>;
    /// Entries with `from <= key < to` (bounds as given), in key order.
    fn range<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a>;
    /// The same entries in descending key order.
    fn range_rev<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a>;
    /// Applies writes and metadata atomically.
    fn apply(&mut self, writes: &[RawWrite], meta: &[(String, Vec<u8>)]) -> Result<(), StateError>;
    /// Applies restored changelog records and metadata atomically, as
    /// [`StateBackend::apply`] does, but a backend may make them durable
    /// later (in bulk), provided that after a crash the state it holds is
    /// still that of some prefix of its calls, metadata included, and that
    /// everything restored is durable before the next `apply`.
    fn apply_restored(
        &mut self,
        writes: &[RawWrite],
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StateError> {
        self.apply(writes, meta)
    }
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StateError>;
    /// What the backend reports about its stores' storage, if it keeps
    /// any (an in-memory backend does not).
    fn statistics(&self) -> Option<BackendStatistics> {
        None
    }
}

/// Storage figures of one task's backend ([`StateBackend::statistics`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendStatistics {
    /// By store, in declaration order.
    pub stores: Vec<StoreStatistics>,
    /// Block cache lookups that found their block, and that did not
    /// (counted since the backend opened, for all its stores).
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
}

/// Storage figures of one store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStatistics {
    /// Bytes of its memtables (active and immutable).
    pub memtable_bytes: u64,
    /// Bytes of its live SST files.
    pub sst_bytes: u64,
    /// Bytes compaction is estimated to have to rewrite.
    pub pending_compaction_bytes: u64,
    /// RocksDB's estimate of its keys (deletes and overwrites make it
    /// approximate).
    pub estimated_keys: u64,
}

/// A type kept in a store.
pub(crate) trait StateValue: Sized + Send + 'static {
    fn encode(&self) -> Result<Vec<u8>, String>;
    fn decode(bytes: &[u8]) -> Result<Self, String>;
}

/// Marks a type stored as JSON: readable in the changelog with any Kafka
/// tool, and encoded only once per key per commit, off the hot path.
pub(crate) trait JsonState: Serialize + DeserializeOwned + Send + 'static {}

impl<T: JsonState> StateValue for T {
    fn encode(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(self).map_err(|e| e.to_string())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        crate::record::json::parse(bytes).map_err(|e| e.to_string())
    }
}

/// Stores that only need keys (indexes, timers) keep empty values.
impl StateValue for () {
    fn encode(&self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }

    fn decode(_: &[u8]) -> Result<Self, String> {
        Ok(())
    }
}

/// A typed reference to a declared store; cheap to copy into operators.
pub(crate) struct StoreHandle<V> {
    index: usize,
    _value: PhantomData<fn() -> V>,
}

impl<V> Clone for StoreHandle<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for StoreHandle<V> {}

/// A state change as it goes to the changelog: collapsed per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogEntry {
    pub(crate) store: usize,
    pub(crate) key: Box<[u8]>,
    pub(crate) value: Option<Box<[u8]>>,
}

/// Every store of one task, over one backend.
pub struct StateSet {
    backend: Box<dyn StateBackend>,
    names: Vec<String>,
    overlays: Vec<Option<Box<dyn ErasedOverlay>>>,
    /// Committed entries kept in memory per store between commits.
    cache_entries: usize,
    /// The instance's byte budget of the caches, and how many stores this
    /// set counted in it.
    budget: Option<(Arc<CacheBudget>, usize)>,
    /// The bytes this set last counted in the budget's `used`.
    cached_bytes: usize,
    /// The instance's global tables, which operators read.
    globals: global::Globals,
}

impl Drop for StateSet {
    fn drop(&mut self) {
        self.leave_budget();
    }
}

impl StateSet {
    /// The cache bound of a state set built with [`StateSet::new`]: the
    /// default of the topology's `state.cache_entries`.
    pub(crate) const CACHE_ENTRIES: usize = 100_000;

    /// A state set over `backend`, whose stores are `names` in order.
    pub(crate) fn new(backend: Box<dyn StateBackend>, names: Vec<String>) -> StateSet {
        let overlays = names.iter().map(|_| None).collect();
        StateSet {
            backend,
            names,
            overlays,
            cache_entries: Self::CACHE_ENTRIES,
            budget: None,
            cached_bytes: 0,
            globals: global::Globals::default(),
        }
    }

    /// Lets the operators read `globals`.
    pub(crate) fn with_globals(mut self, globals: global::Globals) -> StateSet {
        self.globals = globals;
        self
    }

    /// The global table read from source `source`, if the instance holds
    /// one.
    pub(crate) fn global(&self, source: &str) -> Option<Arc<dyn global::GlobalTable>> {
        self.globals.get(source)
    }

    /// Takes this set's stores and cached bytes out of its budget.
    fn leave_budget(&mut self) {
        if let Some((budget, stores)) = self.budget.take() {
            budget.stores.fetch_sub(stores, Ordering::Relaxed);
            budget
                .used
                .fetch_sub(std::mem::take(&mut self.cached_bytes), Ordering::Relaxed);
        }
    }

    /// Counts this set's cached stores in `budget` (until it is dropped)
    /// and keeps each within its share. Called once every store is
    /// declared.
    pub fn share_cache(&mut self, budget: Arc<CacheBudget>) {
        self.leave_budget();
        let stores = self
            .overlays
            .iter()
            .flatten()
            .filter(|o| o.cached())
            .count();
        budget.stores.fetch_add(stores, Ordering::Relaxed);
        self.budget = Some((budget, stores));
    }

    /// Keeps at most `entries` committed entries of each store in memory.
    pub(crate) fn with_cache_entries(mut self, entries: usize) -> StateSet {
        self.cache_entries = entries;
        self
    }

    /// The backend's storage figures, with each store's name.
    pub(crate) fn statistics(&self) -> Option<(BackendStatistics, &[String])> {
        self.backend
            .statistics()
            .map(|stats| (stats, self.names.as_slice()))
    }

    /// Declares the store `name` as holding `V`. Each store is declared
    /// once, by the operator that owns it.
    pub(crate) fn declare<V: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<StoreHandle<V>, StateError> {
        self.declare_overlay(name, true)
    }

    /// Declares a store whose committed entries are not kept in memory: for
    /// entries written once and seldom read (an event log, an index of
    /// applied ids). Only pending writes stay in the overlay, so a commit
    /// walks what was written since the last one, not a cache of every key
    /// written before, and reads of committed entries go to the backend.
    pub(crate) fn declare_uncached<V: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<StoreHandle<V>, StateError> {
        self.declare_overlay(name, false)
    }

    fn declare_overlay<V: StateValue>(
        &mut self,
        name: &str,
        cached: bool,
    ) -> Result<StoreHandle<V>, StateError> {
        let index = self
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| StateError::UnknownStore(name.to_string()))?;
        self.overlays[index] = Some(Box::new(Overlay::<V> {
            name: name.to_string(),
            slots: BTreeMap::new(),
            written: Written::default(),
            dirty: 0,
            evict_from: Box::default(),
            cached,
            size: EntrySize::default(),
        }));
        Ok(StoreHandle {
            index,
            _value: PhantomData,
        })
    }

    /// A view of one store for reads and writes.
    pub(crate) fn view<V: StateValue>(&mut self, handle: StoreHandle<V>) -> StoreView<'_, V> {
        let overlay = self.overlays[handle.index]
            .as_mut()
            .and_then(|o| o.as_any_mut().downcast_mut::<Overlay<V>>())
            // Handles are only minted by `declare`, which installs an
            // `Overlay<V>` at that index with the same `V`.
            .expect("store handle matches its declared overlay");
        StoreView {
            backend: &*self.backend,
            overlay,
            store: handle.index,
        }
    }

    /// Whether any store has writes that are not committed yet.
    pub(crate) fn has_pending(&self) -> bool {
        self.overlays.iter().flatten().any(|o| o.dirty() > 0)
    }

    /// The pending writes of every store, collapsed per key, encoded for
    /// the changelog. The overlay keeps them until `committed` or `abort`.
    pub fn changelog(&self) -> Result<Vec<ChangelogEntry>, StateError> {
        let mut out = Vec::new();
        for (store, overlay) in self.overlays.iter().enumerate() {
            if let Some(overlay) = overlay {
                overlay.changelog(store, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The transaction carrying `entries` committed: apply them to the
    /// backend with `meta` in one batch and keep them as clean cache.
    pub fn committed(
        &mut self,
        entries: Vec<ChangelogEntry>,
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StateError> {
        let writes: Vec<RawWrite> = entries
            .into_iter()
            .map(|e| RawWrite {
                store: e.store,
                key: e.key,
                value: e.value,
            })
            .collect();
        self.backend.apply(&writes, meta)?;
        if self.budget.is_some() {
            for write in &writes {
                if let (Some(Some(overlay)), Some(value)) =
                    (self.overlays.get_mut(write.store), &write.value)
                {
                    overlay.observe(write.key.len(), value.len());
                }
            }
        }
        let share = self.budget.as_ref().map(|(budget, _)| budget.share());
        for overlay in self.overlays.iter_mut().flatten() {
            let within = share.and_then(|bytes| overlay.entries_within(bytes));
            overlay.committed(within.map_or(self.cache_entries, |n| n.min(self.cache_entries)));
        }
        if let Some((budget, _)) = &self.budget {
            let now: usize = self
                .overlays
                .iter()
                .flatten()
                .map(|o| o.cached_bytes())
                .sum();
            let before = std::mem::replace(&mut self.cached_bytes, now);
            if now >= before {
                budget.used.fetch_add(now - before, Ordering::Relaxed);
            } else {
                budget.used.fetch_sub(before - now, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Drops what the overlay of `store` holds for `key`, cached or
    /// pending, so the next read goes to the backend: for a committed entry
    /// the runtime changed on its way (a state value too large for its
    /// changelog was committed as a deletion).
    pub(crate) fn forget(&mut self, store: usize, key: &[u8]) {
        if let Some(Some(overlay)) = self.overlays.get_mut(store) {
            overlay.forget(key);
        }
    }

    /// The transaction aborted: forget every pending write.
    pub(crate) fn abort(&mut self) {
        for overlay in self.overlays.iter_mut().flatten() {
            overlay.abort();
        }
    }

    /// Writes restored changelog records straight to the backend. Only
    /// valid before processing starts (the overlays must be empty).
    pub(crate) fn restore(
        &mut self,
        writes: &[RawWrite],
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StateError> {
        self.backend.apply_restored(writes, meta)
    }

    pub(crate) fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.backend.meta(key)
    }
}

/// Reads and writes of one typed store.
pub(crate) struct StoreView<'a, V> {
    backend: &'a dyn StateBackend,
    overlay: &'a mut Overlay<V>,
    store: usize,
}

impl<V: StateValue> StoreView<'_, V> {
    fn decode(&self, bytes: &[u8]) -> Result<V, StateError> {
        V::decode(bytes).map_err(|message| StateError::Codec {
            store: self.overlay.name.clone(),
            message,
        })
    }

    /// Brings `key` into the overlay if the backend has it; returns whether
    /// a live value is now there.
    fn load(&mut self, key: &[u8]) -> Result<bool, StateError> {
        match self.overlay.slots.get(key) {
            Some(CacheEntry::Clean(_) | CacheEntry::Dirty(_)) => return Ok(true),
            Some(CacheEntry::Deleted) => return Ok(false),
            None => {}
        }
        match self.backend.get(self.store, key)? {
            Some(bytes) => {
                let value = self.decode(&bytes)?;
                self.overlay.size.observe(key.len(), bytes.len());
                self.overlay
                    .slots
                    .insert(key.into(), CacheEntry::Clean(value));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    pub(crate) fn get(&mut self, key: &[u8]) -> Result<Option<&V>, StateError> {
        if !self.load(key)? {
            return Ok(None);
        }
        Ok(match self.overlay.slots.get(key) {
            Some(CacheEntry::Clean(v) | CacheEntry::Dirty(v)) => Some(v),
            _ => None,
        })
    }

    /// A mutable reference; the key is marked as written.
    pub(crate) fn get_mut(&mut self, key: &[u8]) -> Result<Option<&mut V>, StateError> {
        if !self.load(key)? {
            return Ok(None);
        }
        let cached = self.overlay.slots.len();
        let Some(slot) = self.overlay.slots.get_mut(key) else {
            return Ok(None);
        };
        Ok(dirty_value(
            slot,
            &mut self.overlay.dirty,
            &mut self.overlay.written,
            key,
            cached,
        ))
    }

    /// Runs `f` on the live value at `key`, marked as written, or on `None`
    /// when there is none. A cached key takes one lookup, where
    /// [`StoreView::get_mut`] takes two: a reference it returns cannot come
    /// from the lookup that may be followed by a load.
    pub(crate) fn update<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&mut V>) -> R,
    ) -> Result<R, StateError> {
        let cached = self.overlay.slots.len();
        match self.overlay.slots.get_mut(key) {
            Some(slot) => Ok(f(dirty_value(
                slot,
                &mut self.overlay.dirty,
                &mut self.overlay.written,
                key,
                cached,
            ))),
            None => Ok(f(self.get_mut(key)?)),
        }
    }

    pub(crate) fn put(&mut self, key: &[u8], value: V) {
        let cached = self.overlay.slots.len();
        match self.overlay.slots.get_mut(key) {
            Some(slot) => {
                if matches!(slot, CacheEntry::Clean(_)) {
                    self.overlay.dirty += 1;
                    self.overlay.written.mark(key, cached);
                }
                *slot = CacheEntry::Dirty(value);
            }
            None => {
                self.overlay
                    .slots
                    .insert(key.into(), CacheEntry::Dirty(value));
                self.overlay.dirty += 1;
                self.overlay.written.mark(key, cached + 1);
            }
        }
    }

    pub(crate) fn delete(&mut self, key: &[u8]) {
        let cached = self.overlay.slots.len();
        match self.overlay.slots.get_mut(key) {
            Some(slot) => {
                if matches!(slot, CacheEntry::Clean(_)) {
                    self.overlay.dirty += 1;
                    self.overlay.written.mark(key, cached);
                }
                *slot = CacheEntry::Deleted;
            }
            None => {
                self.overlay.slots.insert(key.into(), CacheEntry::Deleted);
                self.overlay.dirty += 1;
                self.overlay.written.mark(key, cached + 1);
            }
        }
    }

    /// Removes `key` and returns its value.
    pub(crate) fn take(&mut self, key: &[u8]) -> Result<Option<V>, StateError> {
        if !self.load(key)? {
            return Ok(None);
        }
        let previous = self.overlay.slots.insert(key.into(), CacheEntry::Deleted);
        Ok(match previous {
            Some(CacheEntry::Clean(v)) => {
                self.overlay.dirty += 1;
                let cached = self.overlay.slots.len();
                self.overlay.written.mark(key, cached);
                Some(v)
            }
            Some(CacheEntry::Dirty(v)) => Some(v),
            _ => None,
        })
    }

    /// Up to `limit` live entries with keys in the range, in key order,
    /// merging pending writes over committed state.
    pub(crate) fn range(
        &mut self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Entries<V>, StateError>
    where
        V: Clone,
    {
        let mut out = Vec::new();
        let mut pending = self.overlay.slots.range::<[u8], _>((from, to)).peekable();
        let mut committed = self.backend.range(self.store, from, to);
        let mut next_committed = committed.next().transpose()?;
        while out.len() < limit {
            let take_pending = match (pending.peek(), &next_committed) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((p, _)), Some((c, _))) => {
                    if p.as_ref() == c.as_ref() {
                        // The overlay shadows the committed value.
                        next_committed = committed.next().transpose()?;
                    }
                    match &next_committed {
                        Some((c, _)) => p.as_ref() <= c.as_ref(),
                        None => true,
                    }
                }
            };
            if take_pending {
                if let Some((key, CacheEntry::Clean(v) | CacheEntry::Dirty(v))) = pending.next() {
                    out.push((key.clone(), v.clone()));
                }
            } else if let Some((key, bytes)) = next_committed.take() {
                let value = V::decode(&bytes).map_err(|message| StateError::Codec {
                    store: self.overlay.name.clone(),
                    message,
                })?;
                out.push((key, value));
                next_committed = committed.next().transpose()?;
            }
        }
        Ok(out)
    }

    /// The live entry with the greatest key in the range, merging pending
    /// writes over committed state: one seek, however many entries the
    /// range holds.
    pub(crate) fn last(
        &mut self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<Option<Entry<V>>, StateError>
    where
        V: Clone,
    {
        let mut pending = self
            .overlay
            .slots
            .range::<[u8], _>((from, to))
            .rev()
            .peekable();
        let mut committed = self.backend.range_rev(self.store, from, to);
        let mut next_committed = committed.next().transpose()?;
        loop {
            let take_pending = match (pending.peek(), &next_committed) {
                (None, None) => return Ok(None),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((p, _)), Some((c, _))) => {
                    if p.as_ref() == c.as_ref() {
                        // The overlay shadows the committed value.
                        next_committed = committed.next().transpose()?;
                        true
                    } else {
                        p.as_ref() > c.as_ref()
                    }
                }
            };
            if take_pending {
                match pending.next() {
                    Some((key, CacheEntry::Clean(v) | CacheEntry::Dirty(v))) => {
                        return Ok(Some((key.clone(), v.clone())));
                    }
                    // Deleted here: look further down.
                    _ => continue,
                }
            }
            if let Some((key, bytes)) = next_committed.take() {
                return Ok(Some((key, self.decode(&bytes)?)));
            }
        }
    }

    /// Number of live entries, without decoding values.
    pub(crate) fn count(&mut self) -> Result<usize, StateError> {
        let mut committed_only = 0;
        for entry in self
            .backend
            .range(self.store, Bound::Unbounded, Bound::Unbounded)
        {
            let (key, _) = entry?;
            if !self.overlay.slots.contains_key(&key) {
                committed_only += 1;
            }
        }
        let live = self
            .overlay
            .slots
            .values()
            .filter(|slot| !matches!(slot, CacheEntry::Deleted))
            .count();
        Ok(committed_only + live)
    }

    /// Up to `limit` live entries whose key starts with `prefix`.
    #[cfg(test)]
    pub(crate) fn prefix(&mut self, prefix: &[u8], limit: usize) -> Result<Entries<V>, StateError>
    where
        V: Clone,
    {
        match prefix_end(prefix) {
            Some(end) => self.range(Bound::Included(prefix), Bound::Excluded(&end), limit),
            None => self.range(Bound::Included(prefix), Bound::Unbounded, limit),
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, if any.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests;

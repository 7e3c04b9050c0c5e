//! The RocksDB [`StateBackend`]: one database per task, one column family
//! per declared store, metadata (changelog offsets) in the default column
//! family, every commit one atomic `WriteBatch`.
//!
//! **Restored records skip the write-ahead log.** A restore writes
//! millions of records the changelog already holds; logging each of them
//! a second time (and checksumming it) costs as much as the memtable
//! insert. So [`StateBackend::apply_restored`] writes its batches, changelog
//! offsets included, without the WAL, and the database flushes all its
//! column families *atomically* (`atomic_flush`): every flush, automatic
//! or manual, persists all column families up to one sequence number, so
//! the files on disk always hold the state after some whole batch, with
//! the changelog offsets of that very batch. A crash during a restore thus
//! loses only its latest batches, never data the saved offsets claim (the
//! next restore replays from the offsets that survived). Before anything
//! is written with the WAL again (the first commit after a restore, which
//! the WAL would replay on top of state that a crash had lost), and when
//! the database closes, the restored batches are flushed.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, Direction, FlushOptions,
    IteratorMode, Options, ReadOptions, WriteBatch, WriteBufferManager, WriteOptions,
};

use super::{BackendStatistics, RawIter, RawWrite, StateBackend, StateError, StoreStatistics};

/// What every task database of an instance shares, so that RocksDB's memory
/// is bounded by the topology's `state:` section and not by the number of
/// tasks, stores or keys: one block cache (with the index and filter blocks
/// charged to it) and one write buffer manager for all memtables.
#[derive(Clone)]
pub struct RocksResources {
    cache: Cache,
    write_buffers: WriteBufferManager,
    max_open_files: i32,
}

impl Default for RocksResources {
    /// The defaults of the topology's `state:` section.
    fn default() -> RocksResources {
        RocksResources::new(
            RocksResources::BLOCK_CACHE,
            RocksResources::WRITE_BUFFERS,
            RocksResources::MAX_OPEN_FILES,
        )
    }
}

impl RocksResources {
    /// Default block cache of an instance: 64 MiB.
    pub const BLOCK_CACHE: usize = 64 << 20;
    /// Default memtable budget of an instance: 128 MiB.
    pub const WRITE_BUFFERS: usize = 128 << 20;
    /// Default open files of each task database.
    pub const MAX_OPEN_FILES: u32 = 1000;

    /// One block cache of `block_cache` bytes, memtables of `write_buffers`
    /// bytes in all, and `max_open_files` per database.
    pub fn new(block_cache: usize, write_buffers: usize, max_open_files: u32) -> RocksResources {
        RocksResources {
            cache: Cache::new_lru_cache(block_cache),
            // No stall: a writer over the budget flushes the largest
            // memtable instead of waiting.
            write_buffers: WriteBufferManager::new_write_buffer_manager(write_buffers, false),
            max_open_files: i32::try_from(max_open_files).unwrap_or(i32::MAX),
        }
    }

    /// Bytes in the block cache now.
    pub fn block_cache_usage(&self) -> usize {
        self.cache.get_usage()
    }

    /// Bytes of every memtable now.
    pub fn write_buffer_usage(&self) -> usize {
        self.write_buffers.get_usage()
    }

    fn store_options(&self) -> Options {
        use rocksdb::DBCompressionType::{Lz4, None};
        let mut options = Options::default();
        // Levels 0 and 1 are small and rewritten soon: compressing them
        // costs a restore's flushes and compactions more than it saves on
        // disk (the usual RocksDB advice for write-heavy loads).
        options.set_compression_per_level(&[None, None, Lz4, Lz4, Lz4, Lz4, Lz4]);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&self.cache);
        // Index and filter blocks count against the cache instead of
        // growing with the data; the level-0 ones stay pinned, as every
        // read looks at them.
        table.set_cache_index_and_filter_blocks(true);
        table.set_cache_index_and_filter_blocks_with_high_priority(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        // A Bloom filter per table, as Kafka Streams' RocksDB stores have:
        // a point read of a key that is not there (a new event id in
        // dedup or the projection's id index, a new account's first fold)
        // skips every table that cannot hold it instead of reading an
        // index and a data block from each. About 10 bits per key, charged
        // to the block cache like the index. Range scans do not use it.
        table.set_bloom_filter(10.0, false);
        // Index and filter in partitions of 4 KiB behind a small top-level
        // index (pinned), as RocksDB advises for bounded memory: a table's
        // whole filter (about 1.2 MiB per million keys) is larger than a
        // shard of the block cache (64 MiB in 64 shards), so it did not
        // stay cached, and point reads loaded and checksummed it from the
        // file again and again: a dedup store of 3M ids fell from 115k to
        // 6k records/s (BENCHMARKS.md, "Dedup and projection at 10M
        // keys").
        table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4096);
        table.set_pin_top_level_index_and_filter(true);
        options.set_block_based_table_factory(&table);
        options
    }
}

const META_PREFIX: &[u8] = b"streamfold.meta/";

pub struct RocksBackend {
    /// Shared with the query server (`run --query-addr`), which reads
    /// committed state from its own threads; see [`RocksBackend::on_close`].
    db: Arc<DB>,
    /// The database's options, which hold its statistics (tickers only).
    options: Options,
    stores: Vec<String>,
    path: PathBuf,
    on_close: Option<Box<dyn FnOnce() + Send>>,
    /// Restored batches were written without the WAL and not flushed yet.
    unflushed: bool,
}

fn backend_error(path: &Path, e: rocksdb::Error) -> StateError {
    StateError::Backend(format!("RocksDB at {}: {e}", path.display()))
}

impl RocksBackend {
    /// Opens (or creates) the database at `path` with a column family per
    /// store. Column families of stores the topology no longer declares
    /// are dropped.
    pub fn open(
        path: &Path,
        stores: &[String],
        resources: &RocksResources,
    ) -> Result<RocksBackend, StateError> {
        std::fs::create_dir_all(path)
            .map_err(|e| StateError::Backend(format!("cannot create {}: {e}", path.display())))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // Restored batches skip the WAL: see the module docs.
        options.set_atomic_flush(true);
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        options.set_write_buffer_manager(&resources.write_buffers);
        options.set_max_open_files(resources.max_open_files);
        // Counters only (block cache hits and misses, ...), which RocksDB
        // keeps per core: no timers, no histograms, whose clock reads are
        // what makes statistics costly.
        options.enable_statistics();
        options.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
        let existing = DB::list_cf(&options, path).unwrap_or_default();
        let mut families: Vec<String> = stores.to_vec();
        for name in &existing {
            if name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME && !families.contains(name) {
                families.push(name.clone());
            }
        }
        let descriptors = families
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, resources.store_options()));
        let mut db = DB::open_cf_descriptors(&options, path, descriptors)
            .map_err(|e| backend_error(path, e))?;
        for stale in &families[stores.len()..] {
            tracing::info!(path = %path.display(), store = %stale, "Dropping state of a store the topology no longer declares.");
            db.drop_cf(stale).map_err(|e| backend_error(path, e))?;
        }
        Ok(RocksBackend {
            db: Arc::new(db),
            options,
            stores: stores.to_vec(),
            path: path.to_path_buf(),
            on_close: None,
            unflushed: false,
        })
    }

    /// The database, for readers on other threads. RocksDB only ever
    /// holds committed state (pending writes live in the overlay), so a
    /// reader never sees an uncommitted value.
    pub fn shared(&self) -> Arc<DB> {
        Arc::clone(&self.db)
    }

    /// Runs `hook` when the backend closes, before the database does: the
    /// query server drops its handles there (and waits for reads in
    /// flight), so the files can be wiped or reopened right after.
    pub(crate) fn on_close(&mut self, hook: Box<dyn FnOnce() + Send>) {
        self.on_close = Some(hook);
    }

    fn cf(&self, store: usize) -> Result<&ColumnFamily, StateError> {
        self.stores
            .get(store)
            .and_then(|name| self.db.cf_handle(name))
            .ok_or_else(|| StateError::Backend(format!("no column family for store #{store}")))
    }

    /// Makes restored batches durable: one atomic flush of every column
    /// family, the metadata's included.
    fn flush_restored(&mut self) -> Result<(), StateError> {
        if !self.unflushed {
            return Ok(());
        }
        let mut families: Vec<&ColumnFamily> = self
            .stores
            .iter()
            .filter_map(|name| self.db.cf_handle(name))
            .collect();
        families.extend(self.db.cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME));
        let mut options = FlushOptions::default();
        options.set_wait(true);
        self.db
            .flush_cfs_opt(&families, &options)
            .map_err(|e| backend_error(&self.path, e))?;
        self.unflushed = false;
        Ok(())
    }

    fn batch(
        &self,
        writes: &[RawWrite],
        meta: &[(String, Vec<u8>)],
    ) -> Result<WriteBatch, StateError> {
        let mut batch = WriteBatch::default();
        for write in writes {
            let cf = self.cf(write.store)?;
            match &write.value {
                Some(value) => batch.put_cf(cf, &write.key, value),
                None => batch.delete_cf(cf, &write.key),
            }
        }
        for (key, value) in meta {
            batch.put(meta_key(key), value);
        }
        Ok(batch)
    }

    /// Iterates `store` from `mode` within `read`'s bounds, leaving out
    /// the key `skip` (an excluded bound the seek lands on).
    fn iterate<'a>(
        &'a self,
        store: usize,
        read: ReadOptions,
        mode: IteratorMode<'_>,
        skip: Option<Vec<u8>>,
    ) -> RawIter<'a> {
        let cf = match self.cf(store) {
            Ok(cf) => cf,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        let path = self.path.clone();
        Box::new(
            self.db
                .iterator_cf_opt(cf, read, mode)
                .filter(move |item| !matches!((item, &skip), (Ok((k, _)), Some(s)) if k.as_ref() == s.as_slice()))
                .map(move |item| item.map_err(|e| backend_error(&path, e))),
        )
    }
}

impl Drop for RocksBackend {
    fn drop(&mut self) {
        // RocksDB flushes unlogged data when it closes too; this says so
        // when it cannot.
        if let Err(error) = self.flush_restored() {
            tracing::warn!(%error, "Cannot flush restored state on close; the next start restores it again.");
        }
        if let Some(hook) = self.on_close.take() {
            hook();
        }
    }
}

fn meta_key(key: &str) -> Vec<u8> {
    let mut out = META_PREFIX.to_vec();
    out.extend_from_slice(key.as_bytes());
    out
}

impl StateBackend for RocksBackend {
    fn get(&self, store: usize, key: &[u8]) -> Result<Option<Box<[u8]>>, StateError> {
        let cf = self.cf(store)?;
        self.db
            .get_pinned_cf(cf, key)
            .map(|v| v.map(|v| Box::from(v.as_ref())))
            .map_err(|e| backend_error(&self.path, e))
    }

    fn range<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a> {
        let mut read = ReadOptions::default();
        match to {
            Bound::Excluded(end) => read.set_iterate_upper_bound(end.to_vec()),
            // The upper bound is exclusive: the smallest key after `end`.
            Bound::Included(end) => {
                let mut after = end.to_vec();
                after.push(0);
                read.set_iterate_upper_bound(after);
            }
            Bound::Unbounded => {}
        }
        let (mode, skip) = match from {
            Bound::Included(start) => (IteratorMode::From(start, Direction::Forward), None),
            Bound::Excluded(start) => (
                IteratorMode::From(start, Direction::Forward),
                Some(start.to_vec()),
            ),
            Bound::Unbounded => (IteratorMode::Start, None),
        };
        self.iterate(store, read, mode, skip)
    }

    fn range_rev<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a> {
        let mut read = ReadOptions::default();
        match from {
            Bound::Included(start) => read.set_iterate_lower_bound(start.to_vec()),
            // The lower bound is inclusive: the smallest key after `start`.
            Bound::Excluded(start) => {
                let mut after = start.to_vec();
                after.push(0);
                read.set_iterate_lower_bound(after);
            }
            Bound::Unbounded => {}
        }
        // A reverse seek lands on the last key <= `end`.
        let (mode, skip) = match to {
            Bound::Included(end) => (IteratorMode::From(end, Direction::Reverse), None),
            Bound::Excluded(end) => (
                IteratorMode::From(end, Direction::Reverse),
                Some(end.to_vec()),
            ),
            Bound::Unbounded => (IteratorMode::End, None),
        };
        self.iterate(store, read, mode, skip)
    }

    fn apply(&mut self, writes: &[RawWrite], meta: &[(String, Vec<u8>)]) -> Result<(), StateError> {
        // Logged writes must not land on restored state a crash could
        // still take away.
        self.flush_restored()?;
        let batch = self.batch(writes, meta)?;
        self.db
            .write(batch)
            .map_err(|e| backend_error(&self.path, e))
    }

    fn apply_restored(
        &mut self,
        writes: &[RawWrite],
        meta: &[(String, Vec<u8>)],
    ) -> Result<(), StateError> {
        let batch = self.batch(writes, meta)?;
        let mut options = WriteOptions::default();
        options.disable_wal(true);
        self.unflushed = true;
        self.db
            .write_opt(batch, &options)
            .map_err(|e| backend_error(&self.path, e))
    }

    fn statistics(&self) -> Option<BackendStatistics> {
        use rocksdb::statistics::Ticker;
        let property = |cf: &ColumnFamily, name: &str| {
            self.db
                .property_int_value_cf(cf, name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let stores = (0..self.stores.len())
            .map(|store| match self.cf(store) {
                Ok(cf) => StoreStatistics {
                    memtable_bytes: property(cf, "rocksdb.cur-size-all-mem-tables"),
                    sst_bytes: property(cf, "rocksdb.live-sst-files-size"),
                    pending_compaction_bytes: property(
                        cf,
                        "rocksdb.estimate-pending-compaction-bytes",
                    ),
                    estimated_keys: property(cf, "rocksdb.estimate-num-keys"),
                },
                Err(_) => StoreStatistics::default(),
            })
            .collect();
        Some(BackendStatistics {
            stores,
            block_cache_hits: self.options.get_ticker_count(Ticker::BlockCacheHit),
            block_cache_misses: self.options.get_ticker_count(Ticker::BlockCacheMiss),
        })
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.db
            .get(meta_key(key))
            .map_err(|e| backend_error(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(store: usize, key: &str, value: Option<&str>) -> RawWrite {
        RawWrite {
            store,
            key: key.as_bytes().into(),
            value: value.map(|v| v.as_bytes().into()),
        }
    }

    fn keys(iter: RawIter<'_>) -> Vec<String> {
        iter.map(|r| String::from_utf8(r.unwrap().0.to_vec()).unwrap())
            .collect()
    }

    /// Two task databases over one [`RocksResources`]: their memtables
    /// together stay near the write buffer budget (the largest is flushed,
    /// where RocksDB alone would keep 64 MiB per store in memory) and their
    /// reads fill one block cache that never exceeds its capacity.
    #[test]
    fn task_databases_share_one_memory_budget() {
        const MIB: usize = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let resources = RocksResources::new(2 * MIB, 4 * MIB, 64);
        let stores = vec!["n-open".to_string()];
        let mut dbs: Vec<RocksBackend> = (0..2)
            .map(|task| {
                RocksBackend::open(&dir.path().join(task.to_string()), &stores, &resources).unwrap()
            })
            .collect();
        // 2 x 24 MiB of distinct keys with incompressible-ish values.
        let value: Box<[u8]> = (0..1024u32).map(|i| (i * 7919 % 251) as u8).collect();
        let mut peak = 0;
        for round in 0..24 * 1024 / 256 {
            for db in &mut dbs {
                let writes: Vec<RawWrite> = (0..256)
                    .map(|i| RawWrite {
                        store: 0,
                        key: format!("key-{round:05}-{i:03}").into_bytes().into(),
                        value: Some(value.clone()),
                    })
                    .collect();
                db.apply(&writes, &[]).unwrap();
                peak = peak.max(resources.write_buffer_usage());
            }
        }
        // Flushes run in the background, so the usage can pass the budget
        // for a moment; without the shared budget it reaches 48 MiB.
        assert!(
            peak < 16 * MIB,
            "memtables of both databases peaked at {peak} bytes, budget 4 MiB"
        );
        let on_disk = |db: &RocksBackend| {
            db.db
                .property_int_value_cf(db.cf(0).unwrap(), "rocksdb.total-sst-files-size")
                .unwrap()
                .unwrap_or(0)
        };
        assert!(
            dbs.iter().all(|db| on_disk(db) > 0),
            "both databases flushed to files"
        );
        for db in &dbs {
            for round in (0..24 * 1024 / 256).step_by(3) {
                assert_eq!(
                    db.get(0, format!("key-{round:05}-007").as_bytes())
                        .unwrap()
                        .as_deref(),
                    Some(&*value)
                );
            }
        }
        let cached = resources.block_cache_usage();
        assert!(cached > 0, "reads went through the shared cache");
        assert!(
            cached <= 2 * MIB,
            "the cache holds {cached} bytes, capacity 2 MiB"
        );
    }

    #[test]
    fn writes_meta_and_ranges_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let stores = vec!["a-open".to_string(), "a-timers".to_string()];
        {
            let mut db =
                RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
            db.apply(
                &[
                    write(0, "k1", Some("v1")),
                    write(0, "k2", Some("v2")),
                    write(1, "t", Some("")),
                ],
                &[("offsets".into(), b"12".to_vec())],
            )
            .unwrap();
            db.apply(&[write(0, "k2", None), write(0, "k3", Some("v3"))], &[])
                .unwrap();
        }
        let db = RocksBackend::open(dir.path(), &stores, &RocksResources::default()).unwrap();
        assert_eq!(db.get(0, b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(db.get(0, b"k2").unwrap(), None);
        assert_eq!(db.meta("offsets").unwrap(), Some(b"12".to_vec()));
        assert_eq!(
            keys(db.range(0, Bound::Unbounded, Bound::Unbounded)),
            vec!["k1", "k3"]
        );
        assert_eq!(
            keys(db.range(0, Bound::Excluded(b"k1"), Bound::Included(b"k3"))),
            vec!["k3"]
        );
        assert_eq!(
            keys(db.range(0, Bound::Included(b"k1"), Bound::Excluded(b"k3"))),
            vec!["k1"]
        );
        assert_eq!(
            keys(db.range(1, Bound::Unbounded, Bound::Unbounded)),
            vec!["t"]
        );
        assert_eq!(
            keys(db.range_rev(0, Bound::Unbounded, Bound::Unbounded)),
            vec!["k3", "k1"]
        );
        assert_eq!(
            keys(db.range_rev(0, Bound::Excluded(b"k1"), Bound::Excluded(b"k3"))),
            Vec::<String>::new()
        );
        assert_eq!(
            keys(db.range_rev(0, Bound::Included(b"k1"), Bound::Excluded(b"k3"))),
            vec!["k1"]
        );
        assert_eq!(
            keys(db.range_rev(0, Bound::Included(b"k0"), Bound::Excluded(b"k2"))),
            vec!["k1"],
            "a reverse seek to a missing key lands before it"
        );
        assert_eq!(
            keys(db.range_rev(0, Bound::Excluded(b"k1"), Bound::Included(b"k9"))),
            vec!["k3"]
        );
    }

    /// The files of an open database as they are: what a crash leaves.
    fn crash_image(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }

    /// Restored batches skip the WAL; a crash may lose the latest of them
    /// but never leaves changelog offsets ahead of the data, and a logged
    /// write never lands on restored state a crash could still lose.
    #[test]
    fn a_crash_keeps_restored_batches_whole_with_their_offsets_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let stores = vec!["a-open".to_string(), "a-timers".to_string()];
        let mut db = RocksBackend::open(&path, &stores, &RocksResources::default()).unwrap();
        db.apply(
            &[write(0, "before", Some("1"))],
            &[("offsets".into(), b"1".to_vec())],
        )
        .unwrap();
        db.apply_restored(
            &[write(0, "r1", Some("a")), write(1, "t1", Some(""))],
            &[("offsets".into(), b"3".to_vec())],
        )
        .unwrap();
        crash_image(&path, &dir.path().join("during-restore"));
        db.apply(
            &[write(0, "after", Some("2"))],
            &[("offsets".into(), b"4".to_vec())],
        )
        .unwrap();
        crash_image(&path, &dir.path().join("after-a-commit"));
        db.apply_restored(
            &[write(0, "r2", Some("b"))],
            &[("offsets".into(), b"5".to_vec())],
        )
        .unwrap();
        drop(db);

        let during = RocksBackend::open(
            &dir.path().join("during-restore"),
            &stores,
            &RocksResources::default(),
        )
        .unwrap();
        let restored = during.get(0, b"r1").unwrap().is_some();
        assert_eq!(during.get(1, b"t1").unwrap().is_some(), restored);
        assert_eq!(
            during.meta("offsets").unwrap(),
            Some(if restored {
                b"3".to_vec()
            } else {
                b"1".to_vec()
            }),
            "the offsets are those of the batches that survived"
        );
        assert_eq!(
            during.get(0, b"before").unwrap().as_deref(),
            Some(&b"1"[..])
        );

        let after = RocksBackend::open(
            &dir.path().join("after-a-commit"),
            &stores,
            &RocksResources::default(),
        )
        .unwrap();
        assert_eq!(after.get(0, b"r1").unwrap().as_deref(), Some(&b"a"[..]));
        assert_eq!(after.get(1, b"t1").unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(after.get(0, b"after").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(after.meta("offsets").unwrap(), Some(b"4".to_vec()));

        let closed = RocksBackend::open(&path, &stores, &RocksResources::default()).unwrap();
        assert_eq!(closed.get(0, b"r2").unwrap().as_deref(), Some(&b"b"[..]));
        assert_eq!(closed.meta("offsets").unwrap(), Some(b"5".to_vec()));
    }

    #[test]
    fn stores_dropped_from_the_topology_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut db = RocksBackend::open(
                dir.path(),
                &["old".to_string(), "kept".to_string()],
                &RocksResources::default(),
            )
            .unwrap();
            db.apply(&[write(0, "x", Some("1")), write(1, "y", Some("2"))], &[])
                .unwrap();
        }
        let db = RocksBackend::open(
            dir.path(),
            &["kept".to_string()],
            &RocksResources::default(),
        )
        .unwrap();
        assert_eq!(db.get(0, b"y").unwrap().as_deref(), Some(&b"2"[..]));
        let families = DB::list_cf(&Options::default(), dir.path()).unwrap();
        assert!(!families.contains(&"old".to_string()), "{families:?}");
    }
}

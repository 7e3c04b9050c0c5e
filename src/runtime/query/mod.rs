//! Interactive queries: `run --query-addr HOST:PORT` serves the committed
//! state of the topology's stores over HTTP (see `docs/queries.md`).
//!
//! - [`QueryState`] is what the engine and the HTTP server share: the
//!   tasks of this instance, each with its RocksDB handle and whether it
//!   runs or still restores. The engine registers a task when it opens its
//!   state, marks it running when restore ends, and the backend's close
//!   hook removes it — under the write lock, so no read is in flight when
//!   the database closes (it may be wiped or reopened right after).
//! - Reads go to RocksDB only. RocksDB holds committed state only: the
//!   write-back overlay keeps uncommitted writes until their transaction
//!   commits. A task that restores answers `503` with `Retry-After`.
//! - [`endpoints`] advertises which tasks this instance runs, and at which
//!   address, on the compacted topic `<app>-query-endpoints`.
//! - [`server`] serves HTTP; `routes` routes it (axum) and checks the
//!   bearer token; `reads` answers lookups and scans (paged with a
//!   cursor) from local tasks, and `forward` asks the owners of the
//!   others, all at once; `metadata` tells which partition and instance
//!   hold a key, and lists the instances; `keys` reads keys, bounds and
//!   cursors from a request and writes them into answers (`text` or
//!   `base64`).

pub mod endpoints;
mod forward;
mod keys;
mod metadata;
mod reads;
mod routes;
pub mod server;
#[cfg(test)]
mod tests;
mod tls;
mod window_ranges;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use rocksdb::{DB, Direction, IteratorMode, ReadOptions};
use serde_json::Value;

use super::RuntimeError;
use super::settings::RunOptions;
use crate::topology::Topology;
use keys::KeyRange;

/// The most entries one scan returns.
pub(crate) const MAX_SCAN_LIMIT: usize = 10_000;

/// A store `run --query-addr` serves.
#[derive(Clone, Debug)]
pub struct QueryableStore {
    /// `<node>-<store>`: the URL's store name and the column family.
    pub name: String,
    pub(crate) node: usize,
    /// With `key_by`, the runtime routes keys with [`crate::task::partitioner`]
    /// through a repartition topic, so a key's task is known; otherwise a
    /// key lives on whichever partition its producer chose, and lookups
    /// ask every task.
    pub(crate) routed: bool,
    /// Holds windows (`window` nodes): read by key and time range.
    pub(crate) windowed: bool,
}

/// The stores of `topology` that answer queries, in topology order.
pub fn queryable_stores(topology: &Topology) -> Vec<QueryableStore> {
    topology
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(index, node)| {
            let spec = node.kind.spec();
            let store = spec.queryable_store(&node.input_info)?;
            Some(QueryableStore {
                name: node.store_name(store),
                node: index,
                routed: node.repartition_topic.is_some(),
                windowed: spec.query_windows(),
            })
        })
        .collect()
}

/// A task of this instance, as the query server sees it.
struct TaskEntry {
    db: Arc<DB>,
    running: bool,
}

/// What the engine and the query server share.
pub struct QueryState {
    tasks: RwLock<BTreeMap<i32, TaskEntry>>,
    /// Bumped on every change of the running set, for [`endpoints`].
    generation: AtomicU64,
    /// The partition count of the sources (0 until known).
    partitions: AtomicU64,
}

impl fmt::Debug for QueryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryState")
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

/// Why a task's store could not be read here.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The task restores here, or is not a task of this instance.
    Unavailable(Local),
    /// RocksDB failed, or the stored value is not JSON.
    Failed(String),
}

/// Entries read from a store: key bytes and stored JSON.
pub(crate) type ReadEntries = Vec<(Vec<u8>, Value)>;

/// Why a task's state is not readable here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// The task is restoring its state here.
    Restoring,
    /// Not a task of this instance.
    Absent,
}

impl QueryState {
    pub fn new() -> Arc<QueryState> {
        Arc::new(QueryState {
            tasks: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            partitions: AtomicU64::new(0),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<i32, TaskEntry>> {
        self.tasks.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<i32, TaskEntry>> {
        self.tasks.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_partitions(&self, partitions: i32) {
        self.partitions
            .store(u64::try_from(partitions).unwrap_or(0), Ordering::Relaxed);
    }

    pub(crate) fn partitions(&self) -> i32 {
        i32::try_from(self.partitions.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// A task opened its state: it restores until [`QueryState::started`].
    pub fn opened(&self, task: i32, db: Arc<DB>) {
        let replaced = self.write().insert(task, TaskEntry { db, running: false });
        if replaced.is_some_and(|e| e.running) {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A task finished restoring and runs.
    pub fn started(&self, task: i32) {
        if let Some(entry) = self.write().get_mut(&task) {
            entry.running = true;
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// A task's database is about to close. Waits for reads in flight.
    pub(crate) fn closing(&self, task: i32, db: &Arc<DB>) {
        let mut tasks = self.write();
        // A reopened task (wiped state) registered its new database
        // already; only the entry of this one goes.
        if tasks.get(&task).is_some_and(|e| Arc::ptr_eq(&e.db, db)) {
            tasks.remove(&task);
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Tasks that run here, in order.
    pub(crate) fn running(&self) -> Vec<i32> {
        self.read()
            .iter()
            .filter(|(_, e)| e.running)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Tasks that restore here, in order.
    pub(crate) fn restoring(&self) -> Vec<i32> {
        self.read()
            .iter()
            .filter(|(_, e)| !e.running)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Whether `task` runs here (`Some(true)`), restores here
    /// (`Some(false)`) or is not a task of this instance (`None`).
    pub(crate) fn local(&self, task: i32) -> Option<bool> {
        self.read().get(&task).map(|e| e.running)
    }

    /// The committed value of `key` in `store` of `task`, if the task runs
    /// here (`Err(local)` otherwise).
    pub(crate) fn get(
        &self,
        task: i32,
        store: &str,
        key: &[u8],
    ) -> Result<Option<Value>, ReadError> {
        let tasks = self.read();
        let entry = running_entry(&tasks, task)?;
        let cf = entry.store(task, store)?;
        match entry.db.get_pinned_cf(cf, key) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| ReadError::Failed(format!("stored value is not JSON: {e}"))),
            Ok(None) => Ok(None),
            Err(e) => Err(ReadError::Failed(e.to_string())),
        }
    }

    /// Up to `limit` committed entries of `store` of `task` in `range`, in
    /// key order.
    pub(crate) fn scan(
        &self,
        task: i32,
        store: &str,
        range: &KeyRange,
        limit: usize,
    ) -> Result<ReadEntries, ReadError> {
        let tasks = self.read();
        let entry = running_entry(&tasks, task)?;
        let cf = entry.store(task, store)?;
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let mut read = ReadOptions::default();
        if let Some(end) = &range.end {
            read.set_iterate_upper_bound(end.clone());
        }
        let mut out = Vec::new();
        let iter = entry.db.iterator_cf_opt(
            cf,
            read,
            IteratorMode::From(&range.start, Direction::Forward),
        );
        for item in iter.take(limit) {
            let (key, value) = item.map_err(|e| ReadError::Failed(e.to_string()))?;
            let value = serde_json::from_slice(&value)
                .map_err(|e| ReadError::Failed(format!("stored value is not JSON: {e}")))?;
            out.push((key.to_vec(), value));
        }
        Ok(out)
    }

    /// Up to `limit` committed entries of `store` of `task` from `start`
    /// on, in key order, that `step` takes; it skips the others with a
    /// seek. One iterator, so one committed state, however far it seeks.
    pub(crate) fn walk(
        &self,
        task: i32,
        store: &str,
        start: &[u8],
        limit: usize,
        step: impl Fn(&[u8]) -> window_ranges::Step,
    ) -> Result<ReadEntries, ReadError> {
        let tasks = self.read();
        let entry = running_entry(&tasks, task)?;
        let cf = entry.store(task, store)?;
        let mut out = Vec::new();
        let mut iter = entry.db.raw_iterator_cf(cf);
        iter.seek(start);
        while out.len() < limit {
            let Some(key) = iter.key() else { break };
            match step(key) {
                window_ranges::Step::Take => {
                    let value = serde_json::from_slice(iter.value().unwrap_or_default())
                        .map_err(|e| ReadError::Failed(format!("stored value is not JSON: {e}")))?;
                    out.push((key.to_vec(), value));
                    iter.next();
                }
                window_ranges::Step::Seek(next) => iter.seek(&next),
            }
        }
        iter.status()
            .map_err(|e| ReadError::Failed(e.to_string()))?;
        Ok(out)
    }
}

impl TaskEntry {
    /// The column family of `store` in this task's database.
    fn store(&self, task: i32, store: &str) -> Result<&rocksdb::ColumnFamily, ReadError> {
        self.db
            .cf_handle(store)
            .ok_or_else(|| ReadError::Failed(format!("task {task} has no store `{store}`")))
    }
}

fn running_entry(tasks: &BTreeMap<i32, TaskEntry>, task: i32) -> Result<&TaskEntry, ReadError> {
    match tasks.get(&task) {
        Some(entry) if entry.running => Ok(entry),
        Some(_) => Err(ReadError::Unavailable(Local::Restoring)),
        None => Err(ReadError::Unavailable(Local::Absent)),
    }
}

/// The query server and the endpoint advertiser of `--query-addr`.
pub(crate) struct Queries {
    pub(crate) state: Arc<QueryState>,
    server: server::QueryServer,
    advertiser: endpoints::Advertiser,
}

impl Queries {
    pub(crate) fn start(
        topology: &Arc<Topology>,
        options: &RunOptions,
        addr: std::net::SocketAddr,
        partitions: i32,
    ) -> Result<Queries, RuntimeError> {
        // The files first: a bad one is a configuration error to report
        // before anything reaches the broker.
        let tls = match &topology.queries.tls {
            Some(tls) => Some(tls::Tls::load(tls).map_err(RuntimeError::Settings)?),
            None => None,
        };
        let config = super::settings::admin_config(topology, options);
        endpoints::ensure_topic(&config, &topology.name)?;
        let state = QueryState::new();
        state.set_partitions(partitions);
        let directory = Arc::new(endpoints::Directory::default());
        let context = server::Context::new(
            Arc::clone(topology),
            options.instance_id.clone(),
            Arc::clone(&state),
            Arc::clone(&directory),
        );
        let token = match options
            .query_token
            .as_ref()
            .or(topology.queries.token.as_ref())
        {
            Some(token) if token.is_empty() => {
                return Err(RuntimeError::Settings(
                    "the query token (queries.token or --query-token) is empty; set a secret (e.g. ${file:/run/secrets/query-token}) or remove it".into(),
                ));
            }
            token => token.cloned(),
        };
        let mut context = context
            .with_token(token)
            .with_request_timeout(topology.queries.request_timeout());
        if let Some(tls) = tls {
            context = context.with_tls(tls);
        }
        let server = server::QueryServer::start(addr, context)?;
        let advertised = match options
            .query_advertised_addr
            .as_ref()
            .or(topology.queries.advertised_addr.as_ref())
        {
            Some(address) => address.clone(),
            None if server.addr.ip().is_unspecified() => {
                return Err(RuntimeError::Settings(format!(
                    "the query address {addr} is a wildcard address other instances cannot reach; set --query-advertised-addr HOST:PORT (or queries.advertised_addr)"
                )));
            }
            None => server.addr.to_string(),
        };
        directory.set_own_address(advertised.clone());
        let advertiser = endpoints::Advertiser::start(
            &config,
            &topology.name,
            options.instance_id.clone(),
            advertised,
            Arc::clone(&state),
            directory,
        )?;
        Ok(Queries {
            state,
            server,
            advertiser,
        })
    }

    pub(crate) fn stop(self) {
        self.advertiser.stop();
        self.server.stop();
    }
}

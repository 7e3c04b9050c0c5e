//! Global tables: a table every instance holds whole.
//!
//! A source of `kind: global_table` is read outside the group, every
//! partition by every instance (Kafka Streams' `GlobalKTable`), into one
//! store that all of the instance's tasks read. Its topic is its
//! changelog: the store keeps, with its rows and in the same atomic
//! write, the next offset of each partition, so a restart reads on from
//! there and a wiped state directory reads the topic again from its
//! beginning. Nothing is written back to Kafka.
//!
//! Tasks only read it ([`GlobalTable::get`]); the reader
//! (`runtime::global_tables`) is its only writer. Lookups are not
//! synchronized with the stream: a stream record joins the row the
//! instance has read so far, as in Kafka Streams.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, RwLock};

use rocksdb::{DB, Options, WriteBatch, WriteOptions};
use serde_json::Value;

use super::StateError;

/// A global table as the tasks read it: the latest value of a key.
pub trait GlobalTable: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Value>, StateError>;
}

/// The instance's global tables, by source name.
#[derive(Clone, Default)]
pub struct Globals(BTreeMap<String, Arc<dyn GlobalTable>>);

impl Globals {
    pub(crate) fn insert(&mut self, source: &str, table: Arc<dyn GlobalTable>) {
        self.0.insert(source.to_string(), table);
    }

    pub(crate) fn get(&self, source: &str) -> Option<Arc<dyn GlobalTable>> {
        self.0.get(source).cloned()
    }
}

/// A change to a global table: a row's new value, or its deletion.
pub(crate) struct Change<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a Value>,
}

/// A global table in memory: the offline driver's.
#[derive(Default)]
pub struct MemoryGlobal(RwLock<HashMap<Box<[u8]>, Value>>);

impl MemoryGlobal {
    pub(crate) fn apply(&self, change: Change<'_>) {
        let mut rows = self.0.write().unwrap_or_else(|e| e.into_inner());
        match change.value {
            Some(value) => rows.insert(change.key.into(), value.clone()),
            None => rows.remove(change.key),
        };
    }
}

impl GlobalTable for MemoryGlobal {
    fn get(&self, key: &[u8]) -> Result<Option<Value>, StateError> {
        let rows = self.0.read().unwrap_or_else(|e| e.into_inner());
        Ok(rows.get(key).cloned())
    }
}

/// Row keys start with this byte, partitions' next offsets with
/// [`OFFSET`].
const ROW: u8 = b'r';
const OFFSET: u8 = b'o';

/// A global table in RocksDB, with the offsets it has read.
pub struct RocksGlobal {
    db: DB,
}

fn backend(error: rocksdb::Error) -> StateError {
    StateError::Backend(error.to_string())
}

fn row_key(key: &[u8]) -> Vec<u8> {
    let mut row = Vec::with_capacity(key.len() + 1);
    row.push(ROW);
    row.extend_from_slice(key);
    row
}

fn offset_key(partition: i32) -> [u8; 5] {
    let mut key = [OFFSET; 5];
    key[1..].copy_from_slice(&partition.to_be_bytes());
    key
}

impl RocksGlobal {
    pub fn open(path: &Path) -> Result<RocksGlobal, StateError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        let db = DB::open(&options, path).map_err(backend)?;
        Ok(RocksGlobal { db })
    }

    /// The next offset to read of each partition read so far.
    pub fn offsets(&self) -> Result<BTreeMap<i32, i64>, StateError> {
        let mut offsets = BTreeMap::new();
        for entry in self.db.prefix_iterator([OFFSET]) {
            let (key, value) = entry.map_err(backend)?;
            if key.first() != Some(&OFFSET) {
                break;
            }
            let (Ok(partition), Ok(offset)) = (
                <[u8; 4]>::try_from(&key[1..]),
                <[u8; 8]>::try_from(&value[..]),
            ) else {
                return Err(StateError::Backend(format!(
                    "a global table's offset entry is malformed: {key:?}"
                )));
            };
            offsets.insert(i32::from_be_bytes(partition), i64::from_be_bytes(offset));
        }
        Ok(offsets)
    }

    /// Applies `changes` and the partitions' next `offsets` in one atomic
    /// write.
    pub(crate) fn apply<'a>(
        &self,
        changes: impl IntoIterator<Item = Change<'a>>,
        offsets: &BTreeMap<i32, i64>,
    ) -> Result<(), StateError> {
        let mut batch = WriteBatch::default();
        for change in changes {
            match change.value {
                Some(value) => batch.put(row_key(change.key), crate::record::json::encode(value)),
                None => batch.delete(row_key(change.key)),
            }
        }
        for (&partition, &offset) in offsets {
            batch.put(offset_key(partition), offset.to_be_bytes());
        }
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(backend)
    }
}

impl GlobalTable for RocksGlobal {
    fn get(&self, key: &[u8]) -> Result<Option<Value>, StateError> {
        let Some(bytes) = self.db.get_pinned(row_key(key)).map_err(backend)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Codec {
                store: "global table".into(),
                message: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rows_and_offsets_survive_a_reopen_and_tombstones_delete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("customers");
        {
            let table = RocksGlobal::open(&path).unwrap();
            let ada = json!({"name": "Ada"});
            let bob = json!({"name": "Bob"});
            let changes = [
                Change {
                    key: b"c-1",
                    value: Some(&ada),
                },
                Change {
                    key: b"c-2",
                    value: Some(&bob),
                },
            ];
            table
                .apply(changes, &BTreeMap::from([(0, 2), (3, 1)]))
                .unwrap();
            let gone = [Change {
                key: b"c-2",
                value: None,
            }];
            table.apply(gone, &BTreeMap::from([(3, 2)])).unwrap();
        }
        let table = RocksGlobal::open(&path).unwrap();
        assert_eq!(table.get(b"c-1").unwrap(), Some(json!({"name": "Ada"})));
        assert_eq!(table.get(b"c-2").unwrap(), None);
        assert_eq!(table.offsets().unwrap(), BTreeMap::from([(0, 2), (3, 2)]));
    }
}

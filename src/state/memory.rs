//! An in-memory [`StateBackend`]: ordered maps, for `streamfold test` and
//! unit tests. Same semantics as the RocksDB backend, nothing survives the
//! process.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::{RawIter, RawWrite, StateBackend, StateError};

type Store = BTreeMap<Box<[u8]>, Box<[u8]>>;

pub struct MemoryBackend {
    stores: Vec<Store>,
    meta: BTreeMap<String, Vec<u8>>,
}

impl MemoryBackend {
    pub fn new(stores: usize) -> MemoryBackend {
        MemoryBackend {
            stores: (0..stores).map(|_| BTreeMap::new()).collect(),
            meta: BTreeMap::new(),
        }
    }

    fn store(&self, store: usize) -> Result<&Store, StateError> {
        self.stores
            .get(store)
            .ok_or_else(|| StateError::Backend(format!("no store #{store}")))
    }
}

impl StateBackend for MemoryBackend {
    fn get(&self, store: usize, key: &[u8]) -> Result<Option<Box<[u8]>>, StateError> {
        Ok(self.store(store)?.get(key).cloned())
    }

    fn range<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a> {
        match self.store(store) {
            Ok(map) => Box::new(
                map.range::<[u8], _>((from, to))
                    .map(|(k, v)| Ok((k.clone(), v.clone()))),
            ),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }

    fn range_rev<'a>(&'a self, store: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> RawIter<'a> {
        match self.store(store) {
            Ok(map) => Box::new(
                map.range::<[u8], _>((from, to))
                    .rev()
                    .map(|(k, v)| Ok((k.clone(), v.clone()))),
            ),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }

    fn apply(&mut self, writes: &[RawWrite], meta: &[(String, Vec<u8>)]) -> Result<(), StateError> {
        if let Some(bad) = writes.iter().find(|w| w.store >= self.stores.len()) {
            return Err(StateError::Backend(format!("no store #{}", bad.store)));
        }
        for write in writes {
            let map = &mut self.stores[write.store];
            match &write.value {
                Some(value) => {
                    map.insert(write.key.clone(), value.clone());
                }
                None => {
                    map.remove(&write.key);
                }
            }
        }
        for (key, value) in meta {
            self.meta.insert(key.clone(), value.clone());
        }
        Ok(())
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.meta.get(key).cloned())
    }
}

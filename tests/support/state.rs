//! What a stopped application's state directory holds, store by store.

use std::collections::BTreeMap;
use std::path::Path;

/// Every store's contents in a stopped application's state directory
/// (`<state_dir>/<app>/<task>`): `"<task>/<store>"` → key → value, read straight from RocksDB (each
/// task's column families but the default one, which holds only the
/// runtime's metadata: changelog offsets, event time).
pub type StateDump = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

pub fn dump_state(state_dir: &Path, app: &str) -> StateDump {
    let mut dump = StateDump::new();
    let Ok(tasks) = std::fs::read_dir(state_dir.join(app)) else {
        return dump;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = task.file_name().to_string_lossy().to_string();
        let options = rocksdb::Options::default();
        let Ok(families) = rocksdb::DB::list_cf(&options, &path) else {
            continue;
        };
        let db = rocksdb::DB::open_cf_for_read_only(&options, &path, &families, false)
            .unwrap_or_else(|e| panic!("cannot open the state at {}: {e}", path.display()));
        for family in families
            .iter()
            .filter(|f| *f != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
        {
            let cf = db.cf_handle(family).unwrap();
            let entries: BTreeMap<Vec<u8>, Vec<u8>> = db
                .iterator_cf(cf, rocksdb::IteratorMode::Start)
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            if !entries.is_empty() {
                dump.insert(format!("{name}/{family}"), entries);
            }
        }
    }
    dump
}

/// Fails, naming the first differences, unless `restored` holds exactly
/// what `live` holds (callers check `live` is not empty where it must
/// hold something, so the comparison is not vacuous).
pub fn assert_same_state(live: &StateDump, restored: &StateDump, what: &str) {
    assert_restored(live, restored, what, false);
}

/// [`assert_same_state`] for at least once, where the changelog is not
/// transactional: a batch written and then replayed after an abort left
/// its writes there. Replayed, it writes the same values again but for
/// processing-time timers, whose keys hold the deadline: the first
/// attempt's timers come back in a restore, stale (the key's live timer
/// has another deadline), and fire as no-ops. Those, and only those, may
/// be restored beyond the live state.
pub fn assert_same_state_at_least_once(live: &StateDump, restored: &StateDump, what: &str) {
    assert_restored(live, restored, what, true);
}

/// Bytes of a timer key before the fold key: clock and deadline
/// (`src/state/timers.rs`).
const TIMER_HEADER: usize = 9;

fn assert_restored(live: &StateDump, restored: &StateDump, what: &str, stale_timers: bool) {
    let mut differences = Vec::new();
    let mut stale = 0usize;
    let stores: std::collections::BTreeSet<&String> = live.keys().chain(restored.keys()).collect();
    let empty = BTreeMap::new();
    for store in stores {
        let a = live.get(store).unwrap_or(&empty);
        let b = restored.get(store).unwrap_or(&empty);
        for key in a
            .keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (x, y) = (a.get(key), b.get(key));
            let stale_timer = || {
                let of = |k: &Vec<u8>| k.get(TIMER_HEADER..).map(<[u8]>::to_vec);
                store.ends_with("-timers")
                    && of(key).is_some_and(|fold| a.keys().any(|k| of(k).as_ref() == Some(&fold)))
            };
            if stale_timers && x.is_none() && y.is_some() && stale_timer() {
                stale += 1;
                continue;
            }
            if x != y {
                let show = |v: Option<&Vec<u8>>| {
                    v.map_or("(absent)".to_string(), |v| {
                        String::from_utf8_lossy(v).to_string()
                    })
                };
                differences.push(format!(
                    "{store} {:?}: live {} / restored {}",
                    String::from_utf8_lossy(key),
                    show(x),
                    show(y)
                ));
            }
        }
    }
    let keys: usize = live.values().map(BTreeMap::len).sum();
    assert!(
        differences.is_empty(),
        "{what}: a from-scratch restore does not reproduce the state ({} differences over {keys} live keys), first ones:\n{}",
        differences.len(),
        differences
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    if stale > 0 {
        eprintln!("{what}: {stale} stale timers restored (at least once)");
    }
}

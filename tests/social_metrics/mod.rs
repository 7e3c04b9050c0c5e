//! The social-metrics topology as the broker tests of `streamfold run`
//! drive it (`tests/runtime.rs`, `fencing.rs`, `start_offsets.rs`,
//! `frozen_broker.rs`): one test's topic and application names, the event
//! stream, and the one folded event each account must get.
//!
//! Folds close only by `max_events` (every account gets exactly
//! [`PER_ACCOUNT`] events, and quiet/max-wait are set far away), so the
//! expected output is exact: one folded event per account, whatever
//! restarts, rebalances or crashes happen on the way. Events come in
//! blocks of [`ACTIVE`] interleaved accounts, so folds complete all along
//! the stream.

// Each test binary uses its own part of the fixture.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use streamfold::testkit::article::METRICS;

use crate::support::*;

/// Events per account; a fold closes once it holds this many.
pub const PER_ACCOUNT: u64 = 100;
/// Accounts receiving events at the same time.
pub const ACTIVE: u64 = 20;

/// Names of one test's topics and application.
pub struct Names {
    pub app: String,
    pub source: String,
    pub folded: String,
    pub dlq: String,
}

impl Names {
    pub fn new(test: &str) -> Names {
        Names {
            app: unique(&format!("sf-{test}")),
            source: unique("post-metric-updated"),
            folded: unique("account-metrics-folded"),
            dlq: unique("dlq"),
        }
    }

    /// The topology's variables; with `exact`, folds close only when they
    /// hold [`PER_ACCOUNT`] events.
    pub fn env(&self, exact: bool) -> Vec<(String, String)> {
        let mut env = vec![
            ("STREAMFOLD_APP".to_string(), self.app.clone()),
            ("POST_METRICS_TOPIC".to_string(), self.source.clone()),
            ("FOLDED_TOPIC".to_string(), self.folded.clone()),
            ("DEAD_LETTER_TOPIC".to_string(), self.dlq.clone()),
        ];
        if exact {
            env.push(("FOLD_QUIET_FOR".into(), "10m".into()));
            env.push(("FOLD_MAX_WAIT".into(), "1h".into()));
            env.push(("FOLD_MAX_EVENTS".into(), PER_ACCOUNT.to_string()));
        }
        env
    }

    pub fn app(&self, instance: &str, state_dir: PathBuf, exact: bool) -> AppConfig {
        AppConfig {
            topology: repo().join("topologies/social-metrics.yaml"),
            instance: instance.to_string(),
            state_dir,
            env: self.env(exact),
            txn_header: true,
            args: Vec::new(),
        }
    }
}

/// The account of event `i`: blocks of `ACTIVE` accounts, each block
/// getting `PER_ACCOUNT` events per account, interleaved.
fn account_of(i: u64, accounts: u64) -> u64 {
    let block = i / (ACTIVE * PER_ACCOUNT);
    (block * ACTIVE + i % ACTIVE) % accounts
}

/// Event `i` of a stream over `accounts` accounts.
fn event(i: u64, accounts: u64) -> (String, Value) {
    let account = format!("account_{}", account_of(i, accounts));
    let value = json!({
        "post_id": format!("post_{}", i % 37),
        "account_id": account,
        "metrics": {METRICS[(i % 6) as usize]: i},
    });
    (account, value)
}

pub fn produce_range(
    producer: &TestProducer,
    topic: &str,
    range: std::ops::Range<u64>,
    accounts: u64,
) {
    for i in range {
        let (key, value) = event(i, accounts);
        producer.send_json(topic, &key, &value);
    }
    producer.flush();
}

/// What each account's single folded event must hold.
fn expected_folds(accounts: u64) -> BTreeMap<String, Value> {
    let mut metrics: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let mut posts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for i in 0..accounts * PER_ACCOUNT {
        let account = format!("account_{}", account_of(i, accounts));
        metrics
            .entry(account.clone())
            .or_default()
            .insert(METRICS[(i % 6) as usize]);
        posts
            .entry(account)
            .or_default()
            .insert(format!("post_{}", i % 37));
    }
    metrics
        .into_iter()
        .map(|(account, metrics)| {
            let posts: Vec<&String> = posts[&account].iter().collect();
            let value = json!({
                "account_id": account,
                "metrics": metrics.into_iter().collect::<Vec<_>>(),
                "posts": posts,
                "folded_count": PER_ACCOUNT,
                "closed_by": "max_events",
            });
            (account, value)
        })
        .collect()
}

/// The folded event without its timestamps, for comparison.
fn content(record: &Consumed) -> Value {
    let mut value = record.json();
    if let Some(map) = value.as_object_mut() {
        map.remove("first_event_at");
        map.remove("last_event_at");
    }
    value
}

/// Reads the folded topic until every account has its event.
pub fn read_folded(names: &Names, accounts: u64) -> Vec<Consumed> {
    read_topic(
        &names.folded,
        accounts as usize,
        Duration::from_secs(3),
        Duration::from_secs(240),
    )
}

/// Exactly one folded event per account, each exactly as expected.
pub fn assert_exact(outputs: &[Consumed], accounts: u64) {
    let expected = expected_folds(accounts);
    let grouped = by_key(outputs);
    let missing: Vec<&String> = expected
        .keys()
        .filter(|k| !grouped.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} accounts have no folded event, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for (account, records) in &grouped {
        assert_eq!(
            records.len(),
            1,
            "{account} was published {} times: {:?}",
            records.len(),
            records.iter().map(|r| r.json()).collect::<Vec<_>>()
        );
        assert_eq!(content(records[0]), expected[account], "{account}");
    }
    assert_eq!(outputs.len(), accounts as usize);
}

/// [`assert_exact`], a failure naming each copy's transaction as the
/// processes' journal describes it. The journal only explains: the verdict
/// is the topic's, read under read_committed.
pub fn assert_exact_naming_transactions(outputs: &[Consumed], journal: &TxnJournal, accounts: u64) {
    let expected = expected_folds(accounts);
    let grouped = by_key(outputs);
    assert_eq!(grouped.len(), accounts as usize, "nothing missing");
    for (account, records) in grouped {
        assert_eq!(
            records.len(),
            1,
            "{account}: {} copies: {:?}",
            records.len(),
            records
                .iter()
                .map(|r| {
                    let label = r.header("streamfold.txn").unwrap_or_default();
                    (label, journal.describe(label), r.json())
                })
                .collect::<Vec<_>>()
        );
        assert_eq!(content(records[0]), expected[&account], "{account}");
    }
}

/// `run` arguments that keep a transaction journal at `path`.
pub fn journal_args(path: &Path) -> Vec<String> {
    vec!["--txn-journal".into(), path.display().to_string()]
}

/// Creates the source with 4 partitions and produces every event of
/// `accounts` to it at once (a backlog); the partitions' end offsets.
pub fn produce_backlog(names: &Names, accounts: u64) -> Vec<i64> {
    create_topic(&names.source, 4);
    let producer = TestProducer::new();
    produce_range(
        &producer,
        &names.source,
        0..accounts * PER_ACCOUNT,
        accounts,
    );
    producer.ends(&names.source, 4)
}

/// Waits until the group has committed the source up to `end`, then reads
/// the folded topic to its end.
pub fn folded_once_committed(app: &App, names: &Names, end: &[i64]) -> Vec<Consumed> {
    wait_committed_to(
        app,
        &names.app,
        &names.source,
        end,
        Duration::from_secs(300),
    );
    read_to_end(&names.folded, Duration::from_secs(60))
}

/// Points `config` at a copy of its topology, written to `dir`, whose
/// transactions time out after `timeout`.
pub fn with_transaction_timeout(config: &mut AppConfig, dir: &Path, timeout: &str) {
    let topology = std::fs::read_to_string(&config.topology).unwrap().replace(
        "  commit_interval: ${STREAMFOLD_COMMIT_INTERVAL:-100ms}\n",
        &format!("  commit_interval: ${{STREAMFOLD_COMMIT_INTERVAL:-100ms}}\n  transaction_timeout: {timeout}\n"),
    );
    assert!(topology.contains(&format!("transaction_timeout: {timeout}")));
    config.topology = dir.join(format!("transactions-{timeout}.yaml"));
    std::fs::write(&config.topology, topology).unwrap();
}

//! Windowed counts over random streams, run offline through the same
//! driver as `streamfold test`: whatever the arrival order of records
//! (out of order, but never later than the grace period), every kind of
//! window emits exactly the counts a brute-force recount of the input
//! gives — once per window when emitting on close, and as the last update
//! of each window (retracted sessions left out) when emitting on update.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use streamfold::config::types::HumanDuration;
use streamfold::testkit::{Driver, VIRTUAL_EPOCH};
use streamfold::topology::{self, Topology};

const SIZE: i64 = 10_000;
const ADVANCE: i64 = 4_000;
const GAP: i64 = 5_000;
const GRACE: i64 = 6_000;

const KINDS: [(&str, &str); 4] = [
    ("tumbling", "size: 10s"),
    ("hopping", "size: 10s\n    advance: 4s"),
    ("sliding", "size: 10s"),
    ("session", "gap: 5s"),
];

fn topology() -> Arc<Topology> {
    let mut nodes = String::new();
    let mut sinks = String::new();
    for (kind, shape) in KINDS {
        for emit in ["on_close", "on_update"] {
            nodes.push_str(&format!(
                "  {kind}_{emit}:\n    type: window\n    input: events\n    window: {kind}\n    {shape}\n    grace: 6s\n    emit: {emit}\n    fields:\n      n: {{ rule: count }}\n"
            ));
            sinks.push_str(&format!(
                "  {kind}_{emit}_out: {{ topic: {kind}-{emit}, input: {kind}_{emit} }}\n"
            ));
        }
    }
    let text = format!(
        "
name: props
kafka: {{ bootstrap_servers: 'unused:9092' }}
processing: {{ punctuation_interval: 1s, idle_advance: 1m }}
sources:
  events: {{ topic: events, timestamp: /t }}
nodes:
{nodes}sinks:
{sinks}"
    );
    Arc::new(topology::load_str("props.yaml", &text, &|_| None).expect("a valid topology"))
}

/// A window as `(key, start, end)`, with its count.
type Counts = BTreeMap<(String, i64, i64), u64>;

/// Counts of every window of `kind` over `records` (key, time), by brute
/// force: each window's records, counted from the input.
fn recount(kind: &str, records: &[(String, i64)]) -> Counts {
    let mut by_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (key, t) in records {
        by_key.entry(key).or_default().push(*t);
    }
    let mut out = Counts::new();
    for (key, mut times) in by_key {
        times.sort_unstable();
        let count = |from: i64, to_inclusive: i64| {
            times
                .iter()
                .filter(|t| (from..=to_inclusive).contains(*t))
                .count() as u64
        };
        let mut windows: Vec<(i64, i64, u64)> = Vec::new();
        match kind {
            "tumbling" | "hopping" => {
                let advance = if kind == "tumbling" { SIZE } else { ADVANCE };
                let mut starts: Vec<i64> = times
                    .iter()
                    .flat_map(|t| {
                        let last = t - t.rem_euclid(advance);
                        (0..)
                            .map(move |i| last - i * advance)
                            .take_while(move |s| s + SIZE > *t)
                    })
                    .collect();
                starts.sort_unstable();
                starts.dedup();
                for s in starts {
                    windows.push((s, s + SIZE, count(s, s + SIZE - 1)));
                }
            }
            "sliding" => {
                let mut starts: Vec<i64> = times.iter().map(|t| t - SIZE).collect();
                for t in &times {
                    if times.iter().any(|u| u > t && *u <= t + SIZE) {
                        starts.push(t + 1);
                    }
                }
                starts.sort_unstable();
                starts.dedup();
                for s in starts {
                    windows.push((s, s + SIZE, count(s, s + SIZE)));
                }
            }
            _ => {
                let mut start = times[0];
                let mut end = times[0];
                let mut n = 0;
                for t in &times {
                    if *t - end > GAP {
                        windows.push((start, end, n));
                        start = *t;
                        n = 0;
                    }
                    end = *t;
                    n += 1;
                }
                windows.push((start, end, n));
            }
        }
        for (start, end, n) in windows {
            out.insert((key.to_string(), start, end), n);
        }
    }
    out
}

fn millis(value: &Value) -> i64 {
    let text = value.as_str().expect("a window time");
    let time = humantime::parse_rfc3339(text).expect("an RFC 3339 time");
    time.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - VIRTUAL_EPOCH
}

/// The windows a sink received: every one (on close, where a window
/// emitted twice is a failure), or the last update of each (on update,
/// tombstones removing a window).
fn received(driver: &Driver, topic: &str, final_only: bool) -> Result<Counts, String> {
    let mut out = Counts::new();
    for record in driver.received(topic) {
        let key = record.key.clone().unwrap_or_default();
        let (name, span) = key.split_once('@').ok_or("a windowed key")?;
        let value = record.value.as_ref().map_err(Clone::clone)?;
        if value.is_null() {
            let (start, end) = span.split_once('/').ok_or("a window in the key")?;
            out.remove(&(name.to_string(), millis(&json!(start)), millis(&json!(end))));
            continue;
        }
        let window = (
            value["key"].as_str().ok_or("a key field")?.to_string(),
            millis(&value["window_start"]),
            millis(&value["window_end"]),
        );
        let n = value["n"].as_u64().ok_or("a count")?;
        if out.insert(window.clone(), n).is_some() && final_only {
            return Err(format!("{window:?} was emitted twice on close"));
        }
    }
    Ok(out)
}

/// Records as (key, time offset), in arrival order: each at most `GRACE`
/// behind the latest time before it, so none is late. Times are mostly in
/// whole half-seconds, so window edges and gaps are hit exactly, not only
/// stepped over.
fn stream() -> impl Strategy<Value = Vec<(String, i64)>> {
    let ms = |max: i64| prop_oneof![(0..=max / 500).prop_map(|n| n * 500), 0..=max];
    prop::collection::vec((0u8..3, ms(3_000), ms(GRACE)), 1..60).prop_map(|steps| {
        let mut base = 0;
        steps
            .into_iter()
            .map(|(key, step, behind)| {
                base += step;
                (format!("k{key}"), (base - behind).max(0))
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn windowed_counts_equal_a_recount_of_the_input(records in stream()) {
        let mut driver = Driver::new(topology()).unwrap();
        for (key, t) in &records {
            driver
                .feed_json("events", Some(key), &json!({"t": VIRTUAL_EPOCH + t}))
                .unwrap();
        }
        // Idle for longer than `idle_advance` plus every window's close.
        driver.advance(HumanDuration::from_secs(600)).unwrap();
        for (kind, _) in KINDS {
            let expected = recount(kind, &records);
            let closed = received(&driver, &format!("{kind}-on_close"), true);
            prop_assert_eq!(closed.as_ref(), Ok(&expected), "{} on close", kind);
            let updated = received(&driver, &format!("{kind}-on_update"), false);
            prop_assert_eq!(updated.as_ref(), Ok(&expected), "{} on update", kind);
        }
    }
}

//! What a run wrote, checked against a recount of the input before its
//! figures are reported, for the workloads whose output a recount pins
//! down: page-views and orders-enriched, the same checks for every system.
//!
//! - **page-views**: every published window (one per page and window
//!   start, keyed `<page>@<start>/<end>`) holds exactly the views of its
//!   page and window that were not dead-lettered, counted (`views`) and
//!   their users as a sorted set (`users`); every view is in its window or
//!   in the dead-letter topic, never both; every window whose close (end
//!   plus grace) is behind the input's latest time by 5 s or more is
//!   published (the last windows stay open: nothing moves stream time past
//!   them); the views generated late (more than a window behind what their
//!   partition held before them) are all dead-lettered. A view on time
//!   that was dead-lettered anyway is counted and shown: it lagged its
//!   task's stream time by more than the grace (records re-keyed through
//!   a repartition topic arrive behind those that were not).
//! - **orders-enriched**: one output per order, keyed by its customer,
//!   its value the order's fields plus `customer`: `{name, tier}` of the
//!   customer's latest profile, or null when the table holds none
//!   (unknown or deleted); an order joined with an earlier state of its
//!   customer (processed before the table was loaded to its end) is
//!   counted and shown. Nothing is dead-lettered.
//!
//! A mismatch is reported with the first problems found (main.rs fails
//! the benchmark on it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{Map, Value};
use streamfold::record::json::parse_timestamp;

use crate::support::{Consumed, read_to_end};
use crate::systems::Launch;
use crate::workload::Workload;

/// How far behind the input's latest time a window must close to be
/// published for sure: each partition's stream time reaches that far.
const SURELY_CLOSED_MS: i64 = 5_000;
/// At most this many problems are listed.
const LISTED: usize = 12;

/// What the input says a run must write.
pub enum Expected {
    PageViews(PageViews),
    OrdersEnriched(Orders),
}

/// A view as the recount knows it.
type View = (String, i64, String);

pub struct PageViews {
    size: i64,
    grace: i64,
    /// Every view (page, time, user), with how many times it was sent.
    views: HashMap<View, u64>,
    /// The views more than a window behind their partition's latest time
    /// before them: late wherever they are processed.
    late: HashMap<View, u64>,
    latest: i64,
    /// The start of the first window of the views on time.
    first_window: i64,
    /// Where each view is in the input (partition, offset), for the
    /// problems' messages.
    positions: HashMap<View, Vec<(i32, i64)>>,
}

pub struct Orders {
    /// Each customer's values in the order of its partition (`None`: a
    /// tombstone).
    history: HashMap<String, Vec<Option<Value>>>,
    /// Each order's value by its id.
    orders: HashMap<String, Map<String, Value>>,
}

fn millis(duration: &str) -> i64 {
    humantime::parse_duration(duration)
        .expect("a duration")
        .as_millis() as i64
}

fn read(topic: &str) -> Vec<Consumed> {
    read_to_end(topic, Duration::from_secs(300))
}

/// A view's page, time and user, if the record is one.
fn view(record: &Consumed) -> Option<View> {
    let value: Value = serde_json::from_slice(record.payload.as_deref()?).ok()?;
    let page = value.get("page")?.as_str()?.to_string();
    let user = value.get("user")?.as_str()?.to_string();
    let at = parse_timestamp(value.get("viewed_at")?)?;
    Some((page, at, user))
}

/// The recount of `input` (and its table) for `workload`, when the
/// harness checks that workload.
pub fn expected(workload: Workload, input: &str) -> Option<Expected> {
    match workload {
        Workload::PageViews => {
            let mut views = HashMap::new();
            let mut late = HashMap::new();
            let size = millis(crate::workload::PAGE_VIEWS_WINDOW);
            let mut latest_of: HashMap<i32, i64> = HashMap::new();
            let mut positions: HashMap<View, Vec<(i32, i64)>> = HashMap::new();
            for record in read(input) {
                let view = view(&record).expect("page-views' input holds views");
                positions
                    .entry(view.clone())
                    .or_default()
                    .push((record.partition, record.offset));
                let partition_latest = latest_of.entry(record.partition).or_insert(i64::MIN);
                if view.1.saturating_add(size) < *partition_latest {
                    *late.entry(view.clone()).or_default() += 1;
                }
                *partition_latest = (*partition_latest).max(view.1);
                *views.entry(view).or_default() += 1;
            }
            let latest = latest_of.values().copied().max().unwrap_or(i64::MIN);
            let first = views
                .keys()
                .filter(|v| !late.contains_key(*v))
                .map(|v| v.1)
                .min()
                .unwrap_or(0);
            Some(Expected::PageViews(PageViews {
                size,
                grace: millis(crate::workload::PAGE_VIEWS_GRACE),
                views,
                late,
                latest,
                first_window: first - first.rem_euclid(size),
                positions,
            }))
        }
        Workload::OrdersEnriched => {
            let table = workload.table_topic(input).expect("a customers topic");
            let mut history: HashMap<String, Vec<Option<Value>>> = HashMap::new();
            for record in read(&table) {
                let key = record.key.clone().expect("customers are keyed");
                let value = record
                    .payload
                    .as_deref()
                    .map(|p| serde_json::from_slice(p).expect("a customer's profile is JSON"));
                history.entry(key).or_default().push(value);
            }
            let mut orders = HashMap::new();
            for record in read(input) {
                let Value::Object(order) = record.json() else {
                    panic!("orders-enriched's input holds orders as objects");
                };
                let id = order["order_id"].as_str().expect("an order id").to_string();
                orders.insert(id, order);
            }
            Some(Expected::OrdersEnriched(Orders { history, orders }))
        }
        _ => None,
    }
}

/// Problems found, the first [`LISTED`] kept, all counted.
#[derive(Default)]
struct Problems {
    listed: Vec<String>,
    count: usize,
}

impl Problems {
    fn add(&mut self, problem: String) {
        self.count += 1;
        if self.listed.len() < LISTED {
            self.listed.push(problem);
        }
    }

    fn result(&self, label: &str, summary: String) -> Result<String, String> {
        if self.count == 0 {
            Ok(summary)
        } else {
            Err(format!(
                "{label}: the output does not match the input ({} problems; {summary}):\n  {}",
                self.count,
                self.listed.join("\n  ")
            ))
        }
    }
}

/// Checks what `launch`'s run wrote (call it once the run has stopped):
/// a one-line summary, or what does not match.
pub fn check(expected: &Expected, launch: &Launch) -> Result<String, String> {
    match expected {
        Expected::PageViews(input) => check_page_views(input, launch),
        Expected::OrdersEnriched(input) => check_orders(input, launch),
    }
}

fn check_page_views(input: &PageViews, launch: &Launch) -> Result<String, String> {
    let mut problems = Problems::default();
    let window_of = |at: i64| at - at.rem_euclid(input.size);

    // Dead letters: each a view of the input, no more often than sent.
    let mut left = input.views.clone();
    let mut dropped: HashMap<View, u64> = HashMap::new();
    let dead_letters = read(&launch.dead_letters);
    for record in &dead_letters {
        match view(record) {
            Some(v) if left.get(&v).is_some_and(|&n| n > 0) => {
                if let Some(n) = left.get_mut(&v) {
                    *n -= 1;
                }
                *dropped.entry(v).or_default() += 1;
            }
            _ => problems.add(format!(
                "dead letter {:?} is not a view of the input (or one too many): {}",
                record.key,
                String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default())
            )),
        }
    }
    let late_total: u64 = input.late.values().sum();
    let late_dropped: u64 = input
        .late
        .iter()
        .map(|(v, &n)| n.min(dropped.get(v).copied().unwrap_or(0)))
        .sum();
    if late_dropped < late_total {
        problems.add(format!(
            "{} of the {late_total} views generated late were not dead-lettered",
            late_total - late_dropped
        ));
    }

    // What each window must hold: its views that were not dead-lettered.
    let mut windows: BTreeMap<(String, i64), BTreeMap<String, u64>> = BTreeMap::new();
    for ((page, at, user), n) in left {
        if n > 0 {
            *windows
                .entry((page, window_of(at)))
                .or_default()
                .entry(user)
                .or_default() += n;
        }
    }

    let mut published: BTreeSet<(String, i64)> = BTreeSet::new();
    let mut published_views = 0u64;
    let output = read(&launch.output);
    for record in &output {
        let value = record.json();
        let text = |field: &str| value.get(field).and_then(Value::as_str).map(String::from);
        let (Some(page), Some(start_text), Some(end_text)) =
            (text("page"), text("window_start"), text("window_end"))
        else {
            problems.add(format!(
                "output {:?} lacks page or window: {value}",
                record.key
            ));
            continue;
        };
        let start = parse_timestamp(&Value::String(start_text.clone()));
        let end = parse_timestamp(&Value::String(end_text.clone()));
        let (Some(start), Some(end)) = (start, end) else {
            problems.add(format!("output {:?}: unreadable window times", record.key));
            continue;
        };
        let key = format!("{page}@{start_text}/{end_text}");
        if record.key.as_deref() != Some(key.as_str()) || end - start != input.size {
            problems.add(format!(
                "output {:?}: expected key {key} and a window of {} ms",
                record.key, input.size
            ));
        }
        if !published.insert((page.clone(), start)) {
            problems.add(format!("window {key} published twice"));
            continue;
        }
        let Some(users) = windows.get(&(page.clone(), start)) else {
            problems.add(format!(
                "window {key} published but no view of it was accepted"
            ));
            continue;
        };
        let views: u64 = users.values().sum();
        let names: Vec<Value> = users.keys().map(|u| Value::String(u.clone())).collect();
        published_views += views;
        let published_users = value.get("users").and_then(Value::as_array);
        if value.get("views").and_then(Value::as_u64) != Some(views)
            || published_users != Some(&names)
        {
            let had: BTreeSet<&str> = published_users
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let missing: Vec<String> = users
                .keys()
                .filter(|u| !had.contains(u.as_str()))
                .map(|u| {
                    // Where the input has this user's views of the window.
                    let at: Vec<String> = input
                        .positions
                        .iter()
                        .filter(|((p, t, v), _)| p == &page && v == u && window_of(*t) == start)
                        .flat_map(|(_, at)| at.iter().map(|(p, o)| format!("{p}:{o}")))
                        .collect();
                    format!("{u} at {}", at.join(" "))
                })
                .collect();
            let extra: Vec<&&str> = had.iter().filter(|u| !users.contains_key(**u)).collect();
            problems.add(format!(
                "window {key}: {views} views by {} users recounted, published {} views by {} users \
                 (users missing {missing:?}, extra {extra:?})",
                users.len(),
                value.get("views").unwrap_or(&Value::Null),
                had.len(),
            ));
        }
    }

    // Windows that closed on every partition must be out; the rest are
    // still open.
    let (mut open, mut open_views) = (0u64, 0u64);
    for ((page, start), users) in &windows {
        if published.contains(&(page.clone(), *start)) {
            continue;
        }
        let close = start + input.size + input.grace;
        if close <= input.latest - SURELY_CLOSED_MS {
            problems.add(format!(
                "window of {page} at {start} (closed at {close} ms) was not published"
            ));
        } else {
            open += 1;
            open_views += users.values().sum::<u64>();
        }
    }

    let dropped_total: u64 = dropped.values().sum();
    // The views dead-lettered on time, by window of event time.
    let mut behind: BTreeMap<i64, u64> = BTreeMap::new();
    for (view, &n) in &dropped {
        let on_time = n - n.min(input.late.get(view).copied().unwrap_or(0));
        if on_time > 0 {
            *behind.entry(window_of(view.1)).or_default() += on_time;
        }
    }
    let by_window = if behind.is_empty() {
        String::new()
    } else {
        let first = input.first_window;
        let parts: Vec<String> = behind
            .iter()
            .map(|(start, n)| format!("window {}: {n}", (start - first) / input.size))
            .collect();
        format!(": {}", parts.join(", "))
    };
    let summary = format!(
        "{} windows published with {published_views} views, each equal to a recount of the input; \
         {open} windows still open ({open_views} views); {dropped_total} views dead-lettered as late \
         ({late_dropped} generated late, {} on time but behind their task's stream time{by_window})",
        published.len(),
        dropped_total - late_dropped,
    );
    problems.result(&launch.label, summary)
}

/// jq's `{name, tier}` of a profile.
fn profile(value: &Value) -> Value {
    let field = |name: &str| value.get(name).cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    out.insert("name".into(), field("name"));
    out.insert("tier".into(), field("tier"));
    Value::Object(out)
}

fn check_orders(input: &Orders, launch: &Launch) -> Result<String, String> {
    let mut problems = Problems::default();
    let dead_letters = read(&launch.dead_letters);
    for record in &dead_letters {
        problems.add(format!(
            "dead letter {:?}: {} ({})",
            record.key,
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()),
            record
                .header("streamfold.dlq.reason")
                .or(record.header("__streams.errors.message"))
                .unwrap_or_default()
        ));
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let (mut with_customer, mut without, mut earlier) = (0u64, 0u64, 0u64);
    let output = read(&launch.output);
    for record in &output {
        let Value::Object(mut value) = record.json() else {
            problems.add(format!("output {:?} is not an object", record.key));
            continue;
        };
        let customer = value.remove("customer").unwrap_or(Value::Null);
        let id = value
            .get("order_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let Some(order) = input.orders.get(&id) else {
            problems.add(format!("output for an order not in the input: {id:?}"));
            continue;
        };
        if !seen.insert(id.clone()) {
            problems.add(format!("order {id} joined twice"));
            continue;
        }
        let customer_id = order["customer_id"].as_str().unwrap_or_default();
        if record.key.as_deref() != Some(customer_id) || &value != order {
            problems.add(format!(
                "order {id}: keyed {:?}, fields {value:?}; expected keyed {customer_id} with the order's fields",
                record.key
            ));
        }
        let history = input.history.get(customer_id);
        let latest = history
            .and_then(|h| h.last())
            .and_then(Option::as_ref)
            .map_or(Value::Null, profile);
        if customer == latest {
            if latest.is_null() {
                without += 1;
            } else {
                with_customer += 1;
            }
        } else if customer.is_null()
            || history.is_some_and(|h| h.iter().flatten().any(|v| profile(v) == customer))
        {
            earlier += 1;
        } else {
            problems.add(format!(
                "order {id} of {customer_id}: joined {customer}, a profile the customer never had"
            ));
        }
    }
    let missing = input.orders.len() - seen.len();
    if missing > 0 {
        problems.add(format!(
            "{missing} of {} orders have no output",
            input.orders.len()
        ));
    }
    let summary = format!(
        "{} orders each joined once: {with_customer} with their customer's latest profile, \
         {without} without one (unknown or deleted customer), {earlier} with an earlier state \
         of the table (processed before the table was read to its end); {} dead letters",
        seen.len(),
        dead_letters.len()
    );
    problems.result(&launch.label, summary)
}

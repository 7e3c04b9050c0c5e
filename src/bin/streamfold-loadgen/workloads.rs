//! The generators behind `produce --workload`: each event a function of
//! its number (through [`mix`]), so every run produces the same events and
//! a judge or a peer can recompute them.

use std::time::Duration;

use serde_json::json;

/// page-views' first window: 2026-01-01T00:00:00Z.
const PAGE_VIEWS_EPOCH_MS: u64 = 1_767_225_600_000;
/// The topology's window (`PAGE_VIEWS_WINDOW`, 5m).
const PAGE_VIEW_WINDOW_MS: u64 = 300_000;
/// How much event time a window's burst of views spans: past the previous
/// window's close (its end plus the 1-minute grace), so that window closes
/// during the burst.
const PAGE_VIEW_BURST_MS: u64 = 70_000;
/// How far behind its place a late view's time is: two windows, so its
/// window closed long before (a late view comes at least
/// [`LATE_VIEWS_FROM`] views into a burst, after views that moved the
/// stream time into the burst's window on every path).
const PAGE_VIEW_LATE_BY_MS: u64 = 2 * PAGE_VIEW_WINDOW_MS;
const LATE_VIEWS_FROM: u64 = 1_000;

/// Page view `i`, the `k`-th of the run, over `pages` pages and ten times
/// as many users: keyed by its view id, `viewed_at` a function of `k`.
///
/// Views come in bursts of `per_window`, one burst a 5-minute window: the
/// `j`-th view of burst `b` happened at `b × 5m + j × 70s / per_window`
/// after [`PAGE_VIEWS_EPOCH_MS`], so window `b - 1` closes (stream time at
/// its end plus the grace) six sevenths into burst `b`, and the last
/// burst's windows stay open. A system replaying the topic reads it far
/// faster than real time, and records re-keyed through a repartition topic
/// arrive behind those read directly; an on-time view is late only when it
/// lags six sevenths of a burst (`per_window × 6/7` views) behind the
/// records that set its task's stream time. One view in a hundred (from
/// the [`LATE_VIEWS_FROM`]-th of a burst on) is [`PAGE_VIEW_LATE_BY_MS`]
/// behind: late everywhere, dead-lettered.
pub(crate) fn page_view(
    i: u64,
    k: u64,
    pages: u64,
    per_window: u64,
) -> (String, serde_json::Value) {
    let r = mix(i);
    let (burst, j) = (k / per_window, k % per_window);
    let on_time =
        PAGE_VIEWS_EPOCH_MS + burst * PAGE_VIEW_WINDOW_MS + j * PAGE_VIEW_BURST_MS / per_window;
    let late = j >= LATE_VIEWS_FROM && (r >> 48).is_multiple_of(100);
    let at = if late {
        on_time - PAGE_VIEW_LATE_BY_MS
    } else {
        on_time
    };
    let viewed_at = std::time::UNIX_EPOCH + Duration::from_millis(at);
    let value = json!({
        "page": format!("/page/{}", r % pages),
        "user": format!("user_{}", (r >> 20) % (pages * 10)),
        "viewed_at": humantime::format_rfc3339_millis(viewed_at).to_string(),
    });
    (format!("view_{i}"), value)
}

/// Customer tiers, in the order an update moves a customer up.
const TIERS: [&str; 3] = ["bronze", "silver", "gold"];

/// orders-enriched's customers table over `customers` customers, keyed
/// by customer id: every profile, then an update for one customer in ten
/// (one tier up), then a tombstone for one in twenty. None is a
/// tombstone.
pub(crate) fn customers(customers: u64) -> Vec<(String, Option<serde_json::Value>)> {
    let id = |c: u64| format!("customer_{c}");
    let profile = |c: u64, up: u64| {
        let tier = (mix(c ^ 0x00C0_FFEE) % 3 + up).min(2);
        json!({"name": format!("Customer {c}"), "tier": TIERS[tier as usize]})
    };
    let mut out: Vec<(String, Option<serde_json::Value>)> = (0..customers)
        .map(|c| (id(c), Some(profile(c, 0))))
        .collect();
    out.extend(
        (0..customers)
            .filter(|c| c % 10 == 3)
            .map(|c| (id(c), Some(profile(c, 1)))),
    );
    out.extend(
        (0..customers)
            .filter(|c| c % 20 == 7)
            .map(|c| (id(c), None)),
    );
    out
}

/// Order `i`, keyed by its id, for one of `customers` customers or (one
/// in eleven) a customer the table does not hold.
pub(crate) fn order(i: u64, customers: u64) -> (String, serde_json::Value) {
    let r = mix(i);
    let customer = r % (customers + customers.div_ceil(10));
    let id = format!("order_{i}");
    let value = json!({
        "order_id": id,
        "customer_id": format!("customer_{customer}"),
        "amount": 1 + (r >> 16) % 500,
        "items": 1 + (r >> 40) % 5,
    });
    (id, value)
}

/// SplitMix64: the generators' choices, a function of the event number so
/// that every run produces the same events.
pub(crate) fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The question-feed generator: the next sequence of each question and
/// answer.
#[derive(Default)]
pub(crate) struct QuestionFeed {
    questions: std::collections::HashMap<u64, u64>,
    answers: std::collections::HashMap<u64, u64>,
}

impl QuestionFeed {
    /// Event `i` over `keys` questions and as many answers: its key, its
    /// value and how many times to send it.
    pub(crate) fn event(&mut self, i: u64, keys: u64) -> (String, serde_json::Value, u32) {
        let r = mix(i);
        let id = format!("event_{i}");
        let copies = if (r >> 56).is_multiple_of(10) { 2 } else { 1 };
        if r % 10 < 6 {
            let question = (r >> 8) % keys;
            let seq = self.questions.entry(question).or_insert(0);
            *seq += 1;
            let kind = match (*seq, (r >> 40) % 10) {
                (1, _) => "QuestionCreated",
                (_, 0..5) => "QuestionEdited",
                (_, 5..9) => "AnswerAdded",
                _ => "QuestionDeleted",
            };
            let question = format!("q{question}");
            let value = json!({"event_id": id, "type": kind, "question_id": question,
                "sequence": *seq, "title": format!("{question} title {seq}"),
                "author": format!("author of {question}")});
            (question, value, copies)
        } else {
            let answer = (r >> 8) % keys;
            let seq = self.answers.entry(answer).or_insert(0);
            *seq += 1;
            let answer = format!("a{answer}");
            let value = json!({"event_id": id, "type": "ThanksForAnswerGiven",
                "answer_id": answer, "totalThanks": *seq, "sequence": *seq});
            (answer, value, copies)
        }
    }
}

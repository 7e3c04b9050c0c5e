//! The social-metrics article's example, shared by the quickstart's load
//! generator, the tests and the benchmarks: its six post-metric-updated
//! events and the metric names generated events carry.

use serde_json::{Value, json};

/// Metric names of generated post-metric events.
pub const METRICS: [&str; 6] = [
    "likes",
    "shares",
    "comments",
    "impressions",
    "saves",
    "views",
];

/// The article's six events, in order: posts 1 to 6 over two accounts.
/// Folded per account they give `account_1` with metrics comments,
/// impressions, likes, shares and `account_2` with likes, shares.
pub fn events() -> Vec<Value> {
    [
        ("post_1", "account_1", json!({"likes": 10})),
        ("post_2", "account_1", json!({"shares": 2})),
        ("post_3", "account_2", json!({"likes": 3, "shares": 1})),
        ("post_4", "account_1", json!({"comments": 5, "likes": 11})),
        ("post_5", "account_2", json!({"likes": 4})),
        ("post_6", "account_1", json!({"impressions": 120})),
    ]
    .into_iter()
    .map(|(post, account, metrics)| json!({"post_id": post, "account_id": account, "metrics": metrics}))
    .collect()
}

//! Asking the owners of tasks that run elsewhere: one request per owner,
//! all sent at once and joined.
//!
//! A forwarded request carries the header [`FORWARDED`], `tasks=<list>`,
//! keys in base64url (`key_encoding=base64`, so that any key survives the
//! hop) and the bearer token when one is set. The owner answers from its
//! own tasks only, always as `{entries: [...]}`. Its answer becomes ours:
//! entries are entries (none, for a lookup, is `404`); a `503`, a timeout
//! or no connection is `503` (ask again); any other status (a token the
//! instances do not share, another version of the topology) is `502`, which
//! asking again will not cure.
//!
//! The client is hyper's (hyper-util's pooled legacy client, keep-alive):
//! the server is axum on the same hyper; a second HTTP stack would add
//! weight for nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::header::AUTHORIZATION;
use hyper::{Request, StatusCode, Uri};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::QueryableStore;
use super::keys::{KeyEncoding, ScanBounds, base64url};
use super::reads::{Found, GROUP_BOUNDS, Op};
use super::server::{Context, FORWARDED, Refusal};

/// How long a forwarded request may take before the answer is `503`
/// (`queries.request_timeout` bounds the whole request as well).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// `op` for the tasks of each owner in `remote` (address → tasks), every
/// owner asked at once; the answers in `remote`'s order.
pub(crate) async fn fan_out(
    context: &Arc<Context>,
    store: &QueryableStore,
    op: &Op,
    remote: BTreeMap<String, Vec<i32>>,
) -> Vec<Result<Vec<Found>, Refusal>> {
    let asked: Vec<_> = remote
        .into_iter()
        .map(|(address, tasks)| {
            let (context, store, op) = (Arc::clone(context), store.clone(), op.clone());
            tokio::spawn(async move { forward(&context, &address, &store, &op, &tasks).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(asked.len());
    for answer in asked {
        answers.push(answer.await.unwrap_or_else(|e| {
            Err(Refusal::Unavailable(format!(
                "a forwarded query did not finish: {e}"
            )))
        }));
    }
    answers
}

/// The path and query string that ask an owner for `op` on `tasks`.
fn forwarded_path(store: &QueryableStore, op: &Op, tasks: &[i32]) -> String {
    let store = utf8_percent_encode(&store.name, NON_ALPHANUMERIC);
    let list: Vec<String> = tasks.iter().map(i32::to_string).collect();
    let common = format!("key_encoding=base64&tasks={}", list.join(","));
    match op {
        Op::Get(key) => format!("/v1/stores/{store}/keys/{}?{common}", base64url(key)),
        Op::Scan { bounds, limit } | Op::Windows { bounds, limit } => {
            let mut path = format!("/v1/stores/{store}?{common}&limit={limit}");
            if matches!(op, Op::Windows { .. }) {
                path.push('&');
                path.push_str(GROUP_BOUNDS);
            }
            if !bounds.prefix.is_empty() {
                path.push_str(&format!("&prefix={}", base64url(&bounds.prefix)));
            }
            for (name, key) in [("from", &bounds.from), ("to", &bounds.to)] {
                if let Some(key) = key {
                    path.push_str(&format!("&{name}={}", base64url(key)));
                }
            }
            if let Some(after) = &bounds.after {
                path.push_str(&format!("&cursor={}", ScanBounds::cursor(after)));
            }
            path
        }
    }
}

async fn forward(
    context: &Context,
    address: &str,
    store: &QueryableStore,
    op: &Op,
    tasks: &[i32],
) -> Result<Vec<Found>, Refusal> {
    let failed = |why: String| {
        tracing::debug!(%address, %why, "A forwarded query failed.");
        Refusal::Unavailable(format!(
            "the owner of partitions {tasks:?} ({address}) did not answer: {why}"
        ))
    };
    let scheme = context.client.scheme();
    let uri: Uri = format!("{scheme}://{address}{}", forwarded_path(store, op, tasks))
        .parse()
        .map_err(|e| failed(format!("bad address: {e}")))?;
    let mut request = Request::get(uri).header(FORWARDED, &context.instance);
    if let Some(token) = &context.token {
        request = request.header(AUTHORIZATION, format!("Bearer {}", token.expose()));
    }
    let request = request
        .body(Empty::new())
        .map_err(|e| failed(e.to_string()))?;
    let response = tokio::time::timeout(FORWARD_TIMEOUT, context.client.request(request))
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    let body = tokio::time::timeout(FORWARD_TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))?;
    let message = || body["error"].as_str().unwrap_or("no reason").to_string();
    match status {
        StatusCode::OK => found_in(&body)
            .ok_or_else(|| failed("an entry has no base64url key: another version?".into())),
        StatusCode::NOT_FOUND if matches!(op, Op::Get(_)) && message() == "no such key" => {
            Ok(Vec::new())
        }
        StatusCode::SERVICE_UNAVAILABLE => Err(Refusal::Unavailable(message())),
        other => {
            tracing::warn!(%address, status = %other, error = %message(), "An instance refused a forwarded query.");
            Err(Refusal::Status(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the owner of partitions {tasks:?} ({address}) refused the forwarded query: {other}: {}",
                    message()
                ),
            ))
        }
    }
}

/// The entries of an owner's answer, keys in base64url (`None`: one is
/// not).
fn found_in(body: &Value) -> Option<Vec<Found>> {
    let entries = body["entries"].as_array().map_or(&[][..], Vec::as_slice);
    entries
        .iter()
        .map(|e| {
            let key = KeyEncoding::Base64
                .decode(e["key"].as_str()?.as_bytes())
                .ok()?;
            Some(Found {
                key,
                partition: e["partition"]
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    .unwrap_or(-1),
                value: e["value"].clone(),
            })
        })
        .collect()
}

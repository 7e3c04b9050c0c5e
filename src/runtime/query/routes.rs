//! The routes of the query server, on axum: which handler answers which
//! path, the bearer token checked before any of them, `404` for other
//! paths and `405` with `Allow` for other methods, and `503` for a request
//! not answered within `queries.request_timeout`.
//!
//! The handlers under a store read the store's name and the key from the
//! raw path themselves: a key is percent-decoded bytes, which need not be
//! UTF-8 (axum's path extractors require it).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use serde_json::{Value, json};

use super::QueryableStore;
use super::keys::{KeyEncoding, percent_decode, query_params};
use super::server::{Context, FORWARDED, Reply, error, reply, unavailable};
use super::{metadata, reads};
use crate::secrets::Secret;
use crate::telemetry;

/// Every route of the API, behind the token check.
pub(crate) fn router(context: Arc<Context>) -> Router {
    Router::new()
        .route("/v1/stores", get(stores))
        .route("/v1/instances", get(instances))
        .route("/v1/stores/{store}", get(store))
        .route("/v1/stores/{store}/keys/{key}", get(store))
        .route("/v1/stores/{store}/keys/{key}/metadata", get(store))
        .fallback(no_such_path)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&context),
            time_limit,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&context),
            authorize,
        ))
        // Outermost: refusals of the token check are counted too.
        .layer(middleware::from_fn_with_state(
            Arc::clone(&context),
            measure,
        ))
        .with_state(context)
}

/// Counts and times every request, by [`route_of`] its path and by status.
async fn measure(State(context): State<Arc<Context>>, request: Request, next: Next) -> Response {
    let route = route_of(request.uri().path());
    let started = Instant::now();
    let response = next.run(request).await;
    let app = context.topology.name.clone();
    let status = response.status().as_u16().to_string();
    metrics::counter!(telemetry::QUERY_REQUESTS, "topology" => app.clone(), "route" => route, "status" => status)
        .increment(1);
    metrics::histogram!(telemetry::QUERY_DURATION, "topology" => app, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// The route a path asks for, as a bounded label: `stores`, `instances`,
/// `scan`, `lookup`, `metadata`, or `other` (no route serves it).
pub(crate) fn route_of(path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "stores"] => "stores",
        ["v1", "instances"] => "instances",
        ["v1", "stores", store] if !store.is_empty() => "scan",
        ["v1", "stores", _, "keys", _] => "lookup",
        ["v1", "stores", _, "keys", _, "metadata"] => "metadata",
        _ => "other",
    }
}

/// `503` with `Retry-After` for a request not answered within
/// `queries.request_timeout`; what it waited for (a forwarded request, a
/// long scan) is dropped.
async fn time_limit(State(context): State<Arc<Context>>, request: Request, next: Next) -> Response {
    let limit = context.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => unavailable(format!(
            "not answered within queries.request_timeout ({})",
            humantime::format_duration(limit)
        ))
        .into_response(),
    }
}

/// `401` unless the request carries the token (when one is set).
async fn authorize(State(context): State<Arc<Context>>, request: Request, next: Next) -> Response {
    if authorized(context.token.as_ref(), request.headers()) {
        return next.run(request).await;
    }
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "this server needs `Authorization: Bearer <queries.token>`",
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response.into_response()
}

async fn stores(State(context): State<Arc<Context>>) -> Reply {
    list_stores(&context)
}

async fn instances(State(context): State<Arc<Context>>) -> Reply {
    metadata::instances(&context)
}

async fn no_such_path() -> Reply {
    error(
        StatusCode::NOT_FOUND,
        "not found; try /v1/stores, /v1/instances, /v1/stores/<store>, /v1/stores/<store>/keys/<key> or /v1/stores/<store>/keys/<key>/metadata",
    )
}

async fn method_not_allowed() -> Reply {
    error(StatusCode::METHOD_NOT_ALLOWED, "only GET is served")
}

/// `/v1/stores/<store>` (a scan), `…/keys/<key>` (a lookup) and
/// `…/keys/<key>/metadata`.
async fn store(State(context): State<Arc<Context>>, request: Request) -> Reply {
    let params = query_params(request.uri());
    let encoding = match KeyEncoding::from_params(&params) {
        Ok(encoding) => encoding,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let forwarded = request.headers().contains_key(FORWARDED);
    // Owned: nothing of the request is borrowed across an await.
    let path = request.uri().path().to_string();
    drop(request);
    // `/v1/stores/` and then the store's segments.
    let segments: Vec<&str> = path.split('/').skip(3).collect();
    let Some((name, rest)) = segments.split_first() else {
        return no_such_path().await;
    };
    let Some(store) = find_store(&context, name) else {
        return unknown_store(&context, name);
    };
    match rest {
        [] => reads::scan(&context, store, &params, encoding, forwarded).await,
        ["keys", key] => reads::lookup(&context, store, key, encoding, &params, forwarded).await,
        ["keys", key, "metadata"] => metadata::key(&context, store, key, encoding),
        _ => no_such_path().await,
    }
}

/// Whether `headers` carry the bearer `token` (always, without one).
fn authorized(token: Option<&Secret>, headers: &HeaderMap) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, given)| given.trim());
    given.is_some_and(|given| same_bytes(given.as_bytes(), token.expose().as_bytes()))
}

/// Equality that takes as long whichever byte differs, so that the time
/// of a refusal says nothing of the token.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn list_stores(context: &Context) -> Reply {
    let stores: Vec<Value> = context
        .stores
        .iter()
        .map(|s| {
            let node = &context.topology.nodes[s.node];
            json!({
                "name": s.name,
                "node": node.name,
                "type": node.kind.type_name(),
                "keyed_by": node.common.key_by.as_ref().map_or_else(
                    || "the record key".to_string(),
                    |p| p.to_string(),
                ),
            })
        })
        .collect();
    reply(
        StatusCode::OK,
        &json!({
            "topology": context.topology.name,
            "instance": context.instance,
            "partitions": context.state.partitions(),
            "running": context.state.running(),
            "stores": stores,
        }),
    )
}

fn find_store<'a>(context: &'a Context, name: &str) -> Option<&'a QueryableStore> {
    let name = String::from_utf8_lossy(&percent_decode(name)).into_owned();
    context.stores.iter().find(|s| s.name == name)
}

fn unknown_store(context: &Context, name: &str) -> Reply {
    let names: Vec<&str> = context.stores.iter().map(|s| s.name.as_str()).collect();
    reply(
        StatusCode::NOT_FOUND,
        &json!({
            "error": format!("no queryable store `{}`", String::from_utf8_lossy(&percent_decode(name))),
            "stores": names,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_token_is_authorized() {
        let token = Secret::new("s3cret");
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(authorized(None, &HeaderMap::new()));
        assert!(!authorized(Some(&token), &HeaderMap::new()));
        assert!(authorized(Some(&token), &headers("Bearer s3cret")));
        assert!(authorized(Some(&token), &headers("bearer s3cret")));
        assert!(!authorized(Some(&token), &headers("Bearer s3cre")));
        assert!(!authorized(Some(&token), &headers("Bearer s3cret!")));
        assert!(!authorized(Some(&token), &headers("Basic s3cret")));
    }

    /// Every path the router serves has its own route label, and no other
    /// path can add one.
    #[test]
    fn a_path_is_labelled_with_its_route() {
        for (path, route) in [
            ("/v1/stores", "stores"),
            ("/v1/instances", "instances"),
            ("/v1/stores/by_id-latest", "scan"),
            ("/v1/stores/by_id-latest/keys/user%2F1", "lookup"),
            ("/v1/stores/by_id-latest/keys/u/metadata", "metadata"),
            ("/v1/stores/", "other"),
            ("/v2", "other"),
            ("/v1/stores/s/keys/k/other", "other"),
        ] {
            assert_eq!(route_of(path), route, "{path}");
        }
    }
}

//! The in-process schema registry the integration tests use
//! (`support::registry`) answers as Confluent's REST API documents.

mod support;

use hyper::Method;
use serde_json::{Value, json};
use support::registry::{Routes, percent_decode};

fn state() -> Routes {
    Routes::new()
}

fn call(routes: &mut Routes, method: Method, path: &str, body: Value) -> (u16, Value) {
    routes.call(method, path, body)
}

const V1: &str = r#"{"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}]}"#;
const V2: &str = r#"{"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long", "default": 0}]}"#;
const BREAKING: &str =
    r#"{"type": "record", "name": "E", "fields": [{"name": "n", "type": "long"}]}"#;

#[test]
fn registering_versions_and_reading_them_back() {
    let mut s = state();
    let (status, body) = call(
        &mut s,
        Method::POST,
        "/subjects/orders-value/versions",
        json!({"schema": V1}),
    );
    assert_eq!((status, body), (200, json!({"id": 1})));
    // Same schema, other spacing: same id, no new version.
    let spaced = V1.replace(", ", ",   ");
    let (_, body) = call(
        &mut s,
        Method::POST,
        "/subjects/orders-value/versions",
        json!({"schema": spaced}),
    );
    assert_eq!(body, json!({"id": 1}));
    let (_, body) = call(
        &mut s,
        Method::POST,
        "/subjects/orders-value/versions",
        json!({"schema": V2}),
    );
    assert_eq!(body, json!({"id": 2}));
    // The same schema under another subject keeps its id.
    let (_, body) = call(
        &mut s,
        Method::POST,
        "/subjects/other%2Dvalue/versions",
        json!({"schema": V1}),
    );
    assert_eq!(body, json!({"id": 1}));

    let (status, latest) = call(
        &mut s,
        Method::GET,
        "/subjects/orders-value/versions/latest",
        json!(null),
    );
    assert_eq!(status, 200);
    assert_eq!(
        latest,
        json!({"subject": "orders-value", "version": 2, "id": 2, "schema": V2})
    );
    let (_, first) = call(
        &mut s,
        Method::GET,
        "/subjects/orders-value/versions/1",
        json!(null),
    );
    assert_eq!(first["id"], 1);
    let (_, by_id) = call(&mut s, Method::GET, "/schemas/ids/2", json!(null));
    assert_eq!(by_id, json!({"schema": V2}));
    let (_, versions) = call(
        &mut s,
        Method::GET,
        "/subjects/orders-value/versions",
        json!(null),
    );
    assert_eq!(versions, json!([1, 2]));
    let (_, subjects) = call(&mut s, Method::GET, "/subjects", json!(null));
    assert_eq!(subjects, json!(["orders-value", "other-value"]));
    let (_, places) = call(&mut s, Method::GET, "/schemas/ids/1/versions", json!(null));
    assert_eq!(
        places,
        json!([{"subject": "orders-value", "version": 1}, {"subject": "other-value", "version": 1}])
    );
    let (_, found) = call(
        &mut s,
        Method::POST,
        "/subjects/orders-value",
        json!({"schema": V2}),
    );
    assert_eq!(found["version"], 2);
}

#[test]
fn unknown_ids_subjects_and_versions_use_confluent_error_codes() {
    let mut s = state();
    let (status, body) = call(&mut s, Method::GET, "/schemas/ids/7", json!(null));
    assert_eq!((status, body["error_code"].clone()), (404, json!(40403)));
    let (status, body) = call(
        &mut s,
        Method::GET,
        "/subjects/nope/versions/latest",
        json!(null),
    );
    assert_eq!((status, body["error_code"].clone()), (404, json!(40401)));
    call(
        &mut s,
        Method::POST,
        "/subjects/a/versions",
        json!({"schema": V1}),
    );
    let (status, body) = call(&mut s, Method::GET, "/subjects/a/versions/9", json!(null));
    assert_eq!((status, body["error_code"].clone()), (404, json!(40402)));
    let (status, body) = call(
        &mut s,
        Method::POST,
        "/subjects/a/versions",
        json!({"schema": "{\"type\": \"nope\"}"}),
    );
    assert_eq!((status, body["error_code"].clone()), (422, json!(42201)));
    let (status, _) = call(&mut s, Method::DELETE, "/subjects/a", json!(null));
    assert_eq!(status, 405);
}

#[test]
fn backward_incompatible_versions_are_refused_unless_compatibility_is_none() {
    let mut s = state();
    call(
        &mut s,
        Method::POST,
        "/subjects/a/versions",
        json!({"schema": V1}),
    );
    let (status, body) = call(
        &mut s,
        Method::POST,
        "/subjects/a/versions",
        json!({"schema": BREAKING}),
    );
    assert_eq!((status, body["error_code"].clone()), (409, json!(409)));
    let (_, body) = call(
        &mut s,
        Method::PUT,
        "/config",
        json!({"compatibility": "NONE"}),
    );
    assert_eq!(body, json!({"compatibility": "NONE"}));
    let (status, _) = call(
        &mut s,
        Method::POST,
        "/subjects/a/versions",
        json!({"schema": BREAKING}),
    );
    assert_eq!(status, 200);
}

#[test]
fn percent_escapes_decode_in_paths() {
    assert_eq!(percent_decode("team%2Forders-value"), "team/orders-value");
    assert_eq!(percent_decode("100%"), "100%");
}

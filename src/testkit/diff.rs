//! Compares what a topic received with what a case expects: per key, in
//! order; across keys, in any order. Differences read field by field.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::{Expected, Received};

fn show_key(key: &Option<String>) -> String {
    match key {
        Some(k) => format!("key {k:?}"),
        None => "no key".to_string(),
    }
}

fn show_value(value: &Result<Value, String>) -> String {
    match value {
        Ok(v) => v.to_string(),
        Err(raw) => format!("raw {raw:?}"),
    }
}

/// Field-level differences between two JSON values, as pointer lines.
fn value_diff(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}/{k}");
                match a.get(k) {
                    Some(av) => value_diff(&p, ev, av, out),
                    None => out.push(format!("{p}: expected {ev}, but the field is missing")),
                }
            }
            for (k, av) in a {
                if !e.contains_key(k) {
                    out.push(format!("{path}/{k}: not expected, got {av}"));
                }
            }
        }
        _ if expected == actual => {}
        _ => {
            let at = if path.is_empty() { "value" } else { path };
            out.push(format!("{at}: expected {expected}, got {actual}"));
        }
    }
}

fn differences(expected: &Expected, actual: &Received) -> Vec<String> {
    let mut out = Vec::new();
    match (&expected.value, &actual.value) {
        (Ok(e), Ok(a)) => value_diff("", e, a, &mut out),
        (e, a) if e == a => {}
        (e, a) => out.push(format!(
            "value: expected {}, got {}",
            show_value(e),
            show_value(a)
        )),
    }
    for (name, value) in &expected.headers {
        match actual.headers.iter().rev().find(|(n, _)| n == name) {
            Some((_, got)) if got == value => {}
            Some((_, got)) => out.push(format!("header {name}: expected {value:?}, got {got:?}")),
            None => out.push(format!(
                "header {name}: expected {value:?}, but it is missing"
            )),
        }
    }
    if let (Some(e), Some(a)) = (expected.timestamp, actual.timestamp)
        && e != a
    {
        out.push(format!(
            "timestamp: expected {}, got {}",
            crate::record::json::rfc3339_millis(e),
            crate::record::json::rfc3339_millis(a)
        ));
    }
    out
}

/// `None` when `actual` matches `expected`; otherwise a report.
pub(crate) fn compare(topic: &str, expected: &[Expected], actual: &[Received]) -> Option<String> {
    let mut by_key: BTreeMap<Option<String>, (Vec<&Expected>, Vec<&Received>)> = BTreeMap::new();
    for e in expected {
        by_key.entry(e.key.clone()).or_default().0.push(e);
    }
    for a in actual {
        by_key.entry(a.key.clone()).or_default().1.push(a);
    }
    let mut report = String::new();
    for (key, (expected, actual)) in &by_key {
        for i in 0..expected.len().max(actual.len()) {
            match (expected.get(i), actual.get(i)) {
                (Some(e), Some(a)) => {
                    let diffs = differences(e, a);
                    if !diffs.is_empty() {
                        let _ = writeln!(
                            report,
                            "  {}, record {} (expected line {}):",
                            show_key(key),
                            i + 1,
                            e.line
                        );
                        for d in diffs {
                            let _ = writeln!(report, "      {d}");
                        }
                    }
                }
                (Some(e), None) => {
                    let _ = writeln!(
                        report,
                        "  {}, record {}: missing (expected line {}): {}",
                        show_key(key),
                        i + 1,
                        e.line,
                        show_value(&e.value)
                    );
                }
                (None, Some(a)) => {
                    let _ = writeln!(
                        report,
                        "  {}, record {}: not expected: {}",
                        show_key(key),
                        i + 1,
                        show_value(&a.value)
                    );
                }
                (None, None) => {}
            }
        }
    }
    (!report.is_empty()).then(|| format!("topic {topic}:\n{report}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn expected(key: &str, value: Value) -> Expected {
        Expected {
            line: 1,
            key: Some(key.into()),
            value: Ok(value),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    fn received(key: &str, value: Value) -> Received {
        Received {
            key: Some(key.into()),
            value: Ok(value),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    #[test]
    fn order_across_keys_does_not_matter_but_within_a_key_it_does() {
        let e = [
            expected("a", json!(1)),
            expected("b", json!(2)),
            expected("a", json!(3)),
        ];
        let across = [
            received("b", json!(2)),
            received("a", json!(1)),
            received("a", json!(3)),
        ];
        assert_eq!(compare("t", &e, &across), None);
        let within = [
            received("a", json!(3)),
            received("b", json!(2)),
            received("a", json!(1)),
        ];
        assert!(compare("t", &e, &within).is_some());
    }

    #[test]
    fn reports_name_the_fields_that_differ() {
        let e = [expected("a", json!({"n": 1, "m": ["x"]}))];
        let a = [received("a", json!({"n": 2, "m": ["x"], "extra": true}))];
        let report = compare("out", &e, &a).unwrap();
        assert!(report.contains("/n: expected 1, got 2"), "{report}");
        assert!(
            report.contains("/extra: not expected, got true"),
            "{report}"
        );
        let missing = compare("out", &e, &[]).unwrap();
        assert!(missing.contains("missing"), "{missing}");
    }
}

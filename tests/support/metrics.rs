//! Reading Prometheus text.

use std::collections::BTreeMap;

/// Sum of the samples `selector` picks in Prometheus text; a selector no
/// sample matches fails the test (a missing series is not a zero). A
/// selector is a metric name, optionally with the labels a sample must
/// carry, as in PromQL: `streamfold_fold_closed_total{cause="quiet"}`.
pub fn parse_metric(text: &str, selector: &str) -> f64 {
    find_metric(text, selector)
        .unwrap_or_else(|| panic!("no sample of {selector} in the metrics:\n{text}"))
}

/// Sum of the samples `selector` picks in Prometheus text (see
/// [`parse_metric`]), or `None` when no sample of it is there.
pub fn find_metric(text: &str, selector: &str) -> Option<f64> {
    let (name, wanted) = match selector.split_once('{') {
        Some((name, labels)) => (
            name,
            parse_labels(labels.strip_suffix('}').unwrap_or(labels)),
        ),
        None => (selector, BTreeMap::new()),
    };
    let samples: Vec<f64> = series(text, name)
        .into_iter()
        .filter(|(labels, _)| wanted.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|(_, value)| value)
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum())
}

/// Every sample of `name` in Prometheus text: its labels and value. Label
/// values are unescaped (`\"`, `\\`, `\n`).
pub fn series(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, labels) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.strip_suffix('}').unwrap_or(rest)),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        out.push((parse_labels(labels), value));
    }
    out
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

//! The side-by-side table: one row per system, each figure the median of
//! the runs with their spread, then the ratios the goals are stated in.

use crate::measure::RunFigures;
use crate::recovery::Recovery;
use crate::support::median;
use crate::systems::Kind;

/// What one system (or bare consumer setting) measured over the runs.
#[derive(Default)]
pub struct Row {
    pub label: String,
    /// `None`: a bare consumer.
    pub kind: Option<Kind>,
    /// Exactly-once (the peers always are).
    pub exactly_once: bool,
    /// Several streamfold instances (latency and recovery are measured
    /// with one).
    pub several_instances: bool,
    pub runs: Vec<RunFigures>,
    /// Per latency run: p50 and p99, ms.
    pub p50: Vec<f64>,
    pub p99: Vec<f64>,
    pub recovery: Vec<Recovery>,
    /// Per run whose output was checked (verify.rs): what the check found.
    pub checks: Vec<String>,
}

/// `median (min–max)`, each with `digits` decimals, or empty.
fn spread(values: &[f64], digits: usize) -> String {
    if values.is_empty() {
        return String::new();
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let f = |v: f64| thousands(v, digits);
    if values.len() == 1 {
        f(values[0])
    } else {
        format!("{} ({}–{})", f(median(values)), f(min), f(max))
    }
}

/// `1234567.8` as `1,234,568` (or with `digits` decimals).
fn thousands(value: f64, digits: usize) -> String {
    let text = format!("{value:.digits$}");
    let (whole, fraction) = text
        .split_once('.')
        .map_or((text.as_str(), ""), |(w, f)| (w, f));
    let (sign, whole) = whole.strip_prefix('-').map_or(("", whole), |w| ("-", w));
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if fraction.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{fraction}")
    }
}

impl Row {
    pub fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(RunFigures::rate).collect()
    }

    fn cpu(&self) -> Vec<f64> {
        self.runs.iter().map(RunFigures::cpu_per_million).collect()
    }

    fn broker_cpu(&self) -> Vec<f64> {
        self.runs
            .iter()
            .map(RunFigures::broker_cpu_per_million)
            .collect()
    }

    fn rss(&self) -> Vec<f64> {
        self.runs
            .iter()
            .map(|r| r.rss_mib)
            .filter(|&r| r > 0.0)
            .collect()
    }

    fn recovery_seconds(&self) -> Vec<f64> {
        self.recovery.iter().map(|r| r.seconds).collect()
    }
}

/// Prints the table of `rows` (Markdown).
pub fn table(rows: &[Row]) {
    println!(
        "| system | records/s | CPU s per 1M records | broker CPU s per 1M records | peak RSS MiB | latency p50 ms | latency p99 ms | restore + catch-up s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.label,
            spread(&row.rates(), 0),
            spread(&row.cpu(), 2),
            spread(&row.broker_cpu(), 2),
            spread(&row.rss(), 0),
            spread(&row.p50, 0),
            spread(&row.p99, 0),
            spread(&row.recovery_seconds(), 1),
        );
    }
}

/// The ratios the goals are stated in, from the medians of `rows`:
/// streamfold under exactly-once against each peer and the tuned bare
/// consumer.
pub fn ratios(rows: &[Row], tuned_bare: f64) {
    let Some(ours) = rows
        .iter()
        .find(|r| r.kind == Some(Kind::Streamfold) && r.exactly_once && !r.several_instances)
    else {
        return;
    };
    let m = |v: Vec<f64>| (!v.is_empty()).then(|| median(&v));
    let rate = median(&ours.rates());
    println!();
    println!(
        "- {}: {} records/s, {:.1} % of the tuned bare consumer ({} records/s)",
        ours.label,
        thousands(rate, 0),
        100.0 * rate / tuned_bare,
        thousands(tuned_bare, 0)
    );
    for peer in rows
        .iter()
        .filter(|r| matches!(r.kind, Some(Kind::KafkaStreams | Kind::Quix)) && !r.runs.is_empty())
    {
        let mut parts = vec![format!("records/s {:.1}×", rate / median(&peer.rates()))];
        parts.push(format!(
            "CPU per record {:.2} of its",
            median(&ours.cpu()) / median(&peer.cpu())
        ));
        if let (Some(a), Some(b)) = (m(ours.rss()), m(peer.rss())) {
            parts.push(format!("peak RSS {:.2} of its", a / b));
        }
        if let (Some(a), Some(b)) = (m(ours.p99.clone()), m(peer.p99.clone())) {
            parts.push(format!("p99 {a:.0} ms against {b:.0} ms"));
        }
        if let (Some(a), Some(b)) = (m(ours.recovery_seconds()), m(peer.recovery_seconds())) {
            parts.push(format!(
                "restore + catch-up {a:.1} s against {b:.1} s ({:.2})",
                a / b
            ));
        }
        println!("- against {}: {}", peer.label, parts.join(", "));
    }
}

/// What the checks of each row's runs found (verify.rs): the first run's
/// summary, and whether the others' differed.
pub fn checks(rows: &[Row]) {
    let checked: Vec<&Row> = rows.iter().filter(|r| !r.checks.is_empty()).collect();
    if checked.is_empty() {
        return;
    }
    println!();
    println!("Output checked against a recount of the input after every run:");
    for row in checked {
        let same = row.checks.iter().all(|c| *c == row.checks[0]);
        println!(
            "- {}: {}{}",
            row.label,
            row.checks[0],
            if same {
                format!(" (the same in all {} runs)", row.checks.len())
            } else {
                format!("; other runs: {}", row.checks[1..].join("; "))
            }
        );
    }
}

//! librdkafka's own verdict on a topology's client settings, for `check`:
//! a misspelled property, a value it does not take, a feature this build
//! lacks (a SASL mechanism without its library) or settings that
//! contradict each other fail `check` as they would fail `run`.
//!
//! Two passes. Each property of `kafka.properties`, `kafka.consumer` and
//! `kafka.producer` alone is set on a fresh librdkafka configuration
//! (`rd_kafka_conf_set`), which names the property it refuses. Then every
//! client `run` creates (group consumer, restore consumer, producer,
//! admin) is created from the configuration `run` would give it, with no
//! bootstrap servers so that nothing connects: `rd_kafka_new` makes the
//! checks that span properties and features.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

use super::settings::{self, RunOptions};
use crate::topology::Topology;

/// One setting librdkafka refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropertyProblem {
    /// Where the setting is: `["kafka", "consumer", "fetch.max.bytes"]`,
    /// or as close as can be told (`["kafka"]`).
    pub path: Vec<String>,
    /// librdkafka's words, with the client it was for.
    pub message: String,
}

/// The sections of `kafka` that hold librdkafka properties, in the order
/// a client applies them (a later one wins).
const SECTIONS: [&str; 3] = ["properties", "consumer", "producer"];

/// What librdkafka refuses in `topology`'s client settings; empty when it
/// takes them all.
pub fn librdkafka_problems(topology: &Topology) -> Vec<PropertyProblem> {
    let mut problems = Vec::new();
    for section in SECTIONS {
        for (key, value) in section_properties(topology, section) {
            let mut alone = ClientConfig::new();
            alone.set(key, value);
            if let Err(error) = alone.create_native_config() {
                problems.push(PropertyProblem {
                    path: vec!["kafka".into(), section.into(), key.clone()],
                    message: describe(&error),
                });
            }
        }
    }
    // Contradictions are only worth reporting once every property exists.
    if !problems.is_empty() {
        return problems;
    }
    let options = RunOptions {
        instance_id: "check".into(),
        ..RunOptions::default()
    };
    let clients: [(&str, ClientConfig, bool); 4] = [
        (
            "group consumer",
            settings::consumer_config(topology, &options),
            true,
        ),
        (
            "restore consumer",
            settings::restore_config(topology, &options),
            true,
        ),
        (
            "producer",
            settings::producer_config(topology, &options),
            false,
        ),
        (
            "admin client",
            settings::admin_config(topology, &options),
            false,
        ),
    ];
    for (client, mut settings, consumer) in clients {
        settings.set("bootstrap.servers", "");
        let created = if consumer {
            settings.create::<BaseConsumer>().map(drop)
        } else {
            settings.create::<BaseProducer>().map(drop)
        };
        if let Err(error) = created {
            let message = describe(&error);
            problems.push(PropertyProblem {
                path: locate(topology, &message, consumer),
                message: format!("{message} (creating the {client})"),
            });
            // The same settings fail the other clients alike.
            break;
        }
    }
    problems
}

fn section_properties<'t>(
    topology: &'t Topology,
    section: &str,
) -> &'t std::collections::BTreeMap<String, String> {
    match section {
        "consumer" => &topology.kafka.consumer,
        "producer" => &topology.kafka.producer,
        _ => &topology.kafka.properties,
    }
}

/// librdkafka's message, without rust-rdkafka's wrapping.
fn describe(error: &KafkaError) -> String {
    match error {
        KafkaError::ClientConfig(_, description, _, _) => description.clone(),
        KafkaError::ClientCreation(description) => description.clone(),
        other => other.to_string(),
    }
}

/// The setting a creation error is about: the first property it names
/// (librdkafka writes them in backquotes, or first, as in
/// `sasl.mechanisms`), in the section that sets it for that client.
fn locate(topology: &Topology, message: &str, consumer: bool) -> Vec<String> {
    let named: Vec<&str> = message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
        .filter(|w| w.contains('.') && w.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .collect();
    let own = if consumer { "consumer" } else { "producer" };
    let mut named = named;
    // "No provider for SASL mechanism X" names no property.
    if message.contains("SASL mechanism") {
        named.push("sasl.mechanisms");
        named.push("sasl.mechanism");
    }
    for name in named {
        for section in [own, "properties"] {
            if section_properties(topology, section).contains_key(name) {
                return vec!["kafka".into(), section.into(), name.into()];
            }
        }
        if name.starts_with("sasl.") || name.starts_with("ssl.") || name == "security.protocol" {
            return vec!["kafka".into(), "security".into()];
        }
    }
    vec!["kafka".into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(kafka: &str) -> Topology {
        let text = format!(
            "name: app
kafka:
  bootstrap_servers: localhost:9092
{kafka}
sources:
  events: {{ topic: events }}
nodes:
  kept: {{ type: filter, input: events, condition: '.keep' }}
sinks:
  out: {{ topic: out, input: kept }}
"
        );
        crate::topology::load_str("t.yaml", &text, &|_| None).unwrap()
    }

    fn paths(problems: &[PropertyProblem]) -> Vec<String> {
        problems.iter().map(|p| p.path.join(".")).collect()
    }

    #[test]
    fn librdkafka_takes_valid_settings() {
        let t =
            topology("  consumer: { fetch.max.bytes: 52428800 }\n  producer: { linger.ms: 20 }");
        assert_eq!(librdkafka_problems(&t), Vec::new());
    }

    #[test]
    fn a_misspelled_property_is_refused_by_name() {
        let t = topology("  producer: { linger.msec: 20 }\n  consumer: { fetch.max.bytes: lots }");
        let problems = librdkafka_problems(&t);
        assert_eq!(
            paths(&problems),
            vec![
                "kafka.consumer.fetch.max.bytes",
                "kafka.producer.linger.msec"
            ]
        );
        assert!(
            problems[1]
                .message
                .contains("No such configuration property"),
            "{problems:?}"
        );
        assert!(
            problems[0].message.contains("fetch.max.bytes"),
            "{problems:?}"
        );
    }

    #[test]
    fn features_this_build_lacks_are_refused_where_they_are_asked_for() {
        let t = topology(
            "  properties: { security.protocol: sasl_plaintext, sasl.mechanisms: GSSAPI }",
        );
        let problems = librdkafka_problems(&t);
        assert_eq!(
            paths(&problems),
            vec!["kafka.properties.sasl.mechanisms"],
            "{problems:?}"
        );
        assert!(problems[0].message.contains("GSSAPI"), "{problems:?}");
        let t = topology("  properties: { sasl.oauthbearer.method: oidc }");
        let problems = librdkafka_problems(&t);
        assert_eq!(
            paths(&problems),
            vec!["kafka.properties.sasl.oauthbearer.method"],
            "{problems:?}"
        );
        assert!(
            problems[0].message.contains("not supported in this build"),
            "{problems:?}"
        );
    }

    #[test]
    fn settings_that_contradict_each_other_are_refused_at_creation() {
        let t = topology("  consumer: { fetch.max.bytes: 1000, message.max.bytes: 1000000 }");
        let problems = librdkafka_problems(&t);
        assert_eq!(
            paths(&problems),
            vec!["kafka.consumer.fetch.max.bytes"],
            "{problems:?}"
        );
        assert!(
            problems[0].message.contains("creating the group consumer"),
            "{problems:?}"
        );
    }
}

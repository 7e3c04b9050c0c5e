//! The settings of `streamfold run`: its options, and the librdkafka
//! configurations built from them and the topology. (The topology
//! language itself is the top-level `config` module.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rdkafka::config::ClientConfig;

use crate::topology::Topology;
use crate::topology::model::Guarantee;

/// What `streamfold run` adds to the topology.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides `kafka.bootstrap_servers`.
    pub bootstrap_servers: Option<String>,
    /// Names this instance: transactional id `<app>-<instance>`, static
    /// group membership. Stable across restarts, unique per instance.
    pub instance_id: String,
    /// Overrides `processing.state_dir`.
    pub state_dir: Option<PathBuf>,
    /// Overrides `processing.threads`.
    pub threads: Option<usize>,
    /// Overrides `kafka.static_membership`.
    pub static_membership: Option<bool>,
    /// librdkafka properties from `-X key=value`, applied last.
    pub properties: Vec<(String, String)>,
    /// Testing aids: transaction stamps, journal, injected faults.
    pub hooks: super::commit::TestHooks,
    /// Serve Prometheus metrics here.
    pub metrics_addr: Option<SocketAddr>,
    /// Serve interactive queries here (`docs/queries.md`).
    pub query_addr: Option<SocketAddr>,
    /// The address other instances forward queries to (`host:port`);
    /// `query_addr` by default.
    pub query_advertised_addr: Option<String>,
    /// Overrides `queries.token`.
    pub query_token: Option<crate::secrets::Secret>,
}

/// The default instance id: this host's name.
pub fn default_instance_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "streamfold".to_string())
}

/// Settings streamfold relies on; a user value that differs is replaced,
/// with a warning.
fn enforce(config: &mut ClientConfig, key: &str, value: &str) {
    if let Some(user) = config.get(key)
        && user != value
    {
        tracing::warn!(
            property = key,
            user = crate::secrets::shown(key, user),
            value,
            "Overriding a librdkafka property streamfold depends on."
        );
    }
    config.set(key, value);
}

/// Properties every client gets: bootstrap servers, the topology's
/// `kafka.properties` and `kafka.security`, then `-X` overrides.
pub(crate) fn base_config(topology: &Topology, options: &RunOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    let servers = options
        .bootstrap_servers
        .clone()
        .unwrap_or_else(|| topology.kafka.bootstrap_servers.clone());
    config.set("bootstrap.servers", servers);
    config.set(
        "client.id",
        format!("{}-{}", topology.name, options.instance_id),
    );
    // librdkafka backs off reconnects up to 10 s; after a broker restart
    // the group consumer can then go a whole session timeout without
    // reaching its coordinator while the producer, reconnected, keeps
    // committing: the group expels the member and hands its partitions on
    // while it still works (a zombie the broker must fence, see
    // docs/exactly-once.md).
    // The Java client's 1 s keeps a member through a short broker outage.
    config.set("reconnect.backoff.max.ms", "1000");
    for (k, v) in &topology.kafka.properties {
        config.set(k, v);
    }
    // `check` refuses a property set both here and above.
    if let Some(security) = &topology.kafka.security {
        for (k, v) in security.properties() {
            config.set(k, v);
        }
    }
    config
}

fn apply_overrides(config: &mut ClientConfig, options: &RunOptions) {
    for (k, v) in &options.properties {
        config.set(k, v);
    }
}

/// `topology` with what `run`'s options override in it: static membership
/// (`--static-membership`), and the `-X message.max.bytes` override (if
/// any) in its producer settings, where the producer gets it from anyway
/// (`-X` applies last), so operators size what they emit for the producer
/// that sends it ([`crate::topology::model::KafkaConfig::max_record_bytes`]).
pub(crate) fn with_overrides(topology: Arc<Topology>, options: &RunOptions) -> Arc<Topology> {
    let max_bytes = options
        .properties
        .iter()
        .rev()
        .find(|(k, _)| k == "message.max.bytes");
    let membership = options
        .static_membership
        .filter(|&on| on != topology.kafka.static_membership);
    if max_bytes.is_none() && membership.is_none() {
        return topology;
    }
    let mut topology = Topology::clone(&topology);
    if let Some((_, value)) = max_bytes {
        topology
            .kafka
            .producer
            .insert("message.max.bytes".into(), value.clone());
    }
    if let Some(on) = membership {
        topology.kafka.static_membership = on;
    }
    Arc::new(topology)
}

/// The group consumer.
pub(crate) fn consumer_config(topology: &Topology, options: &RunOptions) -> ClientConfig {
    let mut config = base_config(topology, options);
    let reset = topology
        .sources
        .first()
        .map(|s| s.config.offset_reset)
        .unwrap_or_default();
    config.set("auto.offset.reset", reset.name());
    config.set("statistics.interval.ms", "5000");
    // librdkafka stops fetching for `fetch.queue.backoff.ms` (1 s by
    // default) once its local queue holds `queued.min.messages`; against a
    // broker that answers with large batches that idles the consumer for
    // most of each second. Resume as soon as the queue drains.
    config.set("fetch.queue.backoff.ms", "10");
    // Each running task's partitions have queues of their own (the engine's
    // `Queues`), and librdkafka then bounds its prefetch per partition, not
    // per consumer: 25,000 messages or 8 MiB each, about what its defaults
    // (100,000 messages, 64 MiB) allow one shared queue of four partitions.
    config.set("queued.min.messages", "25000");
    config.set("queued.max.messages.kbytes", "8192");
    // Bounds how long a fetch waits for data (librdkafka's default is
    // 500 ms), which a broker slow to answer a waiting fetch would add to
    // every folded event.
    config.set("fetch.wait.max.ms", "100");
    config.set("session.timeout.ms", "10000");
    config.set("heartbeat.interval.ms", "2000");
    for (k, v) in &topology.kafka.consumer {
        config.set(k, v);
    }
    apply_overrides(&mut config, options);
    enforce(&mut config, "group.id", &topology.name);
    enforce(&mut config, "enable.auto.commit", "false");
    enforce(&mut config, "enable.auto.offset.store", "false");
    enforce(
        &mut config,
        "partition.assignment.strategy",
        "cooperative-sticky",
    );
    if topology.processing.guarantee == Guarantee::ExactlyOnce {
        enforce(&mut config, "isolation.level", "read_committed");
    }
    if topology.kafka.static_membership {
        enforce(&mut config, "group.instance.id", &options.instance_id);
    }
    // The group lists its members by client id; the process's mark in it
    // tells this process's memberships from another process's with the
    // same instance id (a successor, or a predecessor whose session has not
    // ended yet).
    let instance = config.get("client.id").unwrap_or_default().to_string();
    config.set(
        "client.id",
        super::engine::ProcessId::current().client_id(&instance),
    );
    config
}

/// The consumer that replays changelogs (no group, read_committed).
pub(crate) fn restore_config(topology: &Topology, options: &RunOptions) -> ClientConfig {
    let mut config = base_config(topology, options);
    for (k, v) in &topology.kafka.consumer {
        config.set(k, v);
    }
    apply_overrides(&mut config, options);
    config.remove("group.instance.id");
    enforce(
        &mut config,
        "group.id",
        &format!("{}-restore", topology.name),
    );
    // A stored offset the topic no longer has is caught before the
    // restore starts (a full restore); should one appear while it runs, the
    // beginning is the only safe place to go, never the end.
    enforce(&mut config, "auto.offset.reset", "earliest");
    enforce(&mut config, "enable.auto.commit", "false");
    enforce(&mut config, "enable.auto.offset.store", "false");
    enforce(&mut config, "isolation.level", "read_committed");
    config
}

/// The transactional (or idempotent, at least once) producer.
pub(crate) fn producer_config(topology: &Topology, options: &RunOptions) -> ClientConfig {
    let mut config = base_config(topology, options);
    config.set("linger.ms", "5");
    // Java-compatible placement for keyed records.
    config.set("partitioner", "murmur2_random");
    for (k, v) in &topology.kafka.producer {
        config.set(k, v);
    }
    apply_overrides(&mut config, options);
    enforce(&mut config, "enable.idempotence", "true");
    if topology.processing.guarantee == Guarantee::ExactlyOnce {
        enforce(
            &mut config,
            "transactional.id",
            &format!("{}-{}", topology.name, options.instance_id),
        );
        enforce(
            &mut config,
            "transaction.timeout.ms",
            &topology
                .processing
                .transaction_timeout
                .as_millis()
                .to_string(),
        );
    }
    config
}

/// A client with the common properties and the `-X` overrides: the admin
/// client (topic checks and creation), and the base of `dlq replay`'s.
pub fn admin_config(topology: &Topology, options: &RunOptions) -> ClientConfig {
    let mut config = base_config(topology, options);
    apply_overrides(&mut config, options);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topology whose `kafka.static_membership` is `static_membership`.
    fn topology(static_membership: bool) -> Arc<Topology> {
        let text = format!(
            "
name: shop
kafka: {{ bootstrap_servers: 'unused:9092', static_membership: {static_membership} }}
sources:
  orders: {{ topic: orders }}
sinks:
  out: {{ topic: out, input: orders }}
"
        );
        Arc::new(crate::topology::load_str("shop.yaml", &text, &|_| None).unwrap())
    }

    fn instance_id_of(topology: &Topology, options: &RunOptions) -> Option<String> {
        consumer_config(topology, options)
            .get("group.instance.id")
            .map(str::to_string)
    }

    /// `--static-membership` turns static membership on or off whatever the
    /// topology says; without it the topology decides.
    #[test]
    fn the_static_membership_flag_overrides_the_topology() {
        let options = |static_membership| RunOptions {
            instance_id: "pod-0".into(),
            static_membership,
            ..RunOptions::default()
        };
        for (declared, flag, member) in [
            (false, None, None),
            (true, None, Some("pod-0")),
            (false, Some(true), Some("pod-0")),
            (true, Some(false), None),
        ] {
            let options = options(flag);
            let topology = with_overrides(topology(declared), &options);
            assert_eq!(
                instance_id_of(&topology, &options).as_deref(),
                member,
                "declared {declared}, flag {flag:?}"
            );
            assert_eq!(topology.kafka.static_membership, member.is_some());
        }
    }
}

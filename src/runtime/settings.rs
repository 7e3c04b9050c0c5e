//! The settings of `streamfold run`: its options, and the librdkafka
//! configurations built from them and the topology. (The topology
//! language itself is the top-level `config` module.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

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
        .group_sources()
        .next()
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
    config.set("client.id", ProcessId::current().client_id(&instance));
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

/// A process of an instance, as its group consumer's client id names it:
/// `<instance's client id>-p<start><nonce>`, the start in Unix
/// milliseconds (12 hex digits) and 16 random bits (4). The group lists a
/// process's memberships under that client id whatever their member ids:
/// one librdkafka has just begun for it (after a session timeout, its
/// JoinGroup answer not served yet) and one of an earlier consumer of the
/// process (a group reloaded after a broker's restart) are told from
/// another process's by the id alone, with no race against the group's
/// answers. Of two processes with one instance id, the later started is
/// the successor (Kafka Streams, likewise, names each process in its
/// client ids). This holds for dynamic members only: the group gives a
/// consumer that joins with a known `group.instance.id` the instance's
/// entry, with the client id of its first member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessId {
    started_ms: u64,
    nonce: u16,
}

impl ProcessId {
    /// A process started at `started_ms` whose random bits are `nonce`.
    #[cfg(test)]
    pub(crate) fn new(started_ms: u64, nonce: u16) -> ProcessId {
        ProcessId { started_ms, nonce }
    }

    /// This process's, fixed at its first use.
    pub(crate) fn current() -> ProcessId {
        static CURRENT: OnceLock<ProcessId> = OnceLock::new();
        *CURRENT.get_or_init(|| ProcessId {
            started_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            nonce: super::commit::rand_u64() as u16,
        })
    }

    /// The group consumer's client id of this process of `instance` (the
    /// client id its other clients have).
    pub(crate) fn client_id(self, instance: &str) -> String {
        format!("{instance}-p{:012x}{:04x}", self.started_ms, self.nonce)
    }

    /// The instance's client id and the process in a group consumer's
    /// client id.
    pub(crate) fn split(client_id: &str) -> Option<(&str, ProcessId)> {
        let (instance, mark) = client_id.rsplit_once("-p")?;
        if mark.len() != 16 || !mark.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let started_ms = u64::from_str_radix(&mark[..12], 16).ok()?;
        let nonce = u16::from_str_radix(&mark[12..], 16).ok()?;
        Some((instance, ProcessId { started_ms, nonce }))
    }

    /// Whether `client` is a client id of a process of `instance` (one of a
    /// streamfold that did not mark its clients included).
    pub(crate) fn is_of(client: &str, instance: &str) -> bool {
        client == instance || ProcessId::split(client).is_some_and(|(of, _)| of == instance)
    }

    /// Whether the member with `client` is another process of `instance`
    /// that started after this one. A member under the instance's bare
    /// client id is a process of a streamfold that did not mark its
    /// clients, whose start is unknown: taken for a successor, so that
    /// this process stops rather than fence it.
    pub(crate) fn is_succeeded_by(self, client: &str, instance: &str) -> bool {
        if client == instance {
            return true;
        }
        match ProcessId::split(client) {
            Some((of, other)) if of == instance => {
                other != self && (other.started_ms, other.nonce) > (self.started_ms, self.nonce)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_id_round_trips_through_the_client_id() {
        let own = ProcessId::new(0x019a_d3f0_1234, 0xbeef);
        let client = own.client_id("app-instance-0");
        assert_eq!(client, "app-instance-0-p019ad3f01234beef");
        assert_eq!(ProcessId::split(&client), Some(("app-instance-0", own)));
        let current = ProcessId::current();
        assert_eq!(current, ProcessId::current(), "fixed for the process");
        assert_eq!(
            ProcessId::split(&current.client_id("a-b-p-c")),
            Some(("a-b-p-c", current)),
            "instance ids with `-p` in them"
        );
        for unmarked in [
            "app-instance-0",
            "app-instance-0-p12",
            "app-x-pzzzzzzzzzzzzzzzz",
        ] {
            assert_eq!(ProcessId::split(unmarked), None, "{unmarked}");
        }
    }

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

//! `streamfold-loadgen`: produce and read the example topologies' events,
//! for the quickstart, manual runs and the end-to-end benchmark.
//!
//! ```text
//! streamfold-loadgen create-topic --topic post-metric-updated --partitions 4
//! streamfold-loadgen produce --topic post-metric-updated --article --events 200000 --accounts 1000
//! streamfold-loadgen produce --workload question-feed --topic question-feed-events --events 100000 --accounts 5000
//! streamfold-loadgen produce --workload distributed-counter --topic counter-events --events 100000 --accounts 500
//! streamfold-loadgen produce --workload page-views --topic page-views --events 200000 --accounts 1000
//! streamfold-loadgen produce --workload orders-enriched --topic orders --customers-topic customers \
//!   --events 200000 --accounts 10000
//! streamfold-loadgen read --topic account-metrics-folded
//! streamfold-loadgen read --topic account-metrics-folded --count 2 --timeout 1m
//! streamfold-loadgen bare-consume --topic post-metric-updated --expect 1000000
//! ```
//!
//! Connection settings are those of `streamfold run`: `--topology FILE`
//! takes the servers, `kafka.properties` and `kafka.security` (SASL, TLS)
//! of a topology, `--bootstrap-servers` overrides the servers and
//! `-X key=value` any librdkafka property:
//!
//! ```text
//! streamfold-loadgen --topology topologies/social-metrics.yaml produce --topic post-metric-updated --article
//! streamfold-loadgen -X security.protocol=sasl_ssl -X sasl.mechanisms=SCRAM-SHA-512 \
//!   -X sasl.username=loadgen -X sasl.password="$KAFKA_PASSWORD" -X ssl.ca.location=ca.pem read --topic t
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::json;
use streamfold::runtime::RawHeaders;
use streamfold::runtime::connect;
use streamfold::runtime::settings::{self, RunOptions};
use streamfold::secrets;
use streamfold::telemetry::logging::{self, LogFormat};
use streamfold::testkit::article as example;
use streamfold::topology;

use self::workloads::{QuestionFeed, customers, mix, order, page_view};

mod workloads;

#[derive(Parser)]
#[command(
    name = "streamfold-loadgen",
    about = "Produce and read the example topologies' events."
)]
struct Cli {
    /// Kafka servers; defaults to the topology's, else `127.0.0.1:9092`.
    #[arg(long, env = "KAFKA_BOOTSTRAP_SERVERS", global = true)]
    bootstrap_servers: Option<String>,
    /// Take the connection settings (servers, `kafka.properties`,
    /// `kafka.security`) from this topology, as `streamfold run` does.
    #[arg(long, global = true)]
    topology: Option<PathBuf>,
    /// Any librdkafka property, applied last: `-X security.protocol=ssl`.
    #[arg(short = 'X', value_parser = parse_property, global = true)]
    property: Vec<(String, String)>,
    #[command(subcommand)]
    command: Command,
}

/// The events `produce` generates, each for one of the example topologies.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// Post-metric events keyed by account (`social-metrics.yaml`).
    SocialMetrics,
    /// Question events (created, edited, answered, deleted) keyed by
    /// question, and thanks totals keyed by answer, with growing sequences
    /// per question and answer; one event in ten is sent twice, as an
    /// at-least-once producer would (`question-feed.yaml`).
    QuestionFeed,
    /// Counter increments with a unique token, each sent twice in a row
    /// (the producer's retry, same token and event time), keyed by token,
    /// so the rollup's `key_by: /counter` goes through its repartition
    /// topic (`distributed-counter.yaml`).
    DistributedCounter,
    /// Page views keyed by view id, each with its page, its user and an
    /// event time (`viewed_at`) that advances with the view's number, one
    /// in a hundred two windows late (`page-views.yaml`; [`page_view`]).
    PageViews,
    /// A customers table (`--customers-topic`, compacted: a profile per
    /// customer, some updated, some deleted by tombstones), then orders
    /// keyed by order id, some for customers the table does not hold
    /// (`orders-enriched.yaml`).
    OrdersEnriched,
}

#[derive(Subcommand)]
enum Command {
    /// Create a topic; nothing happens when it exists.
    CreateTopic {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
    /// Create the topic if needed and produce generated events.
    Produce {
        #[arg(long)]
        topic: String,
        /// Partitions when the topic is created.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// Which topology's events.
        #[arg(long, value_enum, default_value_t = Workload::SocialMetrics)]
        workload: Workload,
        /// The article's six events (post_1..post_6 over account_1,
        /// account_2), before the generated ones (social-metrics only).
        #[arg(long)]
        article: bool,
        /// Generated events (distinct ones: the copies some workloads send
        /// come on top).
        #[arg(long, default_value_t = 0)]
        events: u64,
        /// Keys the generated events are spread over: accounts, questions
        /// and answers, counters, pages, or customers.
        #[arg(long, alias = "keys", default_value_t = 1000)]
        accounts: u64,
        /// page-views: views per 5-minute window of event time (the views
        /// of one window come in a burst, see [`page_view`]).
        #[arg(long, default_value_t = 50_000)]
        views_per_window: u64,
        /// orders-enriched: the customers table's topic, produced (and
        /// created compacted when missing) before the orders.
        #[arg(long, default_value = "customers")]
        customers_topic: String,
        /// Events per account in a row before moving to the next account
        /// (1 interleaves accounts).
        #[arg(long, default_value_t = 1)]
        run: u64,
        /// Key post-metric events by their post instead of their account,
        /// so a fold by account re-keys them (social-metrics only).
        #[arg(long)]
        key_by_post: bool,
        /// Which stretch of the generators' sequence to send: seed `s`
        /// sends events `s × 2³²` onwards, so two seeds never send the
        /// same event and one seed always sends the same events. 0 is the
        /// sequence the Kafka Streams peer's `Check produce` sends.
        #[arg(long, default_value_t = 0)]
        seed: u32,
        /// Also print the summary as JSON on stdout (`records`: every
        /// record sent, copies included).
        #[arg(long)]
        json: bool,
    },
    /// Print the records of a topic as JSON lines (read_committed), from
    /// the start of every partition to its end, then stop.
    Read {
        #[arg(long)]
        topic: String,
        /// Also wait until at least this many records were read, for a
        /// topic whose records are still being committed.
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Fail when the ends (and `--count`) are not reached within this
        /// long.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        timeout: Duration,
        /// Only print a summary.
        #[arg(long)]
        summary: bool,
    },
    /// Read a whole topic with assign() (no group) and report the rate,
    /// timed from the first record to the last.
    BareConsume {
        #[arg(long)]
        topic: String,
        /// Records to read before stopping.
        #[arg(long)]
        expect: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(LogFormat::Text);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", secrets::scrub(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// The properties every client of this run starts from: the topology's
/// (when given) or the servers alone, then `-X`. The connection is
/// verified once, so a wrong password or an untrusted certificate fails
/// at once, naming the cause.
fn base_config(cli: &Cli) -> anyhow::Result<ClientConfig> {
    secrets::register_properties(cli.property.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let config = match &cli.topology {
        Some(path) => {
            let topology = topology::load_file(path).map_err(|diagnostics| {
                let lines: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
                anyhow::anyhow!("{}", lines.join("\n"))
            })?;
            for credential in topology.credentials() {
                secrets::register(credential);
            }
            let options = RunOptions {
                bootstrap_servers: cli.bootstrap_servers.clone(),
                instance_id: "loadgen".into(),
                properties: cli.property.clone(),
                ..RunOptions::default()
            };
            settings::admin_config(&topology, &options)
        }
        None => {
            let mut config = ClientConfig::new();
            config.set(
                "bootstrap.servers",
                cli.bootstrap_servers.as_deref().unwrap_or("127.0.0.1:9092"),
            );
            for (k, v) in &cli.property {
                config.set(k, v);
            }
            config
        }
    };
    connect::verify(&config)?;
    Ok(config)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let base = base_config(&cli)?;
    match cli.command {
        Command::CreateTopic { topic, partitions } => {
            ensure_topic(&base, &topic, partitions)?;
            eprintln!("topic {topic} exists ({partitions} partitions when created here)");
            Ok(())
        }
        Command::Produce {
            topic,
            partitions,
            workload,
            article,
            events,
            accounts,
            views_per_window,
            customers_topic,
            run,
            key_by_post,
            seed,
            json,
        } => {
            if (article || key_by_post) && workload != Workload::SocialMetrics {
                bail!("--article and --key-by-post are social-metrics' options");
            }
            let events = Generated {
                workload,
                article,
                events,
                keys: accounts.max(1),
                run: run.max(1),
                key_by_post,
                views_per_window: views_per_window.max(1),
                first: u64::from(seed) << 32,
            };
            let table = (workload == Workload::OrdersEnriched).then_some(customers_topic.as_str());
            produce(&base, &topic, table, partitions, &events, json)
        }
        Command::Read {
            topic,
            count,
            timeout,
            summary,
        } => read(&base, &topic, count, timeout, summary),
        Command::BareConsume { topic, expect } => bare_consume(&base, &topic, expect),
    }
}

/// Creates `topic` unless it exists: a user allowed to write a topic
/// need not be allowed to create topics.
fn ensure_topic(base: &ClientConfig, topic: &str, partitions: i32) -> anyhow::Result<()> {
    ensure_topic_with(base, topic, partitions, &[])
}

/// [`ensure_topic`] with topic configs for when it is created
/// (`cleanup.policy=compact` for a table).
fn ensure_topic_with(
    base: &ClientConfig,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    // Asking for the topic must not create it with the broker's defaults.
    let admin: AdminClient<DefaultClientContext> = base
        .clone()
        .set("allow.auto.create.topics", "false")
        .create()?;
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), Duration::from_secs(10))?;
    if metadata
        .topics()
        .iter()
        .any(|t| t.error().is_none() && !t.partitions().is_empty())
    {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for (name, value) in configs {
        new_topic = new_topic.set(name, value);
    }
    let results = runtime.block_on(admin.create_topics(
        &[new_topic],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("cannot create topic {name}: {code}"),
        }
    }
    Ok(())
}

/// What `produce` sends.
struct Generated {
    workload: Workload,
    /// The article's events first (social-metrics).
    article: bool,
    events: u64,
    /// Accounts, questions and answers, or counters.
    keys: u64,
    /// Events per account in a row (social-metrics).
    run: u64,
    /// Keyed by post rather than account (social-metrics).
    key_by_post: bool,
    /// Views per window of event time (page-views).
    views_per_window: u64,
    /// The number of the first generated event (the seed's stretch).
    first: u64,
}

/// Where a generated record goes: the workload's input topic, or the
/// table it reads beside it (orders-enriched's customers).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Input,
    Table,
}

fn produce(
    base: &ClientConfig,
    topic: &str,
    table: Option<&str>,
    partitions: i32,
    generated: &Generated,
    json: bool,
) -> anyhow::Result<()> {
    ensure_topic(base, topic, partitions)?;
    if let Some(table) = table {
        // Both sides of a join need the same partition count.
        ensure_topic_with(base, table, partitions, &[("cleanup.policy", "compact")])?;
    }
    let producer: BaseProducer = with_defaults(
        base,
        &[
            ("partitioner", "murmur2_random"),
            ("linger.ms", "20"),
            ("batch.num.messages", "10000"),
            ("queue.buffering.max.messages", "1000000"),
            ("enable.idempotence", "true"),
        ],
    )
    .create()?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut table_sent = 0u64;
    let mut table_done = false;
    let mut send =
        |target: Target, key: &str, value: Option<&serde_json::Value>| -> anyhow::Result<()> {
            let to = match (target, table) {
                (Target::Table, Some(table)) => table,
                (Target::Table, None) => bail!("this workload has no table topic"),
                (Target::Input, _) => topic,
            };
            if target == Target::Input && table.is_some() && !table_done {
                // The table goes first, every profile timestamped before the
                // first order: Kafka Streams picks a task's next record by
                // timestamp, so it loads the table before it joins.
                producer
                    .flush(Duration::from_secs(120))
                    .context("flushing the table")?;
                let flushed = std::time::SystemTime::now();
                while flushed.elapsed().unwrap_or_default() < Duration::from_millis(2) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                table_done = true;
            }
            let payload = value.map(serde_json::to_vec).transpose()?;
            let mut record = BaseRecord::<str, [u8]>::to(to).key(key);
            if let Some(payload) = &payload {
                record = record.payload(payload);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
            match target {
                Target::Input => sent += 1,
                Target::Table => table_sent += 1,
            }
            if (sent + table_sent).is_multiple_of(10_000) {
                producer.poll(Duration::ZERO);
            }
            Ok(())
        };
    send_generated(generated, &mut send)?;
    producer
        .flush(Duration::from_secs(120))
        .context("flushing the producer")?;
    let seconds = started.elapsed().as_secs_f64();
    if let Some(table) = table {
        eprintln!("produced {table_sent} table records to {table}");
    }
    eprintln!(
        "produced {sent} events to {topic} in {seconds:.1}s ({:.0}/s)",
        sent as f64 / seconds.max(1e-9)
    );
    if json {
        println!(
            "{}",
            json!({"records": sent, "table_records": table_sent, "seconds": seconds})
        );
    }
    Ok(())
}

/// Sends every event of `generated` with `send`, each as where it goes,
/// its key and its JSON value (none: a tombstone): the article's first if
/// asked, then the workload's.
fn send_generated(
    generated: &Generated,
    send_to: &mut impl FnMut(Target, &str, Option<&serde_json::Value>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let &Generated {
        workload,
        article,
        events,
        keys: accounts,
        run,
        key_by_post,
        views_per_window,
        first,
    } = generated;
    let mut send = |key: &str, value: &serde_json::Value| send_to(Target::Input, key, Some(value));
    if article {
        for value in example::events() {
            let account = value["account_id"].as_str().unwrap_or_default().to_string();
            send(&account, &value)?;
        }
    }
    match workload {
        Workload::SocialMetrics => {
            for i in first..first + events {
                let account = (i / run) % accounts;
                let account_id = format!("account_{account}");
                let post_id = format!("post_{}", 1000 + i % 5000);
                let key = if key_by_post {
                    post_id.clone()
                } else {
                    account_id.clone()
                };
                let value = json!({
                    "post_id": post_id,
                    "account_id": account_id,
                    "metrics": {example::METRICS[(i % 6) as usize]: i % 97},
                });
                send(&key, &value)?;
            }
        }
        Workload::QuestionFeed => {
            let mut feed = QuestionFeed::default();
            for i in first..first + events {
                let (key, value, copies) = feed.event(i, accounts);
                for _ in 0..copies {
                    send(&key, &value)?;
                }
            }
        }
        Workload::DistributedCounter => {
            // Event times advance 1 ms per 100 events, so the rollup's
            // `accept_limit` (5 s) sees them as on time unless partitions
            // drift apart by half a million events.
            let start = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            for i in first..first + events {
                let r = mix(i);
                let token = format!("token_{i}");
                let value = json!({
                    "counter": format!("likes:post_{}", r % accounts),
                    "token": token,
                    "delta": 1 + (r >> 32) % 9,
                    "event_time": start + (i - first) / 100,
                });
                send(&token, &value)?;
                send(&token, &value)?;
            }
        }
        Workload::PageViews => {
            for i in first..first + events {
                let (key, value) = page_view(i, i - first, accounts, views_per_window);
                send(&key, &value)?;
            }
        }
        Workload::OrdersEnriched => {
            for (key, value) in customers(accounts) {
                send_to(Target::Table, &key, value.as_ref())?;
            }
            for i in first..first + events {
                let (key, value) = order(i, accounts);
                send_to(Target::Input, &key, Some(&value))?;
            }
        }
    }
    Ok(())
}

/// Reads `topic` until every partition is at its end (its last stable
/// offset, as the fetches report it) and `want` records were read. It
/// never stops on a quiet period: a slow assignment or fetch makes the
/// read later, not shorter.
fn read(
    base: &ClientConfig,
    topic: &str,
    want: u64,
    timeout: Duration,
    summary: bool,
) -> anyhow::Result<()> {
    let mut config = with_defaults(
        base,
        &[
            ("group.id", "streamfold-loadgen-read"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ],
    );
    // The ends are known from these events, whatever `-X` says.
    config.set("enable.partition.eof", "true");
    let consumer: BaseConsumer<ReadContext> = config.create_with_context(ReadContext)?;
    let partitions = assign_all(&consumer, topic)?;
    let deadline = Instant::now() + timeout;
    let mut at_end = vec![false; partitions];
    let mut count = 0u64;
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    let result = loop {
        if count >= want && at_end.iter().all(|end| *end) {
            break Ok(());
        }
        if Instant::now() >= deadline {
            let open: Vec<usize> = (0..partitions).filter(|p| !at_end[*p]).collect();
            break Err(anyhow::anyhow!(
                "{topic}: read {count} records (wanted at least {want}) within {}; \
                 partitions not at their end: {open:?}",
                humantime::format_duration(timeout)
            ));
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                if let Some(end) = usize::try_from(p).ok().and_then(|p| at_end.get_mut(p)) {
                    *end = true;
                }
                continue;
            }
            Some(Err(e)) => break Err(e.into()),
            Some(Ok(message)) => message,
        };
        // More was committed after the end was reported: read on.
        if let Some(end) = usize::try_from(message.partition())
            .ok()
            .and_then(|p| at_end.get_mut(p))
        {
            *end = false;
        }
        count += 1;
        // Read as bytes: a header name need not be UTF-8 (`RawHeaders`).
        for (_, value) in
            RawHeaders::of_message(&message).filter(|(name, _)| *name == b"streamfold.dlq.reason")
        {
            let reason = String::from_utf8_lossy(value.unwrap_or_default()).into_owned();
            *by_reason.entry(reason).or_default() += 1;
        }
        if !summary {
            let key = message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned());
            let value = message.payload().map(|p| {
                serde_json::from_slice::<serde_json::Value>(p)
                    .unwrap_or_else(|_| json!(String::from_utf8_lossy(p)))
            });
            println!("{}", json!({"key": key, "value": value}));
        }
    };
    eprintln!("{count} records in {topic}");
    for (reason, n) in by_reason {
        eprintln!("  {n} dead letters: {reason}");
    }
    result
}

/// The client context of `read`: librdkafka reports each partition's end
/// as an error event too, which is how `read` knows it is done, so that one
/// is not logged as an error.
struct ReadContext;

impl ClientContext for ReadContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for ReadContext {}

fn assign_all<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> anyhow::Result<usize> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions = metadata
        .topics()
        .first()
        .map(|t| t.partitions().len())
        .filter(|n| *n > 0)
        .with_context(|| format!("topic {topic} does not exist"))?;
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p as i32, Offset::Beginning)?;
    }
    consumer.assign(&list)?;
    Ok(partitions)
}

/// `base` with `defaults` for the properties it does not set (so `-X`
/// and the topology win).
fn with_defaults(base: &ClientConfig, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut config = base.clone();
    for (k, v) in defaults {
        if config.get(k).is_none() {
            config.set(*k, *v);
        }
    }
    config
}

fn parse_property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, found `{text}`")),
    }
}

fn bare_consume(base: &ClientConfig, topic: &str, expect: u64) -> anyhow::Result<()> {
    let consumer: BaseConsumer = with_defaults(
        base,
        &[
            ("group.id", "streamfold-loadgen-bare"),
            ("enable.auto.commit", "false"),
        ],
    )
    .create()?;
    assign_all(&consumer, topic)?;
    let mut first: Option<Instant> = None;
    let mut count = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    while count < expect && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            message?;
            first.get_or_insert_with(Instant::now);
            count += 1;
        }
    }
    let seconds = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    println!(
        "{}",
        json!({"records": count, "seconds": seconds, "rate": count as f64 / seconds.max(1e-9)})
    );
    Ok(())
}

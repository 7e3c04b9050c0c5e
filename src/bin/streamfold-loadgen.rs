//! `streamfold-loadgen`: produce and read post-metric events, for the
//! quickstart, manual runs and the end-to-end benchmark.
//!
//! ```text
//! streamfold-loadgen create-topic --topic post-metric-updated --partitions 4
//! streamfold-loadgen produce --topic post-metric-updated --article --events 200000 --accounts 1000
//! streamfold-loadgen read --topic account-metrics-folded --idle 3s
//! streamfold-loadgen bare-consume --topic post-metric-updated --expect 1000000
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::json;
use streamfold::testkit::article as example;

#[derive(Parser)]
#[command(
    name = "streamfold-loadgen",
    about = "Produce and read post-metric events."
)]
struct Cli {
    #[arg(
        long,
        env = "KAFKA_BOOTSTRAP_SERVERS",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    bootstrap_servers: String,
    #[command(subcommand)]
    command: Command,
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
    /// Create the topic if needed and produce events keyed by account.
    Produce {
        #[arg(long)]
        topic: String,
        /// Partitions when the topic is created.
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// The article's six events (post_1..post_6 over account_1, account_2).
        #[arg(long)]
        article: bool,
        /// Generated post-metric events after the article's.
        #[arg(long, default_value_t = 0)]
        events: u64,
        /// Accounts the generated events are spread over.
        #[arg(long, default_value_t = 1000)]
        accounts: u64,
        /// Events per account in a row before moving to the next account
        /// (1 interleaves accounts).
        #[arg(long, default_value_t = 1)]
        run: u64,
    },
    /// Print records of a topic as JSON lines until it is idle.
    Read {
        #[arg(long)]
        topic: String,
        /// Stop after this long without a record.
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        idle: Duration,
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
        /// Any librdkafka property: `-X isolation.level=read_committed`.
        #[arg(short = 'X', value_parser = parse_property)]
        property: Vec<(String, String)>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::CreateTopic { topic, partitions } => {
            ensure_topic(&cli.bootstrap_servers, &topic, partitions)?;
            eprintln!("topic {topic} exists ({partitions} partitions when created here)");
            Ok(())
        }
        Command::Produce {
            topic,
            partitions,
            article,
            events,
            accounts,
            run,
        } => produce(
            &cli.bootstrap_servers,
            &topic,
            partitions,
            article,
            events,
            accounts.max(1),
            run.max(1),
        ),
        Command::Read {
            topic,
            idle,
            summary,
        } => read(&cli.bootstrap_servers, &topic, idle, summary),
        Command::BareConsume {
            topic,
            expect,
            property,
        } => bare_consume(&cli.bootstrap_servers, &topic, expect, &property),
    }
}

fn ensure_topic(servers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(admin.create_topics(
        &[NewTopic::new(
            topic,
            partitions,
            TopicReplication::Fixed(-1),
        )],
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

fn produce(
    servers: &str,
    topic: &str,
    partitions: i32,
    article: bool,
    events: u64,
    accounts: u64,
    run: u64,
) -> anyhow::Result<()> {
    ensure_topic(servers, topic, partitions)?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("enable.idempotence", "true")
        .create()?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut send = |key: &str, value: &serde_json::Value| -> anyhow::Result<()> {
        let payload = serde_json::to_vec(value)?;
        let mut record = BaseRecord::<str, [u8]>::to(topic)
            .key(key)
            .payload(&payload);
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
        sent += 1;
        if sent.is_multiple_of(10_000) {
            producer.poll(Duration::ZERO);
        }
        Ok(())
    };
    if article {
        for value in example::events() {
            let account = value["account_id"].as_str().unwrap_or_default().to_string();
            send(&account, &value)?;
        }
    }
    for i in 0..events {
        let account = (i / run) % accounts;
        let account_id = format!("account_{account}");
        let value = json!({
            "post_id": format!("post_{}", 1000 + i % 5000),
            "account_id": account_id,
            "metrics": {example::METRICS[(i % 6) as usize]: i % 97},
        });
        send(&account_id, &value)?;
    }
    producer
        .flush(Duration::from_secs(120))
        .context("flushing the producer")?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "produced {sent} events to {topic} in {seconds:.1}s ({:.0}/s)",
        sent as f64 / seconds.max(1e-9)
    );
    Ok(())
}

fn read(servers: &str, topic: &str, idle: Duration, summary: bool) -> anyhow::Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "streamfold-loadgen-read")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    assign_all(&consumer, topic)?;
    let mut last = Instant::now();
    let mut count = 0u64;
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    while last.elapsed() < idle {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message?;
        last = Instant::now();
        count += 1;
        if let Some(headers) = message.headers() {
            for h in headers.iter().filter(|h| h.key == "streamfold.dlq.reason") {
                let reason = String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned();
                *by_reason.entry(reason).or_default() += 1;
            }
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
    }
    eprintln!("{count} records in {topic}");
    for (reason, n) in by_reason {
        eprintln!("  {n} dead letters: {reason}");
    }
    Ok(())
}

fn assign_all(consumer: &BaseConsumer, topic: &str) -> anyhow::Result<usize> {
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

fn parse_property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, found `{text}`")),
    }
}

fn bare_consume(
    servers: &str,
    topic: &str,
    expect: u64,
    properties: &[(String, String)],
) -> anyhow::Result<()> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", servers)
        .set("group.id", "streamfold-loadgen-bare")
        .set("enable.auto.commit", "false");
    for (k, v) in properties {
        config.set(k, v);
    }
    let consumer: BaseConsumer = config.create()?;
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

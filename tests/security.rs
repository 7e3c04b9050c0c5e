//! Against a broker that accepts only SASL/SCRAM-SHA-512 over TLS (Apache
//! Kafka with a SASL_SSL listener, see `support::secure_broker`): the social-metrics topology, given its
//! credentials through `${VAR}` in a `kafka.security` section, processes
//! every record exactly once; `dlq replay` and the load generator connect
//! with the same settings; a wrong password or an untrusted certificate
//! stops `run` at once with an error naming the cause; and the password
//! appears nowhere — not in the log (librdkafka's debug lines included),
//! the metrics, `describe` and `check`, the dead letters, or the errors.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;
use support::*;

/// Accounts in the end-to-end run, and events per account.
const ACCOUNTS: u64 = 20;
const PER_ACCOUNT: u64 = 15;

/// Names of one test's topics and application.
struct Names {
    app: String,
    source: String,
    folded: String,
    dlq: String,
}

impl Names {
    fn new(test: &str) -> Names {
        Names {
            app: unique(&format!("sf-{test}")),
            source: unique("post-metric-updated"),
            folded: unique("account-metrics-folded"),
            dlq: unique("dlq"),
        }
    }

    /// Topic names and fold settings, then the broker's credentials.
    fn env(&self, broker: &SecureBroker) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("STREAMFOLD_APP", self.app.as_str()),
            ("POST_METRICS_TOPIC", &self.source),
            ("FOLDED_TOPIC", &self.folded),
            ("DEAD_LETTER_TOPIC", &self.dlq),
            // One fold per account, closed once its burst is over.
            ("FOLD_QUIET_FOR", "1s"),
            ("FOLD_MAX_WAIT", "1h"),
            ("FOLD_MAX_EVENTS", "1000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.extend(broker.env());
        env
    }

    fn app(&self, topology: &Path, state_dir: &Path, env: Vec<(String, String)>) -> AppConfig {
        AppConfig {
            topology: topology.to_path_buf(),
            instance: "a".into(),
            state_dir: state_dir.to_path_buf(),
            env,
            txn_header: false,
            args: Vec::new(),
        }
    }
}

fn streamfold(args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(streamfold_binary())
        .args(args)
        .envs(env.iter().cloned())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn loadgen(args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_streamfold-loadgen"))
        .args(args)
        .envs(env.iter().cloned())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Fails when `haystack` (named `what`) holds `password`.
fn assert_no_password(what: &str, haystack: &str, password: &str) {
    assert!(
        !haystack.contains(password),
        "the password appears in {what}:\n{haystack}"
    );
}

#[test]
fn a_topology_runs_over_sasl_scram_and_tls_exactly_once_and_never_shows_the_password() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("secured");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    let env = names.env(broker);
    // The tests' own door, a super user: input, and reading what streamfold
    // wrote. streamfold's user has exactly the ACLs docs/security.md lists.
    let client = broker.admin_client();
    broker.grant(
        &broker.principal(),
        &application_acls(&names.app, &[&names.source], &[&names.folded, &names.dlq]),
    );

    // Input: bursts per account, and one record that is not JSON, for a
    // dead letter.
    create_topic_on(&client, &names.source, 4, &[]);
    let producer = TestProducer::on(&client);
    for i in 0..ACCOUNTS * PER_ACCOUNT {
        let account = format!("account_{}", i % ACCOUNTS);
        producer.send_json(
            &names.source,
            &account,
            &json!({"post_id": format!("post_{i}"), "account_id": account, "metrics": {"likes": 1}}),
        );
    }
    producer.send(&names.source, Some(b"account_0"), b"{not json", &[]);
    producer.flush();

    // `check` and `describe` show the settings, the password masked.
    let check = streamfold(&["check", topology.to_str().unwrap()], &env);
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains(&format!(
            "kafka security: sasl_ssl, SCRAM-SHA-512 as user `{}` (password ***), CA {}",
            broker.username,
            broker.ca.display()
        )),
        "{}",
        text(&check)
    );
    let describe = streamfold(&["describe", topology.to_str().unwrap()], &env);
    assert!(describe.status.success(), "{}", text(&describe));
    assert!(
        text(&describe).contains("(password ***)"),
        "{}",
        text(&describe)
    );

    // librdkafka's own debug lines about configuration and security go to
    // the log too, so they are searched as well.
    let mut app_env = env.clone();
    app_env.push(("RUST_LOG".into(), "info,librdkafka=debug".into()));
    let mut config = names.app(&topology, &dir.path().join("state"), app_env);
    config.args = vec!["-X".into(), "debug=conf,security".into()];
    let app = App::start_on(&broker.bootstrap, &config, dir.path());
    // The record that is not JSON came last: once every fold closed (a
    // second after its account's last event), it was processed too.
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(120),
        |closed| closed >= ACCOUNTS as f64,
    );
    let metrics = app.metrics_text();
    assert!(
        metrics.contains("streamfold_fold_closed_total{"),
        "{metrics}"
    );
    let log = app.stop();
    assert!(
        log.contains("sasl") || log.contains("SASL"),
        "librdkafka's debug lines are in the log:\n{log}"
    );

    // Exactly once: one folded event per account, counting each event of
    // the account once.
    let folded = read_to_end_on(&client, &names.folded, Duration::from_secs(60));
    let by_account = by_key(&folded);
    assert_eq!(by_account.len(), ACCOUNTS as usize, "{folded:?}");
    for (account, records) in &by_account {
        assert_eq!(records.len(), 1, "{account}: {records:?}");
        let value = records[0].json();
        assert_eq!(
            value["folded_count"],
            json!(PER_ACCOUNT),
            "{account}: {value}"
        );
        assert_eq!(
            value["posts"].as_array().map(Vec::len),
            Some(PER_ACCOUNT as usize)
        );
    }

    let letters = read_to_end_on(&client, &names.dlq, Duration::from_secs(60));
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].payload.as_deref(), Some(&b"{not json"[..]));
    assert_eq!(
        letters[0].header("streamfold.dlq.topic"),
        Some(names.source.as_str())
    );

    // `dlq replay` over the same settings sends the letter back, with the
    // ACLs docs/security.md lists for it.
    broker.grant(
        &broker.principal(),
        &replay_acls(&names.app, &names.dlq, &[&names.source]),
    );
    let replay = streamfold(
        &["dlq", "replay", "--topology", topology.to_str().unwrap()],
        &env,
    );
    assert!(replay.status.success(), "{}", text(&replay));
    assert!(
        text(&replay).contains(&format!("replayed 1 of 1 dead letters from {}", names.dlq)),
        "{}",
        text(&replay)
    );
    let source = read_to_end_on(&client, &names.source, Duration::from_secs(60));
    let replayed: Vec<&Consumed> = source
        .iter()
        .filter(|r| r.header("streamfold.replayed").is_some())
        .collect();
    assert_eq!(replayed.len(), 1, "{source:?}");
    assert_eq!(replayed[0].payload.as_deref(), Some(&b"{not json"[..]));

    let password = &broker.password;
    assert_no_password("the run's log", &log, password);
    assert_no_password("/metrics", &metrics, password);
    assert_no_password("`check`", &text(&check), password);
    assert_no_password("`describe`", &text(&describe), password);
    assert_no_password("`dlq replay`", &text(&replay), password);
    for letter in &letters {
        assert_no_password(
            "a dead letter",
            &format!(
                "{:?} {} {:?}",
                letter.key,
                String::from_utf8_lossy(letter.payload.as_deref().unwrap_or_default()),
                letter.headers
            ),
            password,
        );
    }
}

#[test]
fn a_wrong_password_stops_run_at_once_with_an_authentication_error() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("wrong-password");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    create_topic_on(&broker.admin_client(), &names.source, 1, &[]);
    let wrong = format!("{}-but-wrong", broker.password);
    let mut env = names.env(broker);
    env.push(("KAFKA_PASSWORD".into(), wrong.clone()));
    let app = App::start_on(
        &broker.bootstrap,
        &names.app(&topology, &dir.path().join("state"), env),
        dir.path(),
    );
    // The bound is the issue's "fails fast", not a performance target:
    // retrying a refused password forever would hang here.
    let (status, log) = app.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(log.contains("authentication failed"), "{log}");
    assert!(
        log.contains(&format!("user `{}`", broker.username)),
        "{log}"
    );
    assert!(log.contains("SASL authentication error"), "{log}");
    assert_no_password("the error output", &log, &wrong);
    assert_no_password("the error output", &log, &broker.password);
}

#[test]
fn an_untrusted_broker_certificate_stops_run_at_once_naming_the_verification_failure() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("untrusted");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    create_topic_on(&broker.admin_client(), &names.source, 1, &[]);
    let mut env = names.env(broker);
    env.push(("KAFKA_CA".into(), broker.other_ca.display().to_string()));
    let app = App::start_on(
        &broker.bootstrap,
        &names.app(&topology, &dir.path().join("state"), env),
        dir.path(),
    );
    let (status, log) = app.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(log.contains("TLS handshake with Kafka"), "{log}");
    assert!(log.contains("certificate verify failed"), "{log}");
    assert!(
        log.contains(&format!("CA in `{}`", broker.other_ca.display())),
        "{log}"
    );
    assert_no_password("the error output", &log, &broker.password);
}

#[test]
fn the_load_generator_takes_the_topology_settings_or_x_properties() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("loadgen");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    let env = names.env(broker);
    let with_topology = ["--topology", topology.to_str().unwrap()];
    create_topic_on(&broker.admin_client(), &names.source, 1, &[]);
    broker.grant(
        &broker.principal(),
        &[
            Acl::literal("TOPIC", &names.source, "WRITE"),
            Acl::literal("TOPIC", &names.source, "READ"),
            // The reader's consumer looks up its group's coordinator.
            Acl::literal("GROUP", "streamfold-loadgen-read", "READ"),
        ],
    );

    // The topology's servers and `kafka.security`.
    let produced = loadgen(
        &[
            &with_topology[..],
            &["produce", "--topic", &names.source, "--article"],
        ]
        .concat(),
        &env,
    );
    assert!(produced.status.success(), "{}", text(&produced));
    let records = read_to_end_on(
        &broker.admin_client(),
        &names.source,
        Duration::from_secs(60),
    );
    assert_eq!(records.len(), 6, "the article's six events: {records:?}");

    // The same settings as `-X` properties, the password from the shell.
    let ca = broker.ca.display().to_string();
    let properties = [
        ("security.protocol", "sasl_ssl"),
        ("sasl.mechanisms", "SCRAM-SHA-512"),
        ("sasl.username", broker.username.as_str()),
        ("sasl.password", broker.password.as_str()),
        ("ssl.ca.location", ca.as_str()),
    ];
    let read_with = |skip: &str| {
        let mut args: Vec<String> = vec!["--bootstrap-servers".into(), broker.bootstrap.clone()];
        for (k, v) in properties.iter().filter(|(k, _)| *k != skip) {
            args.push("-X".into());
            args.push(format!("{k}={v}"));
        }
        args.extend(["read", "--topic", &names.source, "--summary"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        loadgen(&args, &[])
    };
    let read = read_with("");
    assert!(read.status.success(), "{}", text(&read));
    assert!(
        text(&read).contains(&format!("6 records in {}", names.source)),
        "{}",
        text(&read)
    );

    // Without the CA, the broker's certificate is not trusted: the load
    // generator stops at once and says so.
    let refused = read_with("ssl.ca.location");
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("certificate verify failed"),
        "{}",
        text(&refused)
    );
    assert_no_password(
        "the load generator's output",
        &text(&read),
        &broker.password,
    );
    assert_no_password(
        "the load generator's error",
        &text(&refused),
        &broker.password,
    );
}

/// Input for `names`' source: `accounts` accounts from `first`, `per_account`
/// events each (post ids `post_<first>_<i>`).
fn feed(client: &rdkafka::config::ClientConfig, names: &Names, first: u64, accounts: u64) {
    let producer = TestProducer::on(client);
    for i in 0..accounts * PER_ACCOUNT {
        let account = format!("account_{}", first + i % accounts);
        producer.send_json(
            &names.source,
            &account,
            &json!({"post_id": format!("post_{first}_{i}"), "account_id": account, "metrics": {"likes": 1}}),
        );
    }
    producer.flush();
}

/// What read_committed readers see of an application's outputs, and where
/// its group stands: compared before and after a refused start.
#[derive(Debug, PartialEq)]
struct Committed {
    folded: Vec<(i32, i64, Option<String>)>,
    dead_letters: usize,
    group: Vec<i64>,
}

fn committed(broker: &SecureBroker, names: &Names) -> Committed {
    let client = broker.admin_client();
    // Partitions are read in no set order.
    let mut folded: Vec<_> = read_to_end_on(&client, &names.folded, Duration::from_secs(60))
        .iter()
        .map(|r| (r.partition, r.offset, r.key.clone()))
        .collect();
    folded.sort();
    Committed {
        folded,
        dead_letters: read_to_end_on(&client, &names.dlq, Duration::from_secs(60)).len(),
        group: group_committed_on(&client, &names.app, &names.source, 2),
    }
}

#[test]
fn an_application_missing_one_acl_stops_naming_it_and_commits_nothing() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("missing-acl");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    let client = broker.admin_client();
    let user = broker.principal();
    let acls = application_acls(&names.app, &[&names.source], &[&names.folded, &names.dlq]);
    broker.grant(&user, &acls);
    create_topic_on(&client, &names.source, 2, &[]);
    let config = names.app(&topology, &dir.path().join("state"), names.env(broker));

    // A first run with every ACL: two accounts folded and committed.
    feed(&client, &names, 0, 2);
    let app = App::start_on(&broker.bootstrap, &config, dir.path());
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(120),
        |closed| closed >= 2.0,
    );
    app.stop();
    let before = committed(broker, &names);
    assert_eq!(before.folded.len(), 2, "{before:?}");
    assert_eq!(
        before.group.iter().sum::<i64>(),
        (2 * PER_ACCOUNT) as i64,
        "{before:?}"
    );

    // More input, then each ACL in turn taken away: the run stops at once
    // naming it, and read_committed readers see exactly what they saw.
    feed(&client, &names, 100, 3);
    let internal = format!("{}-", names.app);
    let transactional_id = format!("{}-a", names.app);
    // Each with whether `check --cluster` can tell beforehand: Kafka
    // answers what a principal may do with a topic or a group, not with a
    // transactional id.
    let cases = [
        (
            Acl::prefixed("TOPIC", &internal, "WRITE"),
            format!("WRITE on topic `{internal}fold_account-open-changelog` (changelog)"),
            true,
        ),
        (
            Acl::prefixed("TRANSACTIONAL_ID", &internal, "WRITE"),
            format!("WRITE on transactional id `{transactional_id}`"),
            false,
        ),
        (
            Acl::literal("TOPIC", &names.source, "READ"),
            format!("READ on topic `{}` (source `post_metrics`)", names.source),
            true,
        ),
        (
            Acl::literal("GROUP", &names.app, "READ"),
            format!("READ on group `{}` (the consumer group", names.app),
            true,
        ),
        // WRITE was all that let it see the sink: the cluster now hides
        // the topic from it altogether.
        (
            Acl::literal("TOPIC", &names.folded, "WRITE"),
            format!(
                "WRITE, DESCRIBE_CONFIGS on topic `{}` (sink `folded`; the cluster does not let it even describe the topic)",
                names.folded
            ),
            true,
        ),
    ];
    let env = config.env.clone();
    let check = || streamfold(&["check", topology.to_str().unwrap(), "--cluster"], &env);
    let all_granted = check();
    assert!(all_granted.status.success(), "{}", text(&all_granted));
    assert!(
        text(&all_granted).contains("cluster: ok"),
        "{}",
        text(&all_granted)
    );
    for (acl, named, checked) in cases {
        broker.revoke(&user, std::slice::from_ref(&acl));
        if checked {
            let refused = check();
            assert_eq!(
                refused.status.code(),
                Some(3),
                "without {acl:?}, check --cluster fails: {}",
                text(&refused)
            );
            // The operation and its resource; why may say more (a topic
            // the principal may not describe is hidden from it).
            let operation = named.trim_end_matches(')');
            assert!(
                text(&refused).contains(operation),
                "without {acl:?}, check --cluster names {operation}: {}",
                text(&refused)
            );
            assert_no_password("check's output", &text(&refused), &broker.password);
        }
        let app = App::start_on(&broker.bootstrap, &config, dir.path());
        // A bound on a hang, not a performance target: a refusal that were
        // retried would never end.
        let (status, log) = app.wait_exit(Duration::from_secs(60));
        assert_eq!(
            status.code(),
            Some(3),
            "without {acl:?}, a configuration error: {log}"
        );
        assert!(
            log.contains("not authorized: Kafka at")
                && log.contains(&format!("user `{}`", broker.username)),
            "without {acl:?}: {log}"
        );
        assert!(
            log.contains(&named),
            "without {acl:?}, the error names {named}: {log}"
        );
        assert!(log.contains("docs/security.md"), "{log}");
        assert_no_password("the error output", &log, &broker.password);
        assert_eq!(
            committed(broker, &names),
            before,
            "nothing committed without {acl:?}"
        );
        broker.grant(&user, &[acl]);
    }

    // Every ACL back: the new input is processed, each event once.
    let app = App::start_on(&broker.bootstrap, &config, dir.path());
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(120),
        |closed| closed >= 3.0,
    );
    app.stop();
    let folded = read_to_end_on(&client, &names.folded, Duration::from_secs(60));
    let mut posts: Vec<String> = folded
        .iter()
        .flat_map(|r| {
            r.json()["posts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let count = posts.len();
    posts.sort();
    posts.dedup();
    assert_eq!(posts.len(), count, "no event folded twice: {folded:?}");
    assert_eq!(
        count as u64,
        5 * PER_ACCOUNT,
        "every event folded: {folded:?}"
    );
}

#[test]
fn a_plaintext_client_is_refused_by_the_secured_listener() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("plaintext");
    let dir = temp_dir();
    create_topic_on(&broker.admin_client(), &names.source, 1, &[]);
    // The topology as it is, without a `kafka.security` section.
    let topology = repo().join("topologies/social-metrics.yaml");
    let app = App::start_on(
        &broker.bootstrap,
        &names.app(&topology, &dir.path().join("state"), names.env(broker)),
        dir.path(),
    );
    let (status, log) = app.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{log}");
    assert!(log.contains("cannot reach Kafka at"), "{log}");
    assert!(
        log.contains(
            "which uses security.protocol `plaintext`: does its listener expect TLS or SASL?"
        ),
        "{log}"
    );
    let folded = read_to_end_on(
        &broker.admin_client(),
        &names.folded,
        Duration::from_secs(10),
    );
    assert!(folded.is_empty(), "{folded:?}");
}

#[test]
fn a_broker_certificate_that_does_not_name_the_host_is_refused_by_default() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("hostname");
    let dir = temp_dir();
    let topology = secured_topology("topologies/social-metrics.yaml", dir.path());
    create_topic_on(&broker.admin_client(), &names.source, 1, &[]);
    let mut env = names.env(broker);
    env.push((
        "KAFKA_BOOTSTRAP_SERVERS".into(),
        broker.unnamed_bootstrap.clone(),
    ));
    // 127.0.0.2 reaches the same listener, signed by the trusted CA, but
    // the certificate names 127.0.0.1 and localhost only.
    let app = App::start_on(
        &broker.unnamed_bootstrap,
        &names.app(&topology, &dir.path().join("state"), env.clone()),
        dir.path(),
    );
    let (status, log) = app.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("TLS handshake with Kafka at 127.0.0.2"),
        "{log}"
    );
    assert!(log.contains("certificate verify failed"), "{log}");
    assert!(log.contains("does not name the host connected to"), "{log}");

    // The same client with host name verification off gets through: it was
    // the name, nothing else, that failed.
    broker.grant(
        &broker.principal(),
        &[
            Acl::literal("TOPIC", &names.source, "READ"),
            Acl::literal("GROUP", "streamfold-loadgen-read", "READ"),
        ],
    );
    let read = |extra: &[&str]| {
        let args = [
            &["--topology", topology.to_str().unwrap()][..],
            extra,
            &["read", "--topic", &names.source, "--summary"],
        ]
        .concat();
        loadgen(&args, &env)
    };
    let refused = read(&[]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("certificate verify failed"),
        "{}",
        text(&refused)
    );
    let unverified = read(&["-X", "ssl.endpoint.identification.algorithm=none"]);
    assert!(unverified.status.success(), "{}", text(&unverified));
}

#[test]
fn mutual_tls_with_a_client_certificate_runs_exactly_once_and_no_certificate_is_refused() {
    let _serial = serial();
    let broker = secure_broker();
    let names = Names::new("mtls");
    let dir = temp_dir();
    let topology = mutual_tls_topology("topologies/social-metrics.yaml", dir.path());
    let client = broker.admin_client();
    broker.grant(
        &broker.client_principal,
        &application_acls(&names.app, &[&names.source], &[&names.folded, &names.dlq]),
    );
    create_topic_on(&client, &names.source, 2, &[]);
    feed(&client, &names, 0, 4);
    let mut env = names.env(broker);
    env.extend([
        (
            "KAFKA_BOOTSTRAP_SERVERS".into(),
            broker.mtls_bootstrap.clone(),
        ),
        (
            "KAFKA_CERTIFICATE".into(),
            broker.client_certificate.display().to_string(),
        ),
        ("KAFKA_KEY".into(), broker.client_key.display().to_string()),
    ]);
    let app = App::start_on(
        &broker.mtls_bootstrap,
        &names.app(&topology, &dir.path().join("state"), env.clone()),
        dir.path(),
    );
    app.wait_metric(
        r#"streamfold_fold_closed_total{cause="quiet"}"#,
        Duration::from_secs(120),
        |closed| closed >= 4.0,
    );
    app.stop();
    let folded = read_to_end_on(&client, &names.folded, Duration::from_secs(60));
    assert_eq!(folded.len(), 4, "{folded:?}");
    for record in &folded {
        assert_eq!(
            record.json()["folded_count"],
            json!(PER_ACCOUNT),
            "{folded:?}"
        );
    }

    // Without a certificate the listener ends the handshake.
    let no_certificate = loadgen(
        &[
            "--bootstrap-servers",
            &broker.mtls_bootstrap,
            "-X",
            "security.protocol=ssl",
            "-X",
            &format!("ssl.ca.location={}", broker.ca.display()),
            "read",
            "--topic",
            &names.source,
            "--summary",
        ],
        &[],
    );
    assert!(
        !no_certificate.status.success(),
        "{}",
        text(&no_certificate)
    );
    assert!(
        text(&no_certificate).contains("TLS handshake with Kafka")
            && text(&no_certificate).contains("the broker wants a client certificate"),
        "{}",
        text(&no_certificate)
    );
}

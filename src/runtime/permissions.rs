//! What the cluster lets this application do, checked before it processes
//! a record, so a missing ACL stops `run` at once with an error that names
//! it, instead of transactions that fail one after the other.
//!
//! Kafka tells a client which operations it may perform on a topic or a
//! consumer group when asked (KIP-430: `DescribeTopics` and
//! `DescribeConsumerGroups` with authorized operations). [`check`] asks for
//! every topic and group the application uses and compares with what each
//! needs (docs/security.md lists the same ACLs):
//!
//! | resource | operations |
//! |---|---|
//! | source topics | READ |
//! | changelog and repartition topics | READ, WRITE, DESCRIBE_CONFIGS |
//! | sink and dead-letter topics | WRITE, DESCRIBE_CONFIGS |
//! | group `<app>` | READ |
//! | group `<app>-restore` | DESCRIBE |
//!
//! The transactional id cannot be asked about: its refusal comes from
//! `init_transactions` and [`transactional_id_refused`] names it. CREATE
//! on a topic is needed only where streamfold creates it; a refused
//! creation is named by [`creation_refused`]. A broker that does not
//! report authorized operations (they are optional in the protocol) is
//! not checked here; its refusals still stop the run later.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rdsys;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::RuntimeError;
use crate::topology::{InternalKind, Topology};

/// How long the broker gets to answer one question.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// An operation of Kafka's ACLs, as docs/security.md names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Read,
    Write,
    Describe,
    DescribeConfigs,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Describe => "DESCRIBE",
            Operation::DescribeConfigs => "DESCRIBE_CONFIGS",
        }
    }

    fn acl(self) -> u32 {
        use rdsys::rd_kafka_AclOperation_t as Op;
        (match self {
            Operation::Read => Op::RD_KAFKA_ACL_OPERATION_READ,
            Operation::Write => Op::RD_KAFKA_ACL_OPERATION_WRITE,
            Operation::Describe => Op::RD_KAFKA_ACL_OPERATION_DESCRIBE,
            Operation::DescribeConfigs => Op::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        }) as u32
    }
}

/// What one resource must allow, and why the application uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Need {
    /// `topic` or `group`.
    kind: &'static str,
    name: String,
    operations: Vec<Operation>,
    why: String,
}

/// Every topic and group `topology` uses, with what each must allow.
pub(crate) fn needs(topology: &Topology) -> Vec<Need> {
    use Operation::*;
    let mut topics: BTreeMap<String, Need> = BTreeMap::new();
    let mut need = |name: &str, operations: &[Operation], why: String| {
        let entry = topics.entry(name.to_string()).or_insert_with(|| Need {
            kind: "topic",
            name: name.to_string(),
            operations: Vec::new(),
            why,
        });
        entry.operations.extend_from_slice(operations);
        entry.operations.sort();
        entry.operations.dedup();
    };
    for source in &topology.sources {
        need(
            &source.config.topic,
            &[Read],
            format!("source `{}`", source.name),
        );
    }
    for internal in topology.internal_topics() {
        let (operations, why): (&[Operation], &str) = match internal.kind {
            InternalKind::Changelog => (&[Read, Write, DescribeConfigs], "changelog"),
            InternalKind::Repartition => (&[Read, Write, DescribeConfigs], "repartition topic"),
            InternalKind::DeadLetter => (&[Write, DescribeConfigs], "dead letters"),
        };
        need(&internal.name, operations, why.to_string());
    }
    for sink in &topology.sinks {
        need(
            &sink.config.topic,
            &[Write, DescribeConfigs],
            format!("sink `{}`", sink.name),
        );
    }
    let mut out: Vec<Need> = topics.into_values().collect();
    out.push(Need {
        kind: "group",
        name: topology.name.clone(),
        operations: vec![Read],
        why: "the consumer group".into(),
    });
    out.push(Need {
        kind: "group",
        name: format!("{}-restore", topology.name),
        operations: vec![Describe],
        why: "the changelog readers".into(),
    });
    out
}

/// Asks the cluster what this client may do with every topic and group of
/// `topology` (they exist by now: startup created what was missing) and
/// fails with [`RuntimeError::NotAuthorized`] naming each operation
/// missing.
pub(crate) fn check(
    admin: &AdminClient<DefaultClientContext>,
    config: &ClientConfig,
    topology: &Topology,
) -> Result<(), RuntimeError> {
    let needs = needs(topology);
    let topics: Vec<&str> = needs
        .iter()
        .filter(|n| n.kind == "topic")
        .map(|n| n.name.as_str())
        .collect();
    let groups: Vec<&str> = needs
        .iter()
        .filter(|n| n.kind == "group")
        .map(|n| n.name.as_str())
        .collect();
    let mut allowed = describe(admin, Describe::Topics, &topics, ANSWER_TIMEOUT)?;
    allowed.extend(
        describe(admin, Describe::Groups, &groups, ANSWER_TIMEOUT)?
            .into_iter()
            .map(|(name, ops)| (format!("group {name}"), ops)),
    );
    let mut missing = Vec::new();
    for need in &needs {
        let key = match need.kind {
            "group" => format!("group {}", need.name),
            _ => need.name.clone(),
        };
        let Some(answer) = allowed.get(&key) else {
            continue;
        };
        let mut why = need.why.clone();
        let lacking: Vec<&str> = match answer {
            Allowed::Refused => {
                why.push_str(&format!(
                    "; the cluster does not let it even describe the {}",
                    need.kind
                ));
                need.operations.iter().map(|o| o.name()).collect()
            }
            Allowed::Operations(ops) => need
                .operations
                .iter()
                .filter(|o| !ops.contains(&o.acl()))
                .map(|o| o.name())
                .collect(),
            Allowed::Unknown | Allowed::Unanswered(_) => continue,
        };
        if !lacking.is_empty() {
            missing.push(format!(
                "{} on {} `{}` ({})",
                lacking.join(", "),
                need.kind,
                need.name,
                why
            ));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(not_authorized(config, missing))
}

/// The error for the operations `missing`, each written as `WRITE on topic
/// `x` (why)`.
pub(crate) fn not_authorized(config: &ClientConfig, missing: Vec<String>) -> RuntimeError {
    RuntimeError::NotAuthorized {
        servers: config
            .get("bootstrap.servers")
            .unwrap_or_default()
            .to_string(),
        principal: principal(config),
        missing: missing.join("; "),
    }
}

/// `source `x`` (or another user of a topic) refused outright: the
/// principal may not even describe `topics`. Kafka answers so whether or
/// not a topic exists, so waiting for it to be created would be waiting
/// forever.
pub(crate) fn refused_sources(
    admin: &AdminClient<DefaultClientContext>,
    config: &ClientConfig,
    topology: &Topology,
    topics: &[&str],
) -> Result<(), RuntimeError> {
    // Only a refusal ends the wait; a broker that does not answer now is
    // asked again at the next look.
    let answers = match describe(admin, Describe::Topics, topics, ANSWER_TIMEOUT) {
        Ok(answers) => answers,
        Err(error) => {
            tracing::debug!(%error, "Cannot ask about the missing source topics' permissions.");
            return Ok(());
        }
    };
    let missing: Vec<String> = topology
        .sources
        .iter()
        .filter(|s| matches!(answers.get(&s.config.topic), Some(Allowed::Refused)))
        .map(|s| format!("READ on topic `{}` (source `{}`)", s.config.topic, s.name))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(not_authorized(config, missing))
    }
}

/// The error for a refused topic creation, or `None` when `code` is not
/// an authorization failure.
pub(crate) fn creation_refused(
    config: &ClientConfig,
    code: RDKafkaErrorCode,
    topic: &str,
    why: &str,
) -> Option<RuntimeError> {
    (code == RDKafkaErrorCode::TopicAuthorizationFailed
        || code == RDKafkaErrorCode::ClusterAuthorizationFailed)
        .then(|| {
            not_authorized(
                config,
                vec![format!(
                    "CREATE on topic `{topic}` ({why}; or create it beforehand)"
                )],
            )
        })
}

/// The error for a producer whose transactional id the cluster refused, or
/// `None` when `error` is something else.
pub(crate) fn transactional_id_refused(
    config: &ClientConfig,
    error: &RuntimeError,
) -> Option<RuntimeError> {
    let RuntimeError::Kafka(kafka) = error else {
        return None;
    };
    let id = config.get("transactional.id")?;
    (kafka.rdkafka_error_code() == Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed))
        .then(|| {
            not_authorized(
                config,
                vec![format!(
                    "WRITE on transactional id `{id}` (this instance's transactions; WRITE includes the DESCRIBE that finds its coordinator)"
                )],
            )
        })
}

/// Who the broker sees: the SASL user, or the client certificate.
fn principal(config: &ClientConfig) -> String {
    if let Some(user) = config.get("sasl.username") {
        return format!("user `{user}`");
    }
    if let Some(certificate) = config.get("ssl.certificate.location") {
        return format!("the subject of the client certificate `{certificate}`");
    }
    "this client (`User:ANONYMOUS` without SASL or a client certificate)".into()
}

/// What the cluster said about one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Allowed {
    /// The operations this client may perform (librdkafka's codes).
    Operations(Vec<u32>),
    /// Not even described: authorization failed.
    Refused,
    /// The broker did not say (no authorized operations in its answer, or
    /// another error).
    Unknown,
    /// Not answered in time: asked again by the startup checks.
    Unanswered(RDKafkaErrorCode),
}

#[derive(Clone, Copy)]
enum Describe {
    Topics,
    Groups,
}

/// A librdkafka queue, destroyed on drop.
struct Queue(NonNull<rdsys::rd_kafka_queue_t>);

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: the queue was made by `rd_kafka_queue_new` and is
        // destroyed once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0.as_ptr()) };
    }
}

/// Admin options, destroyed on drop.
struct Options(NonNull<rdsys::rd_kafka_AdminOptions_t>);

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: made by `rd_kafka_AdminOptions_new`, destroyed once.
        unsafe { rdsys::rd_kafka_AdminOptions_destroy(self.0.as_ptr()) };
    }
}

/// An event, destroyed on drop.
struct Event(NonNull<rdsys::rd_kafka_event_t>);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: polled from a queue, destroyed once.
        unsafe { rdsys::rd_kafka_event_destroy(self.0.as_ptr()) };
    }
}

/// A C string librdkafka owns, as text.
///
/// # Safety
/// `text` is null or a valid NUL-terminated string.
unsafe fn text(text: *const c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        // SAFETY: per the function's contract.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The authorized operations of `names`, by name, as the cluster answers
/// `DescribeTopics` or `DescribeConsumerGroups` with
/// `include_authorized_operations`.
fn describe(
    admin: &AdminClient<DefaultClientContext>,
    what: Describe,
    names: &[&str],
    timeout: Duration,
) -> Result<BTreeMap<String, Allowed>, RuntimeError> {
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let c_names: Vec<CString> = names
        .iter()
        .map(|n| CString::new(*n).map_err(|e| cannot_ask(e.to_string())))
        .collect::<Result<_, _>>()?;
    let mut pointers: Vec<*const c_char> = c_names.iter().map(|n| n.as_ptr()).collect();
    let rk = admin.inner().native_ptr();
    let op = match what {
        Describe::Topics => rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        Describe::Groups => rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
    };
    // SAFETY: `rk` is the live admin client's handle for this whole call;
    // every object made here is destroyed by its guard; the name pointers
    // outlive the calls that copy them.
    let out = unsafe {
        let queue = Queue(
            NonNull::new(rdsys::rd_kafka_queue_new(rk))
                .ok_or_else(|| cannot_ask("no queue".into()))?,
        );
        let options = describe_options(rk, op, timeout)?;
        send_describe(rk, what, &mut pointers, &options, &queue);
        let event = answer(&queue)?;
        authorized_operations(&event, what)
    };
    drop(pointers);
    // A group's coordinator is asked apart from the others, and its
    // timeout comes in the group's answer. Asked again with a new client:
    // this one is dropped at once, as librdkafka 2.12 aborts the process
    // when a coordinator it waited for comes back after the question
    // timed out and the client is still there (vendor/README.md).
    if let Some(kind) = out.values().find_map(|a| match a {
        Allowed::Unanswered(kind) => Some(*kind),
        _ => None,
    }) {
        return Err(RuntimeError::Kafka(KafkaError::AdminOp(kind)));
    }
    Ok(out)
}

/// The error of a permission query that could not be asked or answered.
fn cannot_ask(why: String) -> RuntimeError {
    RuntimeError::Settings(format!("cannot ask Kafka for permissions: {why}"))
}

/// Admin options for `op` that time the request out after `timeout` and
/// ask for the authorized operations.
///
/// # Safety
/// `rk` is a live client handle.
unsafe fn describe_options(
    rk: *mut rdsys::rd_kafka_t,
    op: rdsys::rd_kafka_admin_op_t,
    timeout: Duration,
) -> Result<Options, RuntimeError> {
    // SAFETY: per the function's contract; the options are destroyed by
    // their guard, the error by hand.
    unsafe {
        let options = Options(
            NonNull::new(rdsys::rd_kafka_AdminOptions_new(rk, op))
                .ok_or_else(|| cannot_ask("no admin options".into()))?,
        );
        let mut errstr = [0 as c_char; 256];
        rdsys::rd_kafka_AdminOptions_set_request_timeout(
            options.0.as_ptr(),
            timeout.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let error =
            rdsys::rd_kafka_AdminOptions_set_include_authorized_operations(options.0.as_ptr(), 1);
        if !error.is_null() {
            let why = text(rdsys::rd_kafka_error_string(error));
            rdsys::rd_kafka_error_destroy(error);
            return Err(cannot_ask(why));
        }
        Ok(options)
    }
}

/// Sends the question of `what` about `names`, to be answered on `queue`.
///
/// # Safety
/// `rk` is a live client handle; `names` point to NUL-terminated strings
/// that live through the call.
unsafe fn send_describe(
    rk: *mut rdsys::rd_kafka_t,
    what: Describe,
    names: &mut [*const c_char],
    options: &Options,
    queue: &Queue,
) {
    // SAFETY: per the function's contract; the collection is destroyed
    // once the request has copied it.
    unsafe {
        match what {
            Describe::Topics => {
                let collection =
                    rdsys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), names.len());
                rdsys::rd_kafka_DescribeTopics(
                    rk,
                    collection,
                    options.0.as_ptr(),
                    queue.0.as_ptr(),
                );
                rdsys::rd_kafka_TopicCollection_destroy(collection);
            }
            Describe::Groups => rdsys::rd_kafka_DescribeConsumerGroups(
                rk,
                names.as_mut_ptr(),
                names.len(),
                options.0.as_ptr(),
                queue.0.as_ptr(),
            ),
        }
    }
}

/// The answer to the question sent on `queue`, waited for whatever it is;
/// an error when it is one.
///
/// # Safety
/// A question was sent on `queue` by a client that is still live.
unsafe fn answer(queue: &Queue) -> Result<Event, RuntimeError> {
    // SAFETY: per the function's contract; the event is destroyed by its
    // guard.
    unsafe {
        // The request times out within `timeout`, and librdkafka then
        // answers with that error: wait for the answer, whatever it is. (A
        // queue destroyed while its request is outstanding trips an
        // assertion in librdkafka 2.12 when the request later times out.)
        let event = loop {
            let event = rdsys::rd_kafka_queue_poll(queue.0.as_ptr(), 100);
            if let Some(event) = NonNull::new(event) {
                break Event(event);
            }
        };
        let code = rdsys::rd_kafka_event_error(event.0.as_ptr());
        if code != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // A broker that did not answer (restarting, unreachable for a
            // moment) is asked again by the startup checks; anything else
            // ends them with the reason.
            let kind = RDKafkaErrorCode::from(code);
            if super::connect::unanswered(kind) {
                return Err(RuntimeError::Kafka(KafkaError::AdminOp(kind)));
            }
            let why = text(rdsys::rd_kafka_event_error_string(event.0.as_ptr()));
            return Err(cannot_ask(why));
        }
        Ok(event)
    }
}

/// What `event`, the answer to a question of `what`, allows on each
/// resource, by name.
///
/// # Safety
/// `event` answers a question of `what` without an error.
unsafe fn authorized_operations(event: &Event, what: Describe) -> BTreeMap<String, Allowed> {
    let mut out = BTreeMap::new();
    let mut count = 0usize;
    // SAFETY: per the function's contract; the results live as long as
    // the event.
    unsafe {
        match what {
            Describe::Topics => {
                let result = rdsys::rd_kafka_event_DescribeTopics_result(event.0.as_ptr());
                let topics = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
                for i in 0..count {
                    let topic = *topics.add(i);
                    let name = text(rdsys::rd_kafka_TopicDescription_name(topic));
                    let error = rdsys::rd_kafka_TopicDescription_error(topic);
                    let mut ops = 0usize;
                    let list =
                        rdsys::rd_kafka_TopicDescription_authorized_operations(topic, &mut ops);
                    out.insert(name, allowed(error, list, ops));
                }
            }
            Describe::Groups => {
                let result = rdsys::rd_kafka_event_DescribeConsumerGroups_result(event.0.as_ptr());
                let groups =
                    rdsys::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
                for i in 0..count {
                    let group = *groups.add(i);
                    let name = text(rdsys::rd_kafka_ConsumerGroupDescription_group_id(group));
                    let error = rdsys::rd_kafka_ConsumerGroupDescription_error(group);
                    let mut ops = 0usize;
                    let list = rdsys::rd_kafka_ConsumerGroupDescription_authorized_operations(
                        group, &mut ops,
                    );
                    out.insert(name, allowed(error, list, ops));
                }
            }
        }
    }
    out
}

/// One resource's answer, from its error and its list of operations.
///
/// # Safety
/// `error` is null or a live error; `list` is null or points to `count`
/// operations.
unsafe fn allowed(
    error: *const rdsys::rd_kafka_error_t,
    list: *const rdsys::rd_kafka_AclOperation_t,
    count: usize,
) -> Allowed {
    use rdsys::rd_kafka_resp_err_t as Err;
    if !error.is_null() {
        // SAFETY: per the function's contract.
        let code = unsafe { rdsys::rd_kafka_error_code(error) };
        return match code {
            Err::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
            | Err::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED => Allowed::Refused,
            Err::RD_KAFKA_RESP_ERR_NO_ERROR => Allowed::Unknown,
            code if super::connect::unanswered(RDKafkaErrorCode::from(code)) => {
                Allowed::Unanswered(RDKafkaErrorCode::from(code))
            }
            _ => {
                // SAFETY: per the function's contract.
                let why = unsafe { text(rdsys::rd_kafka_error_string(error)) };
                tracing::debug!(error = %why, "The broker did not describe a resource.");
                Allowed::Unknown
            }
        };
    }
    if list.is_null() || count == 0 {
        return Allowed::Unknown;
    }
    // The operations are read as plain numbers (the enum's representation),
    // so a value this build does not know cannot be an invalid enum.
    // SAFETY: per the function's contract, `list` holds `count` values.
    let ops = unsafe { std::slice::from_raw_parts(list.cast::<u32>(), count) };
    let all = rdsys::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ALL as u32;
    if ops.contains(&all) {
        return Allowed::Operations(
            [
                Operation::Read,
                Operation::Write,
                Operation::Describe,
                Operation::DescribeConfigs,
            ]
            .map(Operation::acl)
            .to_vec(),
        );
    }
    Allowed::Operations(ops.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group whose coordinator does not answer is not taken for one
    /// that allows everything unknown: the question fails, and the startup
    /// checks ask it again.
    #[test]
    fn a_group_question_its_coordinator_does_not_answer_is_an_error_asked_again() {
        let cluster = rdkafka::mocking::MockCluster::new(2).expect("a mock cluster");
        let group = "a-group";
        cluster
            .coordinator(rdkafka::mocking::MockCoordinator::Group(group.into()), 2)
            .expect("the group's coordinator");
        cluster.broker_down(2).expect("the coordinator down");
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .create()
            .expect("an admin client");
        let answer = describe(&admin, Describe::Groups, &[group], Duration::from_secs(1));
        assert!(
            matches!(
                answer,
                Err(RuntimeError::Kafka(KafkaError::AdminOp(
                    RDKafkaErrorCode::OperationTimedOut
                )))
            ),
            "a question to a coordinator that is down times out: {answer:?}"
        );
    }

    #[test]
    fn the_needs_of_a_topology_name_each_topic_and_group_once() {
        let topology = crate::topology::load_file(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("topologies/social-metrics.yaml"),
        )
        .expect("the example loads");
        let needs = needs(&topology);
        let shown: Vec<String> = needs
            .iter()
            .map(|n| {
                let ops: Vec<&str> = n.operations.iter().map(|o| o.name()).collect();
                format!("{} {}: {}", n.kind, n.name, ops.join(","))
            })
            .collect();
        let app = &topology.name;
        for expected in [
            format!("topic {app}-fold_account-open-changelog: READ,WRITE,DESCRIBE_CONFIGS"),
            format!("topic {app}-fold_account-repartition: READ,WRITE,DESCRIBE_CONFIGS"),
            format!("group {app}: READ"),
            format!("group {app}-restore: DESCRIBE"),
        ] {
            assert!(shown.contains(&expected), "{expected} in {shown:#?}");
        }
        let names: Vec<&str> = needs.iter().map(|n| n.name.as_str()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(
            needs
                .iter()
                .filter(|n| topology.sources.iter().any(|s| s.config.topic == n.name))
                .all(|n| n.operations == [Operation::Read]),
            "{shown:#?}"
        );
    }
}

//! Whether a member that failed was replaced: the group's word on it.
//!
//! A producer fenced, or a consumer refused as fenced, may mean another
//! process took this instance's id (then this one must stop, or it would
//! fence the successor in turn) or may not (an overdue transaction the
//! coordinator aborted; a group loaded again after a broker's restart
//! that holds this very process under an earlier member id). The group's
//! member list, whose client ids name each member's process
//! ([`ProcessId`]), tells the two apart: [`judge`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;

use super::context::EngineContext;
use crate::runtime::RuntimeError;
use crate::runtime::commit::CommitError;
use crate::runtime::settings::ProcessId;
use crate::topology::Topology;

/// The member ids the group gave this process, across its memberships.
pub(super) type MemberIds = Arc<Mutex<HashSet<String>>>;

/// What a membership that ended with `result` means for the process: a
/// fatal failure becomes [`CommitError::Fenced`] (stop) when the group
/// lists a successor, a later process with this instance's id, and stays
/// [`CommitError::Fatal`] (rejoin) otherwise; any other result is kept.
pub(super) fn judge(
    consumer: &BaseConsumer<EngineContext>,
    topology: &Topology,
    client_id: &str,
    wait: Duration,
    result: Result<(), RuntimeError>,
) -> Result<(), RuntimeError> {
    let reason = match result {
        Err(RuntimeError::Commit(CommitError::Fatal(reason))) => reason,
        other => return other,
    };
    if topology.kafka.static_membership {
        return Err(RuntimeError::Commit(membership_verdict(
            consumer,
            &topology.name,
            client_id,
            wait,
            reason,
        )));
    }
    let replaced = replaced_in_group(consumer, &topology.name, client_id, false, wait);
    Err(RuntimeError::Commit(match replaced {
        Some(successor) => CommitError::Fenced(format!(
            "another member of the group runs with this instance's id ({successor}) \
             after the producer failed: {reason}"
        )),
        None => CommitError::Fatal(reason),
    }))
}

/// How long a static member whose producer failed waits for the group's
/// word on its membership: two of the consumer's heartbeats and a second
/// for the answer.
pub(super) fn membership_verdict_wait(consumer: &rdkafka::ClientConfig) -> Duration {
    let heartbeat = consumer
        .get("heartbeat.interval.ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or(3000);
    Duration::from_millis(2 * heartbeat + 1000)
}

/// Whether a static member whose producer or consumer failed was
/// replaced: then it must stop, not rejoin, which would take the id back
/// and fence the successor in turn. A fencing error from the producer
/// cannot always tell (a transaction open past its timeout, which the
/// coordinator aborts, is reported the same way; an abort after a refused
/// produce request can time out instead). The group answers a member whose
/// `group.instance.id` another member holds with FENCED_INSTANCE_ID, a
/// fatal error of the consumer, but that member may be this process: a
/// group loaded again after a broker's restart can hold the instance under
/// a member id of an earlier membership of this process (librdkafka issue
/// 3437 reports the same). So the fencing is believed only when the group
/// lists a member of a process with this instance's id started after this
/// one ([`ProcessId`]); otherwise the process rejoins.
fn membership_verdict(
    consumer: &BaseConsumer<EngineContext>,
    group: &str,
    client_id: &str,
    wait: Duration,
    reason: String,
) -> CommitError {
    let deadline = Instant::now() + wait;
    loop {
        if let Some((RDKafkaErrorCode::FencedInstanceId, fenced)) = consumer.client().fatal_error()
        {
            return match replaced_in_group(consumer, group, client_id, true, wait) {
                Some(successor) => CommitError::Fenced(format!(
                    "the group gave this instance's static membership to another consumer \
                     ({successor}; {fenced}): {reason}"
                )),
                None => {
                    tracing::warn!(
                        %fenced,
                        "The group refused this instance as fenced, but no member but this \
                         process's own holds its id: rejoining."
                    );
                    CommitError::Fatal(format!(
                        "{reason}; the group refused this instance's earlier membership"
                    ))
                }
            };
        }
        if Instant::now() >= deadline {
            return CommitError::Fatal(reason);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a member whose producer or consumer failed was replaced by
/// another process with its instance id; if so, that member's
/// description. The producer cannot tell (its fencing by a successor and
/// the coordinator's abort of an overdue transaction are reported alike),
/// but the group's members can: see [`Own`].
fn replaced_in_group(
    consumer: &BaseConsumer<EngineContext>,
    group: &str,
    client_id: &str,
    static_membership: bool,
    wait: Duration,
) -> Option<String> {
    let Some((instance, process)) = ProcessId::split(client_id) else {
        // Not a client id `consumer_config` makes: no member can be told
        // apart from this process, so none is taken for a successor.
        tracing::warn!(
            client_id,
            "The group consumer's client id names no process."
        );
        return None;
    };
    // Every id this process's consumer holds or was assigned under.
    let own_ids = |own: &mut HashSet<String>| {
        own.extend(
            consumer
                .context()
                .member_ids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        own.extend(member_id(consumer));
    };
    let mut ids = HashSet::new();
    own_ids(&mut ids);
    let deadline = Instant::now() + wait;
    loop {
        let seen: Vec<String> = match consumer.fetch_group_list(Some(group), Duration::from_secs(5))
        {
            Ok(groups) => {
                let members = || {
                    groups
                        .groups()
                        .iter()
                        .flat_map(|g| g.members())
                        .map(|m| (m.id(), m.client_id(), m.client_host()))
                };
                if !static_membership {
                    if let Some(successor) = successor(members(), instance, Own::Process(process)) {
                        tracing::info!(
                            %successor,
                            "The group lists a member of a process with this instance's id started after this one."
                        );
                        return Some(successor);
                    }
                } else {
                    // A static member librdkafka rejoins for this process
                    // while the question is out (after a session timeout)
                    // is listed before the consumer has the join's answer
                    // and its member id. So the ids are read again after
                    // the group's answer, and a member that looks like a
                    // successor is believed only if it still does a moment
                    // later.
                    own_ids(&mut ids);
                    if successor(members(), instance, Own::MemberIds(&ids)).is_some() {
                        std::thread::sleep(Duration::from_millis(500));
                        own_ids(&mut ids);
                        if let Some(successor) =
                            successor(members(), instance, Own::MemberIds(&ids))
                        {
                            tracing::info!(?ids, %successor, "The group lists a member with this instance's id that this process was never given.");
                            return Some(successor);
                        }
                    }
                }
                members()
                    .map(|(id, client, _)| format!("{id} ({client})"))
                    .collect()
            }
            Err(error) => vec![format!("the group was not described: {error}")],
        };
        if Instant::now() >= deadline {
            tracing::info!(
                ?seen,
                "The group lists no other process with this instance's id."
            );
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What, among the group's members of this instance, is this process.
#[derive(Clone, Copy)]
enum Own<'a> {
    /// A dynamic member: the group lists each member under the client id it
    /// joined with, which names its process ([`ProcessId`]). Every member of
    /// this process is known by it, one whose join's answer the process has
    /// not served yet included.
    Process(ProcessId),
    /// A static member: the group keeps the instance's entry when another
    /// consumer joins with the instance id (only the member id changes), so
    /// the client id listed is that of the instance's first member. Only
    /// the member ids tell: those the group gave this process.
    MemberIds(&'a HashSet<String>),
}

/// Among the group's members (id, client id, host), the first of the
/// instance whose client id is `instance` that is another process than
/// `own`: a successor, which took the instance's id over.
fn successor<'m>(
    members: impl IntoIterator<Item = (&'m str, &'m str, &'m str)>,
    instance: &str,
    own: Own<'_>,
) -> Option<String> {
    members
        .into_iter()
        .find(|(id, client, _)| match own {
            Own::Process(process) => process.is_succeeded_by(client, instance),
            Own::MemberIds(ids) => ProcessId::is_of(client, instance) && !ids.contains(*id),
        })
        .map(|(id, client, host)| format!("member {id} ({client}) on {host}"))
}

/// The member id the group gave `consumer`, if it is a member.
pub(super) fn member_id<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    // SAFETY: the handle is the live consumer's; librdkafka returns a copy
    // of the member id (or null), which is freed with its allocator.
    let id = unsafe {
        let raw = rdkafka::bindings::rd_kafka_memberid(consumer.client().native_ptr());
        if raw.is_null() {
            return None;
        }
        let id = std::ffi::CStr::from_ptr(raw).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(std::ptr::null_mut(), raw.cast());
        id
    };
    (!id.is_empty()).then_some(id)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{Own, ProcessId, successor};

    fn process(started_ms: u64, nonce: u16) -> ProcessId {
        ProcessId::new(started_ms, nonce)
    }

    /// A member of this instance is a successor only when its process
    /// started after this one: this process's own memberships (under any
    /// member id) and an earlier process's are not, nor are other
    /// instances' (one whose id merely begins with this one's included).
    #[test]
    fn a_successor_is_a_later_process_of_this_instance() {
        let own = process(1_000_000, 7);
        let ours = own.client_id("app-i-0");
        let earlier = process(999_000, 9).client_id("app-i-0");
        let later = process(1_000_500, 1).client_id("app-i-0");
        let other_instance = process(2_000_000, 1).client_id("app-i-0-b");
        let members = [
            ("app-i-0-aaa", ours.as_str(), "/10.0.0.1"),
            ("app-i-0-bbb", ours.as_str(), "/10.0.0.1"),
            ("app-i-0-ccc", earlier.as_str(), "/10.0.0.7"),
            ("app-i-0-b-ddd", other_instance.as_str(), "/10.0.0.8"),
        ];
        let own = Own::Process(own);
        assert_eq!(successor(members, "app-i-0", own), None);
        let with_later = [members[0], ("app-i-0-eee", later.as_str(), "/10.0.0.9")];
        assert_eq!(
            successor(with_later, "app-i-0", own),
            Some(format!("member app-i-0-eee ({later}) on /10.0.0.9"))
        );
        assert_eq!(
            successor([("app-i-0-fff", "app-i-0", "/10.0.0.3")], "app-i-0", own),
            Some("member app-i-0-fff (app-i-0) on /10.0.0.3".into()),
            "a process that does not mark its client id is taken for a successor"
        );
        assert_eq!(successor([], "app-i-0", own), None);
    }

    /// A static member of this instance is a successor only under a member
    /// id the group never gave this process, whatever its client id (the
    /// group keeps the instance's first one): a member id of an earlier
    /// membership (a group loaded again after a broker's restart) is this
    /// process itself.
    #[test]
    fn a_static_successor_is_a_member_id_never_ours() {
        let first = process(1_000_000, 7).client_id("app-i-0");
        let members = [
            ("i-1-aaa", "app-i-1-p0000000f42400001", "/10.0.0.2"),
            ("i-0-new", first.as_str(), "/10.0.0.9"),
        ];
        let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<HashSet<_>>();
        let old = ids(&["i-0-old"]);
        assert_eq!(
            successor(members, "app-i-0", Own::MemberIds(&old)),
            Some(format!("member i-0-new ({first}) on /10.0.0.9"))
        );
        let both = ids(&["i-0-old", "i-0-new"]);
        assert_eq!(
            successor(members, "app-i-0", Own::MemberIds(&both)),
            None,
            "every member of this instance is one of this process's memberships"
        );
        assert_eq!(successor(members, "app-i-7", Own::MemberIds(&old)), None);
    }
}

//! Whether a member that failed was replaced: the group's word on it.
//!
//! A producer fenced, or a consumer refused as fenced, may mean another
//! process took this instance's id (then this one must stop, or it would
//! fence the successor in turn) or may not (an overdue transaction the
//! coordinator aborted; a group loaded again after a broker's restart
//! that holds this very process under an earlier member id). The group's
//! member list tells the two apart: [`judge`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::RDKafkaErrorCode;

use super::context::EngineContext;
use crate::runtime::RuntimeError;
use crate::runtime::commit::CommitError;
use crate::topology::Topology;

/// The member ids the group gave this process, across its memberships.
pub(super) type MemberIds = Arc<Mutex<HashSet<String>>>;

/// What a membership that ended with `result` means for the process: a
/// fatal failure becomes [`CommitError::Fenced`] (stop) when the group
/// lists a successor with this instance's client id, and stays
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
    let replaced = replaced_in_group(consumer, &topology.name, client_id, wait);
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
/// lists a member with this instance's client id that this process was
/// never given; otherwise the process rejoins.
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
            return match replaced_in_group(consumer, group, client_id, wait) {
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

/// Whether a dynamic member whose producer failed was replaced by another
/// process with its instance id; if so, that member's description. The
/// producer cannot tell (its fencing by a successor and the coordinator's
/// abort of an overdue transaction are reported alike), and the group has
/// no instance ids to refuse, but its members carry their client id,
/// `<app>-<instance id>`: another member with this instance's client id is
/// a successor, which a new producer of this process would fence.
fn replaced_in_group(
    consumer: &BaseConsumer<EngineContext>,
    group: &str,
    client_id: &str,
    wait: Duration,
) -> Option<String> {
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
    let mut own = HashSet::new();
    own_ids(&mut own);
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(groups) = consumer.fetch_group_list(Some(group), Duration::from_secs(5)) {
            let members = || {
                groups
                    .groups()
                    .iter()
                    .flat_map(|g| g.members())
                    .map(|m| (m.id(), m.client_id(), m.client_host()))
            };
            // librdkafka may rejoin for this process while the question is
            // out (after a session timeout): the group then lists the new
            // membership, whose id the consumer takes when the join's
            // answer arrives and the assignment names soon after. So the
            // ids are read again after the answer, and a member that looks
            // like a successor is believed only if it still does a moment
            // later.
            own_ids(&mut own);
            if successor(members(), client_id, &own).is_some() {
                std::thread::sleep(Duration::from_millis(500));
                own_ids(&mut own);
                if let Some(successor) = successor(members(), client_id, &own) {
                    tracing::info!(?own, %successor, "The group lists a member with this instance's client id that this process was never given.");
                    return Some(successor);
                }
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Among the group's members (id, client id, host), the first that runs
/// with `client_id` under an id this process was never given (`own`):
/// another process with this instance's id.
fn successor<'m>(
    members: impl IntoIterator<Item = (&'m str, &'m str, &'m str)>,
    client_id: &str,
    own: &HashSet<String>,
) -> Option<String> {
    members
        .into_iter()
        .find(|(id, client, _)| *client == client_id && !own.contains(*id))
        .map(|(id, _, host)| format!("member {id} on {host}"))
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

    use super::successor;

    fn own(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    /// A member with this instance's client id is a successor only under
    /// an id the group never gave this process: one it gave in an earlier
    /// membership (a group loaded again after a broker's restart) is this
    /// process itself.
    #[test]
    fn a_successor_is_a_member_with_this_client_id_and_an_id_never_ours() {
        let members = [
            ("app-instance-1-aaa", "app-instance-1", "/10.0.0.2"),
            ("app-instance-0-old", "app-instance-0", "/10.0.0.1"),
            ("app-instance-0-new", "app-instance-0", "/10.0.0.9"),
        ];
        assert_eq!(
            successor(members, "app-instance-0", &own(&["app-instance-0-old"])),
            Some("member app-instance-0-new on /10.0.0.9".into())
        );
        assert_eq!(
            successor(
                members,
                "app-instance-0",
                &own(&["app-instance-0-old", "app-instance-0-new"])
            ),
            None,
            "every member with this client id is one of this process's memberships"
        );
        assert_eq!(
            successor(members, "app-instance-7", &own(&[])),
            None,
            "no member runs with this client id"
        );
        assert_eq!(successor([], "app-instance-0", &own(&[])), None);
    }
}

//! The exit statuses of the `streamfold` command, by class, so a
//! supervisor (Kubernetes, systemd, a script) can tell a mistake to fix
//! from an outage to wait out.
//!
//! | status | class |
//! |---|---|
//! | 0 | success (and a `run` stopped by one SIGINT/SIGTERM) |
//! | 1 | failure: a fatal internal error, or what the command checks did not hold (`test` cases failed) |
//! | 2 | usage: the command line is wrong |
//! | 3 | configuration: the topology, a flag or a secret is invalid, the credentials are refused, or the cluster does not fit the topology |
//! | 4 | broker unavailable: Kafka could not be reached or stopped answering |
//! | 5 | fenced: another process took over this instance's id |
//! | 130 | interrupted: a second signal, or the stop timeout after the first, ended `run` at once |

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::runtime::RuntimeError;
use crate::runtime::commit::CommitError;

/// A class of outcome, and its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitClass {
    /// Done as asked.
    Success,
    /// A fatal internal error, or a check the command ran failed.
    Failure,
    /// The command line does not parse (clap's own status).
    Usage,
    /// The topology, a flag or a secret is invalid, the broker refused the
    /// credentials, or the cluster does not fit the topology.
    Configuration,
    /// Kafka could not be reached, or stopped answering.
    BrokerUnavailable,
    /// Another process started with this instance's id and took over.
    Fenced,
    /// A second signal, or the stop timeout after the first, ended the
    /// process before it finished.
    Interrupted,
}

impl ExitClass {
    /// Every class, for documentation and tests.
    pub const ALL: [ExitClass; 7] = [
        ExitClass::Success,
        ExitClass::Failure,
        ExitClass::Usage,
        ExitClass::Configuration,
        ExitClass::BrokerUnavailable,
        ExitClass::Fenced,
        ExitClass::Interrupted,
    ];

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            ExitClass::Success => 0,
            ExitClass::Failure => 1,
            ExitClass::Usage => 2,
            ExitClass::Configuration => 3,
            ExitClass::BrokerUnavailable => 4,
            ExitClass::Fenced => 5,
            ExitClass::Interrupted => 130,
        }
    }

    /// A short name for logs (`"configuration"`).
    pub fn name(self) -> &'static str {
        match self {
            ExitClass::Success => "success",
            ExitClass::Failure => "failure",
            ExitClass::Usage => "usage",
            ExitClass::Configuration => "configuration",
            ExitClass::BrokerUnavailable => "broker_unavailable",
            ExitClass::Fenced => "fenced",
            ExitClass::Interrupted => "interrupted",
        }
    }

    /// The class of a runtime error.
    pub fn of_runtime(error: &RuntimeError) -> ExitClass {
        match error {
            RuntimeError::Unreachable { .. } => ExitClass::BrokerUnavailable,
            RuntimeError::Authentication { .. }
            | RuntimeError::Tls { .. }
            | RuntimeError::Cluster(_)
            | RuntimeError::Settings(_)
            | RuntimeError::Format(_)
            | RuntimeError::Listen { .. }
            | RuntimeError::SourceReplaced { .. }
            | RuntimeError::NotAuthorized { .. } => ExitClass::Configuration,
            RuntimeError::Kafka(error) | RuntimeError::Producer(error) => {
                ExitClass::of_kafka(error)
            }
            RuntimeError::Fenced { .. } | RuntimeError::Commit(CommitError::Fenced(_)) => {
                ExitClass::Fenced
            }
            RuntimeError::State(_)
            | RuntimeError::Task { .. }
            | RuntimeError::Commit(_)
            | RuntimeError::Resources { .. } => ExitClass::Failure,
        }
    }

    /// The class of a Kafka client error: the broker's absence, or else a
    /// failure.
    pub fn of_kafka(error: &KafkaError) -> ExitClass {
        use RDKafkaErrorCode as Code;
        match error.rdkafka_error_code() {
            Some(
                Code::AllBrokersDown
                | Code::BrokerTransportFailure
                | Code::Resolve
                | Code::OperationTimedOut
                | Code::RequestTimedOut
                | Code::MessageTimedOut
                | Code::NetworkException
                | Code::BrokerNotAvailable
                | Code::LeaderNotAvailable
                | Code::NotCoordinator
                | Code::CoordinatorNotAvailable
                | Code::CoordinatorLoadInProgress
                | Code::NotEnoughReplicas
                | Code::NotEnoughReplicasAfterAppend,
            ) => ExitClass::BrokerUnavailable,
            Some(Code::TopicAuthorizationFailed | Code::GroupAuthorizationFailed)
            | Some(Code::ClusterAuthorizationFailed)
            | Some(Code::TransactionalIdAuthorizationFailed)
            | Some(Code::SaslAuthenticationFailed | Code::Authentication) => {
                ExitClass::Configuration
            }
            Some(Code::Fenced | Code::ProducerFenced | Code::FencedInstanceId) => ExitClass::Fenced,
            _ => ExitClass::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_its_own_status() {
        let mut codes: Vec<u8> = ExitClass::ALL.iter().map(|c| c.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ExitClass::ALL.len());
    }

    #[test]
    fn runtime_errors_fall_in_their_class() {
        let unreachable = RuntimeError::Unreachable {
            servers: "x:9092".into(),
            error: "refused".into(),
        };
        assert_eq!(
            ExitClass::of_runtime(&unreachable),
            ExitClass::BrokerUnavailable
        );
        let fenced = RuntimeError::Fenced {
            instance: "a".into(),
            transactional_id: "app-a".into(),
            reason: "r".into(),
        };
        assert_eq!(ExitClass::of_runtime(&fenced), ExitClass::Fenced);
        assert_eq!(
            ExitClass::of_runtime(&RuntimeError::Cluster("missing topics".into())),
            ExitClass::Configuration
        );
        let taken = RuntimeError::Listen {
            addr: ([127, 0, 0, 1], 9).into(),
            what: "the query server",
            source: std::io::ErrorKind::AddrInUse.into(),
        };
        assert_eq!(ExitClass::of_runtime(&taken), ExitClass::Configuration);
        // This host's limits are no fault of the configuration.
        let no_threads = RuntimeError::Resources {
            what: "the admin runtime".into(),
            source: std::io::ErrorKind::OutOfMemory.into(),
        };
        assert_eq!(ExitClass::of_runtime(&no_threads), ExitClass::Failure);
        // A producer that could not start is classed by its Kafka error.
        let unreachable =
            RuntimeError::Producer(KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown));
        assert_eq!(
            ExitClass::of_runtime(&unreachable),
            ExitClass::BrokerUnavailable
        );
        let down = RuntimeError::Kafka(KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown));
        assert_eq!(ExitClass::of_runtime(&down), ExitClass::BrokerUnavailable);
        let refused = RuntimeError::Kafka(KafkaError::MetadataFetch(
            RDKafkaErrorCode::TopicAuthorizationFailed,
        ));
        assert_eq!(ExitClass::of_runtime(&refused), ExitClass::Configuration);
        let internal = RuntimeError::Commit(CommitError::Fatal("unusable".into()));
        assert_eq!(ExitClass::of_runtime(&internal), ExitClass::Failure);
    }
}

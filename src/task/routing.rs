//! Where a record of a `key_by` node goes: its new key read from its value
//! ([`rekey`]), then this task or, through the node's repartition topic,
//! the task its key hashes to ([`Routing::is_here`]). The record path and
//! the field-at-a-time path both route by these two functions.

use serde_json::Value;

use super::partitioner::partition_for;
use crate::record::json::key_bytes;

/// How `key_by` nodes get their records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Straight to the node (the offline driver: one task holds every key).
    Direct,
    /// Through the node's repartition topic, unless the record is already
    /// on the partition its new key hashes to: this task's `partition` of
    /// `partitions`.
    Partitioned { partition: i32, partitions: i32 },
}

impl Routing {
    /// Whether a record keyed `key` is processed by this task; if not, it
    /// goes through the node's repartition topic to the task its key
    /// hashes to (Kafka's murmur2 partitioner, [`partition_for`]).
    pub(crate) fn is_here(self, key: &[u8]) -> bool {
        match self {
            Routing::Direct => true,
            Routing::Partitioned {
                partition,
                partitions,
            } => partition_for(key, partitions) == partition,
        }
    }
}

/// What `key_by` makes of a record's key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rekeyed {
    /// The key already is the field's value: it stays, not reallocated
    /// (producers mostly key a record by the field it is grouped by).
    Kept,
    /// The field's value, as key bytes ([`key_bytes`]).
    New(Box<[u8]>),
    /// The field is missing or null: the record has no key to group by.
    Missing,
}

/// The key of a record keyed `key` whose `key_by` pointer finds `field`
/// in its value.
pub(crate) fn rekey(key: Option<&[u8]>, field: Option<&Value>) -> Rekeyed {
    match field.filter(|v| !v.is_null()) {
        Some(Value::String(text)) if key == Some(text.as_bytes()) => Rekeyed::Kept,
        Some(value) => Rekeyed::New(key_bytes(value)),
        None => Rekeyed::Missing,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_key_equal_to_its_field_is_kept_and_any_other_replaced() {
        let field = json!("acct-1");
        assert_eq!(rekey(Some(b"acct-1"), Some(&field)), Rekeyed::Kept);
        assert_eq!(
            rekey(Some(b"post-9"), Some(&field)),
            Rekeyed::New(Box::from(&b"acct-1"[..]))
        );
        assert_eq!(
            rekey(None, Some(&json!(42))),
            Rekeyed::New(Box::from(&b"42"[..]))
        );
        assert_eq!(
            rekey(Some(b"{\"a\":1}"), Some(&json!({"a": 1}))),
            Rekeyed::New(Box::from(&b"{\"a\":1}"[..])),
            "only a string field keeps the key as it is"
        );
        assert_eq!(rekey(Some(b"k"), Some(&Value::Null)), Rekeyed::Missing);
        assert_eq!(rekey(Some(b"k"), None), Rekeyed::Missing);
    }

    #[test]
    fn a_record_is_here_when_its_key_hashes_to_this_task() {
        assert!(Routing::Direct.is_here(b"anything"));
        let here: Vec<i32> = (0..4)
            .filter(|&partition| {
                Routing::Partitioned {
                    partition,
                    partitions: 4,
                }
                .is_here(b"acct-1")
            })
            .collect();
        assert_eq!(here, vec![partition_for(b"acct-1", 4)]);
    }
}

//! The transaction journal a `streamfold run --txn-journal` process keeps.

use std::collections::BTreeMap;
use std::path::Path;

/// What a `--txn-journal` file says: which transactions (`<run>:<seq>`)
/// began, committed and were aborted. A transaction that began and neither
/// committed nor aborted was open when its process died.
#[derive(Debug, Default)]
pub struct TxnJournal {
    pub begun: std::collections::BTreeSet<String>,
    /// Asked the broker to commit (`committed` follows once it answered).
    pub committing: std::collections::BTreeSet<String>,
    pub committed: std::collections::BTreeSet<String>,
    pub aborted: std::collections::BTreeSet<String>,
    /// Per transaction asked to commit: when, and the offsets it commits.
    pub offsets: BTreeMap<String, JournaledOffsets>,
    /// The group's committed offsets as each new task read them, and when.
    pub fetched: Vec<JournaledOffsets>,
}

/// A journal line's time (unix ms) and `(topic, partition) → offset`.
#[derive(Clone, Debug, Default)]
pub struct JournaledOffsets {
    pub at: u128,
    pub offsets: BTreeMap<(String, i32), i64>,
}

impl JournaledOffsets {
    fn parse(line: &str, words: std::str::SplitWhitespace<'_>) -> JournaledOffsets {
        let mut words = words;
        let at = words
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("journal line `{line}` has no time"));
        let offsets = words
            .map(|word| {
                let mut parts = word.rsplitn(3, ':');
                let (offset, partition, topic) = (parts.next(), parts.next(), parts.next());
                match (topic, partition.map(str::parse), offset.map(str::parse)) {
                    (Some(topic), Some(Ok(partition)), Some(Ok(offset))) => {
                        ((topic.to_string(), partition), offset)
                    }
                    _ => panic!("journal line `{line}`: bad offset `{word}`"),
                }
            })
            .collect();
        JournaledOffsets { at, offsets }
    }
}

/// What became of a transaction in doubt at a kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Committed,
    NotCommitted,
    /// No new owner read the offsets of its partitions afterwards.
    Unknown,
}

impl TxnJournal {
    pub fn read(path: &Path) -> TxnJournal {
        let mut journal = TxnJournal::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(event), Some(label)) = (words.next(), words.next()) else {
                panic!("journal line `{line}`");
            };
            match event {
                "offsets" => {
                    let offsets = JournaledOffsets::parse(line, words);
                    journal.offsets.insert(label.to_string(), offsets);
                    continue;
                }
                "fetched" => {
                    journal.fetched.push(JournaledOffsets::parse(line, words));
                    continue;
                }
                _ => {}
            }
            let set = match event {
                "begin" => &mut journal.begun,
                "committing" => &mut journal.committing,
                "committed" => &mut journal.committed,
                "aborted" => &mut journal.aborted,
                other => panic!("unknown journal event `{other}`"),
            };
            assert!(
                set.insert(label.to_string()),
                "`{line}` twice in the journal"
            );
        }
        for label in journal.committed.iter().chain(&journal.aborted) {
            assert!(
                journal.begun.contains(label),
                "{label} ended without beginning"
            );
        }
        assert!(
            journal.committed.is_disjoint(&journal.aborted),
            "a transaction both committed and aborted"
        );
        journal
    }

    /// Began and did not commit: aborted, or open at a kill.
    pub fn uncommitted(&self) -> std::collections::BTreeSet<String> {
        self.begun.difference(&self.committed).cloned().collect()
    }

    /// Killed between asking the broker to commit and hearing back: it may
    /// have committed or not.
    pub fn in_doubt(&self) -> std::collections::BTreeSet<String> {
        self.committing
            .difference(&self.committed)
            .filter(|label| !self.aborted.contains(*label))
            .cloned()
            .collect()
    }

    /// The journals of several processes as one.
    pub fn merge(&mut self, other: TxnJournal) {
        self.begun.extend(other.begun);
        self.committing.extend(other.committing);
        self.committed.extend(other.committed);
        self.aborted.extend(other.aborted);
        self.offsets.extend(other.offsets);
        self.fetched.extend(other.fetched);
        self.fetched.sort_by_key(|f| f.at);
    }

    /// The fate of `label`, a transaction in doubt, told by the broker:
    /// the first owner of each of its partitions to read the group's
    /// committed offsets after it asked to commit resumed at or past its
    /// offsets (committed) or before them (not committed). Every
    /// transaction moves at least one offset (an input it consumed, or a
    /// changelog it wrote), so had it not committed, one of its partitions
    /// would show the older offset.
    pub fn fate(&self, label: &str) -> Fate {
        let Some(asked) = self.offsets.get(label) else {
            return Fate::Unknown;
        };
        let mut all_seen = true;
        for (partition, &offset) in &asked.offsets {
            let next = self
                .fetched
                .iter()
                .filter(|f| f.at >= asked.at)
                .find_map(|f| f.offsets.get(partition));
            match next {
                Some(&resumed) if resumed < offset => return Fate::NotCommitted,
                Some(_) => {}
                None => all_seen = false,
            }
        }
        if all_seen && !asked.offsets.is_empty() {
            Fate::Committed
        } else {
            Fate::Unknown
        }
    }

    /// The transactions that committed: those the journal saw commit, and
    /// those in doubt at a kill whose fate the broker's answer tells was a
    /// commit ([`Self::fate`]). One whose fate no later owner's offsets
    /// tell (a fenced process stopped in its commit) is left out: a judge
    /// counting only these fails if its records were the only copy, and
    /// names it with [`Self::describe`].
    pub fn committed_or_resolved(&self) -> std::collections::BTreeSet<String> {
        let mut committed = self.committed.clone();
        committed.extend(
            self.in_doubt()
                .into_iter()
                .filter(|label| self.fate(label) == Fate::Committed),
        );
        committed
    }

    /// What the journal tells of `label`, for a failure message.
    pub fn describe(&self, label: &str) -> String {
        if self.committed.contains(label) {
            "committed".into()
        } else if self.aborted.contains(label) {
            "aborted".into()
        } else if self.committing.contains(label) {
            format!("in doubt at a kill, {:?}", self.fate(label))
        } else if self.begun.contains(label) {
            "open at a kill".into()
        } else {
            "not in the journal".into()
        }
    }

    /// Began, and neither committed nor aborted.
    pub fn open_at_kill(&self) -> std::collections::BTreeSet<String> {
        self.uncommitted()
            .difference(&self.aborted)
            .cloned()
            .collect()
    }
}

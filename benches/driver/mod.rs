//! What the operator benches share: a topology from its nodes, and a task
//! driven as the runtime drives it.

use std::sync::Arc;

use serde_json::Value;
use streamfold::record::{Origin, Record};
use streamfold::state::timers::Clock;
use streamfold::task::{Output, Task};
use streamfold::topology::{self, Topology};

/// Records between commits.
pub const COMMIT_EVERY: u64 = 5_000;
/// Records between firings of the processing-time timers (the wall clock
/// moves 1 ms per record: a 100 ms punctuation).
pub const TICK_EVERY: u64 = 100;

/// A topology of `nodes` reading the source `events` (and `reads`, when a
/// node names it), with one sink of `input`.
pub fn topology(nodes: &str, input: &str) -> Arc<Topology> {
    // `check` refuses a source nothing reads: only the rollup reads `reads`.
    let reads = if nodes.contains("reads") {
        "\n  reads: { topic: reads }"
    } else {
        ""
    };
    topology_with(reads, nodes, input)
}

/// As [`topology`], with `sources` (YAML lines) after `events`.
pub fn topology_with(sources: &str, nodes: &str, input: &str) -> Arc<Topology> {
    let text = format!(
        "
name: bench
kafka: {{ bootstrap_servers: 'unused:9092' }}
sources:
  events: {{ topic: events }}{sources}
nodes:
{nodes}
sinks:
  out: {{ topic: out, input: {input} }}
"
    );
    Arc::new(topology::load_str("bench.yaml", &text, &|_| None).unwrap())
}

/// The question-feed projection the benches measure: three jq rules,
/// a snapshot every 50 events.
pub fn projection_topology() -> Arc<Topology> {
    topology(
        "  projection:
    type: projection
    input: events
    event_id: /event_id
    event_name: /type
    order_by: /sequence
    snapshot_every: 50
    rules:
      QuestionCreated: '. + {title: $event.title, answers: 0}'
      QuestionEdited: '.title = $event.title'
      AnswerAdded: '.answers += 1'
",
        "projection",
    )
}

/// Feeds records to a task's first source as the runtime does: timers
/// fired every [`TICK_EVERY`] records, state committed every
/// [`COMMIT_EVERY`] (changelog entries encoded, then applied to the
/// backend).
pub struct Driver {
    outputs: Vec<Output>,
    fed: u64,
    emitted: u64,
}

impl Driver {
    pub fn new() -> Driver {
        Driver {
            outputs: Vec::with_capacity(8 * 1024),
            fed: 0,
            emitted: 0,
        }
    }

    pub fn feed(&mut self, task: &mut Task, key: Vec<u8>, value: Value, timestamp: i64) {
        self.feed_source(task, 0, key, value, timestamp);
    }

    /// Feeds a record to the task's `source`-th source.
    pub fn feed_source(
        &mut self,
        task: &mut Task,
        source: usize,
        key: Vec<u8>,
        value: Value,
        timestamp: i64,
    ) {
        let origin = Origin {
            topic: "events",
            partition: 0,
            offset: self.fed as i64,
            key: Some(&key),
            payload: None,
            headers: &[],
        };
        let record = Record::new(Some(key.clone().into_boxed_slice()), value, timestamp);
        task.records()
            .process_source(source, &origin, Ok(record), &mut self.outputs)
            .unwrap();
        self.fed += 1;
        if self.fed.is_multiple_of(TICK_EVERY) {
            task.set_processing_time(self.fed as i64);
            task.fire_timers(Clock::Processing, &mut self.outputs, usize::MAX)
                .unwrap();
        }
        if self.fed.is_multiple_of(COMMIT_EVERY) {
            self.commit(task);
        }
    }

    fn commit(&mut self, task: &mut Task) {
        self.emitted += self.outputs.len() as u64;
        self.outputs.clear();
        let entries = task.state().changelog().unwrap();
        task.committed(entries, &[]).unwrap();
    }

    /// Commits what is left; the records emitted in all.
    pub fn finish(mut self, task: &mut Task) -> u64 {
        self.commit(task);
        self.emitted
    }
}

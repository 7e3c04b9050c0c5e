//! Durable timers: "call me back for this key at this time, on this clock".
//!
//! Each timer-driven node gets a store `<node>-timers` whose keys are
//! `[clock][deadline][key]`, so the due timers of a clock are a prefix range
//! scan in deadline order and survive restarts through the changelog like
//! any other state. A cached lower bound of the earliest deadline per clock
//! makes "is anything due?" free on the per-record path.

use std::ops::Bound;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{StateError, StateSet, StoreHandle};
use crate::record::Timestamp;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Wall-clock time: fires from the punctuation tick even when no
    /// records arrive.
    #[default]
    Processing,
    /// Record time, advanced per task by the records it processes.
    Event,
}

impl Clock {
    fn tag(self) -> u8 {
        match self {
            Clock::Processing => 0,
            Clock::Event => 1,
        }
    }

    fn index(self) -> usize {
        usize::from(self.tag())
    }
}

/// A timer that came due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timer {
    pub(crate) clock: Clock,
    pub(crate) at: Timestamp,
    pub(crate) key: Box<[u8]>,
}

const HEADER: usize = 9;

fn encode(clock: Clock, at: Timestamp, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + key.len());
    out.push(clock.tag());
    // Flip the sign bit so big-endian byte order is numeric order.
    out.extend_from_slice(&((at as u64) ^ (1 << 63)).to_be_bytes());
    out.extend_from_slice(key);
    out
}

fn decode(clock: Clock, bytes: &[u8]) -> Option<Timer> {
    let deadline: [u8; 8] = bytes.get(1..HEADER)?.try_into().ok()?;
    Some(Timer {
        clock,
        at: (u64::from_be_bytes(deadline) ^ (1 << 63)) as i64,
        key: bytes[HEADER..].into(),
    })
}

/// The timers of one node in one task.
pub(crate) struct TimerState {
    store: StoreHandle<()>,
    /// Per clock: a lower bound of the earliest deadline (`None`: unknown,
    /// `Some(Timestamp::MAX)`: no timers).
    next: [Option<Timestamp>; 2],
    /// Per clock: no timer is due before this (`None`: unknown). Timers
    /// fired since the last commit stay in the store's pending writes as
    /// deletions until the commit; `due` starts its scan here instead of
    /// walking them all again, which made firing a timer per record cost
    /// a walk over every timer fired since the commit.
    floor: [Option<Timestamp>; 2],
}

impl TimerState {
    /// Timers stored in `<node>-timers`.
    pub(crate) fn declare(
        state: &mut StateSet,
        store_name: &str,
    ) -> Result<TimerState, StateError> {
        Ok(TimerState {
            store: state.declare::<()>(store_name)?,
            next: [None, None],
            floor: [None, None],
        })
    }

    pub(crate) fn set(&mut self, state: &mut StateSet, clock: Clock, at: Timestamp, key: &[u8]) {
        state.view(self.store).put(&encode(clock, at, key), ());
        if let Some(next) = &mut self.next[clock.index()] {
            *next = (*next).min(at);
        }
        if let Some(floor) = &mut self.floor[clock.index()] {
            *floor = (*floor).min(at);
        }
    }

    pub(crate) fn cancel(&mut self, state: &mut StateSet, clock: Clock, at: Timestamp, key: &[u8]) {
        // The cached bound may now be early; `due` finds nothing and
        // recomputes it.
        state.view(self.store).delete(&encode(clock, at, key));
    }

    /// Removes and returns up to `limit` timers of `clock` due at `now`,
    /// earliest first.
    pub(crate) fn due(
        &mut self,
        state: &mut StateSet,
        clock: Clock,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Timer>, StateError> {
        if self.next[clock.index()].is_some_and(|next| next > now) {
            return Ok(Vec::new());
        }
        let floor = self.floor[clock.index()].unwrap_or(Timestamp::MIN);
        let from = encode(clock, floor, b"");
        let upto = encode(clock, now.saturating_add(1), b"");
        let mut view = state.view(self.store);
        let entries = view.range(Bound::Included(&from), Bound::Excluded(&upto), limit)?;
        let mut fired = Vec::with_capacity(entries.len());
        for (key, ()) in entries {
            view.delete(&key);
            if let Some(timer) = decode(clock, &key) {
                fired.push(timer);
            }
        }
        self.floor[clock.index()] = if fired.len() < limit {
            Some(floor.max(now.saturating_add(1)))
        } else {
            // More may be due at the last one's time.
            fired.last().map(|t| t.at).or(Some(floor))
        };
        if fired.len() < limit {
            // Everything due is out; learn the next deadline.
            let end = [clock.tag() + 1];
            let next = view.range(Bound::Included(&upto), Bound::Excluded(&end), 1)?;
            self.next[clock.index()] = Some(
                next.first()
                    .and_then(|(key, ())| decode(clock, key))
                    .map_or(Timestamp::MAX, |t| t.at),
            );
        }
        Ok(fired)
    }

    /// Forgets the cached bound (after an abort dropped pending timers).
    pub(crate) fn reset(&mut self) {
        self.next = [None, None];
        self.floor = [None, None];
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryBackend;
    use super::*;

    fn setup() -> (StateSet, TimerState) {
        let mut state = StateSet::new(Box::new(MemoryBackend::new(1)), vec!["n-timers".into()]);
        let timers = TimerState::declare(&mut state, "n-timers").unwrap();
        (state, timers)
    }

    #[test]
    fn timers_fire_in_deadline_order_per_clock_and_only_once() {
        let (mut state, mut timers) = setup();
        timers.set(&mut state, Clock::Processing, 300, b"c");
        timers.set(&mut state, Clock::Processing, -5, b"a");
        timers.set(&mut state, Clock::Processing, 100, b"b");
        timers.set(&mut state, Clock::Event, 50, b"e");
        let due = timers.due(&mut state, Clock::Processing, 100, 10).unwrap();
        let keys: Vec<_> = due.iter().map(|t| (t.at, t.key.to_vec())).collect();
        assert_eq!(keys, vec![(-5, b"a".to_vec()), (100, b"b".to_vec())]);
        assert!(
            timers
                .due(&mut state, Clock::Processing, 100, 10)
                .unwrap()
                .is_empty()
        );
        let event = timers.due(&mut state, Clock::Event, 1000, 10).unwrap();
        assert_eq!(event.len(), 1);
        let later = timers.due(&mut state, Clock::Processing, 1000, 10).unwrap();
        assert_eq!(later[0].key.as_ref(), b"c");
    }

    #[test]
    fn cancelled_timers_do_not_fire_and_new_early_ones_do() {
        let (mut state, mut timers) = setup();
        timers.set(&mut state, Clock::Processing, 100, b"a");
        assert!(
            timers
                .due(&mut state, Clock::Processing, 50, 10)
                .unwrap()
                .is_empty()
        );
        timers.cancel(&mut state, Clock::Processing, 100, b"a");
        timers.set(&mut state, Clock::Processing, 60, b"b");
        let due = timers.due(&mut state, Clock::Processing, 200, 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].key.as_ref(), b"b");
    }

    #[test]
    fn a_timer_set_before_what_already_fired_still_fires() {
        let (mut state, mut timers) = setup();
        for (at, key) in [(10, b"a"), (20, b"b"), (20, b"c"), (30, b"d")] {
            timers.set(&mut state, Clock::Event, at, key);
        }
        // Stopped by the limit inside the timers at 20: the rest at 20 next.
        let fired = timers.due(&mut state, Clock::Event, 25, 2).unwrap();
        assert_eq!(fired.iter().map(|t| t.at).collect::<Vec<_>>(), [10, 20]);
        timers.set(&mut state, Clock::Event, 20, b"again");
        let fired = timers.due(&mut state, Clock::Event, 25, 10).unwrap();
        assert_eq!(fired.len(), 2, "both left at 20");
        // Everything up to 25 is out; a timer set back at 5 fires at once.
        timers.set(&mut state, Clock::Event, 5, b"late");
        let fired = timers.due(&mut state, Clock::Event, 25, 10).unwrap();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].key.as_ref(), b"late");
        // After a reset (an abort drops the pending deletions, which brings
        // fired timers back) the scan starts from the beginning again.
        timers.reset();
        let fired = timers.due(&mut state, Clock::Event, 40, 10).unwrap();
        assert_eq!(fired.iter().map(|t| t.at).collect::<Vec<_>>(), [30]);
    }

    #[test]
    fn limits_leave_the_rest_for_the_next_call() {
        let (mut state, mut timers) = setup();
        for i in 0..5u8 {
            timers.set(&mut state, Clock::Processing, i64::from(i), &[i]);
        }
        assert_eq!(
            timers
                .due(&mut state, Clock::Processing, 10, 3)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            timers
                .due(&mut state, Clock::Processing, 10, 3)
                .unwrap()
                .len(),
            2
        );
    }
}

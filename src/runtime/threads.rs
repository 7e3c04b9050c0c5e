//! The processing threads: a pool beside the polling thread, and the
//! one way work is spread over them ([`for_each`]). Tasks process their
//! share of a batch, fire their timers and write their state at commit
//! this way.

use super::RuntimeError;

/// Runs `work` on every item: with a pool and more than one item, this
/// thread and the pool's threads each take the next item not yet taken
/// (the pool's from the front, this thread from the back) until none is
/// left, so a thread that finishes early (or the pool's, still waking up)
/// does not leave the others waiting at the end; else all on this thread.
/// Each item is worked on by one thread.
pub(crate) fn for_each<T: Send>(
    pool: Option<&rayon::ThreadPool>,
    items: &mut [T],
    work: impl Fn(&mut T) + Sync + Send,
) {
    for_each_after(pool, items, None::<fn()>, work);
}

/// [`for_each`], with this thread doing `first` before it takes items:
/// with a pool, the pool's threads start on the items meanwhile.
pub(crate) fn for_each_after<T: Send>(
    pool: Option<&rayon::ThreadPool>,
    items: &mut [T],
    first: Option<impl FnOnce()>,
    work: impl Fn(&mut T) + Sync + Send,
) {
    // Items this thread leaves to the pool's: all but one, or all while it
    // does `first`.
    let shared = (items.len() + usize::from(first.is_some())).saturating_sub(1);
    match pool {
        Some(pool) if shared > 0 => {
            let helpers = pool.current_num_threads().min(shared);
            let next = std::sync::Mutex::new(items.iter_mut());
            // The lock is held only to take an item, not while it is
            // worked on. The pool's threads take from the front, this
            // thread from the back: from one batch to the next, a task
            // tends to stay on the same thread, its state in that core's
            // caches.
            let take = |back: bool| {
                let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
                if back { next.next_back() } else { next.next() }
            };
            let drain = |back: bool| {
                while let Some(item) = take(back) {
                    work(item);
                }
            };
            let drain = &drain;
            pool.in_place_scope(|scope| {
                for _ in 0..helpers {
                    scope.spawn(move |_| drain(false));
                }
                if let Some(first) = first {
                    first();
                }
                drain(true);
            });
        }
        _ => {
            if let Some(first) = first {
                first();
            }
            items.iter_mut().for_each(work);
        }
    }
}

/// The processing threads besides the polling thread (which processes
/// too), or none when there is to be one: then every task runs on the
/// polling thread.
pub(crate) fn pool(threads: usize, app: &str) -> Result<Option<rayon::ThreadPool>, RuntimeError> {
    if threads <= 1 {
        return Ok(None);
    }
    let app = app.to_string();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads - 1)
        .thread_name(move |i| format!("{app}-processing-{i}"))
        .build()
        .map(Some)
        .map_err(|e| RuntimeError::Resources {
            what: format!("{threads} processing threads"),
            source: std::io::Error::other(e),
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use super::{for_each, for_each_after, pool};

    /// Every item is worked on once, by one thread, with or without a
    /// pool, and the work spreads over the pool's thread and this one.
    #[test]
    fn for_each_works_every_item_once() {
        let pool = pool(2, "test").unwrap();
        let caller = std::thread::current().id();
        for pool in [None, pool.as_ref()] {
            for len in [0, 1, 2, 3, 64] {
                // (visits, the thread of the last visit)
                let mut items: Vec<(u32, Option<ThreadId>)> = vec![(0, None); len];
                let threads = Mutex::new(HashSet::new());
                let both_wanted = pool.is_some() && len > 1;
                for_each(pool, &mut items, |(visits, by)| {
                    *visits += 1;
                    *by = Some(std::thread::current().id());
                    threads.lock().unwrap().insert(std::thread::current().id());
                    // Hold this item until the other thread has taken one
                    // (for at most 10 s): both must take part.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while both_wanted
                        && threads.lock().unwrap().len() < 2
                        && Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                assert!(items.iter().all(|&(visits, _)| visits == 1), "{items:?}");
                let threads = threads.into_inner().unwrap().len();
                if both_wanted {
                    assert_eq!(threads, 2, "both threads should take items");
                    // Each holds its first item until the other has one:
                    // the pool's thread took the first, this one the last.
                    assert_ne!(
                        items[0].1,
                        Some(caller),
                        "the pool's thread takes from the front"
                    );
                    assert_eq!(
                        items[len - 1].1,
                        Some(caller),
                        "this thread takes from the back"
                    );
                } else {
                    assert!(threads <= 1);
                }
            }
        }
    }

    /// `first` runs on the calling thread, once, while the pool's thread
    /// starts on the items (even on a single one); then every item is
    /// worked on once.
    #[test]
    fn for_each_after_overlaps_first_with_the_items() {
        let pool = pool(2, "test").unwrap();
        for pool in [None, pool.as_ref()] {
            for len in [0, 1, 3] {
                let mut items: Vec<u32> = vec![0; len];
                let taken = Mutex::new(0);
                let mut ran = None;
                let caller = std::thread::current().id();
                let overlap_wanted = pool.is_some() && len > 0;
                for_each_after(
                    pool,
                    &mut items,
                    Some(|| {
                        // Waits (for at most 10 s) until the pool's thread
                        // has taken an item.
                        let deadline = Instant::now() + Duration::from_secs(10);
                        while overlap_wanted
                            && *taken.lock().unwrap() == 0
                            && Instant::now() < deadline
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        ran = Some((std::thread::current().id(), *taken.lock().unwrap()));
                    }),
                    |visits| {
                        *visits += 1;
                        *taken.lock().unwrap() += 1;
                    },
                );
                assert!(items.iter().all(|&visits| visits == 1), "{items:?}");
                let (thread, taken_meanwhile) = ran.expect("`first` ran");
                assert_eq!(thread, caller, "`first` runs on the calling thread");
                if overlap_wanted {
                    assert!(taken_meanwhile > 0, "the pool started while `first` ran");
                } else {
                    assert_eq!(taken_meanwhile, 0, "without a pool, `first` runs first");
                }
            }
        }
    }
}

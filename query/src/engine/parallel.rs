//! Work spread over the cores for the derived tables' builds: after a reading of every attempt
//! (a new process, a retention sweep, or routers writing random ids faster than the merges keep
//! up with) every chunk or group of a kept table is built again, each apart from the others.
//! One thread a core at most; the caller's thread takes a share, and a single item is built on
//! it alone.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// The threads a build spreads over: one a core, at most 8.
pub fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8)
}

/// Room for one of `shares` vectors that `items` are dealt into by hash: all of them for one
/// share, else a fair share and an eighth more, so that a vector is seldom copied as it grows.
pub fn share_room(items: usize, shares: usize) -> usize {
    match shares {
        0 | 1 => items,
        _ => items / shares + items / shares / 8 + 16,
    }
}

/// `f` of each of `items`, in their order, computed on up to one thread a core, each thread
/// taking the next item not taken yet (items may differ in cost). After an error no item is
/// started; the error of the lowest item that failed is returned, once every thread has stopped.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Result<R> + Sync) -> Result<Vec<R>> {
    let threads = workers().min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    // Each thread keeps what it computed, with the item's index: no lock between the threads.
    let work = || {
        let mut done: Vec<(usize, Result<R>)> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            let r = f(item);
            let failed = r.is_err();
            done.push((i, r));
            if failed {
                // No more items are started; those under way finish.
                next.store(items.len(), Ordering::Relaxed);
            }
        }
        done
    };
    let mut done: Vec<(usize, Result<R>)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut done = work();
        for other in others {
            match other.join() {
                Ok(mut more) => done.append(&mut more),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    // Items left unstarted follow a failure, so either every item is here or an error is.
    if done.len() < items.len() || done.iter().any(|(_, r)| r.is_err()) {
        return match done.into_iter().find_map(|(_, r)| r.err()) {
            Some(e) => Err(e),
            None => Err(Error::Internal("a parallel build stopped early".into())),
        };
    }
    done.into_iter().map(|(_, r)| r).collect()
}

/// `a()` and `b()` side by side: `b` on another thread when there is more than one core.
pub fn join<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    if workers() <= 1 {
        return (a(), b());
    }
    std::thread::scope(|s| {
        let other = s.spawn(b);
        let first = a();
        match other.join() {
            Ok(second) => (first, second),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_the_order_and_the_first_error() {
        let items: Vec<u64> = (0..100).collect();
        assert_eq!(
            map(&items, |&i| Ok(i * i)).unwrap(),
            items.iter().map(|i| i * i).collect::<Vec<_>>()
        );
        let failed = map(&items, |&i| match i {
            7 | 50 => Err(Error::Internal(format!("item {i}"))),
            _ => Ok(i),
        });
        // Items are taken in order: 7 was started before 50 could fail, and its error comes first.
        assert_eq!(
            failed.unwrap_err().to_string(),
            Error::Internal("item 7".into()).to_string()
        );
        let late = map(&items, |&i| match i {
            50 => Err(Error::Internal(format!("item {i}"))),
            _ => Ok(i),
        });
        assert_eq!(
            late.unwrap_err().to_string(),
            Error::Internal("item 50".into()).to_string()
        );
        assert!(map(&[] as &[u64], |&i| Ok(i)).unwrap().is_empty());
        assert_eq!(join(|| 1, || "two"), (1, "two"));
    }
}

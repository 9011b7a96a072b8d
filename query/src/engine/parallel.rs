//! Work spread over the cores for the derived tables' builds: after a reading of every attempt
//! (a new process, a retention sweep, or routers writing random ids faster than the merges keep
//! up with) every chunk or group of a kept table is built again, each apart from the others.
//! One thread a core at most; the caller's thread takes a share, and a single item is built on
//! it alone.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// The threads a build spreads over: one a core, at most 8.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8)
}

/// `f` of each of `items`, in their order, computed on up to one thread a core, each thread
/// taking the next item not taken yet (items may differ in cost). The first error (in item
/// order) is returned, once every thread has stopped.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Result<R> + Sync) -> Result<Vec<R>> {
    let threads = workers().min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<R>>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            let r = f(item);
            let failed = r.is_err();
            if let Ok(mut done) = done.lock() {
                done[i] = Some(r);
            }
            if failed {
                // No more items are started; those under way finish.
                next.store(items.len(), Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    let done = done
        .into_inner()
        .map_err(|_| Error::Internal("a parallel build panicked".into()))?;
    let mut out = Vec::with_capacity(items.len());
    for r in done {
        match r {
            Some(r) => out.push(r?),
            // Items are taken in order: one left unstarted follows an item that failed.
            None => return Err(Error::Internal("a parallel build stopped early".into())),
        }
    }
    Ok(out)
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
        assert!(map(&[] as &[u64], |&i| Ok(i)).unwrap().is_empty());
        assert_eq!(join(|| 1, || "two"), (1, "two"));
    }
}

//! Locking the query caches so that one failed read does not fail every later one.

use std::sync::{Mutex, MutexGuard};

/// Locks `cache`. When a thread panicked while holding it (a read that met a damaged page of the
/// ledger file panics inside redb, cberner/redb#1334), the value may be half updated: it is
/// replaced by `empty()` and the lock is usable again, so the next query reads the ledger afresh
/// instead of every later query failing with a poisoned lock.
pub(crate) fn lock_or_reset<T>(cache: &Mutex<T>, empty: impl FnOnce() -> T) -> MutexGuard<'_, T> {
    match cache.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            let mut guard = poisoned.into_inner();
            *guard = empty();
            cache.clear_poison();
            guard
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_poisoned_by_a_panic_is_emptied_and_usable_again() {
        let cache = Mutex::new(Some(7));
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let mut g = cache.lock().unwrap();
                *g = Some(8);
                panic!("a read met a damaged page");
            })
            .join()
        });
        assert!(cache.is_poisoned());
        assert_eq!(*lock_or_reset(&cache, || None), None);
        assert!(!cache.is_poisoned());
        *lock_or_reset(&cache, || None) = Some(9);
        assert_eq!(*cache.lock().unwrap(), Some(9));
    }
}

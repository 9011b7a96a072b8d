//! How fresh a read must be: the write generation its answer must reflect at least (its floor).
//!
//! A query alone reads the ledger as it stands: its floor is the ledger's current generation, so an
//! acknowledged record is in the next answer. A weekly review runs a few dozen queries; under
//! routers posting all day every one of them would see a newer generation than the last, bring the
//! cached columns up to date again and build each table kept whole again. A review (or a page)
//! therefore pins the generation it started at ([`crate::Session::pinned`]): each of its reads
//! takes any cached state at that generation or newer, so it catches up once and its sections are
//! built from the same columns unless another reader moved them on meanwhile.
//!
//! Every cache keyed by generation labels an entry with a generation its data reflects at least
//! (the floor it was built for, or the generation read before its rows) and serves a read whose
//! floor is at or below that label. The floor reaches the table reads in two ways: a DataFusion
//! statement carries it as a config extension ([`Floor`]), and the code that reads the cached
//! columns sets it for its thread ([`with_floor`]) around the synchronous read.

use std::cell::Cell;

/// The floor a statement's table reads keep to, as a DataFusion config extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor(pub u64);

thread_local! {
    static FLOOR: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The floor of a read on this thread: the pinned one when [`with_floor`] set one, else
/// `current` (the ledger's generation now).
pub fn floor_or(current: u64) -> u64 {
    FLOOR.with(Cell::get).unwrap_or(current)
}

/// Runs `read` with this thread's floor set to `floor` (`None`: the ledger's current generation),
/// and puts the previous floor back after, also when `read` panics.
pub fn with_floor<T>(floor: Option<u64>, read: impl FnOnce() -> T) -> T {
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FLOOR.with(|f| f.set(self.0));
        }
    }
    let _restore = Restore(FLOOR.with(|f| f.replace(floor)));
    read()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_holds_inside_its_read_only() {
        assert_eq!(floor_or(9), 9);
        let inner = with_floor(Some(4), || {
            let nested = with_floor(None, || floor_or(9));
            (floor_or(9), nested, floor_or(9))
        });
        assert_eq!(inner, (4, 9, 4));
        assert_eq!(floor_or(9), 9);
        let caught = std::panic::catch_unwind(|| with_floor(Some(2), || panic!("a read failed")));
        assert!(caught.is_err());
        assert_eq!(floor_or(9), 9, "put back after a panic");
    }
}

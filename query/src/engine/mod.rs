//! The DataFusion runtime pieces that know nothing of the ledger: the SQL threads
//! ([`executor`]), stopping a plan ([`stop`]), the bounded string functions and `array_agg`, SQLite's `SUM`,
//! the planning hints, the cache locks, the builds spread over the cores ([`parallel`]) and how fresh a read must be ([`read_floor`]).
//!
//! Imports: [`crate::error`] and [`crate::words`] only (the crate root's bottom files).

pub mod bounded_aggregates;
pub mod bounded_strings;
pub(crate) mod cache_lock;
pub mod executor;
pub mod hints;
pub(crate) mod parallel;
pub mod read_floor;
pub mod sqlite_sum;
pub mod stop;

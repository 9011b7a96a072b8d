//! Decoding records from input: attempts from NDJSON or CSV ([`parse`]), gate decisions through
//! the same framing ([`decision`]), attempts from a SQLite table ([`sqlite_source`]).
//!
//! May import [`crate::model`], [`crate::policy`] and [`crate::config`]; nothing above.

pub mod decision;
pub mod parallel;
pub mod parse;
pub mod sqlite_source;

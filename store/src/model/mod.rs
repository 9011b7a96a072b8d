//! What a record is and how two reports of one record merge: the attempt and its lane
//! ([`record`], [`lanes`]), timestamps ([`time`]) and SPEC 2's write rules ([`write_rules`]).
//!
//! The bottom folder: it imports nothing else from the crate.

pub mod lanes;
pub mod record;
pub mod time;
pub mod write_rules;

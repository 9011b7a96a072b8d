//! The seeds' pure policy functions, transcribed rule for rule.
//!
//! Each submodule reproduces one seed exactly (same branches, same constants, same results) and
//! carries that seed's own tests as Rust `#[test]`s:
//!
//! * [`lane`] — seed 000, the `next_lane` router: pin a job to the paid lane after an ambiguous or
//!   permanent outcome, or once its free-lane budget is spent.
//! * [`refusal`] — seed 002, `key_failover.t27`: classify a provider refusal, rest or close the key
//!   (in seconds), pick the next free key or pool, and decide the step after a refusal.
//! * [`gate`] — seed 003, the dwell gate: admit on the free path only while queue age + expected
//!   service + retry tax (all in seconds) still fits the deadline slack.
//!
//! Nothing here does I/O or reads a clock; callers pass every input in.

pub mod gate;
pub mod lane;
pub mod refusal;

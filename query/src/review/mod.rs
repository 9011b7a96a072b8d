//! The weekly review built on the [`Session`](crate::Session): the drill table and its alerts
//! ([`metrics`]), the dwell gate's review ([`gate_metrics`]), cost and latency ([`cost`]), the
//! audit sections ([`sections`]), why a job was flagged ([`findings`]) and what-if ([`whatif`]).
//!
//! Imports: [`crate::session`], [`crate::derived`], [`crate::tables`], [`crate::engine`], and the
//! crate root's [`crate::error`] and [`crate::words`].

pub mod cost;
pub mod findings;
pub mod gate_metrics;
pub mod metrics;
pub mod sections;
pub mod whatif;

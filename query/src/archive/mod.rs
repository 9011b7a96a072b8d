//! What leaves the ledger: exports as Parquet, Arrow IPC or CSV ([`export`]) and the retention
//! sweep with its archive ([`retention`], SPEC 6).
//!
//! Imports: every folder below it ([`crate::review`], [`crate::session`], [`crate::derived`],
//! [`crate::tables`], [`crate::engine`]) and the crate root's [`crate::error`] and [`crate::words`].

pub mod export;
pub mod retention;

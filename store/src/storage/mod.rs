//! The redb file engine: every table ([`tables`]), the [`Ledger`](ledger::Ledger) and its write
//! transaction ([`ledger`], [`decision_ledger`]), the attempt rows in packed blocks
//! ([`attempt_block`], [`attempt_store`], their key filters [`key_filter`], their runs merged on a
//! second thread during a bulk ingest by `background_merge`), the hash chain and `verify`
//! ([`chain`]), the idem_key index ([`idem_index`]), retention ([`retention`]) and the webhook
//! log ([`webhook_sent`]).
//!
//! May import every folder below it ([`crate::model`], [`crate::policy`], [`crate::config`],
//! [`crate::format`], [`crate::drill`]); never [`crate::ingest`].

pub mod attempt_block;
pub mod attempt_store;
mod background_merge;
pub mod chain;
pub mod decision_ledger;
pub mod idem_index;
pub mod key_filter;
pub mod ledger;
mod reject_seen;
pub mod retention;
pub mod tables;
mod varint;
pub mod webhook_sent;

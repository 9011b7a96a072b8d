//! Which rejected lines the ledger already keeps, so that a bad line delivered again (a file
//! ingested twice, a retried batch) is counted as a duplicate delivery of its reject instead of
//! being stored a second time. Two rejects are the same delivery when their source, line number
//! and raw text are the same; the reason and the time they arrived are not compared (a newer build
//! may word the reason differently).
//!
//! The index is the table [`REJECT_SEEN`]: the SHA-256 of (source, line, raw) → the reject's
//! number in `ingest_reject`, plus the entry under the empty key holding the highest reject number
//! indexed. It is an index, not a record: not chained, and built up to date from `ingest_reject`
//! the first time a write meets a reject, so a file written before it existed needs no
//! migration.

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::model::record::{Reject, RejectRecord};
use crate::storage::ledger::decode;

/// SHA-256 of a reject's (source, line, raw) → its number in `ingest_reject`; the empty key holds
/// the highest reject number indexed.
pub const REJECT_SEEN: TableDefinition<&[u8], u64> = TableDefinition::new("ingest_reject_seen");

/// The key under which [`REJECT_SEEN`] keeps the highest reject number it indexed.
const UPTO: &[u8] = b"";

/// [`REJECT_SEEN`] open in a write transaction, brought up to date with `ingest_reject`
/// ([`crate::storage::tables::INGEST_REJECT`]).
pub(crate) struct RejectSeen<'txn> {
    table: Table<'txn, &'static [u8], u64>,
}

impl<'txn> RejectSeen<'txn> {
    /// Opens the index in `txn` and indexes the rejects of `ingest_reject` it does not hold yet.
    /// `rejects` is `ingest_reject`, which the caller holds open.
    pub(crate) fn open(txn: &'txn WriteTransaction, rejects: &impl ReadableTable<u64, &'static [u8]>) -> Result<Self> {
        let mut table = txn.open_table(REJECT_SEEN)?;
        let upto = table.get(UPTO)?.map(|v| v.value()).unwrap_or(0);
        let mut last = upto;
        for row in rejects.range(upto + 1..)? {
            let (k, v) = row?;
            let RejectRecord::V1(reject) = decode::<RejectRecord>("ingest_reject", k.value(), v.value())?;
            table.insert(identity(&reject).as_slice(), k.value())?;
            last = k.value();
        }
        if last != upto {
            table.insert(UPTO, last)?;
        }
        Ok(RejectSeen { table })
    }

    /// The number of the kept reject with `reject`'s source, line and raw text, if there is one.
    pub(crate) fn kept(&self, reject: &Reject) -> Result<Option<u64>> {
        Ok(self.table.get(identity(reject).as_slice())?.map(|v| v.value()))
    }

    /// Notes that `reject` is now kept as reject number `no`.
    pub(crate) fn insert(&mut self, reject: &Reject, no: u64) -> Result<()> {
        self.table.insert(identity(reject).as_slice(), no)?;
        self.table.insert(UPTO, no)?;
        Ok(())
    }
}

/// SHA-256 over the source, line and raw text, each length-prefixed so that no two different
/// triples hash the same bytes.
fn identity(reject: &Reject) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((reject.source.len() as u64).to_le_bytes());
    h.update(reject.source.as_bytes());
    h.update(reject.line.to_le_bytes());
    h.update((reject.raw.len() as u64).to_le_bytes());
    h.update(reject.raw.as_bytes());
    h.finalize().into()
}

/// The reason a reject delivered again is reported with: its own reason, and where it is kept.
pub(crate) fn again(reason: &str, kept: u64) -> String {
    format!("{reason} (delivered again: kept once, as ingest_reject {kept})")
}

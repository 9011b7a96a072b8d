//! The store's error type.

use std::path::PathBuf;

/// `Result` with the store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the store: opening the ledger, reading input, or a redb call.
///
/// A bad input *record* is not an error: it becomes a [`crate::Reject`] kept in `ingest_reject`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process (or another handle in this one) holds the ledger file open.
    #[error("ledger {0} is already open by another process")]
    AlreadyOpen(PathBuf),
    /// The file was written by a newer laneledger whose format this build cannot read.
    #[error("ledger {path} has format version {found}; this build reads up to {supported}")]
    FormatVersion {
        /// The ledger file.
        path: PathBuf,
        /// The version stored in its `meta` table.
        found: u64,
        /// The newest version this build reads.
        supported: u64,
    },
    /// A stored record could not be decoded (corruption, or a bug).
    #[error(
        "stored {table} record {key} cannot be decoded ({reason}): the ledger file is damaged; \
         `laneledger verify` names the record"
    )]
    Corrupt {
        /// The redb table.
        table: &'static str,
        /// The record's key, printed.
        key: String,
        /// The decoder's message.
        reason: String,
    },
    /// Reading the input failed (not a bad record: the file itself).
    #[error("{source_name}: {error}")]
    Input {
        /// The input's name (file path or `-` for stdin).
        source_name: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A run of chain entries a retention sweep was about to remove does not check: the sweep
    /// refuses to remove records whose chain is broken (run `laneledger verify`).
    #[error("chain entry {position}: {reason}; run `laneledger verify`")]
    ChainBroken {
        /// The chain position at fault.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// The ledger changed between a sweep's plan and its removal transaction (SPEC 6): nothing
    /// was removed; run the sweep again.
    #[error(
        "the ledger changed while the sweep ran (plan digest {planned}, now {found}); nothing was removed, run it again"
    )]
    SweepStale {
        /// The digest of what the plan would remove (hex).
        planned: String,
        /// The digest of what the removal transaction would remove (hex).
        found: String,
    },
    /// The file cannot be written (its permissions, an immutable flag, a read-only mount), so the
    /// ledger was opened read-only: reads work, and this is the answer to every write.
    #[error("ledger {0} is open read-only (the file cannot be written), so it takes no writes")]
    ReadOnly(PathBuf),
    /// The file cannot be written and holds an older format: it must be migrated before it can be
    /// read, and migrating writes.
    #[error(
        "ledger {path} has format version {found} and cannot be written, so it cannot be migrated to \
         version {supported}: make it writable for one command (any command migrates it)"
    )]
    ReadOnlyNeedsMigration {
        /// The ledger file.
        path: PathBuf,
        /// The version stored in its `meta` table.
        found: u64,
        /// The version this build writes.
        supported: u64,
    },
    /// redb found the file's pages damaged: a checksum that does not match, or a page it cannot
    /// parse (bit rot, a torn copy, an edit outside laneledger).
    #[error("the ledger file is damaged (redb: {0}); restore it from a copy")]
    Damaged(String),
    /// A redb storage, transaction or commit error. Its text is part of this error's message, so
    /// it is not also given as the source (which would print it twice).
    #[error("ledger storage: {0}")]
    Storage(redb::Error),
}

impl From<redb::Error> for Error {
    /// redb's own damage reports are [`Error::Damaged`], and so are the errors only a damaged
    /// file gives laneledger: a table whose stored definition is not the one laneledger always
    /// opens it with (its table-definition pages were changed), a table other than `meta` missing
    /// (opening a ledger creates them all), and a read past the end of the file (a page pointer
    /// was changed). Any other storage error stays [`Error::Storage`].
    fn from(e: redb::Error) -> Self {
        match e {
            redb::Error::Corrupted(reason) => Error::Damaged(reason),
            redb::Error::TableTypeMismatch { .. }
            | redb::Error::TableIsMultimap(_)
            | redb::Error::TableIsNotMultimap(_)
            | redb::Error::TypeDefinitionChanged { .. } => {
                Error::Damaged(format!("a table's stored definition does not match: {e}"))
            }
            // Opening a ledger creates every table but `meta` is the mark of a ledger file: a
            // missing `meta` is a file that is not a ledger, any other missing table damage.
            redb::Error::TableDoesNotExist(ref name) if name != "meta" => {
                Error::Damaged(format!("a table is missing: {e}"))
            }
            redb::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                Error::Damaged(format!("a page lies past the end of the file: {io}"))
            }
            e => Error::Storage(e),
        }
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::from(redb::Error::from(e))
            }
        }
    )*};
}
from_redb!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::CursorError,
    redb::CompactionError
);

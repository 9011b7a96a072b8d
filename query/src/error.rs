//! The query layer's error type.

/// `Result` with the query layer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong answering a query.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The statement would change something: DDL, DML, `COPY` or `SET` (user SQL is read-only).
    #[error("read-only: {0}")]
    ReadOnly(String),
    /// The SQL could not be parsed or planned (a user error: bad syntax, unknown column…).
    #[error("{0}")]
    Plan(String),
    /// DataFusion failed while running the query. Its text is part of this error's message (with
    /// the errors it wraps), so it is not also given as the source, which would print it again.
    #[error("query failed: {0}")]
    Execution(datafusion::error::DataFusionError),
    /// The answer is larger than [`crate::session::MAX_RESULT_BYTES`] (bytes).
    #[error("the result is larger than {0} bytes; add a LIMIT or aggregate")]
    ResultTooLarge(usize),
    /// Formatting a result as CSV or JSON failed.
    #[error("formatting the result: {0}")]
    Format(#[from] arrow::error::ArrowError),
    /// No data for the ISO week asked for (no job started in it, or no gate decision was logged).
    #[error("no data for ISO week {0}")]
    UnknownWeek(String),
    /// The week label is not `YYYY-Www`.
    #[error("{0:?} is not an ISO week like 2026-W47")]
    BadWeek(String),
    /// A retention sweep stopped at a fault-injection step (tests only).
    #[error("sweep aborted after {0:?}")]
    Aborted(SweepStep),
    /// Writing a retention sweep's archive failed; nothing was removed.
    #[error("archiving the sweep: {0}")]
    Archive(String),
    /// The statement panicked inside DataFusion (the SQL threads caught it; the process goes
    /// on). Holds the panic's message.
    #[error("the statement failed: it stopped on an internal error ({0}); the details are in the log")]
    Panicked(String),
    /// A scan's worker thread failed outside the ledger (a panic or a closed channel).
    #[error("internal: {0}")]
    Internal(String),

    /// A streamed answer's reader took no batch for this long, so the statement was stopped.
    #[error("the answer was stopped: its reader took nothing for {0:?}")]
    ReaderStalled(std::time::Duration),
    /// The ledger failed.
    #[error(transparent)]
    Store(#[from] laneledger_store::Error),
    /// An export bound (`--since`, `--until`) is not RFC 3339 nor a `YYYY-MM-DD` date, or the
    /// range is empty (SPEC 8 export). Holds the message for the user.
    #[error("{0}")]
    BadTimeRange(String),
    /// Writing an export or archive file (or its folder) failed (SPEC 8 export); `path` names it.
    #[error("writing {}: {source}", path.display())]
    Export {
        /// The file or folder being written.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: ExportWriteError,
    },
}

/// A step of [`sweep`](crate::archive::retention::sweep) after which a test may stop it, as a kill
/// would (fault injection). Re-exported by [`crate::archive::retention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepStep {
    /// After the plan and the week snapshots were read.
    Planned,
    /// While the archive is half written: after its `.partial` folder was filled, before the
    /// rename.
    ArchiveWritten,
    /// After the archive folder got its final name, before the removal transaction.
    Archived,
}

/// Why writing one export file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportWriteError {
    /// The file system refused (create, write, sync, rename).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The Arrow IPC or CSV writer failed.
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    /// The Parquet writer failed.
    #[error(transparent)]
    Parquet(#[from] parquet::errors::ParquetError),
}

impl From<datafusion::error::DataFusionError> for Error {
    /// A parse, plan or schema error anywhere in the chain is the user's ([`Error::Plan`]);
    /// anything else failed while running ([`Error::Execution`]).
    fn from(e: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as D;
        let root = e.find_root();
        if matches!(
            root,
            D::SQL(..) | D::Plan(_) | D::SchemaError(..) | D::NotImplemented(_)
        ) {
            Error::Plan(root.strip_backtrace())
        } else {
            Error::Execution(e)
        }
    }
}

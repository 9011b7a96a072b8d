//! The ledger: one redb file, append-only, keyed by (job_id, attempt_no) with an idem_key index.
//!
//! Writes go through [`Ledger::write_batch`], one redb write transaction a batch: when it returns
//! `Ok`, every accepted record of the batch is durable (redb's default `Durability::Immediate`
//! fsyncs the commit). Readers open their own read transaction and never wait for a writer.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, ReadableTable, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::model::record::{
    Attempt, AttemptRecord, AttemptRecordRef, Conflict, ConflictRecord, Reject, RejectRecord, StoredAttempt,
    StoredAttemptRef,
};
use crate::model::time::now_micros;
use crate::model::write_rules::{Merge, merge, without_own_ingested_at};
use crate::storage::attempt_store::{
    ATTEMPT_ROWS, AttemptWriter, BLOCK_ROWS, KeptRuns, Piece, merge_committed, read_rows,
};
use crate::storage::background_merge::BackgroundMerges;
use crate::storage::chain::{CHAIN_ENTRIES, ChainWriter, EntryKind, RecordKey};
use crate::storage::idem_index::IdemIndex;
use crate::storage::reject_seen::RejectSeen;
use crate::storage::tables::{
    ATTEMPT, ATTEMPT_BLOCK, ATTEMPT_CONFLICT, ATTEMPT_RUN, ATTEMPT_RUN_DIR, CHAIN_BLOCK, CHAIN_CHECKPOINT, CHAIN_TIP,
    COUNTER, DECISION, DECISION_CONFLICT, FORMAT_VERSION, IDEM_RUN, IDEM_RUN_DIR, INGEST_REJECT, META, RETENTION_SWEEP,
    VERIFY_RUN, WEEK_SNAPSHOT,
};

/// One record offered to the ledger: a parsed attempt, or a line already known to be bad.
// An attempt is the usual record (a lane name made it larger than a reject by a little more than
// clippy's bound); boxing it would cost an allocation per record ingested.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A parsed attempt with where it came from.
    Attempt {
        /// A file path, `-` for stdin, or an HTTP route.
        source: String,
        /// 1-based line number in the source.
        line: u64,
        /// The raw text, kept if the record conflicts.
        raw: String,
        /// The record.
        attempt: Attempt,
    },
    /// A line that failed to parse; it is kept in `ingest_reject`.
    Reject(Reject),
}

/// One record of a batch being written: borrowed from the caller, or owned by the write (whose
/// rejects' text is then freed as soon as it is stored).
enum Slot<'a> {
    Shared(&'a Incoming),
    Owned(&'a mut Incoming),
}

/// One record as the write rules meet it.
enum Staged<'a> {
    Reject(Cow<'a, Reject>),
    Attempt {
        source: &'a String,
        line: &'a u64,
        raw: &'a String,
        attempt: &'a Attempt,
    },
}

/// What the ledger did with one record (SPEC 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum WriteResult {
    /// A new identity: a new row.
    Accepted,
    /// The row in force gained these fields.
    Completed {
        /// The fields the row gained.
        fields: Vec<String>,
    },
    /// Nothing new: a duplicate delivery, counted, not an error.
    Duplicate,
    /// A field already set differs; the record is kept in `attempt_conflict`.
    Conflict {
        /// The differing fields.
        fields: Vec<String>,
    },
    /// The record could not be read; it is kept in `ingest_reject`.
    Rejected {
        /// The field at fault, if one is.
        field: Option<String>,
        /// Why.
        reason: String,
    },
}

/// Totals of [`WriteResult`]s: one ingest's summary, or the ledger's running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// New rows.
    pub accepted: u64,
    /// Rows completed by a later record.
    pub completed: u64,
    /// Duplicate deliveries.
    pub duplicates: u64,
    /// Conflicting records kept in `attempt_conflict`.
    pub conflicts: u64,
    /// Rejected lines kept in `ingest_reject`.
    pub rejected: u64,
}

impl Counters {
    /// Counts one result.
    pub fn add(&mut self, r: &WriteResult) {
        match r {
            WriteResult::Accepted => self.accepted += 1,
            WriteResult::Completed { .. } => self.completed += 1,
            WriteResult::Duplicate => self.duplicates += 1,
            WriteResult::Conflict { .. } => self.conflicts += 1,
            WriteResult::Rejected { .. } => self.rejected += 1,
        }
    }

    /// Adds another set of totals.
    pub fn merge(&mut self, o: &Counters) {
        self.accepted += o.accepted;
        self.completed += o.completed;
        self.duplicates += o.duplicates;
        self.conflicts += o.conflicts;
        self.rejected += o.rejected;
    }

    /// Records offered in all.
    pub fn total(&self) -> u64 {
        self.accepted + self.completed + self.duplicates + self.conflicts + self.rejected
    }
}

impl std::fmt::Display for Counters {
    /// `accepted 3, completed 1, duplicate deliveries 2, conflicts 0, rejected 1`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "accepted {}, completed {}, duplicate deliveries {}, conflicts {}, rejected {}",
            self.accepted, self.completed, self.duplicates, self.conflicts, self.rejected
        )
    }
}

pub(crate) const COUNTER_NAMES: [&str; 5] = ["accepted", "completed", "duplicates", "conflicts", "rejected"];
const NEXT_SEQ: &str = "next_attempt_seq";
const NEXT_CONFLICT: &str = "next_conflict";
pub(crate) const NEXT_REJECT: &str = "next_reject";

/// The stored value of a new attempt row, written into `buf` (whose allocation is reused): the
/// same bytes as `encode(&AttemptRecord::V1(StoredAttempt { attempt, seq, ingested_at }))`,
/// without cloning the attempt into a [`StoredAttempt`].
fn attempt_value(mut buf: Vec<u8>, attempt: &Attempt, seq: u64, ingested_at: i64) -> Vec<u8> {
    buf.clear();
    // `AttemptRecord::V1` is postcard variant 0, then `StoredAttempt`'s fields in order: the
    // attempt, `seq`, `ingested_at`.
    buf.push(0);
    let buf = postcard::to_extend(attempt, buf).expect("attempts always encode");
    postcard::to_extend(&(seq, ingested_at), buf).expect("integers always encode")
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // An attempt is about 130 bytes: starting at 256 spares the Vec its growing reallocations.
    postcard::to_extend(v, Vec::with_capacity(256)).expect("ledger records always encode")
}

pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, key: impl std::fmt::Debug, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Corrupt {
        table,
        key: format!("{key:?}"),
        reason: e.to_string(),
    })
}

/// Decodes a stored attempt value (any format version this build reads).
pub fn decode_attempt(bytes: &[u8]) -> Result<StoredAttempt> {
    match decode::<AttemptRecord>("attempt", "value", bytes)? {
        AttemptRecord::V1(a) => Ok(a),
    }
}

/// Decodes a stored attempt value in place, borrowing its strings from `bytes` (any format
/// version this build reads). Errors: [`Error::Corrupt`] naming the attempt table.
pub fn decode_attempt_ref(bytes: &[u8]) -> Result<StoredAttemptRef<'_>> {
    match postcard::from_bytes::<AttemptRecordRef<'_>>(bytes).map_err(|e| Error::Corrupt {
        table: "attempt",
        key: "value".into(),
        reason: e.to_string(),
    })? {
        AttemptRecordRef::V1(a) => Ok(a),
    }
}

/// The attempts of one read snapshot in key ranges ([`Ledger::attempt_snapshot`]).
pub struct AttemptSnapshot {
    txn: ReadTransaction,
    position: u64,
    ranges: Vec<crate::storage::attempt_store::KeyRange>,
}

impl AttemptSnapshot {
    /// The snapshot's chain position, to pass to [`Ledger::attempt_changes_since`] later.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// How many key ranges it is cut into (one at least), in key order.
    pub fn parts(&self) -> usize {
        self.ranges.len()
    }

    /// Copies the attempt values of key range `part` (below [`AttemptSnapshot::parts`]), in key
    /// order, into chunks of `rows` values (filling those `spare` hands back first) and hands each
    /// to `f` with its number in the range (from 0), so that the (costlier) unpacking and
    /// decoding can run on other threads while this one reads on. Stops at the first error `f`
    /// returns. A chunk holds whole blocks, so it may hold up to a block's rows more than `rows`.
    ///
    /// Panics if `part` is not below [`AttemptSnapshot::parts`].
    pub fn chunks<E: From<Error>>(
        &self,
        part: usize,
        rows: usize,
        mut spare: impl FnMut() -> Option<AttemptChunk>,
        mut f: impl FnMut(usize, AttemptChunk) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let range = &self.ranges[part];
        let rows = rows.max(1);
        let view = read_rows(&self.txn)?;
        let mut fresh = || {
            let mut c = spare().unwrap_or_default();
            c.clear();
            c
        };
        let mut chunk = fresh();
        let mut n = 0;
        view.walk_range(true, range.clone(), |piece| -> std::result::Result<(), E> {
            let packed = matches!(piece, Piece::Packed { .. });
            // A chunk holds blocks or rows, not both: hand it on when the kind changes.
            if (packed && !chunk.ends.is_empty()) || (!packed && chunk.packed_rows > 0) {
                f(n, std::mem::replace(&mut chunk, fresh()))?;
                n += 1;
            }
            match piece {
                Piece::Packed { rows, stored } => {
                    chunk.packed.extend_from_slice(stored);
                    chunk.packed_ends.push(chunk.packed.len());
                    chunk.packed_rows += rows;
                }
                Piece::Row { value, .. } => {
                    chunk.bytes.extend_from_slice(value);
                    chunk.ends.push(chunk.bytes.len());
                }
            }
            if chunk.len() >= rows {
                f(n, std::mem::replace(&mut chunk, fresh()))?;
                n += 1;
            }
            Ok(())
        })?;
        if !chunk.is_empty() {
            f(n, chunk)?;
        }
        Ok(())
    }
}

/// A run of attempt values in key order, copied out of one read snapshot by
/// [`Ledger::attempt_chunks`]: whole packed blocks of rows ([`crate::storage::attempt_block`]) or rows
/// one by one. Call [`AttemptChunk::unpack`] (on the thread that decodes), then `bytes` holds the
/// values back to back and `ends[i]` is where value `i` ends. Decode each with
/// [`decode_attempt_ref`].
#[derive(Debug, Default, Clone)]
pub struct AttemptChunk {
    /// The values, concatenated.
    pub bytes: Vec<u8>,
    /// The end offset of each value in `bytes`.
    pub ends: Vec<usize>,
    /// Stored blocks not yet unpacked, back to back (a chunk holds blocks or rows, not both).
    packed: Vec<u8>,
    /// The end offset of each stored block in `packed`.
    packed_ends: Vec<usize>,
    /// The rows those blocks hold.
    packed_rows: usize,
}

impl AttemptChunk {
    /// Unpacks the chunk's blocks into `bytes` and `ends` (nothing to do for a chunk of rows).
    ///
    /// Errors: [`Error::Corrupt`] for a block that does not unpack.
    pub fn unpack(&mut self) -> Result<()> {
        let mut start = 0;
        for (i, &end) in self.packed_ends.iter().enumerate() {
            crate::storage::attempt_block::Block::values_onto(
                &self.packed[start..end],
                &mut self.bytes,
                &mut self.ends,
            )
            .map_err(|reason| Error::Corrupt {
                table: "attempt_block",
                key: format!("block {i} of a scan chunk"),
                reason,
            })?;
            start = end;
        }
        self.packed.clear();
        self.packed_ends.clear();
        self.packed_rows = 0;
        Ok(())
    }

    /// The values in order (of a chunk unpacked: [`AttemptChunk::unpack`]).
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        debug_assert!(self.packed_ends.is_empty(), "values() of a chunk not unpacked");
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let v = &self.bytes[start..end];
            start = end;
            v
        })
    }

    /// How many values, packed or not.
    pub fn len(&self) -> usize {
        self.ends.len() + self.packed_rows
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.packed.clear();
        self.packed_ends.clear();
        self.packed_rows = 0;
    }
}

/// redb's page cache for one open ledger, in bytes: 256 MiB. Writes touch the newest pages and
/// the write rules' point reads are few per record, so a small cache serves ingest; a query scans
/// the attempts once into Arrow ([`Ledger::attempt_chunks`]), where a larger cache would only
/// hold a second copy of pages already read (redb's default is 1 GiB).
pub const CACHE_BYTES: usize = 256 << 20;

/// redb's page cache for a ledger opened read-only, in bytes: 16 MiB. A reading command scans the
/// attempt runs once into Arrow and reads a job or an idem_key by a few pages; the B-trees' upper
/// pages, read again by every lookup, fit. At [`CACHE_BYTES`] a review of 10 M attempts kept a
/// quarter of a gigabyte of pages it never read again (BENCHMARKS.md, "Reading commands' memory").
pub const READ_CACHE_BYTES: usize = 16 << 20;

/// The open redb file: writable, or read-only when the file itself cannot be written.
enum Handle {
    Writable(Database),
    ReadOnly(ReadOnlyDatabase),
}

/// The ledger's redb file, as [`Ledger::database`] hands it out: read transactions always, write
/// transactions when the file could be opened for writing.
pub struct LedgerDb {
    handle: Handle,
    path: PathBuf,
    /// Write transactions begun: the number of the one under way, while one is.
    writes: AtomicU64,
}

impl LedgerDb {
    /// A read transaction: one consistent snapshot, never waiting for a writer.
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        Ok(match &self.handle {
            Handle::Writable(db) => db.begin_read()?,
            Handle::ReadOnly(db) => db.begin_read()?,
        })
    }

    /// A write transaction. Errors: [`Error::ReadOnly`] when the file was opened read-only.
    pub fn begin_write(&self) -> Result<WriteTransaction> {
        match &self.handle {
            Handle::Writable(db) => {
                let txn = db.begin_write()?;
                // redb hands out one write transaction at a time: this is its number.
                self.writes.fetch_add(1, Ordering::AcqRel);
                Ok(txn)
            }
            Handle::ReadOnly(_) => Err(Error::ReadOnly(self.path.clone())),
        }
    }

    /// Whether the file was opened read-only because it cannot be written.
    pub fn is_read_only(&self) -> bool {
        matches!(self.handle, Handle::ReadOnly(_))
    }
}

/// The attempt runs merged on a second thread ([`Ledger::merges_in_background`]) until
/// [`MergesInBackground::settle`] or the guard's drop.
pub struct MergesInBackground<'a> {
    ledger: &'a Ledger,
    /// Whether this guard started the thread (and so stops it).
    started: bool,
}

impl MergesInBackground<'_> {
    /// Waits for the merge under way, if any, and stops the thread; then merges what is still
    /// due (the thread lags behind the writer by a merge or a few) on this thread, each merged
    /// run put in place by a write transaction of its own, so that the ledger is left with the
    /// runs a writer merging on its own thread would leave. Errors: storage errors.
    pub fn settle(mut self) -> Result<()> {
        if !std::mem::take(&mut self.started) {
            return Ok(());
        }
        let Some(mut merges) = self.ledger.merges().take() else {
            return Ok(());
        };
        let mut run = merges.settle();
        drop(merges);
        let never = std::sync::atomic::AtomicBool::new(false);
        loop {
            if let Some(run) = run {
                self.ledger.write_with(|txn| {
                    let block_rows = txn.open_table(COUNTER)?.get(BLOCK_ROWS)?.map_or(0, |v| v.value());
                    AttemptWriter::open(txn, block_rows)?.install(run)?;
                    Ok(())
                })?;
            }
            run = merge_committed(&self.ledger.db.begin_read()?, &never)?;
            if run.is_none() {
                return Ok(());
            }
        }
    }
}

impl Drop for MergesInBackground<'_> {
    fn drop(&mut self) {
        if self.started {
            // Stops the merge under way: its runs stay as they are.
            let merges = self.ledger.merges().take();
            drop(merges);
        }
    }
}

/// The attempt ledger. Cheap to clone: clones share one open redb file ([`LedgerDb`]).
#[derive(Clone)]
pub struct Ledger {
    db: Arc<LedgerDb>,
    generation: Arc<AtomicU64>,
    migrated_from: Option<u64>,
    /// The thread merging attempt runs while a bulk ingest writes ([`Ledger::merges_in_background`]).
    merges: Arc<Mutex<Option<BackgroundMerges>>>,
    /// What the attempt rows' writer of the last write transaction handed on, with that
    /// transaction's number ([`LedgerDb::begin_write`]) and whether it committed: taken over by
    /// the next one if it is the very next.
    kept: Arc<Mutex<Option<(u64, KeptRuns, bool)>>>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("path", &self.db.path).finish()
    }
}

/// Whether opening a file for writing failed because the file cannot be written (permissions, an
/// immutable flag, a read-only mount) rather than for a reason a read-only open would share.
fn cannot_write(e: &redb::DatabaseError) -> bool {
    match e {
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => matches!(
            io.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ),
        _ => false,
    }
}

impl Ledger {
    /// Opens the ledger at `path`, creating it (and its tables) when it does not exist.
    ///
    /// An older file is migrated in the same transaction: a format-version-1 file (before the
    /// hash chain) has its records chained in table order ([`crate::storage::chain`]); a version-2 file has
    /// its chain stored again in blocks (entry bytes and hashes unchanged); the idem_key index of
    /// a version 2 or 3 file becomes one sorted run ([`crate::storage::idem_index`]); the chain of a version
    /// 2, 3 or 4 file is stored again without the hashes that can be computed (every hash
    /// unchanged); the attempt rows of a version 5 (or older) file are packed into blocks
    /// ([`crate::storage::attempt_store`], every value unchanged); each becomes version 8, and the file is
    /// compacted (redb moves its pages down and gives the freed space back). A version 6 or 7 file
    /// only has its version raised: its blocks are read as they are (version 6: one values frame
    /// each; version 7: framed, without a key filter; see [`crate::storage::attempt_block`]) and a
    /// block a write rewrites gets version 8's layout.
    ///
    /// A file that exists but cannot be written is opened read-only: every read works and every
    /// write answers [`Error::ReadOnly`].
    ///
    /// Errors: [`Error::AlreadyOpen`] when another process holds the file, [`Error::FormatVersion`]
    /// when a newer laneledger wrote it, [`Error::ReadOnlyNeedsMigration`] for an older file that
    /// cannot be written, [`Error::Damaged`] when redb finds its pages damaged, [`Error::Storage`]
    /// for anything else redb reports.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path.as_ref(), false, &crate::progress::Silent)
    }

    /// [`Ledger::open`], telling `progress` how far a migration of an older file has come (one
    /// stage a migration step; nothing when the file is current). The compaction after a
    /// migration from version 5 or older is not counted.
    pub fn open_with_progress(path: impl AsRef<Path>, progress: &dyn crate::progress::Progress) -> Result<Self> {
        Self::open_with(path.as_ref(), false, progress)
    }

    /// [`Ledger::open`], first checking the checksum of every page of the file (redb's integrity
    /// check: it reads the whole file). A file damaged outside laneledger then fails to open with
    /// [`Error::Damaged`] instead of being read; `laneledger verify` opens this way. A read-only
    /// file is opened without the check (redb's check commits).
    pub fn open_checked(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path.as_ref(), true, &crate::progress::Silent)
    }

    fn open_with(path: &Path, check_integrity: bool, progress: &dyn crate::progress::Progress) -> Result<Self> {
        let path = path.to_path_buf();
        let mut builder = Database::builder();
        builder
            .set_cache_size(CACHE_BYTES)
            .set_check_integrity_on_open(check_integrity);
        let mut db = match builder.create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(Error::AlreadyOpen(path)),
            Err(e) if cannot_write(&e) && path.is_file() => return Self::open_read_only(path),
            Err(e) => return Err(redb::Error::from(e).into()),
        };
        let txn = db.begin_write()?;
        let mut migrated_from = None;
        {
            let mut meta = txn.open_table(META)?;
            let found = meta.get("format_version")?.map(|v| v.value());
            txn.open_table(ATTEMPT)?;
            txn.open_table(ATTEMPT_BLOCK)?;
            txn.open_table(ATTEMPT_RUN)?;
            txn.open_table(ATTEMPT_RUN_DIR)?;
            txn.open_table(IDEM_RUN)?;
            txn.open_table(IDEM_RUN_DIR)?;
            txn.open_table(ATTEMPT_CONFLICT)?;
            txn.open_table(INGEST_REJECT)?;
            txn.open_table(COUNTER)?;
            txn.open_table(DECISION)?;
            txn.open_table(DECISION_CONFLICT)?;
            txn.open_table(CHAIN_BLOCK)?;
            txn.open_table(CHAIN_TIP)?;
            txn.open_table(CHAIN_CHECKPOINT)?;
            txn.open_table(RETENTION_SWEEP)?;
            txn.open_table(WEEK_SNAPSHOT)?;
            txn.open_table(VERIFY_RUN)?;
            match found {
                Some(v) if v > FORMAT_VERSION => {
                    return Err(Error::FormatVersion {
                        path,
                        found: v,
                        supported: FORMAT_VERSION,
                    });
                }
                Some(v) if v < FORMAT_VERSION => {
                    if v < 2 {
                        let chained = crate::storage::chain::migrate_v1(&txn, progress)?;
                        txn.open_table(COUNTER)?.insert(CHAIN_ENTRIES, chained)?;
                    }
                    if v < 3 {
                        crate::storage::chain::migrate_v2(&txn, progress)?;
                    }
                    if v < 4 {
                        crate::storage::idem_index::migrate_v3(&txn, progress)?;
                    }
                    if v < 5 {
                        crate::storage::chain::migrate_v4(&txn, progress)?;
                    }
                    if v < 6 {
                        crate::storage::attempt_store::migrate_v5(&txn, progress)?;
                    }
                    if v < 9 {
                        crate::storage::attempt_store::migrate_v8(&txn, progress)?;
                    }
                    if v >= 5 {
                        // Older migrations above write the chain packed already.
                        crate::storage::chain::migrate_v10(&txn, progress)?;
                    }
                    meta.insert("format_version", FORMAT_VERSION)?;
                    migrated_from = Some(v);
                }
                Some(_) => {}
                None => {
                    meta.insert("format_version", FORMAT_VERSION)?;
                }
            }
        }
        txn.commit()?;
        if migrated_from.is_some_and(|v| v < 11) {
            // A migration rewrote tables: give the freed pages back (at 10 M attempts, a 2.9 GB
            // version 4 file is 3.5 GB migrated and 2.2 GB compacted, in 26 s; a 1.53 GB version
            // 10 file has its chain packed in about 4 s, is 3.06 GB then and 1.43 GB compacted,
            // in 3.5 s).
            db.compact()?;
        }
        Ok(Self::with_handle(Handle::Writable(db), path, migrated_from))
    }

    /// Opens an existing ledger file without writing to it. Errors as [`Ledger::open`]; a file of
    /// an older format gives [`Error::ReadOnlyNeedsMigration`], and one that is not a ledger (no
    /// `meta` table) gives [`Error::Storage`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let db = match Database::builder()
            .set_cache_size(READ_CACHE_BYTES)
            .open_read_only(&path)
        {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(Error::AlreadyOpen(path)),
            Err(e) => return Err(redb::Error::from(e).into()),
        };
        let txn = db.begin_read()?;
        let found = txn.open_table(META)?.get("format_version")?.map(|v| v.value());
        drop(txn);
        match found {
            Some(v) if v > FORMAT_VERSION => Err(Error::FormatVersion {
                path,
                found: v,
                supported: FORMAT_VERSION,
            }),
            Some(v) if v < FORMAT_VERSION => Err(Error::ReadOnlyNeedsMigration {
                path,
                found: v,
                supported: FORMAT_VERSION,
            }),
            _ => Ok(Self::with_handle(Handle::ReadOnly(db), path, None)),
        }
    }

    /// Opens an existing ledger for reading without writing to it where it can: read-only
    /// ([`Ledger::open_read_only`]), so that reading leaves the file's bytes as they were and
    /// several readers may share it. A file that must be written first is opened as
    /// [`Ledger::open`] does: one of an older format (migrated) or one a crash left needing
    /// recovery (repaired). Errors as [`Ledger::open`].
    pub fn open_to_read(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_to_read_with_progress(path, &crate::progress::Silent)
    }

    /// [`Ledger::open_to_read`], telling `progress` how far a migration has come, as
    /// [`Ledger::open_with_progress`] does.
    pub fn open_to_read_with_progress(
        path: impl AsRef<Path>,
        progress: &dyn crate::progress::Progress,
    ) -> Result<Self> {
        let path = path.as_ref();
        match Self::open_read_only(path) {
            Err(Error::ReadOnlyNeedsMigration { .. } | Error::Storage(redb::Error::RepairAborted)) => {
                Self::open_with_progress(path, progress)
            }
            opened => opened,
        }
    }

    fn with_handle(handle: Handle, path: PathBuf, migrated_from: Option<u64>) -> Self {
        Ledger {
            db: Arc::new(LedgerDb {
                handle,
                path,
                writes: AtomicU64::new(0),
            }),
            generation: Arc::new(AtomicU64::new(0)),
            migrated_from,
            merges: Arc::default(),
            kept: Arc::default(),
        }
    }

    /// Merges the attempt runs on a second thread until the guard returned is settled or dropped
    /// (what a bulk ingest does: see `storage/background_merge.rs`). Nothing changes for a
    /// read-only ledger, nor while another guard of this ledger is alive.
    pub fn merges_in_background(&self) -> MergesInBackground<'_> {
        let mut merges = self.merges.lock().unwrap_or_else(PoisonError::into_inner);
        let started = !self.is_read_only() && merges.is_none();
        if started {
            let db = self.db.clone();
            *merges = Some(BackgroundMerges::start(move || db.begin_read()));
        }
        MergesInBackground { ledger: self, started }
    }

    /// The merging thread, when one runs.
    fn merges(&self) -> std::sync::MutexGuard<'_, Option<BackgroundMerges>> {
        self.merges.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One write transaction: `stage` fills it, then it commits; the merging thread, if any, is
    /// told that it ended either way.
    fn write_with<T>(&self, stage: impl FnOnce(&WriteTransaction) -> Result<T>) -> Result<T> {
        let written = self.db.begin_write().and_then(|txn| {
            let number = self.db.writes.load(Ordering::Acquire);
            let out = stage(&txn)?;
            txn.commit()?;
            Ok((number, out))
        });
        if let Some(m) = self.merges().as_mut() {
            m.ended();
        }
        let (number, out) = written?;
        if let Some((n, _, committed)) = self.kept.lock().unwrap_or_else(PoisonError::into_inner).as_mut()
            && *n == number
        {
            *committed = true;
        }
        self.bump_generation();
        Ok(out)
    }

    /// Whether the file was opened read-only because it cannot be written: writes answer
    /// [`Error::ReadOnly`].
    pub fn is_read_only(&self) -> bool {
        self.db.is_read_only()
    }

    /// Gives the file's free pages back to the file system, then closes the file: redb moves the
    /// pages in use towards the start of the file and cuts off the free end (`Database::compact`).
    /// Every record, the chain and its tip are unchanged; only the file's layout moves. Worth
    /// running after a bulk ingest, whose copy-on-write commits and growing file leave space
    /// unused (the 1 M drill: 285 MB, 204 MB compacted, in about a second), or after a retention
    /// sweep, whose freed pages are otherwise kept for later writes. It takes the ledger because
    /// it needs the only handle of the file, and blocks every other use while it runs.
    ///
    /// Errors: [`Error::ReadOnly`] for a file opened read-only, [`Error::AlreadyOpen`] while
    /// another handle of this ledger (a clone) is alive, [`Error::Storage`] for what redb reports.
    pub fn compact(self) -> Result<()> {
        let db = Arc::try_unwrap(self.db).map_err(|db| Error::AlreadyOpen(db.path.clone()))?;
        match db.handle {
            Handle::Writable(mut file) => Ok(file.compact().map(|_| ())?),
            Handle::ReadOnly(_) => Err(Error::ReadOnly(db.path)),
        }
    }

    /// The format version the file had when this handle migrated it to [`FORMAT_VERSION`] on
    /// opening, or `None` when it was already current (or new). A migrated file can no longer be
    /// opened by a release that reads only the older version, so callers tell the user.
    pub fn migrated_from(&self) -> Option<u64> {
        self.migrated_from
    }

    /// The ledger file's path.
    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// A number that changes after every committed write through this handle (or a clone of it).
    ///
    /// redb lets one process hold the file, so within that process equal generations mean equal
    /// contents: readers may cache what they derived from the ledger under it.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks a committed write (call after `commit` returns).
    pub(crate) fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The shared redb file, for the store's modules that add their own tables (and for tests).
    pub fn database(&self) -> &LedgerDb {
        &self.db
    }

    /// Applies SPEC 2's write rules to each record in order, in one write transaction, and commits.
    ///
    /// Returns one [`WriteResult`] per record, in order. When this returns `Ok`, the batch is
    /// durable; on `Err` nothing of the batch was written.
    pub fn write_batch(&self, batch: Vec<Incoming>) -> Result<Vec<WriteResult>> {
        let mut batch = batch;
        self.write_with(|txn| {
            // The batch is owned: each reject's text is freed once stored (its field and reason
            // move into its result), so a body of many tiny rejected records does not hold them
            // twice.
            let len = batch.len();
            let results = self.stage(txn, batch.iter_mut().map(Slot::Owned), len)?;
            // The records are in the transaction now: free them before the commit writes its pages.
            drop(batch);
            Ok(results)
        })
    }

    /// [`Ledger::write_batch`] for a borrowed batch: what file ingest does, so that the thread
    /// that made the records frees them (with mimalloc, a free on another thread costs more). A
    /// new attempt's row value is encoded here, straight into a reused buffer (the parsing thread
    /// is ingest's busier one). A new attempt whose key sorts above every key held is appended to
    /// the last block of rows without a lookup ([`crate::storage::attempt_store`]); any other looks up the
    /// row in force first.
    pub fn write_borrowed(&self, batch: &[Incoming]) -> Result<Vec<WriteResult>> {
        self.write_with(|txn| self.stage(txn, batch.iter().map(Slot::Shared), batch.len()))
    }

    /// Applies the write rules to `batch` in `txn`, uncommitted: one result per record.
    fn stage<'a>(
        &self,
        txn: &WriteTransaction,
        batch: impl Iterator<Item = Slot<'a>>,
        len: usize,
    ) -> Result<Vec<WriteResult>> {
        let now = now_micros();
        let mut results = Vec::with_capacity(len);
        {
            // The idem_key index entries of the attempts this batch inserts, stored as one run.
            let mut new_keys: Vec<(&str, &str, u32)> = Vec::new();
            let mut conflicts = txn.open_table(ATTEMPT_CONFLICT)?;
            let mut rejects = txn.open_table(INGEST_REJECT)?;
            let mut counter = txn.open_table(COUNTER)?;
            let get = |name: &str| -> Result<u64> { Ok(counter.get(name)?.map(|v| v.value()).unwrap_or(0)) };
            let number = self.db.writes.load(Ordering::Acquire);
            let kept = self
                .kept
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .and_then(|(n, kept, committed)| (committed && n + 1 == number).then_some(kept));
            let mut rows = AttemptWriter::open_kept(txn, get(BLOCK_ROWS)?, kept)?;
            let attempt_rows = get(ATTEMPT_ROWS)?;
            let mut chain = ChainWriter::open(txn, get(CHAIN_ENTRIES)?)?;
            let mut next_seq = get(NEXT_SEQ)?;
            let mut next_conflict = get(NEXT_CONFLICT)?;
            let mut next_reject = get(NEXT_REJECT)?;
            let mut totals = Counters::default();
            // Opened at the batch's first reject ([`crate::storage::reject_seen`]).
            let mut seen: Option<RejectSeen> = None;
            let mut rejects_again = 0u64;
            // A new row's value is built here: its prepared bytes, then `seq` and `ingested_at`.
            let mut value: Vec<u8> = Vec::with_capacity(512);
            // The greatest key held: a key above it is new for certain. Routers number jobs in
            // time order and send a job's attempts together, so most keys are.
            let held_last = rows.last_key()?;
            let mut greatest: Option<(&str, u32)> = held_last.as_ref().map(|(j, n)| (j.as_str(), *n));

            for slot in batch {
                let incoming = match slot {
                    Slot::Owned(Incoming::Reject(reject)) => Staged::Reject(Cow::Owned(std::mem::replace(
                        reject,
                        Reject {
                            source: String::new(),
                            line: 0,
                            field: None,
                            reason: String::new(),
                            raw: String::new(),
                            received_at: 0,
                        },
                    ))),
                    Slot::Shared(Incoming::Reject(reject)) => Staged::Reject(Cow::Borrowed(reject)),
                    Slot::Owned(Incoming::Attempt {
                        source,
                        line,
                        raw,
                        attempt,
                    }) => Staged::Attempt {
                        source,
                        line,
                        raw,
                        attempt,
                    },
                    Slot::Shared(Incoming::Attempt {
                        source,
                        line,
                        raw,
                        attempt,
                    }) => Staged::Attempt {
                        source,
                        line,
                        raw,
                        attempt,
                    },
                };
                let result = match incoming {
                    Staged::Reject(reject) => {
                        // A line already kept (same source, line and raw text) is a duplicate
                        // delivery of its reject: reported again, stored once.
                        if seen.is_none() {
                            seen = Some(RejectSeen::open(txn, &rejects)?);
                        }
                        let seen = seen.as_mut().expect("opened just above");
                        match seen.kept(&reject)? {
                            Some(kept) => {
                                rejects_again += 1;
                                WriteResult::Rejected {
                                    field: reject.field.clone(),
                                    reason: crate::storage::reject_seen::again(&reject.reason, kept),
                                }
                            }
                            None => {
                                next_reject += 1;
                                seen.insert(&reject, next_reject)?;
                                // Cloned only when the batch is borrowed, as before.
                                let record = RejectRecord::V1(reject.into_owned());
                                let value = encode(&record);
                                rejects.insert(next_reject, value.as_slice())?;
                                chain.append(EntryKind::Insert, RecordKey::IngestReject(next_reject), &value)?;
                                let RejectRecord::V1(reject) = record;
                                WriteResult::Rejected {
                                    field: reject.field,
                                    reason: reject.reason,
                                }
                            }
                        }
                    }
                    Staged::Attempt {
                        source,
                        line,
                        raw,
                        attempt,
                    } => {
                        let key = (attempt.job_id.as_str(), attempt.attempt_no);
                        let above = greatest.is_none_or(|g| key > g);
                        let held = if above { None } else { rows.get(key.0, key.1)? };
                        match held {
                            None => {
                                next_seq += 1;
                                value = attempt_value(std::mem::take(&mut value), attempt, next_seq, now);
                                if above {
                                    rows.append(key.0, key.1, &value)?;
                                    greatest = Some(key);
                                } else {
                                    rows.put(key.0, key.1, &value)?;
                                }
                                new_keys.push((attempt.idem_key.as_str(), key.0, key.1));
                                let key = RecordKey::Attempt {
                                    job_id: key.0.to_string(),
                                    attempt_no: key.1,
                                };
                                chain.append(EntryKind::Insert, key, &value)?;
                                WriteResult::Accepted
                            }
                            Some(bytes) => {
                                let held = decode_attempt(&bytes)?;
                                match merge(&held.attempt, &without_own_ingested_at(attempt, held.ingested_at)) {
                                    Merge::Duplicate => WriteResult::Duplicate,
                                    Merge::Complete(row, fields) => {
                                        let stored = StoredAttempt { attempt: *row, ..held };
                                        let value = encode(&AttemptRecord::V1(stored));
                                        rows.put(key.0, key.1, &value)?;
                                        let key = RecordKey::Attempt {
                                            job_id: key.0.to_string(),
                                            attempt_no: key.1,
                                        };
                                        chain.append(EntryKind::Update, key, &value)?;
                                        WriteResult::Completed { fields }
                                    }
                                    Merge::Conflict(fields) => {
                                        next_conflict += 1;
                                        let c = Conflict {
                                            source: source.clone(),
                                            line: *line,
                                            job_id: attempt.job_id.clone(),
                                            attempt_no: attempt.attempt_no,
                                            fields: fields.clone(),
                                            attempt: attempt.clone(),
                                            raw: raw.clone(),
                                            received_at: now,
                                        };
                                        let value = encode(&ConflictRecord::V1(c));
                                        conflicts.insert(next_conflict, value.as_slice())?;
                                        chain.append(
                                            EntryKind::Insert,
                                            RecordKey::AttemptConflict(next_conflict),
                                            &value,
                                        )?;
                                        WriteResult::Conflict { fields }
                                    }
                                }
                            }
                        }
                    }
                };
                totals.add(&result);
                results.push(result);
            }
            if let Some(m) = self.merges().as_mut().filter(|m| !m.failed()) {
                rows.merges_in_background();
                if let Some(run) = m.take() {
                    rows.install(run)?;
                }
            }
            let (block_rows, kept) = rows.finish_keeping()?;
            counter.insert(BLOCK_ROWS, block_rows)?;
            *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some((number, kept, false));
            counter.insert(ATTEMPT_ROWS, attempt_rows + totals.accepted)?;
            counter.insert(CHAIN_ENTRIES, chain.finish()?)?;
            IdemIndex::open(txn)?.append(&mut new_keys)?;
            counter.insert(NEXT_SEQ, next_seq)?;
            counter.insert(NEXT_CONFLICT, next_conflict)?;
            counter.insert(NEXT_REJECT, next_reject)?;
            let add = [
                totals.accepted,
                totals.completed,
                totals.duplicates + rejects_again,
                totals.conflicts,
                totals.rejected - rejects_again,
            ];
            for (name, n) in COUNTER_NAMES.iter().zip(add) {
                if n > 0 {
                    let old = counter.get(*name)?.map(|v| v.value()).unwrap_or(0);
                    counter.insert(*name, old + n)?;
                }
            }
        }
        Ok(results)
    }

    /// The ledger's running totals of every write result since it was created.
    pub fn counters(&self) -> Result<Counters> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(COUNTER)?;
        let get = |name: &str| -> Result<u64> { Ok(t.get(name)?.map(|v| v.value()).unwrap_or(0)) };
        Ok(Counters {
            accepted: get("accepted")?,
            completed: get("completed")?,
            duplicates: get("duplicates")?,
            conflicts: get("conflicts")?,
            rejected: get("rejected")?,
        })
    }

    /// The number of attempt rows.
    pub fn attempt_count(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(COUNTER)?.get(ATTEMPT_ROWS)?.map_or(0, |v| v.value()))
    }

    /// Calls `f` on every attempt in (job_id, attempt_no) order, from one consistent snapshot.
    pub fn for_each_attempt(&self, mut f: impl FnMut(StoredAttempt)) -> Result<()> {
        let txn = self.db.begin_read()?;
        read_rows(&txn)?.walk(false, |piece| -> Result<()> {
            if let Piece::Row { value, .. } = piece {
                f(decode_attempt(value)?);
            }
            Ok(())
        })
    }

    /// Copies every attempt value, in (job_id, attempt_no) order from one consistent snapshot,
    /// into chunks of `rows` values and hands each to `f` with its number (from 0), so that the
    /// (costlier) unpacking and decoding can run on other threads while this one reads on. Stops
    /// at the first error `f` returns. Returns the snapshot's chain position, to pass to
    /// [`Ledger::attempt_changes_since`] later. [`Ledger::attempt_chunks_reusing`] with no spare
    /// buffers.
    pub fn attempt_chunks<E: From<Error>>(
        &self,
        rows: usize,
        f: impl FnMut(usize, AttemptChunk) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        self.attempt_chunks_reusing(rows, || None, f)
    }

    /// [`Ledger::attempt_chunks`], filling the chunks `spare` hands back (emptied, their buffers
    /// kept) before allocating new ones. A scan of 10 M attempts unpacks about 1.2 GB of values;
    /// with a few buffers passed round between the reader and the decoders, that memory is
    /// allocated (and faulted in by the kernel) once instead of once per chunk. A chunk holds
    /// whole blocks, so it may hold up to a block's rows (about 500) more than `rows`.
    pub fn attempt_chunks_reusing<E: From<Error>>(
        &self,
        rows: usize,
        spare: impl FnMut() -> Option<AttemptChunk>,
        f: impl FnMut(usize, AttemptChunk) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        let snapshot = self.attempt_snapshot(1)?;
        snapshot.chunks(0, rows, spare, f)?;
        Ok(snapshot.position())
    }

    /// One consistent snapshot of the attempts, cut into up to `parts` key ranges that threads
    /// may read side by side ([`AttemptSnapshot::chunks`]); their chunks, range after range, are
    /// [`Ledger::attempt_chunks`]'s.
    pub fn attempt_snapshot(&self, parts: usize) -> Result<AttemptSnapshot> {
        let txn = self.db.begin_read()?;
        let position = crate::storage::chain::chain_position(&txn)?;
        let ranges = read_rows(&txn)?.split(parts)?;
        Ok(AttemptSnapshot { txn, position, ranges })
    }

    /// One attempt by its identity: an index read.
    pub fn attempt(&self, job_id: &str, attempt_no: u32) -> Result<Option<StoredAttempt>> {
        let txn = self.db.begin_read()?;
        read_rows(&txn)?
            .get(job_id, attempt_no)?
            .map(|v| decode_attempt(&v))
            .transpose()
    }

    /// One job's attempts in `attempt_no` order: a range read on the primary key.
    pub fn job_attempts(&self, job_id: &str) -> Result<Vec<StoredAttempt>> {
        let txn = self.db.begin_read()?;
        read_rows(&txn)?
            .job(job_id)?
            .iter()
            .map(|v| decode_attempt(v))
            .collect()
    }

    /// Every attempt that carries `idem_key`, in (job_id, attempt_no) order: an index read (the
    /// runs of [`crate::storage::idem_index`]), then one key read per attempt.
    ///
    /// Errors: [`Error::Corrupt`] for an index block or row that does not decode; storage errors.
    pub fn attempts_by_idem_key(&self, idem_key: &str) -> Result<Vec<StoredAttempt>> {
        let txn = self.db.begin_read()?;
        let keys =
            crate::storage::idem_index::lookup(&txn.open_table(IDEM_RUN)?, &txn.open_table(IDEM_RUN_DIR)?, idem_key)?;
        let view = read_rows(&txn)?;
        let mut out = Vec::with_capacity(keys.len());
        for (job, no) in keys {
            if let Some(v) = view.get(&job, no)? {
                out.push(decode_attempt(&v)?);
            }
        }
        Ok(out)
    }

    /// Every entry of the idem_key index, (idem_key, job_id, attempt_no), in that order: one per
    /// attempt row. For checks and tests; it reads the whole index.
    ///
    /// Errors: as [`Ledger::attempts_by_idem_key`].
    pub fn idem_index_entries(&self) -> Result<Vec<crate::storage::idem_index::IdemEntry>> {
        let txn = self.db.begin_read()?;
        crate::storage::idem_index::entries(&txn.open_table(IDEM_RUN)?, &txn.open_table(IDEM_RUN_DIR)?)
    }

    /// Every conflict kept, in arrival order.
    pub fn conflicts(&self) -> Result<Vec<Conflict>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(ATTEMPT_CONFLICT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<ConflictRecord>("attempt_conflict", k.value(), v.value())? {
                ConflictRecord::V1(c) => out.push(c),
            }
        }
        Ok(out)
    }

    /// Every rejected line kept, in arrival order.
    pub fn rejects(&self) -> Result<Vec<Reject>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(INGEST_REJECT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<RejectRecord>("ingest_reject", k.value(), v.value())? {
                RejectRecord::V1(r) => out.push(r),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::parse::attempt_from_json;

    /// A new row's value as the write encodes it is byte for byte what encoding the whole stored
    /// attempt gives: the chain's hashes and every reader depend on it.
    #[test]
    fn a_new_attempt_s_value_is_the_whole_record_encoded() {
        let lines = [
            r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-02T00:00:00Z"}"#,
            r#"{"job_id":"job-ü","idem_key":"idem","attempt_no":2147483647,"lane":"paid","started_at":"2026-11-02T00:00:00.5+02:00","ended_at":"2026-11-02T00:01:00Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a","http_status":429,"provider_code":1305,"key_id":"k","pool_id":"p","model":"m","extra":{"x":[1,2]},"note":"n"}"#,
        ];
        for (i, line) in lines.iter().enumerate() {
            let attempt = attempt_from_json(line).unwrap();
            for (seq, at) in [(1u64, 0i64), (300 + i as u64, 1_793_836_800_123_456), (u64::MAX, -5)] {
                let whole = encode(&AttemptRecord::V1(StoredAttempt {
                    attempt: attempt.clone(),
                    seq,
                    ingested_at: at,
                }));
                let reused = b"bytes of the row before".to_vec();
                assert_eq!(attempt_value(reused, &attempt, seq, at), whole, "line {i} seq {seq}");
            }
        }
    }
}

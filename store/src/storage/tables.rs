//! Every redb table of the ledger, declared once.
//!
//! Values are postcard-encoded versioned enums ([`crate::model::record::AttemptRecord`] and friends), so a
//! later release reads what this one wrote; `meta["format_version"]` says which versions may occur.

use redb::{MultimapTableDefinition, TableDefinition};

/// The newest on-disk format this build writes and reads. Version 2 added the hash chain
/// ([`CHAIN_V2`], [`CHAIN_CHECKPOINT`]), the retention tables and the verify log; a version 1 file
/// is migrated when it is opened (its records are chained in table order, see [`crate::storage::chain`]).
/// Version 3 stores the chain's entries in blocks ([`CHAIN_BLOCK`], one B-tree insert per write
/// transaction instead of one per record) and the idem_key index as a plain table
/// ([`ATTEMPT_IDEM`]); a version 2 file is migrated when it is opened, entry bytes and hashes
/// unchanged (so a tip hash kept before still matches). Version 4 keeps the idem_key index in
/// sorted runs ([`IDEM_RUN`], [`IDEM_RUN_DIR`], see [`crate::storage::idem_index`]) instead of a B-tree
/// with one insert per attempt; a version 3 file's index becomes one run when it is opened.
/// Version 5 stores each chain entry without its `prev` and its own hash, which are computed when
/// read, and with a CRC-32 instead ([`CHAIN_BLOCK`], [`CHAIN_TIP`]): 60 bytes less an entry. A
/// version 4 file's chain is rewritten when it is opened, every hash unchanged.
/// Version 6 keeps the attempt rows in zstd-packed blocks ([`ATTEMPT_BLOCK`], see
/// [`crate::storage::attempt_store`]), with [`ATTEMPT`] as the delta beside them; a version 5 file's rows
/// are packed into blocks when it is opened, every value unchanged. Version 7 cuts a block's values
/// into zstd frames of 16 KiB, so that one job's lookup unpacks one or two of them
/// ([`crate::storage::attempt_block`]); a version 6 file's blocks, one frame each, are still read, so it
/// only has its version raised when it is opened. Version 8 gives each block a filter of its keys
/// ([`crate::storage::key_filter`]), so that the write path's check for a new key inside the
/// blocks' range (random ids) costs no unpacking; a version 7 or 6 file's blocks are still read, so
/// it only has its version raised, and a block gets its filter when a write rewrites it.
/// Version 9 keeps the rows a write puts inside the blocks' key range (random ids, completions) in
/// sorted runs merged by size tier ([`ATTEMPT_RUN`], [`ATTEMPT_RUN_DIR`]) instead of the delta
/// B-tree [`ATTEMPT`], whose random page writes and folds were most of a random-id ingest; a
/// version 8 or older file's delta is folded into the blocks when it is opened, and [`ATTEMPT`]
/// stays empty. Version 10 gives each new run a blocked key filter of 16 bits a key (every probe
/// of a key in one 64-byte line, [`crate::storage::key_filter`]); a version 9 file's runs, with
/// plain filters, are still read, so it only has its version raised, and a run gets the new
/// filter when a merge rewrites it. Version 11 packs each chain block with zstd
/// ([`crate::storage::chain::pack_block`]), about a fifth of the file at 1 M random-id attempts;
/// a version 5 to 10 file's chain blocks are packed when it is opened, entries and hashes unchanged.
pub const FORMAT_VERSION: u64 = 11;

/// `format_version` and other single values.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The attempt rows' delta (format versions 6 to 8; before them, every attempt row), keyed by
/// (job_id, attempt_no): rows written out of key order and completions, shadowing the rows of
/// [`ATTEMPT_BLOCK`] of the same key until a commit folds them in. Since version 9 it is only
/// where a migration stages rows before folding them into the blocks: empty otherwise.
pub const ATTEMPT: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("attempt");
/// The attempt rows in zstd-packed blocks of at most 32 KiB in key order, each under its last key
/// (job_id, attempt_no); the layout is [`crate::storage::attempt_block`]'s. Format version 6 (framed values
/// since version 7).
pub const ATTEMPT_BLOCK: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("attempt_block");
/// The attempt rows' runs (format version 9, see [`crate::storage::attempt_store`]), keyed by (run number,
/// job_id, attempt_no): each run is rows in key order, in blocks of [`crate::storage::attempt_block`]'s
/// layout, each under the run's number and the block's last key. A newer run has a higher number,
/// and its row shadows an older run's or [`ATTEMPT_BLOCK`]'s row of the same key.
pub const ATTEMPT_RUN: TableDefinition<(u64, &str, u32), &[u8]> = TableDefinition::new("attempt_run");
/// One header per attempt run, keyed by run number: its row count and a filter of its keys
/// ([`crate::storage::attempt_store`]).
pub const ATTEMPT_RUN_DIR: TableDefinition<u64, &[u8]> = TableDefinition::new("attempt_run_dir");
/// The idem_key index of format version 3: one key (idem_key, job_id, attempt_no) per attempt, no
/// value; read only to migrate it into [`IDEM_RUN`], then deleted.
pub const ATTEMPT_IDEM: TableDefinition<(&str, &str, u32), ()> = TableDefinition::new("attempt_idem");
/// The idem_key index of format version 2 (idem_key → (job_id, attempt_no)); read only to migrate
/// it into [`ATTEMPT_IDEM`], then deleted.
pub const ATTEMPT_BY_IDEM_KEY: MultimapTableDefinition<&str, (&str, u32)> =
    MultimapTableDefinition::new("attempt_by_idem_key");
/// The idem_key index's runs (format version 4, see [`crate::storage::idem_index`]), keyed by (run number,
/// block number from 0): each block holds entries (idem_key, job_id, attempt_no) in key order,
/// every field prefix-compressed against the entry before it in the block.
pub const IDEM_RUN: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("idem_run");
/// One header per idem_key index run, keyed by run number (a newer run has a higher number): a
/// postcard [`crate::storage::idem_index::RunHeaderRecord`], its entry count and each block's first idem_key.
pub const IDEM_RUN_DIR: TableDefinition<u64, &[u8]> = TableDefinition::new("idem_run_dir");
/// Conflicting records, in arrival order (key: arrival number from 1).
pub const ATTEMPT_CONFLICT: TableDefinition<u64, &[u8]> = TableDefinition::new("attempt_conflict");
/// Rejected lines, in arrival order (key: arrival number from 1).
pub const INGEST_REJECT: TableDefinition<u64, &[u8]> = TableDefinition::new("ingest_reject");
/// Running totals: see [`crate::storage::ledger::Counters`].
pub const COUNTER: TableDefinition<&str, u64> = TableDefinition::new("counter");
/// Gate decisions (SPEC 1.2, seed 003) keyed by (job_id, decided_at µs since the epoch, UTC): the
/// ledger's order, and the index for one job's decisions.
pub const DECISION: TableDefinition<(&str, i64), &[u8]> = TableDefinition::new("decision");
/// Conflicting decision records, in arrival order (key: arrival number from 1).
pub const DECISION_CONFLICT: TableDefinition<u64, &[u8]> = TableDefinition::new("decision_conflict");
/// The hash chain (see [`crate::storage::chain`]) in blocks: the position of a block's first entry → the
/// `prev` of that entry (32 bytes), then its entries at consecutive positions, each framed as a
/// LEB128 length and the entry's stored bytes (the postcard-encoded [`crate::storage::chain::ChainEntry`]
/// without its `prev`, followed by the CRC-32 of that encoding, 4 bytes). At most
/// [`crate::storage::chain::BLOCK_BYTES`] a block. Format version 5.
pub const CHAIN_BLOCK: TableDefinition<u64, &[u8]> = TableDefinition::new("chain_block_v5");
/// The hash of the chain's last entry, its tip, under the key `tip`: what the next entry links to.
/// Format version 5.
pub const CHAIN_TIP: TableDefinition<&str, &[u8]> = TableDefinition::new("chain_tip");
/// The hash chain of format versions 3 and 4 in blocks: the position of a block's first entry → its
/// entries, each framed as a LEB128 length and the postcard-encoded [`crate::storage::chain::ChainEntry`]
/// followed by its SHA-256; read only to migrate it into [`CHAIN_BLOCK`], then deleted.
pub const CHAIN_BLOCK_V4: TableDefinition<u64, &[u8]> = TableDefinition::new("chain_block");
/// The hash chain of format version 2, one row per entry (position → stored entry bytes); read
/// only to migrate it into [`CHAIN_BLOCK_V4`], then deleted.
pub const CHAIN_V2: TableDefinition<u64, &[u8]> = TableDefinition::new("chain");
/// Checkpoints a retention sweep left where it removed a run of chain entries, keyed by the run's
/// first position; never removed (see [`crate::storage::chain::Checkpoint`]).
pub const CHAIN_CHECKPOINT: TableDefinition<u64, &[u8]> = TableDefinition::new("chain_checkpoint");
/// The retention sweeps (SPEC 6), keyed by sweep number from 1 ([`crate::storage::retention::SweepRecord`]).
pub const RETENTION_SWEEP: TableDefinition<u64, &[u8]> = TableDefinition::new("retention_sweep");
/// The weekly figures of an ISO week, taken before a sweep removed any of its rows, keyed by
/// `2026-W47` ([`crate::storage::retention::WeekFigures`]).
pub const WEEK_SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("week_snapshot");
/// Each `verify` run, keyed by run number from 1 ([`crate::storage::chain::VerifyRun`]); outside the chain.
pub const VERIFY_RUN: TableDefinition<u64, &[u8]> = TableDefinition::new("verify_run");

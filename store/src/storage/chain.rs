//! The hash chain: every record the ledger appends is chained by SHA-256 to the one before it, in
//! commit order, inside the write transaction that stores it (SPEC 2: append-only, provably).
//!
//! Each chain entry names one record — its table and key ([`RecordKey`]) — and holds the SHA-256
//! of the record's stored bytes and the SHA-256 of the entry before it (`prev`). A new attempt
//! row, the completion of a row, a conflict, a reject, a gate decision, a decision conflict, a
//! retention sweep, a week snapshot and a checkpoint each append one entry. An entry's hash is the
//! SHA-256 of its postcard encoding, `prev` last; the first entry links to 32 zero bytes.
//!
//! Entries are stored in blocks ([`CHAIN_BLOCK`]) of consecutive positions, keyed by the first:
//! each write transaction stores its entries as blocks of at most [`BLOCK_BYTES`], so a batch of
//! 10,000 attempts costs one or two B-tree inserts for its chain, not 10,000. A block stores the
//! `prev` of its first entry once; then each entry's encoding without its `prev` (the hash of the
//! entry before it in the block, computed again when the block is read) and a CRC-32 of that
//! encoding. The hash of the last entry, the chain's tip, is kept in [`CHAIN_TIP`] for the next
//! write. This is format version 5: version 4 stored every entry's `prev` and its own hash with it,
//! 64 bytes an entry that can be computed from the rest, and 5 gives the same hashes. Since format
//! version 11 a block is stored packed with zstd ([`pack_block`]): the same bytes, a fifth fewer
//! of them with random ids.
//!
//! A retention sweep (SPEC 6) removes old records *and* their chain entries. Where it removes a run
//! of consecutive entries `first..=last` it leaves a [`Checkpoint`]: the hash the run linked to and
//! the hash of its last entry, checked before the run is removed. Checkpoints are records of
//! their own (chained, never removed), so [`Ledger::verify`] walks the chain across removed runs.
//!
//! [`Ledger::verify`] checks every entry's CRC, position and link, then every stored record against
//! its latest entry: a changed, removed, added or reordered record, or a missing, changed or moved
//! entry, is found, and the first one is named. An entry changed together with its CRC changes
//! every hash after it, so the next block's stored `prev` no longer links (named at that block's
//! first entry), or the stored tip no longer matches (named at the last entry). Verify runs are
//! logged in `verify_run`, outside the chain (they describe it). Without an anchor kept elsewhere a
//! hash chain cannot tell a ledger rewritten from some point on, so `verify` prints the chain's tip
//! hash for keeping.

use std::collections::{BTreeMap, HashMap};

use redb::{ReadableMultimapTable, ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::record::StoredAttempt;
use crate::model::time::format_timestamp;
use crate::progress::{Progress, RowCounter};
use crate::storage::ledger::{Ledger, decode, encode};
use crate::storage::tables::{
    ATTEMPT, ATTEMPT_BY_IDEM_KEY, ATTEMPT_CONFLICT, ATTEMPT_IDEM, CHAIN_BLOCK, CHAIN_BLOCK_V4, CHAIN_CHECKPOINT,
    CHAIN_TIP, CHAIN_V2, COUNTER, DECISION, DECISION_CONFLICT, INGEST_REJECT, RETENTION_SWEEP, VERIFY_RUN,
    WEEK_SNAPSHOT,
};

/// A SHA-256 digest, 32 bytes.
pub type Hash = [u8; 32];

/// The `prev` of the first entry: 32 zero bytes.
pub const GENESIS: Hash = [0; 32];

/// The `counter` row holding how many chain positions have been used (the last entry's `n`).
pub(crate) const CHAIN_ENTRIES: &str = "chain_entries";

/// The most bytes one stored block holds, packed: a write transaction whose entries take more
/// stores several blocks. Just under 512 KiB, so that a full block fills one redb page of that size
/// (about 9,500 attempt entries of the drill, 55 bytes each).
pub const BLOCK_BYTES: usize = 512 * 1024 - 1024;

/// The most entries one format-version-3 or -4 block held (read only to migrate).
const V4_BLOCK_ENTRIES: usize = 4096;

/// The bytes an entry of `len` stored bytes takes in a block: its length (LEB128) and itself.
fn frame_len(len: usize) -> usize {
    len + (usize::BITS - len.leading_zeros()).div_ceil(7).max(1) as usize
}

/// Appends one entry's stored bytes to `block`, framed by its length (LEB128).
fn push_frame(block: &mut Vec<u8>, entry: &[u8]) {
    crate::storage::varint::put(block, entry.len() as u64);
    block.extend_from_slice(entry);
}

/// The stored bytes of each frame of `frames` (a block after its header, or a whole
/// format-version-4 block), in order. Errors: the text of a bad frame (a length cut or over 64
/// bits, or one running past the end).
fn split_frames(frames: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < frames.len() {
        let frame = out.len() + 1;
        let len = crate::storage::varint::get(frames, &mut at).map_err(|e| format!("frame {frame}'s length: {e}"))?;
        let end = usize::try_from(len).ok().and_then(|len| at.checked_add(len));
        let Some(entry) = end.and_then(|end| frames.get(at..end)) else {
            return Err(format!("frame {frame} runs {len} bytes past the block's end"));
        };
        out.push(entry);
        at += entry.len();
    }
    Ok(out)
}

/// The most bytes a block unpacks to, so that a damaged length cannot make a read allocate more:
/// four times what a block is ever filled to ([`packed_target`]).
const PLAIN_MAX: usize = 16 * BLOCK_BYTES;

/// A block as stored (format version 11): the length of its plain bytes ([`join_block`]) as a
/// varint, then those bytes packed as one zstd frame (level 1, as the attempt blocks). About a
/// fifth smaller than plain: a chain entry is mostly its record's hash and its CRC, which do not
/// pack, but the record's key does (random hex ids to about half).
pub fn pack_block(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain.len() * 7 / 8 + 16);
    crate::storage::varint::put(&mut out, plain.len() as u64);
    crate::storage::attempt_block::pack(&mut out, plain);
    out
}

/// The plain bytes of a stored block ([`pack_block`]). Errors: the text of a length that is cut or
/// too large, or of a frame that does not unpack to that length.
pub fn unpack_block(stored: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let mut at = 0;
    let len = crate::storage::varint::get(stored, &mut at).map_err(|e| format!("the block's length: {e}"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= PLAIN_MAX)
        .ok_or_else(|| format!("the block claims {len} bytes unpacked, more than {PLAIN_MAX}"))?;
    let mut plain = Vec::with_capacity(len);
    crate::storage::attempt_block::unpack_onto(&mut plain, &stored[at..], len)?;
    Ok(plain)
}

/// The plain bytes to fill a block to, so that it packs to about 95% of [`BLOCK_BYTES`] at the
/// ratio a stored block of `plain` bytes packed to `stored` showed (one of at least an eighth of
/// [`BLOCK_BYTES`]: a small one packs worse): a redb leaf of one value takes a page of the next
/// power of two, so a block packed to 400 KiB would leave a fifth of its 512 KiB page unused.
/// Without a ratio to go by a block is cut at [`BLOCK_BYTES`] plain, which it cannot pack past.
fn packed_target(plain: usize, stored: usize) -> usize {
    if stored == 0 {
        return BLOCK_BYTES;
    }
    let target = (BLOCK_BYTES as f64 * 0.95 * plain as f64 / stored as f64) as usize;
    target.clamp(BLOCK_BYTES / 2, 4 * BLOCK_BYTES)
}

/// A block's plain bytes ([`split_block`]): the `prev` of its first entry (its first 32 bytes),
/// then the stored bytes of each entry, in position order (the block's key is the first entry's
/// position). Errors: the text of a block shorter than a hash or of a bad frame (a length cut or
/// over 64 bits, or one running past the block's end).
pub fn split_block(block: &[u8]) -> std::result::Result<(Hash, Vec<&[u8]>), String> {
    let Some((prev, frames)) = block.split_first_chunk::<32>() else {
        return Err(format!("{} bytes, shorter than the block's prev hash", block.len()));
    };
    Ok((*prev, split_frames(frames)?))
}

/// One block whose first entry links to `prev`, holding `entries` (stored entry bytes) at
/// consecutive positions: the inverse of [`split_block`].
pub fn join_block<'a>(prev: &Hash, entries: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut block = prev.to_vec();
    for e in entries {
        push_frame(&mut block, e);
    }
    block
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Hash {
    Sha256::digest(bytes).into()
}

/// Lower-case hex of `bytes` (64 characters for a [`Hash`]).
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Which record a chain entry is about: its table and its key in that table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RecordKey {
    /// `attempt` (`job_attempt` in SQL), keyed by (job_id, attempt_no).
    Attempt {
        /// The job.
        job_id: String,
        /// The attempt number.
        attempt_no: u32,
    },
    /// `attempt_conflict`, by arrival number.
    AttemptConflict(u64),
    /// `ingest_reject`, by arrival number.
    IngestReject(u64),
    /// `decision` (`gate_decision` in SQL), keyed by (job_id, decided_at µs since the epoch, UTC).
    Decision {
        /// The job.
        job_id: String,
        /// When the gate decided, µs since the epoch, UTC.
        decided_at: i64,
    },
    /// `decision_conflict`, by arrival number.
    DecisionConflict(u64),
    /// `retention_sweep`, by sweep number.
    RetentionSweep(u64),
    /// `week_snapshot`, by ISO week (`2026-W47`).
    WeekSnapshot(String),
    /// `chain_checkpoint`, by the first chain position of the run it stands for.
    Checkpoint(u64),
}

impl RecordKey {
    /// The redb table the record lives in.
    pub fn table(&self) -> &'static str {
        match self {
            RecordKey::Attempt { .. } => "attempt",
            RecordKey::AttemptConflict(_) => "attempt_conflict",
            RecordKey::IngestReject(_) => "ingest_reject",
            RecordKey::Decision { .. } => "decision",
            RecordKey::DecisionConflict(_) => "decision_conflict",
            RecordKey::RetentionSweep(_) => "retention_sweep",
            RecordKey::WeekSnapshot(_) => "week_snapshot",
            RecordKey::Checkpoint(_) => "chain_checkpoint",
        }
    }
}

impl std::fmt::Display for RecordKey {
    /// The key in words: `job_id=j1 attempt_no=2`, `conflict_no=3`, `iso_week=2026-W47`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordKey::Attempt { job_id, attempt_no } => write!(f, "job_id={job_id} attempt_no={attempt_no}"),
            RecordKey::AttemptConflict(n) | RecordKey::DecisionConflict(n) => write!(f, "conflict_no={n}"),
            RecordKey::IngestReject(n) => write!(f, "reject_no={n}"),
            RecordKey::Decision { job_id, decided_at } => {
                write!(f, "job_id={job_id} decided_at={}", format_timestamp(*decided_at))
            }
            RecordKey::RetentionSweep(n) => write!(f, "sweep_no={n}"),
            RecordKey::WeekSnapshot(w) => write!(f, "iso_week={w}"),
            RecordKey::Checkpoint(n) => write!(f, "first_entry={n}"),
        }
    }
}

/// What an entry records about its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    /// The record was stored for the first time.
    Insert,
    /// The record's value was replaced: an attempt or decision completed by a later delivery.
    Update,
}

/// One chain entry (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainEntry {
    /// The entry's position from 1; the chain table's key must agree.
    pub n: u64,
    /// Insert or update.
    pub kind: EntryKind,
    /// The record's table and key.
    pub key: RecordKey,
    /// SHA-256 of the record's stored value bytes as this entry wrote them.
    pub record: Hash,
    /// The SHA-256 of the entry before (its last 32 stored bytes), or [`GENESIS`].
    pub prev: Hash,
}

/// A format-version-4 stored entry, versioned: the whole [`ChainEntry`] (read only to migrate).
#[derive(Deserialize)]
enum ChainEntryRecord {
    V1(ChainEntry),
}

/// The same encoding as [`ChainEntryRecord`], borrowing the entry.
#[derive(Serialize)]
enum ChainEntryRef<'a> {
    V1(&'a ChainEntry),
}

/// The stored part of an entry (format version 5), versioned: [`ChainEntry`] without `prev`.
/// Postcard writes a struct's fields in order and a [`Hash`] as its 32 bytes, so this encoding
/// followed by `prev` is [`ChainEntryRef`]'s, the bytes the entry's hash is taken of.
#[derive(Deserialize)]
enum StoredEntryRecord {
    V1 {
        n: u64,
        kind: EntryKind,
        key: RecordKey,
        record: Hash,
    },
}

/// The same encoding as [`StoredEntryRecord`], borrowing the key.
#[derive(Serialize)]
enum StoredEntryRef<'a> {
    V1 {
        n: u64,
        kind: EntryKind,
        key: &'a RecordKey,
        record: &'a Hash,
    },
}

/// The hash of the entry whose stored encoding (without `prev`) is `body`: SHA-256 of `body`
/// followed by `prev`.
fn entry_hash(body: &[u8], prev: &Hash) -> Hash {
    Sha256::new().chain_update(body).chain_update(prev).finalize().into()
}

/// One entry's stored bytes (format version 5): the encoding of `entry` without its `prev`,
/// followed by the CRC-32 of that encoding (4 bytes, little-endian); and the entry's hash. The
/// entry's own `prev` is hashed, so it must be the hash of the entry before.
pub fn encode_entry(entry: &ChainEntry) -> (Vec<u8>, Hash) {
    let mut stored = Vec::with_capacity(96);
    let hash = encode_entry_into(&mut stored, entry.n, entry.kind, &entry.key, &entry.record, &entry.prev);
    (stored, hash)
}

/// [`encode_entry`] into `stored` (cleared first), returning the entry's hash.
fn encode_entry_into(
    stored: &mut Vec<u8>,
    n: u64,
    kind: EntryKind,
    key: &RecordKey,
    record: &Hash,
    prev: &Hash,
) -> Hash {
    stored.clear();
    let body = StoredEntryRef::V1 { n, kind, key, record };
    let mut out = postcard::to_extend(&body, std::mem::take(stored)).expect("chain entries always encode");
    let hash = entry_hash(&out, prev);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    *stored = out;
    hash
}

/// The bytes format version 4 stored for `entry`: its whole postcard encoding followed by its
/// SHA-256 (for tests that write a version 4 file).
pub fn encode_v4_entry(entry: &ChainEntry) -> Vec<u8> {
    let mut body = postcard::to_allocvec(&ChainEntryRef::V1(entry)).expect("chain entries always encode");
    let hash = sha256(&body);
    body.extend_from_slice(&hash);
    body
}

/// A decoded stored entry: `(entry, its hash, whether its CRC matches its stored bytes)`, or the
/// text of a decoding failure.
pub type DecodedEntry = std::result::Result<(ChainEntry, Hash, bool), String>;

/// An entry as stored (format version 5), decoded without its hash.
struct StoredEntry<'a> {
    /// The stored bytes without the CRC: what the hash is taken of, before `prev`.
    body: &'a [u8],
    n: u64,
    kind: EntryKind,
    key: RecordKey,
    record: Hash,
    /// Whether the stored CRC matches `body`.
    crc_ok: bool,
}

/// Decodes an entry's stored bytes. Errors: the text of a decoding failure.
fn decode_stored(stored: &[u8]) -> std::result::Result<StoredEntry<'_>, String> {
    let Some((body, crc)) = stored.split_last_chunk::<4>() else {
        return Err(format!("{} bytes, shorter than a CRC", stored.len()));
    };
    let crc_ok = crc32fast::hash(body) == u32::from_le_bytes(*crc);
    match postcard::from_bytes::<StoredEntryRecord>(body) {
        Ok(StoredEntryRecord::V1 { n, kind, key, record }) => Ok(StoredEntry {
            body,
            n,
            kind,
            key,
            record,
            crc_ok,
        }),
        Err(e) => Err(e.to_string()),
    }
}

/// An entry as stored (format version 5), whose `prev` is `prev` (the hash of the entry before it,
/// or its block's stored `prev` for a block's first): `(entry, its hash, whether its CRC matches)`.
/// Errors: the text of a decoding failure.
pub fn decode_entry(stored: &[u8], prev: &Hash) -> DecodedEntry {
    let e = decode_stored(stored)?;
    let hash = entry_hash(e.body, prev);
    Ok((
        ChainEntry {
            n: e.n,
            kind: e.kind,
            key: e.key,
            record: e.record,
            prev: *prev,
        },
        hash,
        e.crc_ok,
    ))
}

/// An entry as format version 4 stored it: `(entry, its stored hash, whether that hash matches the
/// contents)`. Errors: the text of a decoding failure.
fn decode_v4_entry(stored: &[u8]) -> DecodedEntry {
    let Some((body, hash)) = stored.split_last_chunk::<32>() else {
        return Err(format!("{} bytes, shorter than a hash", stored.len()));
    };
    let ok = sha256(body) == *hash;
    match postcard::from_bytes::<ChainEntryRecord>(body) {
        Ok(ChainEntryRecord::V1(e)) => Ok((e, *hash, ok)),
        Err(e) => Err(e.to_string()),
    }
}

/// One entry of a block: its position, its stored bytes and what they decode to.
type BlockEntry<'a> = (u64, &'a [u8], DecodedEntry);

/// Each entry of a stored block with its hash, the hashes chained from the block's stored `prev`:
/// `(position, stored bytes, decoded entry)`. A frame that cannot be decoded leaves the next
/// entry's `prev` as it was. Errors: the text of a bad block (see [`split_block`]).
fn block_entries(first: u64, block: &[u8]) -> std::result::Result<Vec<BlockEntry<'_>>, String> {
    let (mut prev, frames) = split_block(block)?;
    Ok(frames
        .into_iter()
        .enumerate()
        .map(|(i, frame)| {
            let decoded = decode_entry(frame, &prev);
            if let Ok((_, hash, _)) = &decoded {
                prev = *hash;
            }
            (first + i as u64, frame, decoded)
        })
        .collect())
}

/// Where a sweep removed the chain entries `first..=last`: the hash the run's first entry linked
/// to (`before`) and the hash of its last entry (`after`), both checked before removal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The first removed position.
    pub first: u64,
    /// The last removed position.
    pub last: u64,
    /// The `prev` of entry `first`.
    pub before: Hash,
    /// The stored hash of entry `last`.
    pub after: Hash,
    /// The sweep that removed the run.
    pub sweep_no: u64,
}

/// The on-disk checkpoint, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CheckpointRecord {
    /// Format version 2 (the chain's first).
    V1(Checkpoint),
}

/// An entry a sweep keeps in a block it cuts: its position, stored bytes and `prev`.
type Kept = (u64, Vec<u8>, Hash);

/// The [`CHAIN_TIP`] row.
const TIP: &str = "tip";

/// Appends entries to the chain inside one write transaction, as blocks of consecutive positions.
///
/// Entries are held until [`ChainWriter::finish`] (or a full block) stores them: every writer must
/// be finished before its transaction commits, and `finish` returns the `chain_entries` counter's
/// new value, which every writer stores.
pub(crate) struct ChainWriter<'txn> {
    table: Table<'txn, u64, &'static [u8]>,
    tips: Table<'txn, &'static str, &'static [u8]>,
    next: u64,
    tip: Hash,
    entry: Vec<u8>,
    /// The block being built: its `prev` and frames, the position of its first entry and its
    /// entry count.
    block: Vec<u8>,
    block_first: u64,
    block_len: usize,
    /// The plain bytes a block is cut at ([`packed_target`]), from the ratio the last one packed to.
    fill: usize,
    /// Large blocks being packed on threads of their own: (first position, plain bytes, thread).
    packing: Vec<(u64, usize, std::thread::JoinHandle<Vec<u8>>)>,
}

impl<'txn> ChainWriter<'txn> {
    /// Opens the chain in `txn`; `counted` is the `chain_entries` counter, so that a tail removed
    /// behind the ledger's back leaves a gap that `verify` names instead of being reused. The tip
    /// is read from [`CHAIN_TIP`], or computed from the last block when that row is missing.
    pub(crate) fn open(txn: &'txn WriteTransaction, counted: u64) -> Result<Self> {
        let table = txn.open_table(CHAIN_BLOCK)?;
        let tips = txn.open_table(CHAIN_TIP)?;
        let stored_tip = tips.get(TIP)?.and_then(|v| Hash::try_from(v.value()).ok());
        // The ratio of the last block, or of the one before when the last is a write's small
        // remainder, sizes this writer's blocks, so that they fill their pages packed. The last
        // block also gives the last position and, without a tip row, the tip.
        let mut fill = BLOCK_BYTES;
        // With no block there is nothing to link to: a tip row left from before is stale.
        let (mut last, mut tip) = (0, GENESIS);
        for (i, row) in table.iter()?.rev().take(2).enumerate() {
            let (k, v) = row?;
            let stored = v.value();
            if i == 0 {
                (last, tip) = (k.value(), stored_tip.unwrap_or(GENESIS));
                let plain = unpack_block(stored);
                if let Ok(Ok((_, frames))) = plain.as_deref().map(split_block)
                    && !frames.is_empty()
                {
                    last = k.value() + frames.len() as u64 - 1;
                    // Without a tip row, the last block's hashes are computed from its `prev`.
                    if stored_tip.is_none()
                        && let Ok(Ok(entries)) = plain.as_deref().map(|p| block_entries(k.value(), p))
                        && let Some((_, _, Ok((_, hash, _)))) = entries.last()
                    {
                        tip = *hash;
                    }
                }
            }
            let mut at = 0;
            if let Ok(plain) = crate::storage::varint::get(stored, &mut at)
                && plain >= (BLOCK_BYTES / 8) as u64
            {
                fill = packed_target(plain as usize, stored.len());
                break;
            }
        }
        Ok(ChainWriter {
            table,
            tips,
            next: last.max(counted) + 1,
            tip,
            entry: Vec::with_capacity(128),
            block: Vec::new(),
            block_first: 0,
            block_len: 0,
            fill,
            packing: Vec::new(),
        })
    }

    /// Appends the entry for `key`, whose stored value is `value`.
    pub(crate) fn append(&mut self, kind: EntryKind, key: RecordKey, value: &[u8]) -> Result<()> {
        let hash = encode_entry_into(&mut self.entry, self.next, kind, &key, &sha256(value), &self.tip);
        if self.block_len > 0 && self.block.len() + frame_len(self.entry.len()) > self.fill {
            self.flush()?;
        }
        if self.block_len == 0 {
            self.block_first = self.next;
            self.block.extend_from_slice(&self.tip);
        }
        push_frame(&mut self.block, &self.entry);
        self.block_len += 1;
        self.tip = hash;
        self.next += 1;
        Ok(())
    }

    /// Stores the block being built, if it holds any entry. A large one is packed on a thread of
    /// its own, stored by [`ChainWriter::store_packed`]: packing it is milliseconds of the writer's
    /// thread, an ingest's critical path, which goes on with the commit's rows meanwhile.
    fn flush(&mut self) -> Result<()> {
        if self.block_len > 0 {
            if self.block.len() >= BLOCK_BYTES / 8 {
                let plain = std::mem::take(&mut self.block);
                let len = plain.len();
                let packing = std::thread::spawn(move || pack_block(&plain));
                self.packing.push((self.block_first, len, packing));
            } else {
                self.table
                    .insert(self.block_first, pack_block(&self.block).as_slice())?;
                self.block.clear();
            }
            self.block_len = 0;
        }
        Ok(())
    }

    /// Stores the blocks packed on other threads, each once its thread is done.
    fn store_packed(&mut self) -> Result<()> {
        for (first, plain, packing) in std::mem::take(&mut self.packing) {
            let stored = packing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            self.table.insert(first, stored.as_slice())?;
            self.fill = packed_target(plain, stored.len());
        }
        Ok(())
    }

    /// Stores the entries still held and the tip, and returns the positions used so far (the
    /// value for the `chain_entries` counter).
    pub(crate) fn finish(mut self) -> Result<u64> {
        self.flush()?;
        self.store_packed()?;
        self.tips.insert(TIP, self.tip.as_slice())?;
        Ok(self.next - 1)
    }

    /// Removes every entry about a record for which `removed` is true, run of consecutive
    /// positions by run, after checking each run's hashes and links, and returns a checkpoint per
    /// run (not yet stored). A block that loses entries is stored again as the blocks of the
    /// entries it keeps. Errors: [`Error::ChainBroken`] when a run does not check.
    pub(crate) fn remove_records(
        &mut self,
        removed: impl Fn(&RecordKey) -> bool,
        sweep_no: u64,
    ) -> Result<Vec<Checkpoint>> {
        self.flush()?;
        self.store_packed()?;
        let mut runs: Vec<Vec<(u64, ChainEntry, Hash)>> = Vec::new();
        // The blocks that lose entries: (key, the entries they keep).
        let mut touched: Vec<(u64, Vec<Kept>)> = Vec::new();
        let mut open = false;
        for row in self.table.iter()? {
            let (k, v) = row?;
            let first = k.value();
            let plain = unpack_block(v.value());
            let entries = plain
                .as_deref()
                .map_err(Clone::clone)
                .and_then(|plain| block_entries(first, plain))
                .map_err(|reason| Error::ChainBroken {
                    position: first,
                    reason,
                })?;
            let mut kept = Vec::new();
            let mut lost = false;
            for (n, frame, decoded) in entries {
                let (entry, hash, ok) = decoded.map_err(|reason| Error::ChainBroken { position: n, reason })?;
                if !removed(&entry.key) {
                    open = false;
                    kept.push((n, frame.to_vec(), entry.prev));
                    continue;
                }
                lost = true;
                if !ok {
                    return Err(Error::ChainBroken {
                        position: n,
                        reason: "entry CRC does not match its contents".into(),
                    });
                }
                match runs.last_mut() {
                    Some(run) if open && run.last().is_some_and(|(m, _, h)| *m + 1 == n && entry.prev == *h) => {
                        run.push((n, entry, hash))
                    }
                    Some(run) if open && run.last().is_some_and(|(m, _, _)| *m + 1 == n) => {
                        return Err(Error::ChainBroken {
                            position: n,
                            reason: "entry does not link to the one before it".into(),
                        });
                    }
                    _ => runs.push(vec![(n, entry, hash)]),
                }
                open = true;
            }
            if lost {
                touched.push((first, kept));
            }
        }
        let mut checkpoints = Vec::with_capacity(runs.len());
        for run in runs {
            let (first, first_entry, _) = &run[0];
            let (last, _, after) = &run[run.len() - 1];
            checkpoints.push(Checkpoint {
                first: *first,
                last: *last,
                before: first_entry.prev,
                after: *after,
                sweep_no,
            });
        }
        for (first, kept) in touched {
            self.table.remove(first)?;
            // The kept entries, cut where a removed run left a gap, each piece a block.
            let mut piece: Vec<Kept> = Vec::new();
            for (n, bytes, prev) in kept {
                if piece.last().is_some_and(|(m, _, _)| *m + 1 != n) {
                    self.store_piece(&piece)?;
                    piece.clear();
                }
                piece.push((n, bytes, prev));
            }
            self.store_piece(&piece)?;
        }
        Ok(checkpoints)
    }

    /// Stores entries at consecutive positions as one block keyed by the first (nothing for none).
    fn store_piece(&mut self, piece: &[Kept]) -> Result<()> {
        if let Some((first, _, prev)) = piece.first() {
            let block = join_block(prev, piece.iter().map(|(_, b, _)| b.as_slice()));
            self.table.insert(*first, pack_block(&block).as_slice())?;
        }
        Ok(())
    }
}

/// What is wrong with the first bad record [`Ledger::verify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// A chain entry's stored CRC-32 does not match its contents (the entry was changed).
    EntryChanged,
    /// A chain entry cannot be decoded.
    EntryUnreadable,
    /// A chain entry is stored at another position than the one it was written at (reordered).
    EntryMoved,
    /// A chain entry does not link to the entry before it: a block's stored `prev` is not the
    /// hash of the entry before the block (an entry before it was changed, or the `prev`).
    BrokenLink,
    /// The stored tip ([`CHAIN_TIP`]) is not the hash of the last entry: an entry of the last block
    /// was changed, or the tip.
    TipChanged,
    /// A chain position is missing and no checkpoint stands for it (an entry removed).
    EntryMissing,
    /// A record's stored bytes differ from what its latest chain entry hashed.
    RecordChanged,
    /// A chain entry names a record that its table no longer holds.
    RecordRemoved,
    /// A stored record that no chain entry names.
    RecordAdded,
}

impl Problem {
    /// The problem in words.
    pub fn describe(self) -> &'static str {
        match self {
            Problem::EntryChanged => "chain entry changed: its CRC does not match its contents",
            Problem::EntryUnreadable => "chain entry cannot be decoded",
            Problem::EntryMoved => "chain entry stored at another position than it was written at",
            Problem::BrokenLink => "chain entry does not link to the entry before it",
            Problem::TipChanged => "chain tip changed: it is not the hash of the last entry",
            Problem::EntryMissing => "chain entry missing, and no checkpoint stands for it",
            Problem::RecordChanged => "record changed: it differs from what its chain entry hashed",
            Problem::RecordRemoved => "record removed: its chain entry names it but the table does not hold it",
            Problem::RecordAdded => "record added: no chain entry names it",
        }
    }
}

/// The first bad record of a ledger: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    /// The redb table: `chain` for a problem with the chain itself, else the record's table
    /// (`attempt`, `attempt_conflict`, `ingest_reject`, `decision`, `decision_conflict`,
    /// `retention_sweep`, `week_snapshot`, `chain_checkpoint`).
    pub table: &'static str,
    /// The key in words: `n=17` for a chain entry, `job_id=j1 attempt_no=2` for an attempt.
    pub key: String,
    /// The chain position: of the entry at fault, or of the record's latest entry; `None` for a
    /// record that no entry names.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: Problem,
}

impl std::fmt::Display for BadRecord {
    /// `attempt job_id=j1 attempt_no=2 (chain position 17): record changed: …`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seq {
            Some(n) => write!(
                f,
                "{} {} (chain position {n}): {}",
                self.table,
                self.key,
                self.problem.describe()
            ),
            None => write!(f, "{} {}: {}", self.table, self.key, self.problem.describe()),
        }
    }
}

/// What [`Ledger::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Chain entries checked.
    pub entries: u64,
    /// Stored records checked against their entries.
    pub records: u64,
    /// Checkpoints the walk crossed (runs removed by sweeps).
    pub checkpoints: u64,
    /// The hash of the last entry (hex), to keep outside the ledger as an anchor.
    pub tip: String,
    /// The first bad record, `None` when the ledger is clean.
    pub first_bad: Option<BadRecord>,
    /// How many problems were found in all (0 when clean; the chain walk stops at its first).
    pub problems: u64,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.first_bad.is_none()
    }
}

/// One logged `verify` run (table `verify_run`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRun {
    /// Run number from 1.
    pub run_no: u64,
    /// When it ran, µs since the epoch, UTC.
    pub at: i64,
    /// Whether the ledger was clean.
    pub clean: bool,
    /// Chain entries checked.
    pub entries: u64,
    /// Records checked.
    pub records: u64,
    /// The chain's tip hash (hex).
    pub tip: String,
    /// The first bad record in words ([`BadRecord`]'s `Display`), when there was one.
    pub first_bad: Option<String>,
}

/// The on-disk verify run, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum VerifyRunRecord {
    V1(VerifyRun),
}

/// A 128-bit digest of a [`RecordKey`], keyed at random for each verify run: what `verify`
/// keeps per record instead of the key itself. Two keys with one digest could only make a record
/// look changed or removed, never hide a change (the record hashes are still compared).
struct KeyDigest(
    std::collections::hash_map::RandomState,
    std::collections::hash_map::RandomState,
);

impl KeyDigest {
    fn new() -> Self {
        KeyDigest(Default::default(), Default::default())
    }

    fn of(&self, key: &RecordKey) -> u128 {
        use std::hash::BuildHasher;
        (u128::from(self.0.hash_one(key)) << 64) | u128::from(self.1.hash_one(key))
    }
}

/// The record key of the chain entry at position `n` (to name a record whose entry the walk met).
/// Errors: [`Error::Corrupt`] when no block holds it or it cannot be decoded (the walk decoded
/// it a moment before, in the same snapshot).
fn key_at(chain: &redb::ReadOnlyTable<u64, &'static [u8]>, n: u64) -> Result<RecordKey> {
    let corrupt = |reason: String| Error::Corrupt {
        table: "chain",
        key: n.to_string(),
        reason,
    };
    let (k, v) = chain
        .range(..=n)?
        .next_back()
        .transpose()?
        .ok_or_else(|| corrupt("no block holds it".into()))?;
    let plain = unpack_block(v.value()).map_err(corrupt)?;
    let (_, frames) = split_block(&plain).map_err(corrupt)?;
    let frame = frames
        .get((n - k.value()) as usize)
        .ok_or_else(|| corrupt("its block is shorter".into()))?;
    decode_stored(frame).map(|e| e.key).map_err(corrupt)
}

/// Checks one table's records against the latest entry of each (`expected`, drained as found).
fn check_table<K: redb::Key + 'static>(
    txn: &redb::ReadTransaction,
    def: TableDefinition<K, &'static [u8]>,
    key_of: impl Fn(K::SelfType<'_>) -> RecordKey,
    digest: &KeyDigest,
    expected: &mut HashMap<u128, (Hash, u64)>,
    found: &mut Vec<(u64, BadRecord)>,
    checked: &mut RowCounter,
) -> Result<u64> {
    let table = txn.open_table(def)?;
    let mut records = 0;
    for row in table.iter()? {
        let (k, v) = row?;
        records += 1;
        checked.add(1);
        check_record(key_of(k.value()), v.value(), digest, expected, found);
    }
    Ok(records)
}

/// Compares one record with its latest chain entry (taken out of `expected`).
fn check_record(
    key: RecordKey,
    value: &[u8],
    digest: &KeyDigest,
    expected: &mut HashMap<u128, (Hash, u64)>,
    found: &mut Vec<(u64, BadRecord)>,
) {
    match expected.remove(&digest.of(&key)) {
        Some((hash, _)) if hash == sha256(value) => {}
        Some((_, n)) => found.push((
            n,
            BadRecord {
                table: key.table(),
                key: key.to_string(),
                seq: Some(n),
                problem: Problem::RecordChanged,
            },
        )),
        None => found.push((
            u64::MAX,
            BadRecord {
                table: key.table(),
                key: key.to_string(),
                seq: None,
                problem: Problem::RecordAdded,
            },
        )),
    }
}

impl Ledger {
    /// Checks the whole chain and every chained record (see the module docs) from one snapshot.
    ///
    /// The chain is walked first, from position 1, crossing removed runs by their checkpoints; the
    /// first entry that is changed, unreadable, moved, unlinked or missing is the first bad record.
    /// When the chain holds, each record is compared with its latest entry, and the bad record
    /// with the lowest chain position is the first (an added record, which has none, comes after).
    /// Errors: storage errors only; what is wrong with the ledger is in the report.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with_progress(&crate::progress::Silent)
    }

    /// [`Ledger::verify`], telling `progress` how far it has come in two stages: `chain` (the
    /// entries walked, of the entries counted) and `records` (the records compared, of the
    /// records the chain names).
    pub fn verify_with_progress(&self, progress: &dyn Progress) -> Result<VerifyReport> {
        let txn = self.database().begin_read()?;
        let chain = txn.open_table(CHAIN_BLOCK)?;
        let counted = txn.open_table(COUNTER)?.get(CHAIN_ENTRIES)?.map_or(0, |v| v.value());
        let mut walked = RowCounter::stage(progress, "chain", Some(counted));
        // The checkpoints as stored. The walk crosses removed runs by them; one whose stored bytes
        // do not match its own intact chain entry is named first, once the walk has met every
        // entry (a checkpoint's entry comes after the run it stands for).
        let mut checkpoints = BTreeMap::new();
        let mut stored_checkpoints: Vec<(u64, Hash, bool)> = Vec::new();
        for row in txn.open_table(CHAIN_CHECKPOINT)?.iter()? {
            let (k, v) = row?;
            let first = k.value();
            let decoded = decode::<CheckpointRecord>("chain_checkpoint", first, v.value());
            stored_checkpoints.push((first, sha256(v.value()), decoded.is_ok()));
            if let Ok(CheckpointRecord::V1(c)) = decoded {
                checkpoints.insert(c.first, c);
            }
        }
        let chain_bad = |n: u64, problem| VerifyReport {
            entries: n.saturating_sub(1),
            records: 0,
            checkpoints: 0,
            tip: String::new(),
            first_bad: Some(BadRecord {
                table: "chain",
                key: format!("n={n}"),
                seq: Some(n),
                problem,
            }),
            problems: 1,
        };
        // The latest entry of each record: (record hash, position), by a digest of its key, so
        // that 10 M entries take about 60 bytes each instead of their decoded keys.
        let digest = KeyDigest::new();
        let mut expected: HashMap<u128, (Hash, u64)> = HashMap::with_capacity(counted as usize);
        // The intact checkpoint entries met: the record hash each holds, and its position.
        let mut checkpoint_entries: HashMap<u64, (Hash, u64)> = HashMap::new();
        let (mut next, mut prev, mut crossed, mut entries) = (1u64, GENESIS, 0u64, 0u64);
        let mut walk_bad: Option<VerifyReport> = None;
        // Crosses checkpoints from `next` until position `upto`; false when a gap has none.
        let cross = |next: &mut u64, prev: &mut Hash, crossed: &mut u64, upto: u64| -> bool {
            while *next < upto {
                match checkpoints.get(next) {
                    Some(c) if c.before == *prev && c.last < upto => {
                        *prev = c.after;
                        *next = c.last + 1;
                        *crossed += 1;
                    }
                    _ => return false,
                }
            }
            true
        };
        // Each entry in position order (block key + index in the block), decoded once and
        // checked as it comes; a block whose framing is broken is one unreadable entry at its key.
        // After the first bad entry the walk only looks for checkpoint entries.
        let mut step = |n: u64, decoded: DecodedEntry, walking: bool| -> Option<VerifyReport> {
            if let Ok((
                ChainEntry {
                    key: RecordKey::Checkpoint(first),
                    record,
                    n,
                    ..
                },
                _,
                true,
            )) = &decoded
            {
                checkpoint_entries.insert(*first, (*record, *n));
            }
            if !walking {
                return None;
            }
            if !cross(&mut next, &mut prev, &mut crossed, n) {
                return Some(chain_bad(next, Problem::EntryMissing));
            }
            let (entry, hash, ok) = match decoded {
                Ok(x) => x,
                Err(_) => return Some(chain_bad(n, Problem::EntryUnreadable)),
            };
            if !ok {
                return Some(chain_bad(n, Problem::EntryChanged));
            }
            // A position met twice (overlapping blocks) is an entry stored where another is.
            if entry.n != n || n < next {
                return Some(chain_bad(n, Problem::EntryMoved));
            }
            if entry.prev != prev {
                return Some(chain_bad(n, Problem::BrokenLink));
            }
            expected.insert(digest.of(&entry.key), (entry.record, n));
            prev = hash;
            next = n + 1;
            entries += 1;
            None
        };
        for block in chain.iter()? {
            let (k, v) = block?;
            let first = k.value();
            let plain = unpack_block(v.value());
            match plain
                .as_deref()
                .map_err(Clone::clone)
                .and_then(|plain| block_entries(first, plain))
            {
                Ok(entries) => {
                    walked.add(entries.len() as u64);
                    for (n, _, decoded) in entries {
                        let bad = step(n, decoded, walk_bad.is_none());
                        walk_bad = walk_bad.or(bad);
                    }
                }
                Err(reason) => {
                    walked.add(1);
                    let bad = step(first, Err(reason), walk_bad.is_none());
                    walk_bad = walk_bad.or(bad);
                }
            }
        }
        // A checkpoint relied on must match its own entry, when an intact one names it.
        let bad_checkpoint = stored_checkpoints
            .iter()
            .filter_map(|&(first, hash, decodes)| match checkpoint_entries.get(&first) {
                Some(&(h, n)) if !decodes || h != hash => Some((n, first)),
                _ => None,
            })
            .min();
        if let Some((n, first)) = bad_checkpoint {
            return Ok(VerifyReport {
                entries: 0,
                records: 0,
                checkpoints: 0,
                tip: String::new(),
                first_bad: Some(BadRecord {
                    table: "chain_checkpoint",
                    key: RecordKey::Checkpoint(first).to_string(),
                    seq: Some(n),
                    problem: Problem::RecordChanged,
                }),
                problems: 1,
            });
        }
        if let Some(bad) = walk_bad {
            return Ok(bad);
        }
        if next <= counted && !cross(&mut next, &mut prev, &mut crossed, counted + 1) {
            return Ok(chain_bad(next, Problem::EntryMissing));
        }
        // The tip the next write links to must be the last entry's hash.
        let stored_tip = txn.open_table(CHAIN_TIP)?.get(TIP)?.map(|v| v.value().to_vec());
        if entries > 0 && stored_tip.as_deref() != Some(prev.as_slice()) {
            return Ok(chain_bad(next - 1, Problem::TipChanged));
        }
        walked.finish();
        let mut checked = RowCounter::stage(progress, "records", Some(expected.len() as u64));
        let mut found = Vec::new();
        let mut records = 0;
        crate::storage::attempt_store::read_rows(&txn)?.walk(false, |piece| -> Result<()> {
            if let crate::storage::attempt_store::Piece::Row {
                key: (job_id, attempt_no),
                value,
            } = piece
            {
                records += 1;
                checked.add(1);
                let key = RecordKey::Attempt {
                    job_id: job_id.to_string(),
                    attempt_no,
                };
                check_record(key, value, &digest, &mut expected, &mut found);
            }
            Ok(())
        })?;
        records += check_table(
            &txn,
            ATTEMPT_CONFLICT,
            RecordKey::AttemptConflict,
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            INGEST_REJECT,
            RecordKey::IngestReject,
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            DECISION,
            |(job_id, decided_at)| RecordKey::Decision {
                job_id: job_id.to_string(),
                decided_at,
            },
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            DECISION_CONFLICT,
            RecordKey::DecisionConflict,
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            RETENTION_SWEEP,
            RecordKey::RetentionSweep,
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            WEEK_SNAPSHOT,
            |w| RecordKey::WeekSnapshot(w.to_string()),
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        records += check_table(
            &txn,
            CHAIN_CHECKPOINT,
            RecordKey::Checkpoint,
            &digest,
            &mut expected,
            &mut found,
            &mut checked,
        )?;
        checked.finish();
        // Entries whose record is gone: counted, and the first named from its entry.
        let removed = expected.len() as u64;
        if let Some(n) = expected.into_values().map(|(_, n)| n).min() {
            let key = key_at(&chain, n)?;
            found.push((
                n,
                BadRecord {
                    table: key.table(),
                    key: key.to_string(),
                    seq: Some(n),
                    problem: Problem::RecordRemoved,
                },
            ));
        }
        let problems = found.len() as u64 - u64::from(removed > 0) + removed;
        let first_bad = found
            .into_iter()
            .min_by(|(a, x), (b, y)| (a, x.table, &x.key).cmp(&(b, y.table, &y.key)))
            .map(|(_, b)| b);
        Ok(VerifyReport {
            entries,
            records,
            checkpoints: crossed,
            tip: to_hex(&prev),
            first_bad,
            problems,
        })
    }

    /// Logs one verify run at `at` (µs since the epoch, UTC) in `verify_run` and returns its
    /// number. The log sits outside the chain: it describes the chain.
    pub fn record_verify(&self, at: i64, report: &VerifyReport) -> Result<u64> {
        let txn = self.database().begin_write()?;
        let run_no;
        {
            let mut t = txn.open_table(VERIFY_RUN)?;
            run_no = t.last()?.map_or(0, |(k, _)| k.value()) + 1;
            let run = VerifyRun {
                run_no,
                at,
                clean: report.is_clean(),
                entries: report.entries,
                records: report.records,
                tip: report.tip.clone(),
                first_bad: report.first_bad.as_ref().map(ToString::to_string),
            };
            t.insert(run_no, encode(&VerifyRunRecord::V1(run)).as_slice())?;
        }
        txn.commit()?;
        self.bump_generation();
        Ok(run_no)
    }

    /// Every logged verify run, oldest first.
    pub fn verify_runs(&self) -> Result<Vec<VerifyRun>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(VERIFY_RUN)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<VerifyRunRecord>("verify_run", k.value(), v.value())? {
                VerifyRunRecord::V1(r) => out.push(r),
            }
        }
        Ok(out)
    }

    /// Every chain entry with its position, oldest first (for audits and tests).
    pub fn chain_entries(&self) -> Result<Vec<ChainEntry>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(CHAIN_BLOCK)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            let corrupt = |n: u64, reason| Error::Corrupt {
                table: "chain",
                key: n.to_string(),
                reason,
            };
            let plain = unpack_block(v.value()).map_err(|r| corrupt(k.value(), r))?;
            for (n, _, decoded) in block_entries(k.value(), &plain).map_err(|r| corrupt(k.value(), r))? {
                let (entry, _, _) = decoded.map_err(|r| corrupt(n, r))?;
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// The attempts inserted or completed after chain position `since` (the `position` a scan
    /// or an earlier call returned), read from one snapshot: what a reader holding the attempts
    /// as of `since` needs to be current, without reading the others again.
    ///
    /// The chain names every attempt row written after `since` ([`RecordKey::Attempt`] entries);
    /// their rows in force are read by key. [`AttemptChanges::Rescan`] when that cannot tell the
    /// whole story or would not be cheaper than reading everything: a retention sweep ran after
    /// `since` (it removes rows), `since` is past the chain's end (another file), or more than
    /// `limit` attempts changed. Errors: storage errors, or [`Error::Corrupt`] for an entry or row
    /// that cannot be decoded.
    pub fn attempt_changes_since(&self, since: u64, limit: usize) -> Result<AttemptChanges> {
        let txn = self.database().begin_read()?;
        let position = chain_position(&txn)?;
        if position < since {
            return Ok(AttemptChanges::Rescan);
        }
        let mut keys: std::collections::BTreeSet<(String, u32)> = std::collections::BTreeSet::new();
        if position > since {
            let chain = txn.open_table(CHAIN_BLOCK)?;
            let corrupt = |n: u64, reason| Error::Corrupt {
                table: "chain",
                key: n.to_string(),
                reason,
            };
            // The block holding position since + 1 starts at or before it.
            let start = chain
                .range(..=since + 1)?
                .next_back()
                .transpose()?
                .map_or(since + 1, |(k, _)| k.value());
            for block in chain.range(start..)? {
                let (k, v) = block?;
                let plain = unpack_block(v.value()).map_err(|r| corrupt(k.value(), r))?;
                let (_, frames) = split_block(&plain).map_err(|r| corrupt(k.value(), r))?;
                for frame in frames {
                    let entry = decode_stored(frame).map_err(|r| corrupt(k.value(), r))?;
                    if entry.n <= since {
                        continue;
                    }
                    match entry.key {
                        RecordKey::Attempt { job_id, attempt_no } => {
                            keys.insert((job_id, attempt_no));
                            if keys.len() > limit {
                                return Ok(AttemptChanges::Rescan);
                            }
                        }
                        RecordKey::RetentionSweep(_) | RecordKey::Checkpoint(_) | RecordKey::WeekSnapshot(_) => {
                            return Ok(AttemptChanges::Rescan);
                        }
                        _ => {}
                    }
                }
            }
        }
        let view = crate::storage::attempt_store::read_rows(&txn)?;
        let keys: Vec<(String, u32)> = keys.into_iter().collect();
        let mut rows = Vec::with_capacity(keys.len());
        for value in view.get_sorted(&keys)? {
            match value {
                Some(v) => rows.push(crate::storage::ledger::decode_attempt(&v)?),
                // Only a sweep removes a row, and a sweep is chained.
                None => return Ok(AttemptChanges::Rescan),
            }
        }
        Ok(AttemptChanges::Rows { position, rows })
    }

    /// Every checkpoint sweeps left, by first position.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(CHAIN_CHECKPOINT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<CheckpointRecord>("chain_checkpoint", k.value(), v.value())? {
                CheckpointRecord::V1(c) => out.push(c),
            }
        }
        Ok(out)
    }
}

/// Chains every record of a format-version-1 ledger, in table order (attempts and decisions by
/// their append `seq`, conflicts and rejects by arrival number), inside `txn`.
pub(crate) fn migrate_v1(txn: &WriteTransaction, progress: &dyn crate::progress::Progress) -> Result<u64> {
    let mut chain = ChainWriter::open(txn, 0)?;
    let mut count = crate::progress::RowCounter::stage(progress, "chaining records", None);
    {
        let t = txn.open_table(ATTEMPT)?;
        let mut rows: Vec<(u64, RecordKey, Vec<u8>)> = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            let (job_id, attempt_no) = k.value();
            let seq = crate::storage::ledger::decode_attempt(v.value())?.seq;
            rows.push((
                seq,
                RecordKey::Attempt {
                    job_id: job_id.to_string(),
                    attempt_no,
                },
                v.value().to_vec(),
            ));
        }
        rows.sort_by_key(|r| r.0);
        for (_, key, value) in rows {
            chain.append(EntryKind::Insert, key, &value)?;
            count.add(1);
        }
    }
    for (def, key_of) in [
        (ATTEMPT_CONFLICT, RecordKey::AttemptConflict as fn(u64) -> RecordKey),
        (INGEST_REJECT, RecordKey::IngestReject),
    ] {
        let t = txn.open_table(def)?;
        for row in t.iter()? {
            let (k, v) = row?;
            chain.append(EntryKind::Insert, key_of(k.value()), v.value())?;
            count.add(1);
        }
    }
    {
        let t = txn.open_table(DECISION)?;
        let mut rows: Vec<(u64, RecordKey, Vec<u8>)> = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            let (job_id, decided_at) = k.value();
            let seq = crate::storage::decision_ledger::decode_decision(v.value())?.seq;
            rows.push((
                seq,
                RecordKey::Decision {
                    job_id: job_id.to_string(),
                    decided_at,
                },
                v.value().to_vec(),
            ));
        }
        rows.sort_by_key(|r| r.0);
        for (_, key, value) in rows {
            chain.append(EntryKind::Insert, key, &value)?;
            count.add(1);
        }
    }
    {
        let t = txn.open_table(DECISION_CONFLICT)?;
        for row in t.iter()? {
            let (k, v) = row?;
            chain.append(EntryKind::Insert, RecordKey::DecisionConflict(k.value()), v.value())?;
            count.add(1);
        }
    }
    count.finish();
    chain.finish()
}

/// Moves a format-version-2 ledger to version 3 inside `txn`: the chain's one row per entry
/// becomes blocks of up to 4,096 consecutive positions (a gap a sweep left starts a new block) in
/// [`CHAIN_BLOCK_V4`], and the idem_key multimap becomes [`ATTEMPT_IDEM`]. Entry bytes are copied
/// as they are, so every hash, and the tip, stay the same. Both old tables are deleted.
pub(crate) fn migrate_v2(txn: &WriteTransaction, progress: &dyn crate::progress::Progress) -> Result<()> {
    {
        let old = txn.open_table(CHAIN_V2)?;
        let mut count = crate::progress::RowCounter::stage(progress, "moving the chain", Some(old.len()?));
        let mut blocks = txn.open_table(CHAIN_BLOCK_V4)?;
        let (mut block, mut first, mut len, mut last) = (Vec::new(), 0u64, 0usize, 0u64);
        for row in old.iter()? {
            let (k, v) = row?;
            let n = k.value();
            if len > 0 && (n != last + 1 || len == V4_BLOCK_ENTRIES) {
                blocks.insert(first, block.as_slice())?;
                block.clear();
                len = 0;
            }
            if len == 0 {
                first = n;
            }
            push_frame(&mut block, v.value());
            len += 1;
            last = n;
            count.add(1);
        }
        if len > 0 {
            blocks.insert(first, block.as_slice())?;
        }
        count.finish();
    }
    txn.delete_table(CHAIN_V2)?;
    {
        let old = txn.open_multimap_table(ATTEMPT_BY_IDEM_KEY)?;
        let mut idem = txn.open_table(ATTEMPT_IDEM)?;
        for row in old.iter()? {
            let (k, values) = row?;
            for v in values {
                let v = v?;
                let (job_id, attempt_no) = v.value();
                idem.insert((k.value(), job_id, attempt_no), ())?;
            }
        }
    }
    txn.delete_multimap_table(ATTEMPT_BY_IDEM_KEY)?;
    Ok(())
}

/// Packs every chain block of a format version 5 to 10 file ([`pack_block`]) inside `txn`: the
/// entries' bytes are unchanged, so are their hashes and the tip (format version 11). A block that
/// does not read is packed as it is, so `verify` still names it.
pub(crate) fn migrate_v10(txn: &WriteTransaction, progress: &dyn crate::progress::Progress) -> Result<()> {
    let counted = txn.open_table(COUNTER)?.get(CHAIN_ENTRIES)?.map_or(0, |v| v.value());
    let mut count = crate::progress::RowCounter::stage(progress, "packing the chain", Some(counted));
    rewrite_blocks(txn, |_, plain| {
        count.add(split_block(plain).map_or(0, |(_, f)| f.len()) as u64);
        Ok(pack_block(plain))
    })?;
    count.finish();
    Ok(())
}

/// Stores every chain block plain, as format versions 5 to 10 did ([`unpack_block`]): with
/// `meta["format_version"]` set to 10 after it, the chain is what version 10 wrote (for tests of
/// the migrations, or to hand a file back to an older laneledger). Errors: storage errors,
/// [`Error::Corrupt`] for a block that does not unpack.
pub fn write_as_format_10(txn: &WriteTransaction) -> Result<()> {
    rewrite_blocks(txn, |first, stored| {
        unpack_block(stored).map_err(|reason| Error::Corrupt {
            table: "chain",
            key: first.to_string(),
            reason,
        })
    })
}

/// Stores every chain block again as `convert` gives it (from the block's first position and
/// stored bytes), under the same key, one block in memory at a time.
fn rewrite_blocks(txn: &WriteTransaction, mut convert: impl FnMut(u64, &[u8]) -> Result<Vec<u8>>) -> Result<()> {
    let mut table = txn.open_table(CHAIN_BLOCK)?;
    let keys: Vec<u64> = table
        .iter()?
        .map(|row| row.map(|(k, _)| k.value()))
        .collect::<std::result::Result<_, _>>()?;
    for first in keys {
        let stored = match table.get(first)? {
            Some(v) => convert(first, v.value())?,
            None => continue,
        };
        table.insert(first, stored.as_slice())?;
    }
    Ok(())
}

/// Moves a format-version-4 chain ([`CHAIN_BLOCK_V4`]) to version 5 ([`CHAIN_BLOCK`] and
/// [`CHAIN_TIP`]) inside `txn`, then deletes the old table. Every entry keeps its position, fields
/// and hash, so the tip stays the same. What version 4 would have found wrong stays findable: an
/// entry whose stored hash does not match its contents, one that cannot be decoded and a block
/// whose framing is broken are stored with a CRC that does not match (verify names them as
/// changed), and an entry that does not link to the one before it starts a block whose `prev` is
/// the one it stored (verify names the broken link).
pub(crate) fn migrate_v4(txn: &WriteTransaction, progress: &dyn crate::progress::Progress) -> Result<()> {
    /// Blocks being built from version 4 entries.
    struct Builder<'t> {
        table: Table<'t, u64, &'static [u8]>,
        block: Vec<u8>,
        first: u64,
        /// The position after the last entry taken.
        next: u64,
        /// The hash version 4 linked the next entry to (`None` after one that cannot be decoded).
        prev: Option<Hash>,
    }
    impl Builder<'_> {
        fn flush(&mut self) -> Result<()> {
            if self.block.len() > 32 {
                self.table.insert(self.first, pack_block(&self.block).as_slice())?;
            }
            self.block.clear();
            Ok(())
        }
        /// Adds `stored` (version 5 bytes) at `n`, linked to `prev`.
        fn push(&mut self, n: u64, prev: Hash, stored: &[u8]) -> Result<()> {
            let cut = self.block.is_empty()
                || n != self.next
                || self.prev != Some(prev)
                || self.block.len() + frame_len(stored.len()) > BLOCK_BYTES;
            if cut {
                self.flush()?;
                self.first = n;
                self.block.extend_from_slice(&prev);
            }
            push_frame(&mut self.block, stored);
            self.next = n + 1;
            Ok(())
        }
    }
    /// `stored` with its last byte changed, so that its CRC does not match.
    fn spoiled(mut stored: Vec<u8>) -> Vec<u8> {
        if let Some(b) = stored.last_mut() {
            *b ^= 0xff;
        }
        stored
    }
    /// Version 4 bytes that cannot be decoded, stored with a CRC that does not match them.
    fn unreadable(bytes: &[u8]) -> Vec<u8> {
        [bytes, &(!crc32fast::hash(bytes)).to_le_bytes()].concat()
    }
    let tip;
    {
        let old = txn.open_table(CHAIN_BLOCK_V4)?;
        let mut b = Builder {
            table: txn.open_table(CHAIN_BLOCK)?,
            block: Vec::new(),
            first: 0,
            next: 0,
            prev: Some(GENESIS),
        };
        let mut count = crate::progress::RowCounter::stage(progress, "storing the chain again", None);
        for row in old.iter()? {
            let (k, v) = row?;
            let first = k.value();
            count.add(1);
            let Ok(frames) = split_frames(v.value()) else {
                b.push(first, b.prev.unwrap_or(GENESIS), &unreadable(v.value()))?;
                b.prev = None;
                continue;
            };
            for (i, frame) in frames.into_iter().enumerate() {
                let n = first + i as u64;
                match decode_v4_entry(frame) {
                    Ok((entry, stored_hash, ok)) => {
                        let (stored, _) = encode_entry(&entry);
                        let stored = if ok { stored } else { spoiled(stored) };
                        b.push(n, entry.prev, &stored)?;
                        b.prev = Some(stored_hash);
                    }
                    Err(_) => {
                        b.push(n, b.prev.unwrap_or(GENESIS), &unreadable(frame))?;
                        b.prev = None;
                    }
                }
            }
        }
        b.flush()?;
        count.finish();
        // No entry (a version 1 file, chained in version 5 already): the tip stays as it is.
        tip = b.prev.filter(|_| b.next > 0);
    }
    if let Some(tip) = tip {
        txn.open_table(CHAIN_TIP)?.insert(TIP, tip.as_slice())?;
    }
    txn.delete_table(CHAIN_BLOCK_V4)?;
    Ok(())
}

/// The chain position a snapshot is at: the `chain_entries` counter, which every write stores
/// (0 for a ledger that has written nothing).
pub(crate) fn chain_position(txn: &redb::ReadTransaction) -> Result<u64> {
    match txn.open_table(COUNTER) {
        Ok(t) => Ok(t.get(CHAIN_ENTRIES)?.map_or(0, |v| v.value())),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// What [`Ledger::attempt_changes_since`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptChanges {
    /// The rows in force of every attempt inserted or completed after the position asked
    /// about, in (job_id, attempt_no) order, each once; `position` is the chain position they
    /// were read at, to ask about next.
    Rows {
        /// The snapshot's chain position.
        position: u64,
        /// The changed attempts as they stand at `position`.
        rows: Vec<StoredAttempt>,
    },
    /// Read every attempt again ([`Ledger::attempt_chunks`]): rows were removed, the position
    /// is unknown to this ledger, or too many changed.
    Rescan,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_hashes_as_format_4_did_and_its_crc_and_prev_are_found_again() {
        let entry = ChainEntry {
            n: 300,
            kind: EntryKind::Update,
            key: RecordKey::Attempt {
                job_id: "job-1".into(),
                attempt_no: 2,
            },
            record: [7; 32],
            prev: [9; 32],
        };
        let v4 = encode_v4_entry(&entry);
        let (stored, hash) = encode_entry(&entry);
        // Version 4 stored the whole encoding and its SHA-256; version 5 the encoding without
        // `prev` and a CRC-32. The encodings differ only by `prev` at the end, so the hash is one.
        let (v4_body, v4_hash) = v4.split_at(v4.len() - 32);
        let (body, crc) = stored.split_at(stored.len() - 4);
        assert_eq!(v4_body, [body, &[9; 32][..]].concat());
        assert_eq!(hash, *<&Hash>::try_from(v4_hash).unwrap());
        assert_eq!(crc, crc32fast::hash(body).to_le_bytes());
        // variant, n = 300 (ac 02), kind Update, key Attempt, "job-1", attempt_no 2, record.
        assert_eq!(&body[..11], &[0, 0xac, 0x02, 1, 0, 5, b'j', b'o', b'b', b'-', b'1']);
        assert_eq!(body.len(), 11 + 1 + 32);
        assert_eq!(decode_entry(&stored, &[9; 32]), Ok((entry.clone(), hash, true)));
        assert_eq!(decode_v4_entry(&v4), Ok((entry, hash, true)));
        let mut changed = stored.clone();
        changed[12] ^= 1;
        assert!(
            !decode_entry(&changed, &[9; 32]).unwrap().2,
            "the CRC finds a changed byte"
        );
    }
}

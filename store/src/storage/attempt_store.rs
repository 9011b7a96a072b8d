//! Where the attempt rows live (format version 6 and on): compressed blocks and a small delta.
//!
//! Most rows sit in zstd-packed blocks of about 1,300 rows in key order ([`crate::storage::attempt_block`],
//! table [`ATTEMPT_BLOCK`], each block under its last key). A write whose key sorts above every
//! key held, the usual case (routers number jobs in time order, and a job's attempts come
//! together), is appended to the last block; any other write (a key inside the blocks' range, a
//! completion of a row held) goes to the delta, the plain B-tree [`ATTEMPT`], where a row shadows
//! a block row of the same key. Every read merges the two, the delta winning. When the delta
//! holds a quarter as many rows as the blocks, a commit folds it into them (the blocks it falls
//! in are rewritten), so it stays small beside them.
//!
//! The stored values are byte for byte what the `attempt` table held before (`AttemptRecord::V1`),
//! so the hash chain, `verify` and every reader see the same records.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use crate::error::{Error, Result};
use crate::progress::{Progress, RowCounter, Silent};
use crate::storage::attempt_block::{
    Block, BlockBuilder, STORED_MAX, block_raw_bytes, block_rows, may_hold, raw_target,
};
use crate::storage::tables::{ATTEMPT, ATTEMPT_BLOCK, COUNTER};

/// The `counter` row that holds how many rows the blocks hold (shadowed ones included): what the
/// fold's threshold is taken against.
pub const BLOCK_ROWS: &str = "attempt_block_rows";
/// The `counter` row that holds how many attempt rows the ledger holds.
pub const ATTEMPT_ROWS: &str = "attempt_rows";

/// How many delta rows a fold reads at a time.
const FOLD_ROUND: usize = 1 << 16;

/// An attempt row's key: (job_id, attempt_no).
pub type Key = (&'static str, u32);

/// A key owned: (job_id, attempt_no).
type OwnedKey = (String, u32);

/// A row owned: its key and stored value.
type OwnedRow = (OwnedKey, Vec<u8>);

fn corrupt(key: impl std::fmt::Debug, reason: String) -> Error {
    Error::Corrupt {
        table: "attempt_block",
        key: format!("{key:?}"),
        reason,
    }
}

/// The block whose key range holds `key` (the first block whose last key is at or above it),
/// unpacked, with its last key; `None` when `key` sorts above every block.
fn block_holding<B: ReadableTable<Key, &'static [u8]>>(
    blocks: &B,
    key: (&str, u32),
) -> Result<Option<(OwnedKey, Block)>> {
    let Some(row) = blocks.range(key..)?.next() else {
        return Ok(None);
    };
    let (k, v) = row?;
    let last = k.value();
    let block = Block::decode(v.value()).map_err(|r| corrupt(last, r))?;
    Ok(Some(((last.0.to_string(), last.1), block)))
}

/// The lookups of single rows in the blocks, with what they keep between them: the last block
/// unpacked whole, and the block of the lookup before if that one was only partly unpacked.
///
/// A key the block's filter turns away costs a probe. Any other lookup unpacks the keys and the
/// one values frame its row lies in, unless the lookup before it landed in the same block: then
/// the block is unpacked whole and kept. Lookups in key order (the changes after a write, a run of
/// completions) unpack each block about once; scattered ones (random ids) unpack a fraction of
/// the block each.
#[derive(Default)]
struct Lookups {
    whole: Option<(OwnedKey, Block)>,
    last_partial: Option<OwnedKey>,
}

impl Lookups {
    /// Drops what is kept (the blocks were written).
    fn forget(&mut self) {
        *self = Lookups::default();
    }

    /// The stored value the blocks hold for `key`.
    fn get<B: ReadableTable<Key, &'static [u8]>>(&mut self, blocks: &B, key: (&str, u32)) -> Result<Option<Vec<u8>>> {
        if let Some((last, block)) = &self.whole
            && !block.is_empty()
            && block.key(0) <= key
            && key <= (last.0.as_str(), last.1)
        {
            return Ok(block.find(key).ok().map(|i| block.value(i).to_vec()));
        }
        let Some(row) = blocks.range(key..)?.next() else {
            return Ok(None);
        };
        let (k, v) = row?;
        let (last, stored) = (k.value(), v.value());
        if !may_hold(stored, key).map_err(|r| corrupt(last, r))? {
            return Ok(None);
        }
        let owned = (last.0.to_string(), last.1);
        if self.last_partial.as_ref() == Some(&owned) {
            let block = Block::decode(stored).map_err(|r| corrupt(last, r))?;
            let value = block.find(key).ok().map(|i| block.value(i).to_vec());
            self.whole = Some((owned, block));
            self.last_partial = None;
            return Ok(value);
        }
        let value = Block::row_value(stored, key).map_err(|r| corrupt(last, r))?;
        self.last_partial = Some(owned);
        Ok(value)
    }
}

/// The next row of a delta range, owned.
fn pull(range: &mut redb::Range<'_, Key, &'static [u8]>) -> Result<Option<OwnedRow>> {
    Ok(match range.next() {
        Some(row) => {
            let (k, v) = row?;
            let (job, no) = k.value();
            Some(((job.to_string(), no), v.value().to_vec()))
        }
        None => None,
    })
}

/// What [`AttemptRows::walk`] hands on, in key order.
pub enum Piece<'a> {
    /// A whole stored block that no delta row shadows, still packed: `rows` rows, unpacked with
    /// [`Block::values_onto`] or [`Block::decode`].
    Packed {
        /// Rows in the block.
        rows: usize,
        /// The stored block.
        stored: &'a [u8],
    },
    /// One row: its key and stored value.
    Row {
        /// (job_id, attempt_no).
        key: (&'a str, u32),
        /// The stored value (`AttemptRecord`).
        value: &'a [u8],
    },
}

/// The attempt rows of one snapshot, blocks and delta merged: a read transaction's, or a write
/// transaction's as it stands.
pub struct AttemptRows<B, D> {
    blocks: B,
    delta: D,
    lookups: std::cell::RefCell<Lookups>,
}

impl<B: ReadableTable<Key, &'static [u8]>, D: ReadableTable<Key, &'static [u8]>> AttemptRows<B, D> {
    /// The rows of the `attempt_block` and `attempt` tables given.
    pub fn new(blocks: B, delta: D) -> Self {
        AttemptRows {
            blocks,
            delta,
            lookups: Default::default(),
        }
    }

    /// One row's stored value by its key. Errors: storage errors, [`Error::Corrupt`] for a block
    /// that does not unpack.
    pub fn get(&self, job_id: &str, attempt_no: u32) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.delta.get((job_id, attempt_no))? {
            return Ok(Some(v.value().to_vec()));
        }
        self.lookups.borrow_mut().get(&self.blocks, (job_id, attempt_no))
    }

    /// One job's stored values in `attempt_no` order. Errors as [`AttemptRows::get`].
    pub fn job(&self, job_id: &str) -> Result<Vec<Vec<u8>>> {
        let mut rows: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for row in self.delta.range((job_id, 0u32)..=(job_id, u32::MAX))? {
            let (k, v) = row?;
            rows.insert(k.value().1, v.value().to_vec());
        }
        for row in self.blocks.range((job_id, 0u32)..)? {
            let (k, v) = row?;
            let last = k.value();
            for (no, value) in Block::job_values(v.value(), job_id).map_err(|r| corrupt(last, r))? {
                rows.entry(no).or_insert(value);
            }
            if last.0 != job_id {
                break;
            }
        }
        Ok(rows.into_values().collect())
    }

    /// Hands every row to `f` in key order. A block that no delta row falls in goes whole and
    /// packed ([`Piece::Packed`]) when `packed` is true (the query scan unpacks it on another
    /// thread); every other row goes as a [`Piece::Row`]. Stops at the first error.
    pub fn walk<E: From<Error>>(
        &self,
        packed: bool,
        mut f: impl FnMut(Piece<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut delta = self.delta.range::<Key>(..).map_err(Error::from)?;
        let mut next = pull(&mut delta)?;
        let below = |next: &Option<OwnedRow>, key: (&str, u32)| {
            next.as_ref().is_some_and(|((j, n), _)| (j.as_str(), *n) <= key)
        };
        for row in self.blocks.iter().map_err(Error::from)? {
            let (k, v) = row.map_err(Error::from)?;
            let last = k.value();
            if packed && !below(&next, last) {
                let rows = block_rows(v.value()).map_err(|r| corrupt(last, r))?;
                f(Piece::Packed {
                    rows,
                    stored: v.value(),
                })?;
                continue;
            }
            let block = Block::decode(v.value()).map_err(|r| corrupt(last, r))?;
            for i in 0..block.len() {
                let key = block.key(i);
                // Delta rows up to this key go first; one of the same key shadows the block's.
                let mut shadowed = false;
                while below(&next, key) {
                    let ((job, no), value) = next.take().expect("below holds a row");
                    shadowed = (job.as_str(), no) == key;
                    f(Piece::Row {
                        key: (&job, no),
                        value: &value,
                    })?;
                    next = pull(&mut delta)?;
                }
                if !shadowed {
                    f(Piece::Row {
                        key,
                        value: block.value(i),
                    })?;
                }
            }
        }
        while let Some(((job, no), value)) = next.take() {
            f(Piece::Row {
                key: (&job, no),
                value: &value,
            })?;
            next = pull(&mut delta)?;
        }
        Ok(())
    }
}

/// The attempt rows inside a write transaction: appends go to the last block, every other write
/// to the delta; [`AttemptWriter::finish`] packs what was appended and folds the delta when it
/// has grown. Rows of the transaction read back at once ([`AttemptWriter::get`]).
pub struct AttemptWriter<'txn> {
    blocks: Table<'txn, Key, &'static [u8]>,
    delta: Table<'txn, Key, &'static [u8]>,
    /// Rows appended in this transaction (after the last stored block's rows, when that block
    /// was not full: it is taken out and packed again with them).
    tail: BlockBuilder,
    tail_open: bool,
    lookups: Lookups,
    block_rows: u64,
    /// The unpacked bytes a block is filled to ([`raw_target`]).
    target: usize,
}

impl<'txn> AttemptWriter<'txn> {
    /// Opens the attempt tables of `txn`; `block_rows` is the [`BLOCK_ROWS`] counter.
    pub fn open(txn: &'txn WriteTransaction, block_rows: u64) -> Result<Self> {
        Ok(AttemptWriter {
            blocks: txn.open_table(ATTEMPT_BLOCK)?,
            delta: txn.open_table(ATTEMPT)?,
            tail: BlockBuilder::default(),
            tail_open: false,
            lookups: Lookups::default(),
            block_rows,
            target: raw_target(0, 0),
        })
    }

    /// The greatest key held: a key above it is new for certain, and is appended.
    pub fn last_key(&self) -> Result<Option<(String, u32)>> {
        let owned = |(j, n): (&str, u32)| (j.to_string(), n);
        let mut last = match self.tail.last() {
            Some(k) => Some(owned(k)),
            None => self.blocks.last()?.map(|(k, _)| owned(k.value())),
        };
        if let Some((k, _)) = self.delta.last()? {
            let k = k.value();
            if last.as_ref().is_none_or(|l| (l.0.as_str(), l.1) < k) {
                last = Some(owned(k));
            }
        }
        Ok(last)
    }

    /// Takes the last stored block out to be filled further, when it is not full.
    fn open_tail(&mut self) -> Result<()> {
        if self.tail_open {
            return Ok(());
        }
        self.tail_open = true;
        let last = match self.blocks.last()? {
            Some((k, v)) => {
                let (job, no) = k.value();
                let raw = block_raw_bytes(v.value()).map_err(|r| corrupt((job, no), r))?;
                self.target = raw_target(raw, v.value().len());
                // A block packed to 80% of a page or more stays as it is.
                if v.value().len() >= STORED_MAX / 5 * 4 {
                    None
                } else {
                    let block = Block::decode(v.value()).map_err(|r| corrupt((job, no), r))?;
                    Some(((job.to_string(), no), block))
                }
            }
            None => None,
        };
        if let Some(((job, no), block)) = last {
            self.blocks.remove((job.as_str(), no))?;
            self.tail.push_block(&block);
            self.lookups.forget();
        }
        Ok(())
    }

    /// Packs `b`'s rows into blocks of at most [`STORED_MAX`] and stores them, taking the ratio
    /// they packed at for the next block's [`raw_target`].
    fn store(&mut self, b: &mut BlockBuilder) -> Result<()> {
        let raw = b.raw_bytes();
        let mut packed = 0;
        for ((job, no), stored) in b.finish_within() {
            packed += stored.len();
            self.blocks.insert((job.as_str(), no), stored.as_slice())?;
        }
        if packed > 0 {
            self.target = raw_target(raw, packed);
        }
        Ok(())
    }

    /// Stores the tail's rows as blocks.
    fn store_tail(&mut self) -> Result<()> {
        let mut tail = std::mem::take(&mut self.tail);
        let stored = self.store(&mut tail);
        self.tail = tail;
        stored
    }

    /// Appends a new row whose key sorts above every key held ([`AttemptWriter::last_key`]).
    pub fn append(&mut self, job_id: &str, attempt_no: u32, value: &[u8]) -> Result<()> {
        self.open_tail()?;
        self.tail.push(job_id, attempt_no, value);
        self.block_rows += 1;
        if self.tail.raw_bytes() >= self.target {
            self.store_tail()?;
        }
        Ok(())
    }

    /// The stored value of the row in force for a key, if one is held. Errors: storage errors,
    /// [`Error::Corrupt`] for a block that does not unpack.
    pub fn get(&mut self, job_id: &str, attempt_no: u32) -> Result<Option<Vec<u8>>> {
        let key = (job_id, attempt_no);
        if let Some(v) = self.delta.get(key)? {
            return Ok(Some(v.value().to_vec()));
        }
        if let Some(v) = self.tail.get(key) {
            return Ok(Some(v.to_vec()));
        }
        self.lookups.get(&self.blocks, key)
    }

    /// Writes a row to the delta: a new row whose key does not sort above every key held, or the
    /// new value of a row held (it shadows the block's).
    pub fn put(&mut self, job_id: &str, attempt_no: u32, value: &[u8]) -> Result<()> {
        self.delta.insert((job_id, attempt_no), value)?;
        Ok(())
    }

    /// Removes these rows wherever they are (a retention sweep); a key not held is passed over.
    pub fn remove(&mut self, keys: &std::collections::BTreeSet<(String, u32)>) -> Result<()> {
        self.store_tail()?;
        self.tail_open = false;
        self.lookups.forget();
        for (job, no) in keys {
            self.delta.remove((job.as_str(), *no))?;
        }
        // The blocks, each rewritten once without its removed rows.
        let mut keys = keys.iter().peekable();
        while let Some((job, no)) = keys.peek() {
            let Some((last, block)) = block_holding(&self.blocks, (job.as_str(), *no))? else {
                break;
            };
            let mut gone = Vec::new();
            while let Some((j, n)) = keys.peek() {
                if (j.as_str(), *n) > (last.0.as_str(), last.1) {
                    break;
                }
                if let Ok(i) = block.find((j.as_str(), *n)) {
                    gone.push(i);
                }
                keys.next();
            }
            if gone.is_empty() {
                continue;
            }
            self.blocks.remove((last.0.as_str(), last.1))?;
            self.block_rows = self.block_rows.saturating_sub(block.len() as u64);
            let mut b = BlockBuilder::default();
            let mut gone = gone.into_iter().peekable();
            for i in 0..block.len() {
                if gone.peek() == Some(&i) {
                    gone.next();
                    continue;
                }
                let (j, n) = block.key(i);
                b.push(j, n, block.value(i));
            }
            self.block_rows += b.len() as u64;
            self.store(&mut b)?;
        }
        Ok(())
    }

    /// Merges every delta row into the blocks, rewriting the blocks they fall in (a row above
    /// every block is appended), and empties the delta. The delta is read in rounds of
    /// [`FOLD_ROUND`] rows, so a fold of millions (a migration) holds one round in memory. Each
    /// round's rows are counted on `count`.
    fn fold(&mut self, count: &mut RowCounter<'_>) -> Result<()> {
        self.lookups.forget();
        let mut after: Option<(String, u32)> = None;
        loop {
            let mut round = Vec::with_capacity(FOLD_ROUND.min(self.delta.len()? as usize));
            {
                let start = match &after {
                    Some((j, n)) => Bound::Excluded((j.as_str(), *n)),
                    None => Bound::Unbounded,
                };
                let mut range = self.delta.range::<(&str, u32)>((start, Bound::Unbounded))?;
                while round.len() < FOLD_ROUND {
                    match pull(&mut range)? {
                        Some(row) => round.push(row),
                        None => break,
                    }
                }
            }
            let Some((last, _)) = round.last() else { break };
            after = Some(last.clone());
            count.add(round.len() as u64);
            self.fold_round(round)?;
        }
        self.delta.retain(|_, _| false)?;
        Ok(())
    }

    /// Merges `round`, delta rows in key order, into the blocks.
    fn fold_round(&mut self, round: Vec<OwnedRow>) -> Result<()> {
        let mut rows = round.into_iter().peekable();
        while let Some(((job, no), _)) = rows.peek() {
            let Some((last, block)) = block_holding(&self.blocks, (job.as_str(), *no))? else {
                // Above every block: the rest are appends.
                for ((job, no), value) in rows {
                    self.append(&job, no, &value)?;
                }
                return Ok(());
            };
            self.blocks.remove((last.0.as_str(), last.1))?;
            self.block_rows = self.block_rows.saturating_sub(block.len() as u64);
            let mut b = BlockBuilder::default();
            let mut count = 0u64;
            for i in 0..block.len() {
                let key = block.key(i);
                let mut shadowed = false;
                while let Some(((j, n), v)) = rows.next_if(|((j, n), _)| (j.as_str(), *n) <= key) {
                    shadowed = (j.as_str(), n) == key;
                    b.push(&j, n, &v);
                    count += 1;
                    if b.raw_bytes() >= self.target {
                        self.store(&mut b)?;
                    }
                }
                if !shadowed {
                    b.push(key.0, key.1, block.value(i));
                    count += 1;
                    if b.raw_bytes() >= self.target {
                        self.store(&mut b)?;
                    }
                }
            }
            // No delta row lies between the block's last row and its key: they are the same.
            self.store(&mut b)?;
            self.block_rows += count;
        }
        Ok(())
    }

    /// Stores the rows appended, folds the delta into the blocks when it holds a quarter as many
    /// rows as they do (or `fold_all`), and returns the new [`BLOCK_ROWS`] count.
    pub fn finish(self, fold_all: bool) -> Result<u64> {
        self.finish_counted(fold_all, &mut RowCounter::stage(&Silent, "", None))
    }

    /// [`AttemptWriter::finish`], counting the rows a fold merges on `count`.
    fn finish_counted(mut self, fold_all: bool, count: &mut RowCounter<'_>) -> Result<u64> {
        self.store_tail()?;
        self.tail_open = false;
        let delta = self.delta.len()?;
        if delta > 0 && (fold_all || delta * 4 >= self.block_rows) {
            self.fold(count)?;
            self.store_tail()?;
        }
        Ok(self.block_rows)
    }
}

/// The attempt rows of a read transaction, blocks and delta merged.
pub type ReadRows = AttemptRows<ReadOnlyTable<Key, &'static [u8]>, ReadOnlyTable<Key, &'static [u8]>>;

/// The attempt rows of a read transaction. Errors: storage errors.
pub fn read_rows(txn: &ReadTransaction) -> Result<ReadRows> {
    Ok(AttemptRows::new(
        txn.open_table(ATTEMPT_BLOCK)?,
        txn.open_table(ATTEMPT)?,
    ))
}

/// Format version 5 to 6: every row of the `attempt` table, where a version 5 file keeps them
/// all, is packed into blocks, values unchanged; sets the [`BLOCK_ROWS`] and [`ATTEMPT_ROWS`]
/// counters.
pub(crate) fn migrate_v5(txn: &WriteTransaction, progress: &dyn Progress) -> Result<()> {
    let rows = txn.open_table(ATTEMPT)?.len()?;
    let mut count = RowCounter::stage(progress, "packing attempt rows", Some(rows));
    let block_rows = AttemptWriter::open(txn, 0)?.finish_counted(true, &mut count)?;
    count.finish();
    let mut counter = txn.open_table(COUNTER)?;
    counter.insert(BLOCK_ROWS, block_rows)?;
    counter.insert(ATTEMPT_ROWS, rows)?;
    Ok(())
}

/// Writes one attempt row's stored value in `txn` (`None` removes the row), outside the write
/// rules and the hash chain, keeping the row counters right: what `laneledger verify` exists to
/// catch. For tests that tamper with a ledger, and for repair tools.
///
/// Errors: storage errors, [`Error::Corrupt`] for a block that does not unpack.
pub fn set_row(txn: &WriteTransaction, job_id: &str, attempt_no: u32, value: Option<&[u8]>) -> Result<()> {
    let mut counter = txn.open_table(COUNTER)?;
    let count = |name: &str| -> Result<u64> { Ok(counter.get(name)?.map_or(0, |v| v.value())) };
    let (block_rows, rows) = (count(BLOCK_ROWS)?, count(ATTEMPT_ROWS)?);
    let mut w = AttemptWriter::open(txn, block_rows)?;
    let held = w.get(job_id, attempt_no)?.is_some();
    let rows = match value {
        Some(v) => {
            w.put(job_id, attempt_no, v)?;
            rows + u64::from(!held)
        }
        None => {
            w.remove(&std::iter::once((job_id.to_string(), attempt_no)).collect())?;
            rows - u64::from(held)
        }
    };
    counter.insert(BLOCK_ROWS, w.finish(false)?)?;
    counter.insert(ATTEMPT_ROWS, rows)?;
    Ok(())
}

/// Moves every attempt row out of the blocks into the `attempt` table, where format version 5
/// kept them all, and drops the row counters: with `meta["format_version"]` set to 5 after it,
/// the file is what version 5 wrote (for tests of the migrations, or to hand a file back to an
/// older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not unpack.
pub fn write_as_format_5(txn: &WriteTransaction) -> Result<()> {
    {
        let mut delta = txn.open_table(ATTEMPT)?;
        let blocks = txn.open_table(ATTEMPT_BLOCK)?;
        for row in blocks.iter()? {
            let (k, v) = row?;
            let block = Block::decode(v.value()).map_err(|r| corrupt(k.value(), r))?;
            for i in 0..block.len() {
                let (job, no) = block.key(i);
                // A delta row shadows the block's.
                if delta.get((job, no))?.is_none() {
                    delta.insert((job, no), block.value(i))?;
                }
            }
        }
        let mut counter = txn.open_table(COUNTER)?;
        counter.remove(BLOCK_ROWS)?;
        counter.remove(ATTEMPT_ROWS)?;
    }
    txn.delete_table(ATTEMPT_BLOCK)?;
    Ok(())
}

/// Rewrites every attempt block in format version 7's layout (framed, no key filter), rows
/// unchanged ([`crate::storage::attempt_block::to_format_7`]): with `meta["format_version"]` set to 7
/// after it, the file is what version 7 wrote (for tests of the migrations, or to hand a file back
/// to an older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not
/// unpack.
pub fn write_as_format_7(txn: &WriteTransaction) -> Result<()> {
    rewrite_blocks(txn, crate::storage::attempt_block::to_format_7)
}

/// Rewrites every attempt block in format version 6's one-frame layout, rows unchanged
/// ([`crate::storage::attempt_block::to_format_6`]): with `meta["format_version"]` set to 6 after it, the
/// file is what version 6 wrote (for tests of the migrations, or to hand a file back to an older
/// laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not unpack.
pub fn write_as_format_6(txn: &WriteTransaction) -> Result<()> {
    rewrite_blocks(txn, crate::storage::attempt_block::to_format_6)
}

/// Stores every attempt block again as `convert` gives it, under the same key.
fn rewrite_blocks(txn: &WriteTransaction, convert: fn(&[u8]) -> std::result::Result<Vec<u8>, String>) -> Result<()> {
    let mut blocks = txn.open_table(ATTEMPT_BLOCK)?;
    let mut old = Vec::new();
    for row in blocks.iter()? {
        let (k, v) = row?;
        let (job, no) = k.value();
        let stored = convert(v.value()).map_err(|r| corrupt((job, no), r))?;
        old.push(((job.to_string(), no), stored));
    }
    for ((job, no), stored) in old {
        blocks.insert((job.as_str(), no), stored.as_slice())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use redb::ReadableDatabase;

    use super::*;
    use crate::drill::SplitMix64;

    type Model = BTreeMap<(String, u32), Vec<u8>>;

    /// Every row as the store reads it, three ways that must agree: row by row, with whole
    /// blocks unpacked, and one job at a time.
    fn read_back(db: &redb::Database, model: &Model) {
        let txn = db.begin_read().unwrap();
        let rows = read_rows(&txn).unwrap();
        let mut by_row = Model::new();
        rows.walk(false, |p| -> Result<()> {
            let Piece::Row { key, value } = p else {
                panic!("a packed block when none was asked for")
            };
            by_row.insert((key.0.to_string(), key.1), value.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(&by_row, model);
        let mut values = Vec::new();
        rows.walk(true, |p| -> Result<()> {
            match p {
                Piece::Packed { rows, stored } => {
                    let (mut bytes, mut ends) = (Vec::new(), Vec::new());
                    Block::values_onto(stored, &mut bytes, &mut ends).unwrap();
                    assert_eq!(ends.len(), rows);
                    let mut start = 0;
                    for end in ends {
                        values.push(bytes[start..end].to_vec());
                        start = end;
                    }
                }
                Piece::Row { value, .. } => values.push(value.to_vec()),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(values, model.values().cloned().collect::<Vec<_>>());
        let jobs: BTreeSet<&str> = model.keys().map(|(j, _)| j.as_str()).collect();
        for job in jobs.into_iter().step_by(11) {
            let expected: Vec<Vec<u8>> = model
                .range((job.to_string(), 0)..=(job.to_string(), u32::MAX))
                .map(|(_, v)| v.clone())
                .collect();
            assert_eq!(rows.job(job).unwrap(), expected, "job {job}");
        }
        for ((job, no), v) in model.iter().step_by(7) {
            assert_eq!(rows.get(job, *no).unwrap().as_ref(), Some(v));
        }
        assert_eq!(rows.get("no-such-job", 1).unwrap(), None);
    }

    /// Appends, writes inside the blocks' range, completions, removals and folds, checked after
    /// every commit against a map of what should be held.
    #[test]
    fn the_store_holds_what_a_map_would_through_appends_folds_and_removals() {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let mut rng = SplitMix64::new(6);
        let mut model = Model::new();
        let mut block_rows = 0;
        let mut next_job = 0u32;
        for round in 0..30 {
            let txn = db.begin_write().unwrap();
            {
                let mut w = AttemptWriter::open(&txn, block_rows).unwrap();
                for _ in 0..(rng.next_u64() % 400) {
                    // A third of the bytes random, so that blocks fill and split as real rows do.
                    let len = rng.next_u64() % 300 + 20;
                    let value: Vec<u8> = (0..len)
                        .map(|i| {
                            if i % 3 == 0 {
                                rng.next_u64() as u8
                            } else {
                                (i % 7 + round) as u8
                            }
                        })
                        .collect();
                    let kind = rng.next_u64() % 10;
                    let key = if kind < 6 || model.is_empty() {
                        // Above every key held: jobs numbered in order.
                        next_job += 1;
                        (format!("job-{next_job:05}"), 1)
                    } else {
                        // A new attempt of a job held, or a row held rewritten.
                        let job = format!("job-{:05}", rng.next_u64() % u64::from(next_job) + 1);
                        (job, (rng.next_u64() % 3 + 1) as u32)
                    };
                    let above = w
                        .last_key()
                        .unwrap()
                        .is_none_or(|l| (key.0.as_str(), key.1) > (l.0.as_str(), l.1));
                    assert_eq!(w.get(&key.0, key.1).unwrap().as_ref(), model.get(&key));
                    if above {
                        w.append(&key.0, key.1, &value).unwrap();
                    } else {
                        w.put(&key.0, key.1, &value).unwrap();
                    }
                    model.insert(key, value);
                }
                if round % 5 == 4 {
                    let gone: BTreeSet<(String, u32)> = model
                        .keys()
                        .filter(|_| rng.next_u64().is_multiple_of(4))
                        .cloned()
                        .collect();
                    w.remove(&gone).unwrap();
                    model.retain(|k, _| !gone.contains(k));
                }
                block_rows = w.finish(round % 7 == 6).unwrap();
            }
            txn.commit().unwrap();
            read_back(&db, &model);
            let txn = db.begin_read().unwrap();
            let (blocks, delta) = (txn.open_table(ATTEMPT_BLOCK).unwrap(), txn.open_table(ATTEMPT).unwrap());
            let delta = delta.len().unwrap();
            let mut stored = 0;
            for b in blocks.iter().unwrap() {
                stored += block_rows_of(b.unwrap().1.value());
            }
            assert_eq!(stored, block_rows, "round {round}: the counter is the blocks' rows");
            assert!(
                delta * 4 < block_rows.max(1),
                "round {round}: the delta ({delta}) stays a quarter of the blocks ({block_rows})"
            );
        }
        assert!(model.len() > 1500, "{}", model.len());
        let txn = db.begin_read().unwrap();
        let blocks = txn.open_table(ATTEMPT_BLOCK).unwrap();
        assert!(blocks.len().unwrap() > 5, "{} blocks", blocks.len().unwrap());
        for b in blocks.iter().unwrap() {
            assert!(b.unwrap().1.value().len() <= STORED_MAX);
        }
    }

    fn block_rows_of(stored: &[u8]) -> u64 {
        block_rows(stored).unwrap() as u64
    }
}

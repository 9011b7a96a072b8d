//! The idem_key index in sorted runs (format version 4): every attempt's (idem_key, job_id,
//! attempt_no), so that the attempts carrying one idempotency key are found without a scan
//! ([`crate::Ledger::attempts_by_idem_key`]).
//!
//! Format version 3 kept this index as a redb B-tree with one insert per attempt, about a quarter
//! of ingest's time; with random ids each of those inserts dirtied its own 4 KiB page at every
//! commit. Here a write transaction stores the keys of the attempts it inserted as one *run*:
//! sorted, prefix-compressed, cut into blocks of about [`BLOCK_BYTES`] ([`IDEM_RUN`], keyed by
//! (run, block)), with a header that holds each block's first idem_key ([`IDEM_RUN_DIR`]). Runs
//! are merged by size tier: whenever the four newest runs are of one tier (tier = ⌊log₄ entries⌋),
//! or the fourth newest is of a lower tier than the newest, they become one run, unless the
//! fourth newest holds 4⁹ = 262,144 entries or more ([`CAPPED_TIER`]). An entry is then rewritten
//! about once per tier it climbs, and at most three times from a 10,000-attempt commit (40 k,
//! 160 k, 640 k), so a ledger's merge work grows linearly with its attempts: without the cap an
//! entry was rewritten five times on its way into a 10 M-attempt ledger against three into a 1 M
//! one. The price is in lookups: a ledger of `n` attempts holds at most about 3·log₄ n runs below
//! the cap and at most n / 262,144 at it (the drill's 10 M attempts, in 10,000-attempt commits,
//! leave 15 runs of 640 k and five smaller), and a lookup reads every run's header and the blocks
//! whose fences may hold the key.
//!
//! Runs whose key ranges do not overlap, as a router's time-ordered ids give (each commit's keys
//! above the commit's before), are merged by copying their blocks unchanged into the new run
//! (`IdemIndex::concatenate`, a trivial move); only overlapping runs (random ids) are decoded
//! and encoded entry by entry. With the drill's sequential ids this took 10 M attempts' ingest from
//! 12.7–14.2 s to 10.4–10.8 s.
//!
//! Keys compare as bytes, in the order of the tuple (idem_key, job_id, attempt_no), the order the
//! version 3 B-tree had. An entry is in the index exactly while its attempt row is in `attempt`:
//! it is written in the transaction that inserts the row and removed in the retention sweep's
//! transaction that removes it.

use redb::{ReadableTable, ReadableTableMetadata, Table};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::ledger::{decode, encode};
use crate::storage::tables::{ATTEMPT_IDEM, IDEM_RUN, IDEM_RUN_DIR};
use crate::storage::varint;

/// The most bytes a block holds, unless its first entry alone takes more (about 4,000 entries
/// of the drill): a block is closed before an entry that could take it past this. Just under
/// 64 KiB, so that a full block fills one redb page of that size with its key (a block of 64 KiB
/// or more took a page of 128 KiB, half of it unused).
pub const BLOCK_BYTES: usize = 64 * 1024 - 256;

/// The most bytes an entry takes besides its idem_key and job_id: four length varints and the
/// attempt number's (at most 10 bytes each and 5 for a u32).
const ENTRY_OVERHEAD: usize = 4 * 10 + 5;

/// How many runs of one tier are merged into one (and the base of the tier's logarithm).
const FAN_IN: usize = 4;

/// A run's header: how many entries it holds and each block's first idem_key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The run's entries, in all its blocks.
    pub entries: u64,
    /// Block `i`'s first idem_key, for `i` from 0: the fences a lookup searches.
    pub fences: Vec<String>,
}

/// The on-disk header, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RunHeaderRecord {
    /// Format version 4 (the first with runs).
    V1(RunHeader),
}

/// An index entry: (idem_key, job_id, attempt_no).
pub type IdemEntry = (String, String, u32);

/// An index entry as stored bytes, (idem_key, job_id, attempt_no): it compares as the index
/// orders its entries.
type Entry = (Vec<u8>, Vec<u8>, u32);

/// Runs of this tier or above (at least 4⁹ = 262,144 entries) are never merged again, so no merge
/// makes a run of more than 4¹⁰ − 4 = 1,048,572 entries (one commit's own run can be larger) and
/// an entry is rewritten at most three times after its commit (from a 10,000-attempt commit:
/// 40 k, 160 k, 640 k), in a ledger of any size.
const CAPPED_TIER: u32 = 9;

/// A run's tier: ⌊log₄ entries⌋ (0 for an empty run).
fn tier(entries: u64) -> u32 {
    if entries == 0 { 0 } else { entries.ilog2() / 2 }
}

/// Whether the newest [`FAN_IN`] runs are merged, given the oldest of them (`oldest`, entries)
/// and the newest (`newest`): when the oldest is of the newest's tier or lower, and below
/// [`CAPPED_TIER`].
fn merges(oldest: u64, newest: u64) -> bool {
    tier(oldest) <= tier(newest) && tier(oldest) < CAPPED_TIER
}

/// Length of the common prefix of `a` and `b`.
fn shared(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Reads one prefix-compressed field into `prev` (which holds the previous entry's field).
fn get_field(bytes: &[u8], at: &mut usize, prev: &mut Vec<u8>) -> std::result::Result<(), String> {
    let keep = varint::get(bytes, at)? as usize;
    let len = varint::get(bytes, at)? as usize;
    if keep > prev.len() {
        return Err(format!("an entry shares {keep} bytes with a field of {}", prev.len()));
    }
    let Some(suffix) = bytes.get(*at..*at + len) else {
        return Err(format!("a field runs {len} bytes past the block's end"));
    };
    prev.truncate(keep);
    prev.extend_from_slice(suffix);
    *at += len;
    Ok(())
}

/// The entries of one run, decoded into one buffer: `bytes` holds each entry's idem_key then its
/// job_id; `rows` gives (start in `bytes`, idem_key length, job_id length, attempt_no).
#[derive(Default)]
struct Decoded {
    bytes: Vec<u8>,
    rows: Vec<(usize, u16, u16, u32)>,
}

impl Decoded {
    fn len(&self) -> usize {
        self.rows.len()
    }

    /// Entry `i` as (idem_key, job_id, attempt_no) bytes.
    fn get(&self, i: usize) -> (&[u8], &[u8], u32) {
        let (start, k, j, no) = self.rows[i];
        let (k, j) = (usize::from(k), usize::from(j));
        (&self.bytes[start..start + k], &self.bytes[start + k..start + k + j], no)
    }

    /// Appends the entries of one stored block; with `key`, only those whose idem_key equals it.
    fn add_block(&mut self, block: &[u8], key: Option<&[u8]>) -> std::result::Result<(), String> {
        let (mut at, mut idem, mut job) = (0usize, Vec::new(), Vec::new());
        while at < block.len() {
            get_field(block, &mut at, &mut idem)?;
            get_field(block, &mut at, &mut job)?;
            let no = u32::try_from(varint::get(block, &mut at)?).map_err(|_| "an attempt_no over 32 bits")?;
            if key.is_some_and(|k| k != idem.as_slice()) {
                continue;
            }
            let (Ok(k), Ok(j)) = (u16::try_from(idem.len()), u16::try_from(job.len())) else {
                return Err("a key over 65,535 bytes".into());
            };
            self.rows.push((self.bytes.len(), k, j, no));
            self.bytes.extend_from_slice(&idem);
            self.bytes.extend_from_slice(&job);
        }
        Ok(())
    }
}

/// One block being encoded. Each field is stored as the length it shares with the same field of
/// the entry before it in the block, the length of the rest, and the rest; attempt_no as a varint.
/// A block's first entry shares nothing, so each block decodes on its own.
#[derive(Default)]
struct BlockEncoder {
    bytes: Vec<u8>,
    prev_idem: Vec<u8>,
    prev_job: Vec<u8>,
}

impl BlockEncoder {
    fn push(&mut self, idem: &[u8], job: &[u8], no: u32) {
        for (field, prev) in [(idem, &mut self.prev_idem), (job, &mut self.prev_job)] {
            let keep = shared(prev, field);
            varint::put(&mut self.bytes, keep as u64);
            varint::put(&mut self.bytes, (field.len() - keep) as u64);
            self.bytes.extend_from_slice(&field[keep..]);
            prev.truncate(keep);
            prev.extend_from_slice(&field[keep..]);
        }
        varint::put(&mut self.bytes, u64::from(no));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.prev_idem.clear();
        self.prev_job.clear();
    }
}

/// Writes one run's blocks in key order, then its header.
struct RunWriter {
    run: u64,
    block: BlockEncoder,
    block_no: u32,
    fences: Vec<String>,
    entries: u64,
}

impl RunWriter {
    fn new(run: u64) -> Self {
        RunWriter {
            run,
            block: BlockEncoder::default(),
            block_no: 0,
            fences: Vec::new(),
            entries: 0,
        }
    }

    /// Appends one entry; entries must come in key order ([`BlockEncoder`] gives the encoding).
    fn push(&mut self, blocks: &mut Table<(u64, u32), &[u8]>, idem: &[u8], job: &[u8], no: u32) -> Result<()> {
        if !self.block.bytes.is_empty()
            && self.block.bytes.len() + idem.len() + job.len() + ENTRY_OVERHEAD > BLOCK_BYTES
        {
            self.flush(blocks)?;
        }
        if self.block.bytes.is_empty() {
            self.fences.push(String::from_utf8_lossy(idem).into_owned());
        }
        self.block.push(idem, job, no);
        self.entries += 1;
        Ok(())
    }

    fn flush(&mut self, blocks: &mut Table<(u64, u32), &[u8]>) -> Result<()> {
        if !self.block.bytes.is_empty() {
            blocks.insert((self.run, self.block_no), self.block.bytes.as_slice())?;
            self.block.clear();
            self.block_no += 1;
        }
        Ok(())
    }

    /// Stores the last block and the header (nothing for a run without entries); returns the
    /// entry count.
    fn finish(mut self, blocks: &mut Table<(u64, u32), &[u8]>, dir: &mut Table<u64, &[u8]>) -> Result<u64> {
        self.flush(blocks)?;
        if self.entries > 0 {
            let header = RunHeaderRecord::V1(RunHeader {
                entries: self.entries,
                fences: self.fences,
            });
            dir.insert(self.run, encode(&header).as_slice())?;
        }
        Ok(self.entries)
    }
}

/// A run read one block at a time, for a merge.
struct Cursor {
    run: u64,
    next_block: u32,
    block: Decoded,
    at: usize,
}

impl Cursor {
    /// Opens run `run` at its first entry.
    fn open(blocks: &Table<(u64, u32), &[u8]>, run: u64) -> Result<Self> {
        let mut c = Cursor {
            run,
            next_block: 0,
            block: Decoded::default(),
            at: 0,
        };
        c.load(blocks)?;
        Ok(c)
    }

    /// The entry the cursor is at, or `None` past the run's end.
    fn head(&self) -> Option<(&[u8], &[u8], u32)> {
        (self.at < self.block.len()).then(|| self.block.get(self.at))
    }

    fn advance(&mut self, blocks: &Table<(u64, u32), &[u8]>) -> Result<()> {
        self.at += 1;
        if self.at >= self.block.len() {
            self.load(blocks)?;
        }
        Ok(())
    }

    /// Loads the next block that holds an entry (none left: the cursor is at the end).
    fn load(&mut self, blocks: &Table<(u64, u32), &[u8]>) -> Result<()> {
        self.block.bytes.clear();
        self.block.rows.clear();
        self.at = 0;
        while self.block.len() == 0 {
            let Some(v) = blocks.get((self.run, self.next_block))? else {
                return Ok(());
            };
            let n = self.next_block;
            self.block
                .add_block(v.value(), None)
                .map_err(|reason| corrupt(self.run, n, reason))?;
            self.next_block += 1;
        }
        Ok(())
    }
}

/// The index's tables open in one write transaction.
pub(crate) struct IdemIndex<'txn> {
    blocks: Table<'txn, (u64, u32), &'static [u8]>,
    dir: Table<'txn, u64, &'static [u8]>,
}

fn header(run: u64, bytes: &[u8]) -> Result<RunHeader> {
    match decode::<RunHeaderRecord>("idem_run_dir", run, bytes)? {
        RunHeaderRecord::V1(h) => Ok(h),
    }
}

fn corrupt(run: u64, block: u32, reason: String) -> Error {
    Error::Corrupt {
        table: "idem_run",
        key: format!("({run}, {block})"),
        reason,
    }
}

/// Every run's (number, header), oldest first.
fn headers(dir: &impl ReadableTable<u64, &'static [u8]>) -> Result<Vec<(u64, RunHeader)>> {
    let mut out = Vec::new();
    for row in dir.iter()? {
        let (k, v) = row?;
        out.push((k.value(), header(k.value(), v.value())?));
    }
    Ok(out)
}

/// Decodes run `run` (`blocks` of it), keeping only `key`'s entries when given.
fn read_run(
    blocks: &impl ReadableTable<(u64, u32), &'static [u8]>,
    run: u64,
    range: std::ops::Range<u32>,
    key: Option<&[u8]>,
    into: &mut Decoded,
) -> Result<()> {
    for row in blocks.range((run, range.start)..(run, range.end))? {
        let (k, v) = row?;
        let (_, block) = k.value();
        into.add_block(v.value(), key)
            .map_err(|reason| corrupt(run, block, reason))?;
    }
    Ok(())
}

/// The (job_id, attempt_no) of every entry for `idem_key`, in (job_id, attempt_no) order.
///
/// Errors: [`Error::Corrupt`] for a block or header that does not decode; storage errors.
pub(crate) fn lookup(
    blocks: &impl ReadableTable<(u64, u32), &'static [u8]>,
    dir: &impl ReadableTable<u64, &'static [u8]>,
    idem_key: &str,
) -> Result<Vec<(String, u32)>> {
    let mut found = Decoded::default();
    for (run, h) in headers(dir)? {
        // Blocks lo..hi may hold the key: a block whose fence is ≤ the key and whose successor's
        // fence is ≥ it (a key's entries can run on into the next block).
        let hi = h.fences.partition_point(|f| f.as_str() <= idem_key);
        if hi == 0 {
            continue;
        }
        let lo = h.fences.partition_point(|f| f.as_str() < idem_key).saturating_sub(1);
        read_run(blocks, run, lo as u32..hi as u32, Some(idem_key.as_bytes()), &mut found)?;
    }
    let mut out: Vec<(String, u32)> = (0..found.len())
        .map(|i| {
            let (_, job, no) = found.get(i);
            (String::from_utf8_lossy(job).into_owned(), no)
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Every entry of the index, in key order, each once. Errors as [`lookup`].
pub(crate) fn entries(
    blocks: &impl ReadableTable<(u64, u32), &'static [u8]>,
    dir: &impl ReadableTable<u64, &'static [u8]>,
) -> Result<Vec<IdemEntry>> {
    let mut out = Vec::new();
    for (run, _) in headers(dir)? {
        let mut d = Decoded::default();
        read_run(blocks, run, 0..u32::MAX, None, &mut d)?;
        out.extend((0..d.len()).map(|i| {
            let (k, j, no) = d.get(i);
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(j).into_owned(),
                no,
            )
        }));
    }
    out.sort();
    out.dedup();
    Ok(out)
}

impl<'txn> IdemIndex<'txn> {
    /// Opens (creating) the index's tables in `txn`.
    pub(crate) fn open(txn: &'txn redb::WriteTransaction) -> Result<Self> {
        Ok(IdemIndex {
            blocks: txn.open_table(IDEM_RUN)?,
            dir: txn.open_table(IDEM_RUN_DIR)?,
        })
    }

    /// The number for a new run: one past the newest run's, or 1 (a higher number is a newer
    /// run).
    fn next_run(&self) -> Result<u64> {
        Ok(self.dir.last()?.map_or(1, |(k, _)| k.value() + 1))
    }

    /// Stores `keys` (in any order; borrowed (idem_key, job_id, attempt_no)) as a new run, then
    /// merges runs while the tier rule asks (see the module docs). Nothing for no keys.
    pub(crate) fn append(&mut self, keys: &mut [(&str, &str, u32)]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        keys.sort_unstable();
        let run = self.next_run()?;
        let mut w = RunWriter::new(run);
        let mut last: Option<(&str, &str, u32)> = None;
        for &k in keys.iter() {
            if last == Some(k) {
                continue;
            }
            w.push(&mut self.blocks, k.0.as_bytes(), k.1.as_bytes(), k.2)?;
            last = Some(k);
        }
        w.finish(&mut self.blocks, &mut self.dir)?;
        self.merge_tail()
    }

    /// Merges the newest [`FAN_IN`] runs into one while [`merges`] says so.
    fn merge_tail(&mut self) -> Result<()> {
        loop {
            let runs: Vec<(u64, RunHeader)> = {
                let mut out = Vec::new();
                for row in self.dir.iter()?.rev().take(FAN_IN) {
                    let (k, v) = row?;
                    out.push((k.value(), header(k.value(), v.value())?));
                }
                out.reverse();
                out
            };
            if runs.len() < FAN_IN || !merges(runs[0].1.entries, runs[FAN_IN - 1].1.entries) {
                return Ok(());
            }
            self.merge(&runs)?;
        }
    }

    /// Replaces the runs `runs` ((number, header), oldest first) by one run of all their entries,
    /// numbered after the newest run: by [`IdemIndex::concatenate`] when their key ranges do not
    /// overlap, else entry by entry, the inputs read a block at a time.
    fn merge(&mut self, runs: &[(u64, RunHeader)]) -> Result<()> {
        if self.concatenate(runs)? {
            return Ok(());
        }
        let mut inputs = Vec::with_capacity(runs.len());
        for &(run, _) in runs {
            inputs.push(Cursor::open(&self.blocks, run)?);
        }
        let next = self.next_run()?;
        let mut w = RunWriter::new(next);
        let (mut last_idem, mut last_job, mut last_no): (Vec<u8>, Vec<u8>, Option<u32>) = Default::default();
        loop {
            let mut best: Option<usize> = None;
            for (i, c) in inputs.iter().enumerate() {
                let Some(h) = c.head() else { continue };
                if best.is_none_or(|b| Some(h) < inputs[b].head()) {
                    best = Some(i);
                }
            }
            let Some(b) = best else { break };
            let (k, j, no) = inputs[b].head().expect("a best input has a head");
            if last_no != Some(no) || last_idem != k || last_job != j {
                w.push(&mut self.blocks, k, j, no)?;
                last_idem.clear();
                last_idem.extend_from_slice(k);
                last_job.clear();
                last_job.extend_from_slice(j);
                last_no = Some(no);
            }
            inputs[b].advance(&self.blocks)?;
        }
        w.finish(&mut self.blocks, &mut self.dir)?;
        for &(run, _) in runs {
            self.remove_run(run)?;
        }
        Ok(())
    }

    /// The first and the last entry of run `run`, whose header lists `blocks` blocks (`None` when
    /// no block holds an entry): two blocks decoded, the first and the last that hold entries.
    fn bounds(&self, run: u64, blocks: u32) -> Result<Option<(Entry, Entry)>> {
        let mut d = Decoded::default();
        let mut edge = |order: &mut dyn Iterator<Item = u32>, last: bool| -> Result<Option<Entry>> {
            for b in order {
                d.bytes.clear();
                d.rows.clear();
                if let Some(v) = self.blocks.get((run, b))? {
                    d.add_block(v.value(), None).map_err(|reason| corrupt(run, b, reason))?;
                }
                if d.len() > 0 {
                    let (k, j, no) = d.get(if last { d.len() - 1 } else { 0 });
                    return Ok(Some((k.to_vec(), j.to_vec(), no)));
                }
            }
            Ok(None)
        };
        let Some(first) = edge(&mut (0..blocks), false)? else {
            return Ok(None);
        };
        let last = edge(&mut (0..blocks).rev(), true)?.expect("a run with a first entry has a last");
        Ok(Some((first, last)))
    }

    /// Merges the runs `runs` ((number, header)) by copying their blocks, unchanged, into one new
    /// run in key order, when no two of them overlap: the merge of time-ordered ids (a router's
    /// job counter, ULIDs, UUIDv7), each commit's keys above the commit's before, costs a block
    /// copy instead of decoding and encoding every entry (RocksDB calls this a trivial move). Each
    /// block decodes on its own, so a copy is a valid block of the new run; its fence is its first
    /// idem_key, read again (after a retention sweep, an old fence may sit below the block's
    /// keys). Returns `false`, having written nothing, when two runs overlap or share an entry.
    ///
    /// The cost on overlapping runs (random ids) is one comparison of fences, which rules out
    /// almost every such merge, and otherwise two block decodes a run.
    fn concatenate(&mut self, runs: &[(u64, RunHeader)]) -> Result<bool> {
        // Fences are lower bounds of their blocks' idem_keys, exact until a sweep removes entries:
        // a run whose last fence is above the next run's first overlaps it (unless a sweep removed
        // the entries that did), and is left to the general merge without a block decoded.
        let mut by_fence: Vec<&(u64, RunHeader)> = runs.iter().filter(|(_, h)| !h.fences.is_empty()).collect();
        by_fence.sort_by(|a, b| a.1.fences[0].cmp(&b.1.fences[0]));
        if by_fence
            .windows(2)
            .any(|w| w[0].1.fences.last() > w[1].1.fences.first())
        {
            return Ok(false);
        }
        let mut spans = Vec::with_capacity(runs.len());
        for (run, h) in runs {
            if let Some((first, last)) = self.bounds(*run, h.fences.len() as u32)? {
                spans.push((first, last, *run, h));
            }
        }
        spans.sort_by(|a, b| a.0.cmp(&b.0));
        if spans.windows(2).any(|w| w[0].1 >= w[1].0) {
            return Ok(false);
        }
        let next = self.next_run()?;
        let (mut fences, mut entries, mut block_no) = (Vec::new(), 0u64, 0u32);
        let mut bytes = Vec::new();
        for (_, _, run, h) in &spans {
            for b in 0..h.fences.len() as u32 {
                bytes.clear();
                match self.blocks.get((*run, b))? {
                    Some(v) => bytes.extend_from_slice(v.value()),
                    None => continue,
                }
                if bytes.is_empty() {
                    continue;
                }
                let (mut at, mut idem) = (0, Vec::new());
                get_field(&bytes, &mut at, &mut idem).map_err(|reason| corrupt(*run, b, reason))?;
                fences.push(String::from_utf8_lossy(&idem).into_owned());
                self.blocks.insert((next, block_no), bytes.as_slice())?;
                block_no += 1;
            }
            entries += h.entries;
        }
        if entries > 0 {
            let header = RunHeaderRecord::V1(RunHeader { entries, fences });
            self.dir.insert(next, encode(&header).as_slice())?;
        }
        for &(run, _) in runs {
            self.remove_run(run)?;
        }
        Ok(true)
    }

    /// Deletes run `run`'s blocks and header.
    fn remove_run(&mut self, run: u64) -> Result<()> {
        self.blocks.retain_in((run, 0)..=(run, u32::MAX), |_, _| false)?;
        self.dir.remove(run)?;
        Ok(())
    }

    /// Removes every entry for which `gone(job_id, attempt_no)` is true (retention's removal).
    /// Each block that loses entries is stored again under its own key with the entries it keeps
    /// (its fence stays a lower bound of its keys, which is all a lookup needs), and the run's
    /// header gets its new count; a run left with no entry is deleted.
    pub(crate) fn remove(&mut self, gone: impl Fn(&str, u32) -> bool) -> Result<()> {
        let mut d = Decoded::default();
        let mut out = BlockEncoder::default();
        for (run, mut h) in headers(&self.dir)? {
            let mut lost = 0u64;
            for block_no in 0..h.fences.len() as u32 {
                d.bytes.clear();
                d.rows.clear();
                match self.blocks.get((run, block_no))? {
                    Some(v) => d
                        .add_block(v.value(), None)
                        .map_err(|reason| corrupt(run, block_no, reason))?,
                    None => continue,
                }
                out.clear();
                let mut lost_here = 0;
                for i in 0..d.len() {
                    let (k, j, no) = d.get(i);
                    if std::str::from_utf8(j).is_ok_and(|j| gone(j, no)) {
                        lost_here += 1;
                    } else {
                        out.push(k, j, no);
                    }
                }
                if lost_here > 0 {
                    self.blocks.insert((run, block_no), out.bytes.as_slice())?;
                    lost += lost_here;
                }
            }
            if lost == 0 {
                continue;
            }
            h.entries -= lost.min(h.entries);
            if h.entries == 0 {
                self.remove_run(run)?;
            } else {
                self.dir.insert(run, encode(&RunHeaderRecord::V1(h)).as_slice())?;
            }
        }
        Ok(())
    }
}

/// Moves a format-version-3 ledger to version 4 inside `txn`: the idem_key B-tree
/// ([`ATTEMPT_IDEM`], already in key order) becomes one run, and the table is deleted.
pub(crate) fn migrate_v3(txn: &redb::WriteTransaction, progress: &dyn crate::progress::Progress) -> Result<()> {
    {
        let old = txn.open_table(ATTEMPT_IDEM)?;
        let mut count = crate::progress::RowCounter::stage(progress, "idem_key index", Some(old.len()?));
        let mut index = IdemIndex::open(txn)?;
        let run = index.next_run()?;
        let mut w = RunWriter::new(run);
        for row in old.iter()? {
            let (k, _) = row?;
            let (idem_key, job_id, attempt_no) = k.value();
            w.push(&mut index.blocks, idem_key.as_bytes(), job_id.as_bytes(), attempt_no)?;
            count.add(1);
        }
        count.finish();
        w.finish(&mut index.blocks, &mut index.dir)?;
    }
    txn.delete_table(ATTEMPT_IDEM)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::ReadableDatabase;
    use std::collections::BTreeSet;

    #[test]
    fn tiers_are_floor_log4() {
        assert_eq!([0, 1, 3, 4, 15, 16, 10_000, 40_000].map(tier), [0, 0, 0, 1, 1, 2, 6, 7]);
    }

    #[test]
    fn four_runs_merge_from_the_oldest_tier_up_to_the_newest_and_never_from_the_capped_tier() {
        // (oldest of the four, newest, merged?)
        let cases = [
            (10_000, 10_000, true),
            (40_000, 10_000, false),
            (10_000, 40_000, true),
            (160_000, 160_000, true),
            // Four runs of 160 k make one of 640 k (tier 9), the largest a merge makes.
            (262_143, 262_143, true),
            (262_144, 262_144, false),
            (640_000, 640_000, false),
            (640_000, 10_000_000, false),
            (1_048_572, 1_048_572, false),
        ];
        for (oldest, newest, want) in cases {
            assert_eq!(merges(oldest, newest), want, "{oldest} {newest}");
        }
        assert_eq!(tier(4 * 262_143), CAPPED_TIER);
    }

    #[test]
    fn a_block_is_closed_before_an_entry_could_take_it_past_block_bytes() {
        let db = memory_db();
        // 10,000 idem_keys that share little with their neighbours, all with one job_id: three
        // blocks.
        let mut keys: Vec<String> = (0..10_000u64)
            .map(|i| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        keys.sort();
        let txn = db.begin_write().unwrap();
        {
            let mut blocks = txn.open_table(IDEM_RUN).unwrap();
            let mut dir = txn.open_table(IDEM_RUN_DIR).unwrap();
            let mut w = RunWriter::new(1);
            for k in &keys {
                w.push(&mut blocks, k.as_bytes(), b"job-000001", 1).unwrap();
            }
            assert_eq!(w.finish(&mut blocks, &mut dir).unwrap(), 10_000);
            let sizes: Vec<usize> = blocks.iter().unwrap().map(|r| r.unwrap().1.value().len()).collect();
            assert_eq!(sizes.len(), 3);
            // Each full block is within one entry of BLOCK_BYTES and none is past it.
            let longest = 16 + 10 + ENTRY_OVERHEAD;
            for (i, &size) in sizes.iter().enumerate() {
                assert!(size <= BLOCK_BYTES, "block {i}: {size}");
                if i + 1 < sizes.len() {
                    assert!(size + longest > BLOCK_BYTES, "block {i}: {size}");
                }
            }
            for k in keys.iter().step_by(97) {
                assert_eq!(lookup(&blocks, &dir, k).unwrap(), [("job-000001".into(), 1)]);
            }
        }
        txn.commit().unwrap();
    }

    /// A database in memory, for one test.
    fn memory_db() -> redb::Database {
        redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap()
    }

    /// A retention sweep's removal of every entry of job `gone`, in its own commit.
    fn sweep(db: &redb::Database, gone: &str) {
        let txn = db.begin_write().unwrap();
        IdemIndex::open(&txn).unwrap().remove(|j, _| j == gone).unwrap();
        txn.commit().unwrap();
    }

    /// Every stored block of the index, by (run, block), as bytes.
    fn stored_blocks(db: &redb::Database) -> Vec<((u64, u32), Vec<u8>)> {
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(IDEM_RUN).unwrap();
        t.iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value(), v.value().to_vec())
            })
            .collect()
    }

    /// One commit's keys appended to the index, as the ledger's write does.
    fn commit(db: &redb::Database, keys: &[(String, String, u32)]) {
        let txn = db.begin_write().unwrap();
        {
            let mut borrowed: Vec<(&str, &str, u32)> =
                keys.iter().map(|(k, j, n)| (k.as_str(), j.as_str(), *n)).collect();
            IdemIndex::open(&txn).unwrap().append(&mut borrowed).unwrap();
        }
        txn.commit().unwrap();
    }

    /// The whole index and a lookup of every `probe` match `model`.
    fn matches(db: &redb::Database, model: &BTreeSet<(String, String, u32)>, probes: &[String]) {
        let txn = db.begin_read().unwrap();
        let (blocks, dir) = (txn.open_table(IDEM_RUN).unwrap(), txn.open_table(IDEM_RUN_DIR).unwrap());
        assert_eq!(
            entries(&blocks, &dir).unwrap(),
            model.iter().cloned().collect::<Vec<_>>()
        );
        for p in probes {
            let want: Vec<(String, u32)> = model
                .iter()
                .filter(|(k, _, _)| k == p)
                .map(|(_, j, n)| (j.clone(), *n))
                .collect();
            assert_eq!(lookup(&blocks, &dir, p).unwrap(), want, "{p}");
        }
    }

    #[test]
    fn runs_that_do_not_overlap_are_merged_by_copying_their_blocks() {
        let db = memory_db();
        // Four commits of 10,000 time-ordered keys (two blocks each, the last one partial), each
        // commit above the one before: the fourth merges the four.
        let key = |i: u64| (format!("idem-{i:08}"), format!("job-{i:08}"), 1 + (i % 3) as u32);
        let mut model = BTreeSet::new();
        let mut before = Vec::new();
        for c in 0..4u64 {
            let keys: Vec<_> = (c * 10_000..(c + 1) * 10_000).map(key).collect();
            model.extend(keys.iter().cloned());
            if c == 3 {
                before = stored_blocks(&db);
            }
            commit(&db, &keys);
        }
        // The three runs before and the fourth's own blocks, in key order, are the merged run's.
        let after = stored_blocks(&db);
        let per_run = before.len() / 3;
        assert_eq!((before.len(), per_run), (6, 2));
        assert_eq!(after.len(), 4 * per_run);
        assert!(
            after.iter().all(|((run, _), _)| *run == 5),
            "one run, numbered after the fourth"
        );
        let before: Vec<Vec<u8>> = before.into_iter().map(|(_, b)| b).collect();
        let after: Vec<Vec<u8>> = after.into_iter().map(|(_, b)| b).collect();
        assert_eq!(after[..6], before[..]);
        let probes: Vec<String> = (0..40_000).step_by(997).map(|i| key(i).0).collect();
        matches(&db, &model, &probes);
        let txn = db.begin_read().unwrap();
        let h = header(
            5,
            txn.open_table(IDEM_RUN_DIR).unwrap().get(5).unwrap().unwrap().value(),
        )
        .unwrap();
        assert_eq!(h.entries, 40_000);
        assert_eq!(h.fences.len(), 8);
        assert_eq!(h.fences[0], "idem-00000000");
    }

    #[test]
    fn a_copied_block_is_fenced_by_the_first_key_it_still_holds() {
        let db = memory_db();
        let keys = |range: std::ops::RangeInclusive<u32>, job: &str| -> Vec<(String, String, u32)> {
            range.map(|i| (format!("idem-{i:04}"), job.to_string(), 1)).collect()
        };
        // The second run's first key (0005) sits inside the first run's range, so the two overlap;
        // a sweep removes it, and its block keeps the fence "idem-0005".
        commit(&db, &keys(1..=10, "kept"));
        commit(&db, &[keys(5..=5, "gone"), keys(20..=30, "kept")].concat());
        commit(&db, &keys(40..=50, "kept"));
        sweep(&db, "gone");
        // The fourth run makes four of one tier, now without overlap: merged by copying. Had the
        // copy kept the stale fence, a lookup of 0010 would read the second run's block only.
        commit(&db, &keys(60..=70, "kept"));
        let txn = db.begin_read().unwrap();
        let dir = txn.open_table(IDEM_RUN_DIR).unwrap();
        let mut runs = headers(&dir).unwrap();
        assert_eq!(runs.len(), 1);
        let (run, h) = runs.remove(0);
        assert_eq!(run, 5);
        assert_eq!(h.fences, ["idem-0001", "idem-0020", "idem-0040", "idem-0060"]);
        assert_eq!(h.entries, 10 + 11 + 11 + 11);
        let model: BTreeSet<_> = [
            keys(1..=10, "kept"),
            keys(20..=30, "kept"),
            keys(40..=50, "kept"),
            keys(60..=70, "kept"),
        ]
        .concat()
        .into_iter()
        .collect();
        let probes: Vec<String> = (0..=71).map(|i| format!("idem-{i:04}")).collect();
        matches(&db, &model, &probes);
    }

    #[test]
    fn merges_by_copy_and_by_entry_read_as_a_model_through_sweeps_and_keys_in_any_order() {
        let db = memory_db();
        let mut rng = crate::drill::SplitMix64::new(5);
        let mut model: BTreeSet<(String, String, u32)> = BTreeSet::new();
        let mut probes = Vec::new();
        let mut counter = 0u64;
        for round in 0..120u64 {
            let size = 1 + rng.next_u64() % 3_000;
            let keys: Vec<(String, String, u32)> = (0..size)
                .map(|_| {
                    let i = match round % 5 {
                        // Time-ordered: each key above every key before.
                        0..=2 => {
                            counter += 1;
                            counter
                        }
                        // Reaching back below the newest keys, or anywhere.
                        3 => counter.saturating_sub(rng.next_u64() % 5_000),
                        _ => rng.next_u64() % (counter + 1),
                    };
                    (
                        format!("idem-{i:08}"),
                        format!("job-{:04}", rng.next_u64() % 50),
                        1 + (rng.next_u64() % 2) as u32,
                    )
                })
                .collect();
            model.extend(keys.iter().cloned());
            if round % 9 == 0 {
                probes.push(keys[0].0.clone());
            }
            commit(&db, &keys);
            // Now and then a sweep removes the attempts of some jobs: fences no longer exact.
            if round % 13 == 12 {
                let gone = format!("job-{:04}", rng.next_u64() % 50);
                sweep(&db, &gone);
                model.retain(|(_, j, _)| *j != gone);
            }
            if round % 10 == 9 {
                matches(&db, &model, &probes);
            }
        }
        matches(&db, &model, &probes);
    }

    #[test]
    fn a_block_decodes_what_was_pushed() {
        let db = memory_db();
        // A block's bytes, spelled out: each field is (shared, rest length, rest).
        let txn = db.begin_write().unwrap();
        {
            let mut blocks = txn.open_table(IDEM_RUN).unwrap();
            let mut dir = txn.open_table(IDEM_RUN_DIR).unwrap();
            let mut w = RunWriter::new(7);
            let keys = [
                ("k-1", "job-10", 1),
                ("k-1", "job-10", 2),
                ("k-1", "job-9", 1),
                ("k-2", "j", 300),
            ];
            for (k, j, n) in keys {
                w.push(&mut blocks, k.as_bytes(), j.as_bytes(), n).unwrap();
            }
            assert_eq!(w.finish(&mut blocks, &mut dir).unwrap(), 4);
            // "k-1","job-10",1 then "k-1" again: shares 3 of idem, 6 of job, attempt 2.
            let block = blocks.get((7, 0)).unwrap().unwrap().value().to_vec();
            assert_eq!(
                block,
                [
                    &[0, 3][..],
                    b"k-1",
                    &[0, 6],
                    b"job-10",
                    &[1],
                    &[3, 0, 6, 0, 2],
                    &[3, 0, 4, 1],
                    b"9",
                    &[1],
                    &[2, 1],
                    b"2",
                    &[1, 0],
                    &[0xac, 0x02],
                ]
                .concat()
            );
            assert_eq!(
                lookup(&blocks, &dir, "k-1").unwrap(),
                [("job-10".into(), 1), ("job-10".into(), 2), ("job-9".into(), 1)]
            );
            assert_eq!(lookup(&blocks, &dir, "k-2").unwrap(), [("j".into(), 300)]);
            assert!(lookup(&blocks, &dir, "k-").unwrap().is_empty());
            assert!(lookup(&blocks, &dir, "k-3").unwrap().is_empty());
        }
        txn.commit().unwrap();
    }
}

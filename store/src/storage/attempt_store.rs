//! Where the attempt rows live (format version 6 and on): compressed blocks, and sorted runs
//! beside them (version 9).
//!
//! The rows of a router that numbers its jobs in time order sit in zstd-packed blocks of about
//! 1,300 rows in key order ([`crate::storage::attempt_block`], table [`ATTEMPT_BLOCK`], each block
//! under its last key): a write whose key sorts above every key held, and a job's attempts that
//! come together, is appended to the last block. Any other write (a key inside the range held, as
//! random ids such as UUIDs nearly always are; a completion or a re-report of a row held) goes
//! into its transaction's *run*: those rows sorted by key and packed into blocks of the same layout
//! ([`ATTEMPT_RUN`], each under (run, last key)), with a header holding the run's row count and a
//! filter of its keys ([`ATTEMPT_RUN_DIR`]). A newer run's row shadows an older run's and a
//! block's row of the same key; every read merges them in key order.
//!
//! Runs are merged by size tier, as the idem_key index's are ([`crate::storage::idem_index`]):
//! four runs side by side become one when the oldest is of no higher tier (⌊log₄ rows⌋) than the
//! newest and none of them of a higher one ([`due`]), unless the oldest holds 4⁹ = 262,144 rows or
//! more. A row is then rewritten a bounded number of times (about twice from a 40,000-record
//! commit, `ingest`'s) however large the ledger grows. Format 8 put these rows in a delta B-tree
//! instead: a random page written per row, and folds that rewrote nearly every block, again and
//! again as the file grew (most of a random-id ingest's time).
//!
//! A run's blocks are packed on a second thread while the writer's thread sorts or merges the
//! next rows ([`RunPacker`]). During `ingest` the merges themselves are done on a second thread,
//! from committed snapshots ([`merge_committed`]), and put in place by the writer
//! ([`AttemptWriter::install`]; `storage/background_merge.rs`).
//!
//! The write path's "is this (job_id, attempt_no) already held?" for a key inside the range asks
//! each run's filter in memory (read at its first such question, then kept from one commit to the
//! next, [`KeptRuns`]; the key hashed once for all of them) and reads a run's block only when its filter lets the key pass
//! (about one in 1,000 new keys a run: its filter has 16 bits a key, a block's 10, and is blocked,
//! one cache line a key, since format version 10).
//!
//! A row shadowed by a newer run's stays where it is until its run is merged (a block's stays
//! until a retention sweep removes its key): reads never see it.
//!
//! The stored values are byte for byte what the `attempt` table held before (`AttemptRecord::V1`),
//! so the hash chain, `verify` and every reader see the same records.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use twox_hash::XxHash3_64;

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use crate::error::{Error, Result};
use crate::progress::{Progress, RowCounter};
use crate::storage::attempt_block::{
    Block, BlockBuilder, STORED_MAX, block_raw_bytes, block_rows, may_hold, raw_target,
};
use crate::storage::tables::{ATTEMPT, ATTEMPT_BLOCK, ATTEMPT_RUN, ATTEMPT_RUN_DIR, COUNTER};

/// The `counter` row that holds how many rows the blocks hold (shadowed ones included).
pub const BLOCK_ROWS: &str = "attempt_block_rows";
/// The `counter` row that holds how many attempt rows the ledger holds.
pub const ATTEMPT_ROWS: &str = "attempt_rows";

/// How many delta rows a fold reads at a time.
const FOLD_ROUND: usize = 1 << 16;

/// How many runs of one tier are merged into one (and the base of the tier's logarithm).
const FAN_IN: usize = 4;

/// Runs of this tier or above (at least 4⁹ = 262,144 rows) are never merged again: no merge makes
/// a run of more than about 4¹⁰ rows, and a row is rewritten at most about three times after its
/// commit (from a 10,000-record commit: 40 k, 160 k, 640 k), in a ledger of any size.
const CAPPED_TIER: u32 = 9;

/// Runs held past which a writer whose merges are left to a second thread
/// ([`AttemptWriter::merges_in_background`]) merges on its own thread again, as if there were
/// none: while that thread merges a large window, commits go on adding runs, and each run held
/// costs every lookup of a new key a filter probe.
const RUN_LIMIT: usize = 40;

/// An attempt row's key: (job_id, attempt_no).
pub type Key = (&'static str, u32);

/// A run block's key: (run number, job_id, attempt_no of the block's last row).
pub type RunKey = (u64, &'static str, u32);

/// A key owned: (job_id, attempt_no).
type OwnedKey = (String, u32);

/// A row owned: its key and stored value.
type OwnedRow = (OwnedKey, Vec<u8>);

/// A run's tier: ⌊log₄ rows⌋ (0 for an empty run).
fn tier(rows: u64) -> u32 {
    if rows == 0 { 0 } else { rows.ilog2() / 2 }
}

/// Whether a window of [`FAN_IN`] runs next to each other (oldest first) is merged into one: its
/// oldest run is of no higher tier than its newest, below [`CAPPED_TIER`], and no run of it is of
/// a higher tier than its newest. Merged on the writer's thread, the newest window is the only
/// one that can be due, and the last condition always holds; merged on a second thread
/// ([`merge_committed`]), windows further back are due too, and it keeps a large run out of the
/// merges of the small ones around it (which would rewrite it again and again).
fn due(window: &[(u64, u64)]) -> bool {
    let (oldest, newest) = (tier(window[0].1), tier(window[window.len() - 1].1));
    oldest <= newest && oldest < CAPPED_TIER && window.iter().all(|&(_, rows)| tier(rows) <= newest)
}

/// The start of the oldest window of [`FAN_IN`] runs next to each other in `list` (oldest first)
/// that is [`due`], if any. Merged into one run in the place of the window's newest (a run newer
/// than the window still shadows it, an older one is still shadowed by it). Oldest first, so that
/// runs merge in the order they came, as on the writer's thread: taken newest first, the runs of
/// a tier that came before the window would be left behind it, older than a larger run.
fn due_window(list: &[(u64, u64)]) -> Option<usize> {
    (0..=list.len().checked_sub(FAN_IN)?).find(|&i| due(&list[i..i + FAN_IN]))
}

/// The first byte of a run header.
const HEAD_V1: u8 = 1;

/// A run header's bytes: [`HEAD_V1`], the row count (u64, little-endian), then the key filter
/// ([`crate::storage::key_filter`]).
fn encode_head(rows: u64, filter: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + filter.len());
    out.push(HEAD_V1);
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(filter);
    out
}

/// A run header's row count and filter.
fn decode_head(id: u64, bytes: &[u8]) -> Result<(u64, &[u8])> {
    match bytes.split_first() {
        Some((&HEAD_V1, rest)) if rest.len() > 8 => {
            let rows = u64::from_le_bytes(rest[..8].try_into().expect("eight bytes"));
            Ok((rows, &rest[8..]))
        }
        _ => Err(Error::Corrupt {
            table: "attempt_run_dir",
            key: id.to_string(),
            reason: format!("a run header of {} bytes that does not read", bytes.len()),
        }),
    }
}

/// The runs of `dir`, oldest first: (run number, rows).
fn run_list<D: ReadableTable<u64, &'static [u8]>>(dir: &D) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for row in dir.iter()? {
        let (k, v) = row?;
        let id = k.value();
        out.push((id, decode_head(id, v.value())?.0));
    }
    Ok(out)
}

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

/// Fills the `None`s of `out` with the rows of one source (a run, or the blocks) that hold their
/// `keys` (sorted), given `first_block`: the stored block whose last key is the first at or above
/// a key, with that last key. A block serves every following key up to its last one, unpacked
/// once; past a source's last block no later key can be in it.
fn sorted_lookups(
    keys: &[(String, u32)],
    out: &mut [Option<Vec<u8>>],
    mut first_block: impl FnMut((&str, u32)) -> Result<Option<(OwnedKey, Vec<u8>)>>,
) -> Result<()> {
    let mut held: Option<(OwnedKey, Block)> = None;
    for (i, (job, no)) in keys.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let key = (job.as_str(), *no);
        // The held block is the first whose last key is at or above an earlier key: it covers
        // every key up to its own last one.
        if let Some((last, block)) = &held
            && key <= (last.0.as_str(), last.1)
        {
            out[i] = block.find(key).ok().map(|r| block.value(r).to_vec());
            continue;
        }
        let Some((last, stored)) = first_block(key)? else {
            break;
        };
        if !may_hold(&stored, key).map_err(|r| corrupt((last.0.as_str(), last.1), r))? {
            continue;
        }
        let block = Block::decode(&stored).map_err(|r| corrupt((last.0.as_str(), last.1), r))?;
        out[i] = block.find(key).ok().map(|r| block.value(r).to_vec());
        held = Some((last, block));
    }
    Ok(())
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

/// The block of run `id` whose key range holds `key` (the first whose last key is at or above it):
/// its last key and stored bytes; `None` when `key` sorts above the run.
fn run_block<R: ReadableTable<RunKey, &'static [u8]>>(
    runs: &R,
    id: u64,
    key: (&str, u32),
) -> Result<Option<(OwnedKey, Vec<u8>)>> {
    let Some(row) = runs
        .range::<(u64, &str, u32)>((id, key.0, key.1)..(id + 1, "", 0))?
        .next()
    else {
        return Ok(None);
    };
    let (k, v) = row?;
    let (_, job, no) = k.value();
    Ok(Some(((job.to_string(), no), v.value().to_vec())))
}

/// The stored value run `id` holds for `key`. Errors: storage errors, [`Error::Corrupt`].
fn run_get<R: ReadableTable<RunKey, &'static [u8]>>(runs: &R, id: u64, key: (&str, u32)) -> Result<Option<Vec<u8>>> {
    let Some(row) = runs
        .range::<(u64, &str, u32)>((id, key.0, key.1)..(id + 1, "", 0))?
        .next()
    else {
        return Ok(None);
    };
    let (k, v) = row?;
    let stored = v.value();
    let (_, job, no) = k.value();
    if !may_hold(stored, key).map_err(|r| corrupt((id, job, no), r))? {
        return Ok(None);
    }
    Block::row_value(stored, key).map_err(|r| corrupt((id, job, no), r))
}

/// The rows of `block` (whose last key is `last`) that `keys` names, in row order, taking every key
/// up to `last` off `keys`: what a removal rewrites the block without.
fn take_named(
    block: &Block,
    last: &OwnedKey,
    keys: &mut std::iter::Peekable<std::collections::btree_set::Iter<'_, OwnedKey>>,
) -> Vec<usize> {
    let mut gone = Vec::new();
    while let Some((j, n)) = keys.next_if(|(j, n)| (j.as_str(), *n) <= (last.0.as_str(), last.1)) {
        if let Ok(i) = block.find((j.as_str(), *n)) {
            gone.push(i);
        }
    }
    gone
}

/// `block`'s rows but those at `gone` (row indexes in order), pushed into a new builder.
fn without(block: &Block, gone: &[usize]) -> BlockBuilder {
    let mut b = BlockBuilder::default();
    let mut gone = gone.iter().peekable();
    for i in 0..block.len() {
        if gone.next_if_eq(&&i).is_some() {
            continue;
        }
        let (j, n) = block.key(i);
        b.push(j, n, block.value(i));
    }
    b
}

/// Where a merge reads rows from: one run, or the blocks.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Run(u64),
    Blocks,
}

/// The stored block after `after` (the last key of the block before; `None` for the first) in
/// `origin`: its last key and bytes.
fn next_block<B, R>(
    blocks: &B,
    runs: &R,
    origin: Origin,
    after: Option<&OwnedKey>,
) -> Result<Option<(OwnedKey, Vec<u8>)>>
where
    B: ReadableTable<Key, &'static [u8]>,
    R: ReadableTable<RunKey, &'static [u8]>,
{
    match origin {
        Origin::Blocks => {
            let start = match after {
                Some((j, n)) => Bound::Excluded((j.as_str(), *n)),
                None => Bound::Unbounded,
            };
            let Some(row) = blocks.range::<(&str, u32)>((start, Bound::Unbounded))?.next() else {
                return Ok(None);
            };
            let (k, v) = row?;
            let (job, no) = k.value();
            Ok(Some(((job.to_string(), no), v.value().to_vec())))
        }
        Origin::Run(id) => {
            let start = match after {
                Some((j, n)) => Bound::Excluded((id, j.as_str(), *n)),
                None => Bound::Included((id, "", 0)),
            };
            let end = Bound::Excluded((id + 1, "", 0u32));
            let Some(row) = runs.range::<(u64, &str, u32)>((start, end))?.next() else {
                return Ok(None);
            };
            let (k, v) = row?;
            let (_, job, no) = k.value();
            Ok(Some(((job.to_string(), no), v.value().to_vec())))
        }
    }
}

/// The keys of a walk: above `after` (from the least when `None`), up to `upto` (to the greatest
/// when `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// The key the walk starts after.
    pub after: Option<(String, u32)>,
    /// The last key the walk may reach.
    pub upto: Option<(String, u32)>,
}

impl KeyRange {
    /// Whether `key` is at or below the range's end (a walk never meets keys below its start).
    fn holds(&self, key: (&str, u32)) -> bool {
        self.upto.as_ref().is_none_or(|(j, n)| key <= (j.as_str(), *n))
    }
}

/// Rows of the sample run per key range a split asks for ([`AttemptRows::split`]): about a dozen
/// blocks, so that the ranges come out of about one size.
pub const SPLIT_SAMPLE_ROWS: u64 = 16_384;

/// Where one source of a merge stands.
enum At {
    /// Its next block is to be read.
    Fetch,
    /// Its next block, read but not unpacked.
    Pending { last: OwnedKey, stored: Vec<u8> },
    /// Its block unpacked, at row `i`.
    Active { block: Block, i: usize },
    /// No rows left.
    Done,
}

/// A lower bound on the keys a source has left, ordered: `Start` (any key) below every key; a
/// key that may come itself (`0`) below one of which only greater keys may (`1`).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Low<'a> {
    Start,
    At((&'a [u8], u32), u8),
}

struct Source {
    origin: Origin,
    /// The last key of the block before the current one.
    after: Option<OwnedKey>,
    at: At,
    /// [`Source::low`]'s first bytes as one number ([`head_of`]), set when it is put in a
    /// merge's order: most comparisons of the order end there, without comparing job_ids.
    head: u128,
}

/// A number that orders lower bounds as [`Low`] does wherever two numbers differ: `Start` below
/// every key, a key by its job_id's first 15 bytes (zero-padded). Equal numbers say nothing.
fn head_of(low: Option<Low<'_>>) -> u128 {
    match low {
        None | Some(Low::Start) => 0,
        Some(Low::At((job, _), _)) => {
            let mut word = [0u8; 16];
            word[0] = 1;
            for (w, &b) in word[1..].iter_mut().zip(job) {
                *w = b;
            }
            u128::from_be_bytes(word)
        }
    }
}

impl Source {
    fn low(&self) -> Option<Low<'_>> {
        match &self.at {
            At::Done => None,
            At::Fetch | At::Pending { .. } => Some(match &self.after {
                Some((j, n)) => Low::At((j.as_bytes(), *n), 1),
                None => Low::Start,
            }),
            At::Active { block, i } => Some(Low::At(block.key_bytes(*i), 0)),
        }
    }

    /// Moves past the current row of an unpacked block.
    fn advance(&mut self) {
        if let At::Active { block, i } = &mut self.at {
            *i += 1;
            if *i == block.len() {
                let (j, n) = block.key(*i - 1);
                self.after = Some((j.to_string(), n));
                self.at = At::Fetch;
            }
        }
    }
}

/// Rows of several sources (runs, and the blocks) merged in key order, a row of an earlier source
/// shadowing a later source's row of the same key. Each block is read with its own range lookup,
/// so that a caller may write to the tables between steps. The sources with rows left are kept
/// sorted by their lower bound (then by precedence), so a row costs a few comparisons however
/// many runs there are (by the tier rule, a 10 M-attempt ledger of random ids in 10,000-record
/// commits holds about twenty).
struct Merger {
    sources: Vec<Source>,
    /// The rows walked: above `range.after`, up to `range.upto`.
    range: KeyRange,
    /// The sources with rows left, least bound first; empty until the first step.
    order: Vec<usize>,
    started: bool,
}

impl Merger {
    /// The runs `runs` (newest first, as they shadow), then the blocks when `blocks`; the rows in
    /// `range`.
    fn new(runs: impl Iterator<Item = u64>, blocks: bool, range: KeyRange) -> Self {
        let source = |origin| Source {
            origin,
            after: range.after.clone(),
            at: At::Fetch,
            head: 0,
        };
        let mut sources: Vec<Source> = runs.map(|id| source(Origin::Run(id))).collect();
        if blocks {
            sources.push(source(Origin::Blocks));
        }
        Merger {
            sources,
            range,
            order: Vec::new(),
            started: false,
        }
    }

    /// Whether source `a` comes before source `b`: the lesser bound, then the earlier source.
    fn before(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.sources[a], &self.sources[b]);
        match x.head.cmp(&y.head) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => (x.low(), a) < (y.low(), b),
        }
    }

    /// Reads source `i`'s next block if it needs one, and puts it back in the order unless it has
    /// no rows left.
    fn settle<B, R>(&mut self, i: usize, blocks: &B, runs: &R) -> Result<()>
    where
        B: ReadableTable<Key, &'static [u8]>,
        R: ReadableTable<RunKey, &'static [u8]>,
    {
        let s = &mut self.sources[i];
        if matches!(s.at, At::Fetch) {
            s.at = match next_block(blocks, runs, s.origin, s.after.as_ref())? {
                Some((last, stored)) => At::Pending { last, stored },
                None => At::Done,
            };
        }
        if !matches!(self.sources[i].at, At::Done) {
            self.sources[i].head = head_of(self.sources[i].low());
            let at = self.order.partition_point(|&x| self.before(x, i));
            self.order.insert(at, i);
        }
        Ok(())
    }

    /// Hands the next piece to `f`: a whole block still packed when `packed` and no other source
    /// has a key in its range, else one row. Returns false when no row is left.
    fn step<B, R, E: From<Error>>(
        &mut self,
        blocks: &B,
        runs: &R,
        packed: bool,
        f: &mut impl FnMut(Piece<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<bool, E>
    where
        B: ReadableTable<Key, &'static [u8]>,
        R: ReadableTable<RunKey, &'static [u8]>,
    {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                self.settle(i, blocks, runs)?;
            }
        }
        loop {
            let Some(&m) = self.order.first() else {
                return Ok(false);
            };
            if let At::Pending { last, stored } = &self.sources[m].at {
                // The order is sorted: the next source's bound is the least of the others'.
                let alone = self.order.get(1).is_none_or(|&n| {
                    self.sources[n]
                        .low()
                        .is_none_or(|low| Low::At((last.0.as_bytes(), last.1), 0) < low)
                });
                // A source's first block of a walk that starts after a key may hold rows at or below
                // that key: it is still where the walk started.
                let first_of_range = self.range.after.is_some() && self.sources[m].after == self.range.after;
                // A block goes whole only if every row of it is in the range.
                let inside = !first_of_range && self.range.holds((last.0.as_str(), last.1));
                if packed && alone && inside {
                    let rows = block_rows(stored).map_err(|r| corrupt(last, r))?;
                    f(Piece::Packed { rows, stored })?;
                    self.order.remove(0);
                    let s = &mut self.sources[m];
                    if let At::Pending { last, .. } = std::mem::replace(&mut s.at, At::Fetch) {
                        s.after = Some(last);
                    }
                    self.settle(m, blocks, runs)?;
                    return Ok(true);
                }
                let block = Block::decode(stored).map_err(|r| corrupt(last, r))?;
                self.order.remove(0);
                // The first block after the range's start: its rows up to the start are not walked.
                let first = match &self.range.after {
                    Some((j, n)) if first_of_range => match block.find((j.as_str(), *n)) {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    },
                    _ => 0,
                };
                let s = &mut self.sources[m];
                if first == block.len() {
                    if let At::Pending { last, .. } = std::mem::replace(&mut s.at, At::Fetch) {
                        s.after = Some(last);
                    }
                } else {
                    s.at = At::Active { block, i: first };
                }
                self.settle(m, blocks, runs)?;
                continue;
            }
            let At::Active { block, i } = &self.sources[m].at else {
                unreachable!("a source in the order is pending or unpacked")
            };
            let key = block.key(*i);
            // Rows come in key order: past the range's end, none is left to walk.
            if !self.range.holds(key) {
                return Ok(false);
            }
            let bytes = block.key_bytes(*i);
            // Sources holding the same key come right after it in the order, and are shadowed.
            let same = 1 + self.order[1..]
                .iter()
                .take_while(|&&j| self.sources[j].low() == Some(Low::At(bytes, 0)))
                .count();
            f(Piece::Row {
                key,
                value: block.value(*i),
            })?;
            let moved: Vec<usize> = self.order.drain(..same).collect();
            for j in moved {
                self.sources[j].advance();
                self.settle(j, blocks, runs)?;
            }
            return Ok(true);
        }
    }
}

/// The attempt rows of one snapshot, blocks and runs merged: a read transaction's, or a write
/// transaction's as it stands.
pub struct AttemptRows<B, R> {
    blocks: B,
    runs: R,
    /// Each run's number and rows, oldest first.
    run_rows: Vec<(u64, u64)>,
    lookups: std::cell::RefCell<Lookups>,
}

impl<B: ReadableTable<Key, &'static [u8]>, R: ReadableTable<RunKey, &'static [u8]>> AttemptRows<B, R> {
    /// The rows of the `attempt_block` and `attempt_run` tables given, with the runs listed in the
    /// `attempt_run_dir` table given. Errors: storage errors, [`Error::Corrupt`] for a run header
    /// that does not read.
    pub fn new(blocks: B, runs: R, dir: &impl ReadableTable<u64, &'static [u8]>) -> Result<Self> {
        Ok(AttemptRows {
            blocks,
            runs,
            run_rows: run_list(dir)?,
            lookups: Default::default(),
        })
    }

    /// The run numbers, newest first (as they shadow).
    fn newest_first(&self) -> impl Iterator<Item = u64> + '_ {
        self.run_rows.iter().rev().map(|&(id, _)| id)
    }

    /// One row's stored value by its key. Errors: storage errors, [`Error::Corrupt`] for a block
    /// that does not unpack.
    pub fn get(&self, job_id: &str, attempt_no: u32) -> Result<Option<Vec<u8>>> {
        for id in self.newest_first() {
            if let Some(v) = run_get(&self.runs, id, (job_id, attempt_no))? {
                return Ok(Some(v));
            }
        }
        self.lookups.borrow_mut().get(&self.blocks, (job_id, attempt_no))
    }

    /// The stored values of `keys` (in key order, each once), in that order; `None` for a key no
    /// row holds. [`AttemptRows::get`] for many keys at once: each run and the blocks are read in
    /// key order and each block is unpacked at most once, where `get` unpacks a block's keys again
    /// for every key (catching a query's columns up with a second of random-id writes spent most
    /// of its time there). Errors as [`AttemptRows::get`].
    pub fn get_sorted(&self, keys: &[(String, u32)]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        for id in self.newest_first() {
            sorted_lookups(keys, &mut out, |key| run_block(&self.runs, id, key))?;
        }
        sorted_lookups(keys, &mut out, |key| {
            let Some(row) = self.blocks.range(key..)?.next() else {
                return Ok(None);
            };
            let (k, v) = row?;
            let (job, no) = k.value();
            Ok(Some(((job.to_string(), no), v.value().to_vec())))
        })?;
        Ok(out)
    }

    /// One job's stored values in `attempt_no` order. Errors as [`AttemptRows::get`].
    pub fn job(&self, job_id: &str) -> Result<Vec<Vec<u8>>> {
        let mut rows: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for id in self.newest_first() {
            for row in self.runs.range::<(u64, &str, u32)>((id, job_id, 0)..(id + 1, "", 0))? {
                let (k, v) = row?;
                let (_, job, no) = k.value();
                let values = Block::job_values(v.value(), job_id).map_err(|r| corrupt((id, job, no), r))?;
                for (no, value) in values {
                    rows.entry(no).or_insert(value);
                }
                if job != job_id {
                    break;
                }
            }
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

    /// Hands every row to `f` in key order. A block that no other run's row falls in goes whole
    /// and packed ([`Piece::Packed`]) when `packed` is true (the query scan unpacks it on another
    /// thread); every other row goes as a [`Piece::Row`]. Stops at the first error.
    pub fn walk<E: From<Error>>(
        &self,
        packed: bool,
        f: impl FnMut(Piece<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.walk_range(packed, KeyRange::default(), f)
    }

    /// [`AttemptRows::walk`] over the rows of `range` only: a scan reads a ledger's key ranges
    /// side by side ([`AttemptRows::split`]).
    pub fn walk_range<E: From<Error>>(
        &self,
        packed: bool,
        range: KeyRange,
        mut f: impl FnMut(Piece<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut merger = Merger::new(self.newest_first(), true, range);
        while merger.step(&self.blocks, &self.runs, packed, &mut f)? {}
        Ok(())
    }

    /// Up to `parts` key ranges that together hold every row, in key order, each boundary
    /// between two jobs (a job's attempts are in one range). The boundaries are the last keys of
    /// evenly spaced blocks of one run, a sample of the ids: the smallest run of at least
    /// [`SPLIT_SAMPLE_ROWS`] rows a range (else the largest run), so that finding them reads a
    /// few hundred blocks at most. With random ids every run spans the whole key range and a
    /// run's keys spread as the ledger's do; then every block of a walk is unpacked and merged by
    /// the thread that walks it, and ranges walked side by side spread that over the cores. A
    /// ledger without runs is one range: its walk hands blocks on whole, with little to do.
    pub fn split(&self, parts: usize) -> Result<Vec<KeyRange>> {
        let whole = vec![KeyRange::default()];
        let want = SPLIT_SAMPLE_ROWS.saturating_mul(parts as u64);
        let sample = self
            .run_rows
            .iter()
            .filter(|&&(_, rows)| rows >= want)
            .min_by_key(|&&(_, rows)| rows)
            .or_else(|| self.run_rows.iter().max_by_key(|&&(_, rows)| rows));
        let (Some(&(id, _)), true) = (sample, parts > 1) else {
            return Ok(whole);
        };
        let mut lasts: Vec<String> = Vec::new();
        for row in self.runs.range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0))? {
            let (k, _) = row?;
            lasts.push(k.value().1.to_string());
        }
        let mut out = Vec::with_capacity(parts);
        let mut after: Option<OwnedKey> = None;
        for k in 1..parts {
            let job = &lasts[k * lasts.len() / parts];
            // The last block's key is not a boundary: no row of the sample lies above it.
            if job == lasts.last().expect("k * len / parts < len") || after.as_ref().is_some_and(|a| a.0 >= *job) {
                continue;
            }
            let upto = Some((job.clone(), u32::MAX));
            out.push(KeyRange {
                after: after.take(),
                upto: upto.clone(),
            });
            after = upto;
        }
        out.push(KeyRange { after, upto: None });
        Ok(out)
    }
}

/// One job's rows in a transaction's run: (attempt_no, stored value).
type JobRows = Vec<(u32, Vec<u8>)>;

/// The rows a transaction writes to its run, until its finish: hashed by job_id for the lookups
/// (a borrowed key allocates nothing), sorted once at the finish. A B-tree kept in order at every
/// write, and taken apart node by node at the finish, was a seventh of a random-id ingest's
/// writer thread.
#[derive(Default)]
struct Pending {
    /// Each job's rows: (attempt_no, stored value), in the order first written.
    jobs: std::collections::HashMap<String, JobRows>,
    /// The greatest key held.
    last: Option<(String, u32)>,
}

impl Pending {
    fn get(&self, job_id: &str, attempt_no: u32) -> Option<&[u8]> {
        let rows = self.jobs.get(job_id)?;
        rows.iter().find(|(no, _)| *no == attempt_no).map(|(_, v)| v.as_slice())
    }

    /// Writes a row, replacing the row of its key if one is held.
    fn insert(&mut self, job_id: &str, attempt_no: u32, value: &[u8]) {
        if self
            .last
            .as_ref()
            .is_none_or(|(j, n)| (j.as_str(), *n) < (job_id, attempt_no))
        {
            self.last = Some((job_id.to_string(), attempt_no));
        }
        let rows = match self.jobs.get_mut(job_id) {
            Some(rows) => rows,
            None => self.jobs.entry(job_id.to_string()).or_default(),
        };
        match rows.iter_mut().find(|(no, _)| *no == attempt_no) {
            Some(row) => row.1 = value.to_vec(),
            None => rows.push((attempt_no, value.to_vec())),
        }
    }

    /// Takes a row out, if it is held.
    fn remove(&mut self, job_id: &str, attempt_no: u32) {
        let Some(rows) = self.jobs.get_mut(job_id) else { return };
        rows.retain(|(no, _)| *no != attempt_no);
        if rows.is_empty() {
            self.jobs.remove(job_id);
        }
        if self
            .last
            .as_ref()
            .is_some_and(|(j, n)| (j.as_str(), *n) == (job_id, attempt_no))
        {
            self.last = self
                .jobs
                .iter()
                .flat_map(|(j, rows)| rows.iter().map(move |(n, _)| (j, *n)))
                .max()
                .map(|(j, n)| (j.clone(), n));
        }
    }

    /// The greatest key held.
    fn last(&self) -> Option<(&str, u32)> {
        self.last.as_ref().map(|(j, n)| (j.as_str(), *n))
    }

    /// The rows by job_id, then attempt_no.
    fn into_sorted(self) -> Vec<(String, JobRows)> {
        let mut jobs: Vec<(String, JobRows)> = self.jobs.into_iter().collect();
        jobs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (_, rows) in &mut jobs {
            rows.sort_unstable_by_key(|(no, _)| *no);
        }
        jobs
    }
}

/// What an [`AttemptWriter`] hands on to the next transaction's ([`AttemptWriter::finish_keeping`]):
/// the runs held, oldest first, their filters when they were read (newest first), and the
/// unpacked size a block is filled to.
pub struct KeptRuns {
    run_list: Vec<(u64, u64)>,
    filters: Option<Vec<(u64, Arc<[u8]>)>>,
    target: usize,
}

/// The attempt rows inside a write transaction: appends go to the last block, every other write
/// to the transaction's run; [`AttemptWriter::finish`] packs what was appended, stores the run and
/// merges runs by tier. Rows of the transaction read back at once ([`AttemptWriter::get`]).
pub struct AttemptWriter<'txn> {
    blocks: Table<'txn, Key, &'static [u8]>,
    /// Format 8's delta: only a migration's rows, folded into the blocks ([`migrate_v8`]).
    delta: Table<'txn, Key, &'static [u8]>,
    runs: Table<'txn, RunKey, &'static [u8]>,
    dir: Table<'txn, u64, &'static [u8]>,
    /// The runs held, oldest first: (run number, rows).
    run_list: Vec<(u64, u64)>,
    /// Each run's key filter, newest first, read at the first lookup that reaches the runs.
    filters: Option<Vec<(u64, Arc<[u8]>)>>,
    /// Rows of this transaction that do not sort above every key held: its run, at the finish.
    pending: Pending,
    /// Rows appended in this transaction (after the last stored block's rows, when that block
    /// was not full: it is taken out and packed again with them).
    tail: BlockBuilder,
    tail_open: bool,
    lookups: Lookups,
    block_rows: u64,
    /// The unpacked bytes a block is filled to ([`raw_target`]).
    target: usize,
    /// Whether runs are merged on a second thread ([`AttemptWriter::merges_in_background`]).
    background: bool,
}

impl<'txn> AttemptWriter<'txn> {
    /// Opens the attempt tables of `txn`; `block_rows` is the [`BLOCK_ROWS`] counter.
    pub fn open(txn: &'txn WriteTransaction, block_rows: u64) -> Result<Self> {
        Self::open_kept(txn, block_rows, None)
    }

    /// [`AttemptWriter::open`], with what the writer of the transaction before kept
    /// ([`AttemptWriter::finish_keeping`]), when no other write came between them: the run list
    /// and filters are then not read again. Their headers hold the filters, megabytes at 10 M
    /// attempts, which every commit of an ingest read and copied.
    pub fn open_kept(txn: &'txn WriteTransaction, block_rows: u64, kept: Option<KeptRuns>) -> Result<Self> {
        let dir = txn.open_table(ATTEMPT_RUN_DIR)?;
        let (run_list, filters, target) = match kept {
            Some(k) => (k.run_list, k.filters, k.target),
            None => (run_list(&dir)?, None, raw_target(0, 0)),
        };
        Ok(AttemptWriter {
            blocks: txn.open_table(ATTEMPT_BLOCK)?,
            delta: txn.open_table(ATTEMPT)?,
            runs: txn.open_table(ATTEMPT_RUN)?,
            run_list,
            dir,
            filters,
            pending: Pending::default(),
            tail: BlockBuilder::default(),
            tail_open: false,
            lookups: Lookups::default(),
            block_rows,
            target,
            background: false,
        })
    }

    /// Leaves the merges of runs to a second thread (`storage/background_merge.rs`), which
    /// hands them back to [`AttemptWriter::install`]: [`AttemptWriter::finish`] merges only once
    /// more than [`RUN_LIMIT`] runs are held.
    pub fn merges_in_background(&mut self) {
        self.background = true;
    }

    /// Puts `merged` in the place of the runs it was merged from, when they are still held as it
    /// read them; else (a merge on this thread or a retention sweep changed them since) drops
    /// it, the runs staying as they are. Returns whether it was put in. The merged run takes the
    /// number of the window's newest run, so that it shadows and is shadowed as the window was.
    pub fn install(&mut self, merged: MergedRun) -> Result<bool> {
        let n = merged.inputs.len();
        let Some(at) = self.run_list.iter().position(|r| *r == merged.inputs[0].0) else {
            return Ok(false);
        };
        if self
            .run_list
            .get(at..at + n)
            .is_none_or(|held| held.iter().ne(merged.inputs.iter().map(|(r, _)| r)))
        {
            return Ok(false);
        }
        // Same numbers and row counts: the headers tell a run emptied by a sweep and written
        // again under its number apart.
        for &((id, _), head) in &merged.inputs {
            let held = self
                .dir
                .get(id)?
                .ok_or_else(|| corrupt(id, "a run without its header".into()))?;
            if XxHash3_64::oneshot(held.value()) != head {
                return Ok(false);
            }
        }
        let id = merged.inputs[n - 1].0.0;
        for &((old, _), _) in &merged.inputs {
            self.drop_run(old)?;
        }
        for ((job, no), stored) in &merged.blocks {
            self.runs.insert((id, job.as_str(), *no), stored.as_slice())?;
        }
        if merged.rows > 0 {
            self.dir
                .insert(id, encode_head(merged.rows, &merged.filter).as_slice())?;
            self.run_list.insert(at, (id, merged.rows));
            if let Some(filters) = &mut self.filters {
                // Newest first: before the first older run.
                let before = filters.iter().position(|(r, _)| *r < id).unwrap_or(filters.len());
                filters.insert(before, (id, Arc::from(merged.filter)));
            }
        }
        Ok(true)
    }

    /// The greatest key held: a key above it is new for certain, and is appended.
    pub fn last_key(&self) -> Result<Option<(String, u32)>> {
        let owned = |(j, n): (&str, u32)| (j.to_string(), n);
        let mut last = match self.tail.last() {
            Some(k) => Some(owned(k)),
            None => self.blocks.last()?.map(|(k, _)| owned(k.value())),
        };
        let mut consider = |k: (&str, u32)| {
            if last.as_ref().is_none_or(|l| (l.0.as_str(), l.1) < k) {
                last = Some(owned(k));
            }
        };
        if let Some((k, _)) = self.delta.last()? {
            consider(k.value());
        }
        if let Some(k) = self.pending.last() {
            consider(k);
        }
        for &(id, _) in &self.run_list {
            if let Some(row) = self
                .runs
                .range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0))?
                .next_back()
            {
                let (k, _) = row?;
                let (_, j, n) = k.value();
                consider((j, n));
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
        if let Some(v) = self.pending.get(job_id, attempt_no) {
            return Ok(Some(v.to_vec()));
        }
        if self.filters.is_none() && !self.run_list.is_empty() {
            let mut filters = Vec::with_capacity(self.run_list.len());
            for &(id, _) in self.run_list.iter().rev() {
                let head = self
                    .dir
                    .get(id)?
                    .ok_or_else(|| corrupt(id, "a run without its header".into()))?;
                filters.push((id, Arc::from(decode_head(id, head.value())?.1)));
            }
            self.filters = Some(filters);
        }
        if let Some(filters) = &self.filters {
            // Hashed once for every run's filter (twenty of them at 10 M random ids).
            let h = crate::storage::key_filter::hash(job_id, attempt_no);
            for (id, filter) in filters {
                let pass = crate::storage::key_filter::may_hold_hashed(filter, h).map_err(|r| corrupt(id, r))?;
                if pass && let Some(v) = run_get(&self.runs, *id, key)? {
                    return Ok(Some(v));
                }
            }
        }
        // The tail after the runs: it holds the last stored block's rows too, which a run's row of
        // the same key shadows (this transaction's appends sort above every run's keys).
        if let Some(v) = self.tail.get(key) {
            return Ok(Some(v.to_vec()));
        }
        self.lookups.get(&self.blocks, key)
    }

    /// Writes a row to the transaction's run: a new row whose key does not sort above every key
    /// held, or the new value of a row held (it shadows the older row).
    pub fn put(&mut self, job_id: &str, attempt_no: u32, value: &[u8]) -> Result<()> {
        self.pending.insert(job_id, attempt_no, value);
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
        for (job, no) in keys {
            self.pending.remove(job, *no);
        }
        self.remove_from_runs(keys)?;
        // The blocks, each rewritten once without its removed rows.
        let mut keys = keys.iter().peekable();
        while let Some((job, no)) = keys.peek() {
            let Some((last, block)) = block_holding(&self.blocks, (job.as_str(), *no))? else {
                break;
            };
            let gone = take_named(&block, &last, &mut keys);
            if gone.is_empty() {
                continue;
            }
            self.blocks.remove((last.0.as_str(), last.1))?;
            self.block_rows = self.block_rows.saturating_sub(block.len() as u64);
            let mut b = without(&block, &gone);
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

    /// Stores the rows appended, stores the transaction's run and merges runs by tier, and
    /// returns the new [`BLOCK_ROWS`] count.
    pub fn finish(self) -> Result<u64> {
        Ok(self.finish_keeping()?.0)
    }

    /// [`AttemptWriter::finish`], also handing back what the next transaction's writer may
    /// take over ([`AttemptWriter::open_kept`]) once this one commits.
    pub fn finish_keeping(mut self) -> Result<(u64, KeptRuns)> {
        self.store_tail()?;
        self.tail_open = false;
        let pending = std::mem::take(&mut self.pending).into_sorted();
        if !pending.is_empty() {
            let id = self.new_run_id();
            let mut packer = RunPacker::new(id);
            let mut b = BlockBuilder::default();
            let mut hashes = Vec::new();
            for (job, nos) in &pending {
                for (no, value) in nos {
                    hashes.push(crate::storage::key_filter::hash(job, *no));
                    b.push(job, *no, value);
                    if b.raw_bytes() >= self.target {
                        packer.hand(&mut self.runs, &mut self.target, &mut b)?;
                    }
                }
            }
            drop(pending);
            packer.finish(&mut self.runs, &mut self.target, &mut b)?;
            self.add_run(id, hashes.len() as u64, &hashes)?;
            if !self.background || self.run_list.len() > RUN_LIMIT {
                self.merge_tiers()?;
            }
        }
        let kept = KeptRuns {
            run_list: std::mem::take(&mut self.run_list),
            filters: self.filters.take(),
            target: self.target,
        };
        Ok((self.block_rows, kept))
    }

    /// Folds format 8's delta (a migration's rows) into the blocks, counting its rows on
    /// `count`; returns the new [`BLOCK_ROWS`] count.
    fn fold_delta(mut self, count: &mut RowCounter<'_>) -> Result<u64> {
        self.store_tail()?;
        self.tail_open = false;
        if self.delta.len()? > 0 {
            self.fold(count)?;
            self.store_tail()?;
        }
        self.finish()
    }

    /// A run number above every run held.
    fn new_run_id(&self) -> u64 {
        self.run_list.last().map_or(1, |(id, _)| id + 1)
    }

    /// Packs `b`'s rows into blocks of run `id` and stores them.
    fn store_run(&mut self, id: u64, b: &mut BlockBuilder) -> Result<()> {
        let raw = b.raw_bytes();
        store_packed(&mut self.runs, &mut self.target, id, raw, b.finish_within())
    }

    /// Records run `id`, its blocks stored: its header, with the filter of its keys' hashes.
    fn add_run(&mut self, id: u64, rows: u64, hashes: &[u64]) -> Result<()> {
        let filter = crate::storage::key_filter::build_blocked(hashes.iter().copied(), hashes.len());
        self.dir.insert(id, encode_head(rows, &filter).as_slice())?;
        self.run_list.push((id, rows));
        if let Some(filters) = &mut self.filters {
            filters.insert(0, (id, Arc::from(filter)));
        }
        Ok(())
    }

    /// Drops run `id`: its blocks and its header.
    fn drop_run(&mut self, id: u64) -> Result<()> {
        self.runs
            .retain_in::<(u64, &str, u32), _>((id, "", 0)..(id + 1, "", 0), |_, _| false)?;
        self.dir.remove(id)?;
        self.run_list.retain(|(r, _)| *r != id);
        if let Some(filters) = &mut self.filters {
            filters.retain(|(r, _)| *r != id);
        }
        Ok(())
    }

    /// Merges the newest [`FAN_IN`] runs into one while they are [`due`].
    fn merge_tiers(&mut self) -> Result<()> {
        while self.run_list.len() >= FAN_IN {
            let newest = &self.run_list[self.run_list.len() - FAN_IN..];
            if !due(newest) {
                break;
            }
            let ids: Vec<u64> = newest.iter().map(|(id, _)| *id).collect();
            self.merge(&ids)?;
        }
        Ok(())
    }

    /// Merges runs `ids` (oldest first) into one new run, a newer run's row shadowing an older's.
    fn merge(&mut self, ids: &[u64]) -> Result<()> {
        let id = self.new_run_id();
        let mut merger = Merger::new(ids.iter().rev().copied(), false, KeyRange::default());
        let mut packer = RunPacker::new(id);
        let mut b = BlockBuilder::default();
        let mut hashes = Vec::new();
        loop {
            let more = merger.step(&self.blocks, &self.runs, false, &mut |piece| -> Result<()> {
                if let Piece::Row { key, value } = piece {
                    hashes.push(crate::storage::key_filter::hash(key.0, key.1));
                    b.push(key.0, key.1, value);
                }
                Ok(())
            })?;
            if !more {
                break;
            }
            if b.raw_bytes() >= self.target {
                packer.hand(&mut self.runs, &mut self.target, &mut b)?;
            }
        }
        packer.finish(&mut self.runs, &mut self.target, &mut b)?;
        for &old in ids {
            self.drop_run(old)?;
        }
        if !hashes.is_empty() {
            self.add_run(id, hashes.len() as u64, &hashes)?;
        }
        Ok(())
    }

    /// Removes these keys' rows from every run (each block they fall in rewritten once), keeping
    /// each run's header's row count; a run left empty is dropped. Its filter stays: it still
    /// lets every key the run holds pass.
    fn remove_from_runs(&mut self, keys: &std::collections::BTreeSet<(String, u32)>) -> Result<()> {
        for (id, rows) in self.run_list.clone() {
            let mut removed = 0u64;
            let mut keys = keys.iter().peekable();
            while let Some((job, no)) = keys.peek() {
                let Some((last, stored)) = run_block(&self.runs, id, (job.as_str(), *no))? else {
                    break;
                };
                let block = Block::decode(&stored).map_err(|r| corrupt((id, &last), r))?;
                let gone = take_named(&block, &last, &mut keys);
                if gone.is_empty() {
                    continue;
                }
                removed += gone.len() as u64;
                self.runs.remove((id, last.0.as_str(), last.1))?;
                self.store_run(id, &mut without(&block, &gone))?;
            }
            if removed == 0 {
                continue;
            }
            let left = rows.saturating_sub(removed);
            if left == 0 {
                self.drop_run(id)?;
                continue;
            }
            let head = {
                let head = self
                    .dir
                    .get(id)?
                    .ok_or_else(|| corrupt(id, "a run without its header".into()))?;
                encode_head(left, decode_head(id, head.value())?.1)
            };
            self.dir.insert(id, head.as_slice())?;
            for r in &mut self.run_list {
                if r.0 == id {
                    r.1 = left;
                }
            }
        }
        Ok(())
    }
}

/// Stores the blocks `blocks` of run `id`, packed from `raw` unpacked bytes, and sets `target`
/// from their ratio ([`raw_target`]).
fn store_packed(
    runs: &mut Table<'_, RunKey, &'static [u8]>,
    target: &mut usize,
    id: u64,
    raw: usize,
    blocks: Vec<(OwnedKey, Vec<u8>)>,
) -> Result<()> {
    let mut packed = 0;
    for ((job, no), stored) in blocks {
        packed += stored.len();
        runs.insert((id, job.as_str(), no), stored.as_slice())?;
    }
    if packed > 0 {
        *target = raw_target(raw, packed);
    }
    Ok(())
}

/// A block's rows unpacked, what they packed into, and the builder emptied (its buffers kept
/// for a later block).
type Packed = (usize, Vec<(OwnedKey, Vec<u8>)>, BlockBuilder);

/// Packs the blocks of one run on a second thread while the writer's thread goes on filling the
/// next (sorting a commit's rows, merging runs): zstd's packing was about a fifth of a random-id
/// ingest's writer thread, which is the ingest's critical path. Blocks are stored in the order
/// handed in, at most one waiting: the same rows in the same order as one thread would store
/// (a block's size target comes from the ratio of the block two before it, not the one before);
/// every block is stored when [`RunPacker::finish`] returns, before anything reads the run. The
/// thread starts with the run's second block: a run of one block (a commit of a few rows, as
/// `serve`'s usually are) is packed on the writer's thread.
struct RunPacker {
    id: u64,
    /// The packing thread's ends, once it started: blocks to it, packed blocks back.
    thread: Option<Packing>,
    waiting: usize,
    /// A builder back from the packing thread, emptied, to fill next.
    spare: Option<BlockBuilder>,
}

struct Packing {
    to: Option<std::sync::mpsc::SyncSender<BlockBuilder>>,
    back: std::sync::mpsc::Receiver<Packed>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Packing {
    fn start() -> Self {
        let (to, rows) = std::sync::mpsc::sync_channel::<BlockBuilder>(1);
        let (done, back) = std::sync::mpsc::channel::<Packed>();
        let handle = std::thread::spawn(move || {
            for mut b in rows {
                let raw = b.raw_bytes();
                let blocks = b.finish_within();
                if done.send((raw, blocks, b)).is_err() {
                    break;
                }
            }
        });
        Packing {
            to: Some(to),
            back,
            handle: Some(handle),
        }
    }

    /// The thread ended before its work: it panicked, so this thread does too.
    fn stopped(&mut self) -> ! {
        self.to = None;
        match self.handle.take().map(|t| t.join()) {
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            _ => unreachable!("the packing thread ends only when its blocks stop coming"),
        }
    }
}

impl Drop for Packing {
    fn drop(&mut self) {
        // An error may have stopped the run mid-way: the thread packs what it holds and ends.
        self.to = None;
        if let Some(t) = self.handle.take() {
            let _ = t.join();
        }
    }
}

impl RunPacker {
    fn new(id: u64) -> Self {
        RunPacker {
            id,
            thread: None,
            waiting: 0,
            spare: None,
        }
    }

    /// Hands `b`'s rows on to be packed (leaving `b` empty), and stores the block before it.
    fn hand(
        &mut self,
        runs: &mut Table<'_, RunKey, &'static [u8]>,
        target: &mut usize,
        b: &mut BlockBuilder,
    ) -> Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        let rows = std::mem::replace(b, self.spare.take().unwrap_or_default());
        let packing = self.thread.get_or_insert_with(Packing::start);
        match &packing.to {
            Some(to) if to.send(rows).is_ok() => self.waiting += 1,
            _ => packing.stopped(),
        }
        while self.waiting > 1 {
            self.store_next(runs, target)?;
        }
        Ok(())
    }

    /// Stores every block handed on, then `last`'s rows.
    fn finish(
        mut self,
        runs: &mut Table<'_, RunKey, &'static [u8]>,
        target: &mut usize,
        last: &mut BlockBuilder,
    ) -> Result<()> {
        if self.thread.is_none() {
            let raw = last.raw_bytes();
            return store_packed(runs, target, self.id, raw, last.finish_within());
        }
        self.hand(runs, target, last)?;
        if let Some(packing) = &mut self.thread {
            packing.to = None;
        }
        while self.waiting > 0 {
            self.store_next(runs, target)?;
        }
        Ok(())
    }

    fn store_next(&mut self, runs: &mut Table<'_, RunKey, &'static [u8]>, target: &mut usize) -> Result<()> {
        let Some(packing) = &mut self.thread else {
            unreachable!("a block waits only once the thread started")
        };
        let Ok((raw, blocks, spare)) = packing.back.recv() else {
            packing.stopped();
        };
        self.waiting -= 1;
        self.spare = Some(spare);
        store_packed(runs, target, self.id, raw, blocks)
    }
}

/// The runs of a window merged into one away from the writer's thread ([`merge_committed`]), to
/// be put in their place by [`AttemptWriter::install`].
pub struct MergedRun {
    /// The runs merged, oldest first: ((run number, rows), hash of its header) as read.
    inputs: Vec<((u64, u64), u64)>,
    /// The merged run's blocks, packed, under their last keys.
    blocks: Vec<(OwnedKey, Vec<u8>)>,
    rows: u64,
    /// The merged run's key filter.
    filter: Vec<u8>,
}

/// Merges the runs of the oldest window [`due_window`] finds in `txn`'s snapshot into one,
/// packing its blocks on this thread: what [`AttemptWriter::finish`] does on the writer's
/// thread. `None` when no window is due, or when `stop` is set on the way.
pub(crate) fn merge_committed(txn: &ReadTransaction, stop: &AtomicBool) -> Result<Option<MergedRun>> {
    let dir = txn.open_table(ATTEMPT_RUN_DIR)?;
    let list = run_list(&dir)?;
    let Some(at) = due_window(&list) else {
        return Ok(None);
    };
    let mut inputs = Vec::with_capacity(FAN_IN);
    for &(id, rows) in &list[at..at + FAN_IN] {
        let head = dir
            .get(id)?
            .ok_or_else(|| corrupt(id, "a run without its header".into()))?;
        inputs.push(((id, rows), XxHash3_64::oneshot(head.value())));
    }
    let blocks = txn.open_table(ATTEMPT_BLOCK)?;
    let runs = txn.open_table(ATTEMPT_RUN)?;
    let mut merger = Merger::new(inputs.iter().rev().map(|((id, _), _)| *id), false, KeyRange::default());
    let rows: u64 = inputs.iter().map(|((_, rows), _)| rows).sum();
    let mut hashes = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
    let mut b = BlockBuilder::default();
    let mut target = raw_target(0, 0);
    let mut out = Vec::new();
    let mut pack = |b: &mut BlockBuilder, target: &mut usize| {
        let raw = b.raw_bytes();
        let blocks = b.finish_within();
        let packed: usize = blocks.iter().map(|(_, stored)| stored.len()).sum();
        if packed > 0 {
            *target = raw_target(raw, packed);
        }
        out.extend(blocks);
    };
    loop {
        let more = merger.step(&blocks, &runs, false, &mut |piece| -> Result<()> {
            if let Piece::Row { key, value } = piece {
                hashes.push(crate::storage::key_filter::hash(key.0, key.1));
                b.push(key.0, key.1, value);
            }
            Ok(())
        })?;
        if !more {
            break;
        }
        if b.raw_bytes() >= target {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            pack(&mut b, &mut target);
        }
    }
    pack(&mut b, &mut target);
    let filter = crate::storage::key_filter::build_blocked(hashes.iter().copied(), hashes.len());
    Ok(Some(MergedRun {
        inputs,
        blocks: out,
        rows: hashes.len() as u64,
        filter,
    }))
}

/// The attempt rows of a read transaction, blocks and runs merged.
pub type ReadRows = AttemptRows<ReadOnlyTable<Key, &'static [u8]>, ReadOnlyTable<RunKey, &'static [u8]>>;

/// The attempt rows of a read transaction. Errors: storage errors.
pub fn read_rows(txn: &ReadTransaction) -> Result<ReadRows> {
    AttemptRows::new(
        txn.open_table(ATTEMPT_BLOCK)?,
        txn.open_table(ATTEMPT_RUN)?,
        &txn.open_table(ATTEMPT_RUN_DIR)?,
    )
}

/// The attempt rows of a write transaction as it stands (close it before opening an
/// [`AttemptWriter`] on the same transaction). Errors: storage errors.
pub fn write_rows(txn: &WriteTransaction) -> Result<WriteRows<'_>> {
    AttemptRows::new(
        txn.open_table(ATTEMPT_BLOCK)?,
        txn.open_table(ATTEMPT_RUN)?,
        &txn.open_table(ATTEMPT_RUN_DIR)?,
    )
}

/// The attempt rows of a write transaction, blocks and runs merged.
pub type WriteRows<'txn> = AttemptRows<Table<'txn, Key, &'static [u8]>, Table<'txn, RunKey, &'static [u8]>>;

/// Format version 5 to 6: every row of the `attempt` table, where a version 5 file keeps them
/// all, is packed into blocks, values unchanged; sets the [`BLOCK_ROWS`] and [`ATTEMPT_ROWS`]
/// counters.
pub(crate) fn migrate_v5(txn: &WriteTransaction, progress: &dyn Progress) -> Result<()> {
    let rows = txn.open_table(ATTEMPT)?.len()?;
    let mut count = RowCounter::stage(progress, "packing attempt rows", Some(rows));
    let block_rows = AttemptWriter::open(txn, 0)?.fold_delta(&mut count)?;
    count.finish();
    let mut counter = txn.open_table(COUNTER)?;
    counter.insert(BLOCK_ROWS, block_rows)?;
    counter.insert(ATTEMPT_ROWS, rows)?;
    Ok(())
}

/// Format versions 6 to 8 to 9: the rows of the delta ([`ATTEMPT`]) are folded into the blocks,
/// values unchanged, and the delta is left empty; sets the [`BLOCK_ROWS`] counter.
pub(crate) fn migrate_v8(txn: &WriteTransaction, progress: &dyn Progress) -> Result<()> {
    let rows = txn.open_table(ATTEMPT)?.len()?;
    if rows == 0 {
        return Ok(());
    }
    let block_rows = txn.open_table(COUNTER)?.get(BLOCK_ROWS)?.map_or(0, |v| v.value());
    let mut count = RowCounter::stage(progress, "folding attempt rows into blocks", Some(rows));
    let block_rows = AttemptWriter::open(txn, block_rows)?.fold_delta(&mut count)?;
    count.finish();
    txn.open_table(COUNTER)?.insert(BLOCK_ROWS, block_rows)?;
    Ok(())
}

/// Moves every run's rows into format 8's delta ([`ATTEMPT`]), where a newer row shadows an older
/// one and a block's as the runs do, and drops the runs: what format versions 6 to 8 read.
fn runs_into_delta(txn: &WriteTransaction) -> Result<()> {
    {
        let mut delta = txn.open_table(ATTEMPT)?;
        let runs = txn.open_table(ATTEMPT_RUN)?;
        let dir = txn.open_table(ATTEMPT_RUN_DIR)?;
        // Oldest first: a newer run's row overwrites an older's.
        for (id, _) in run_list(&dir)? {
            for row in runs.range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0))? {
                let (k, v) = row?;
                let block = Block::decode(v.value()).map_err(|r| corrupt(k.value(), r))?;
                for i in 0..block.len() {
                    let (job, no) = block.key(i);
                    delta.insert((job, no), block.value(i))?;
                }
            }
        }
    }
    txn.delete_table(ATTEMPT_RUN)?;
    txn.delete_table(ATTEMPT_RUN_DIR)?;
    Ok(())
}

/// Folds every run's rows into the blocks (a newer row replacing an older one) and drops the runs.
fn fold_runs(txn: &WriteTransaction) -> Result<()> {
    runs_into_delta(txn)?;
    let block_rows = txn.open_table(COUNTER)?.get(BLOCK_ROWS)?.map_or(0, |v| v.value());
    let block_rows =
        AttemptWriter::open(txn, block_rows)?.fold_delta(&mut RowCounter::stage(&crate::progress::Silent, "", None))?;
    txn.open_table(COUNTER)?.insert(BLOCK_ROWS, block_rows)?;
    Ok(())
}

/// Writes every run's rows into the delta and drops the runs: with `meta["format_version"]` set to
/// 8 after it, the file is what version 8 wrote (for tests of the migrations, or to hand a file
/// back to an older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does
/// not unpack.
pub fn write_as_format_8(txn: &WriteTransaction) -> Result<()> {
    crate::storage::chain::write_as_format_10(txn)?;
    runs_into_delta(txn)
}

/// Rebuilds every run's key filter as format version 9 stored it (plain, 10 bits a key; see
/// [`crate::storage::key_filter`]), rows unchanged: with `meta["format_version"]` set to 9 after
/// it, the file is what version 9 wrote (for tests of the migrations, or to hand a file back to
/// an older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block or header that
/// does not read.
pub fn write_as_format_9(txn: &WriteTransaction) -> Result<()> {
    crate::storage::chain::write_as_format_10(txn)?;
    let runs = txn.open_table(ATTEMPT_RUN)?;
    let mut dir = txn.open_table(ATTEMPT_RUN_DIR)?;
    for (id, rows) in run_list(&dir)? {
        let mut hashes = Vec::new();
        for row in runs.range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0))? {
            let (k, v) = row?;
            let block = Block::decode(v.value()).map_err(|r| corrupt(k.value(), r))?;
            hashes.extend((0..block.len()).map(|i| {
                let (job, no) = block.key(i);
                crate::storage::key_filter::hash(job, no)
            }));
        }
        let filter = crate::storage::key_filter::build_hashed(hashes.iter().copied(), hashes.len());
        dir.insert(id, encode_head(rows, &filter).as_slice())?;
    }
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
    counter.insert(BLOCK_ROWS, w.finish()?)?;
    counter.insert(ATTEMPT_ROWS, rows)?;
    Ok(())
}

/// Moves every attempt row out of the blocks into the `attempt` table, where format version 5
/// kept them all, and drops the row counters: with `meta["format_version"]` set to 5 after it,
/// the file is what version 5 wrote (for tests of the migrations, or to hand a file back to an
/// older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not unpack.
pub fn write_as_format_5(txn: &WriteTransaction) -> Result<()> {
    crate::storage::chain::write_as_format_10(txn)?;
    runs_into_delta(txn)?;
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

/// Folds the runs into the blocks, then rewrites every attempt block in format version 7's layout
/// (framed, no key filter), rows unchanged ([`crate::storage::attempt_block::to_format_7`]): with `meta["format_version"]` set to 7
/// after it, the file is what version 7 wrote (for tests of the migrations, or to hand a file back
/// to an older laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not
/// unpack.
pub fn write_as_format_7(txn: &WriteTransaction) -> Result<()> {
    crate::storage::chain::write_as_format_10(txn)?;
    fold_runs(txn)?;
    rewrite_blocks(txn, crate::storage::attempt_block::to_format_7)
}

/// Folds the runs into the blocks, then rewrites every attempt block in format version 6's
/// one-frame layout, rows unchanged
/// ([`crate::storage::attempt_block::to_format_6`]): with `meta["format_version"]` set to 6 after it, the
/// file is what version 6 wrote (for tests of the migrations, or to hand a file back to an older
/// laneledger). Errors: storage errors, [`Error::Corrupt`] for a block that does not unpack.
pub fn write_as_format_6(txn: &WriteTransaction) -> Result<()> {
    crate::storage::chain::write_as_format_10(txn)?;
    fold_runs(txn)?;
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

    /// A transaction's pending rows against a sorted map of the same writes: every lookup, the
    /// greatest key after each write and removal (the greatest removed too), and the rows in key
    /// order at the end.
    #[test]
    fn pending_rows_behave_as_a_sorted_map() {
        let mut rng = SplitMix64::new(7);
        let mut pending = Pending::default();
        let mut model = Model::new();
        for step in 0..4_000u32 {
            let mut key = (format!("job-{:03}", rng.next_u64() % 150), (rng.next_u64() % 4) as u32);
            match rng.next_u64() % 5 {
                0 => {
                    // Now and then the greatest key itself.
                    if step % 3 == 0
                        && let Some(greatest) = model.keys().next_back()
                    {
                        key = greatest.clone();
                    }
                    pending.remove(&key.0, key.1);
                    model.remove(&key);
                }
                _ => {
                    let value = step.to_le_bytes().to_vec();
                    pending.insert(&key.0, key.1, &value);
                    model.insert(key.clone(), value);
                }
            }
            assert_eq!(
                pending.get(&key.0, key.1),
                model.get(&key).map(Vec::as_slice),
                "step {step}"
            );
            assert_eq!(
                pending.last(),
                model.keys().next_back().map(|(j, n)| (j.as_str(), *n)),
                "step {step}"
            );
        }
        let sorted: Vec<((String, u32), Vec<u8>)> = pending
            .into_sorted()
            .into_iter()
            .flat_map(|(j, rows)| rows.into_iter().map(move |(n, v)| ((j.clone(), n), v)))
            .collect();
        assert_eq!(sorted, model.into_iter().collect::<Vec<_>>());
    }

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
        // Cut into key ranges that meet end to end, the ranges walked one after another give the
        // same rows, blocks whole where a block lies inside one range.
        for parts in [2, 3, 8] {
            let ranges = rows.split(parts).unwrap();
            assert!(!ranges.is_empty() && ranges.len() <= parts);
            assert_eq!(
                (ranges[0].after.as_ref(), ranges[ranges.len() - 1].upto.as_ref()),
                (None, None)
            );
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].upto, pair[1].after);
            }
            let mut ranged = Vec::new();
            for range in &ranges {
                rows.walk_range(true, range.clone(), |p| -> Result<()> {
                    match p {
                        Piece::Packed { stored, .. } => {
                            let (mut bytes, mut ends) = (Vec::new(), Vec::new());
                            Block::values_onto(stored, &mut bytes, &mut ends).unwrap();
                            let mut start = 0;
                            for end in ends {
                                ranged.push(bytes[start..end].to_vec());
                                start = end;
                            }
                        }
                        Piece::Row { key, value } => {
                            assert!(
                                range.holds(key) && range.after.as_ref().is_none_or(|(j, n)| key > (j.as_str(), *n))
                            );
                            ranged.push(value.to_vec());
                        }
                    }
                    Ok(())
                })
                .unwrap();
            }
            assert_eq!(
                ranged,
                model.values().cloned().collect::<Vec<_>>(),
                "{} ranges",
                ranges.len()
            );
        }
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
        // Many keys at once: every third row held, each with a key beside it that is not (the
        // next attempt_no past the job's last, and a job_id just after it), as `get` finds them.
        let mut keys: BTreeSet<(String, u32)> = BTreeSet::new();
        for ((job, no), _) in model.iter().step_by(3) {
            keys.insert((job.clone(), *no));
            keys.insert((format!("{job}\0"), 1));
            keys.insert((job.clone(), u32::MAX));
        }
        keys.insert((String::new(), 0));
        keys.insert(("~".to_string(), 1));
        let keys: Vec<(String, u32)> = keys.into_iter().collect();
        let expected: Vec<Option<Vec<u8>>> = keys.iter().map(|(j, n)| model.get(&(j.clone(), *n)).cloned()).collect();
        assert_eq!(rows.get_sorted(&keys).unwrap(), expected);
    }

    fn memory_db() -> redb::Database {
        redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap()
    }

    /// A commit's run of many blocks (packed on the second thread) and a run of one (packed on
    /// the writer's): every row reads back, and the run holds the blocks in key order.
    #[test]
    fn runs_packed_on_the_second_thread_or_this_one_read_back_whole() {
        let db = memory_db();
        let mut rng = SplitMix64::new(11);
        let mut model = Model::new();
        let mut block_rows = 0;
        for rows in [1u64, 20_000, 1] {
            let txn = db.begin_write().unwrap();
            {
                let mut w = AttemptWriter::open(&txn, block_rows).unwrap();
                if model.is_empty() {
                    // Every later key sorts below this one: they all go into runs.
                    w.append("~", 1, b"last").unwrap();
                    model.insert(("~".to_string(), 1), b"last".to_vec());
                }
                for _ in 0..rows {
                    let key = (format!("req_{:016x}", rng.next_u64()), 1);
                    let value: Vec<u8> = (0..200)
                        .map(|i| if i % 2 == 0 { rng.next_u64() as u8 } else { 7 })
                        .collect();
                    w.put(&key.0, key.1, &value).unwrap();
                    model.insert(key, value);
                }
                block_rows = w.finish().unwrap();
            }
            txn.commit().unwrap();
            read_back(&db, &model);
        }
        let txn = db.begin_read().unwrap();
        let runs = txn.open_table(ATTEMPT_RUN).unwrap();
        let mut per_run: BTreeMap<u64, Vec<(String, u32)>> = BTreeMap::new();
        for row in runs.iter().unwrap() {
            let (k, _) = row.unwrap();
            let (id, job, no) = k.value();
            per_run.entry(id).or_default().push((job.to_string(), no));
        }
        let sizes: Vec<usize> = per_run.values().map(Vec::len).collect();
        assert_eq!(sizes.len(), 3, "{sizes:?}");
        assert_eq!((sizes[0], sizes[2]), (1, 1));
        assert_eq!(sizes[1], 92, "the 20,000-row run's blocks");
        let dir = txn.open_table(ATTEMPT_RUN_DIR).unwrap();
        let rows: Vec<u64> = run_list(&dir).unwrap().into_iter().map(|(_, r)| r).collect();
        assert_eq!(rows, [1, 20_000, 1]);
    }

    /// Appends, writes inside the blocks' range, completions, removals and folds, checked after
    /// every commit against a map of what should be held.
    #[test]
    fn the_store_holds_what_a_map_would_through_appends_folds_and_removals() {
        let db = memory_db();
        let mut rng = SplitMix64::new(6);
        let mut model = Model::new();
        let mut block_rows = 0;
        let mut next_job = 0u32;
        let (mut max_runs, mut merged) = (0, false);
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
                    let key = if kind < 4 || model.is_empty() {
                        // Above every key held: jobs numbered in order.
                        next_job += 1;
                        (format!("job-{next_job:05}"), 1)
                    } else if kind < 7 {
                        // A new job inside the range held: a random id.
                        (
                            format!(
                                "job-{:05}-{:08x}",
                                rng.next_u64() % u64::from(next_job),
                                rng.next_u64() as u32
                            ),
                            1,
                        )
                    } else {
                        // A new attempt of a job held, or a row held rewritten.
                        let job = format!("job-{:05}", rng.next_u64() % u64::from(next_job) + 1);
                        (job, (rng.next_u64() % 3 + 1) as u32)
                    };
                    let above = w
                        .last_key()
                        .unwrap()
                        .is_none_or(|l| (key.0.as_str(), key.1) > (l.0.as_str(), l.1));
                    assert_eq!(
                        w.get(&key.0, key.1).unwrap().as_ref(),
                        model.get(&key),
                        "round {round} key {key:?} runs {:?}",
                        w.run_list
                    );
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
                block_rows = w.finish().unwrap();
            }
            txn.commit().unwrap();
            read_back(&db, &model);
            let txn = db.begin_read().unwrap();
            let blocks = txn.open_table(ATTEMPT_BLOCK).unwrap();
            let mut stored = 0;
            for b in blocks.iter().unwrap() {
                stored += block_rows_of(b.unwrap().1.value());
            }
            assert_eq!(stored, block_rows, "round {round}: the counter is the blocks' rows");
            // Each run's header counts the rows its blocks hold, and the tiers keep them few.
            let (runs, dir) = (
                txn.open_table(ATTEMPT_RUN).unwrap(),
                txn.open_table(ATTEMPT_RUN_DIR).unwrap(),
            );
            let list = run_list(&dir).unwrap();
            for &(id, rows) in &list {
                let mut held = 0;
                for b in runs.range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0)).unwrap() {
                    held += block_rows_of(b.unwrap().1.value());
                }
                assert_eq!(held, rows, "round {round}: run {id}");
                assert!(rows > 0, "round {round}: an empty run {id} is dropped");
            }
            let tiers: Vec<u32> = list.iter().map(|(_, rows)| tier(*rows)).collect();
            assert!(
                list.len() <= 3 * 6,
                "round {round}: {} runs, tiers {tiers:?}",
                list.len()
            );
            assert_eq!(
                txn.open_table(ATTEMPT).unwrap().len().unwrap(),
                0,
                "the delta stays empty"
            );
            max_runs = max_runs.max(list.len());
            merged |= list.windows(2).any(|w| w[1].0 > w[0].0 + 1);
        }
        assert!(
            max_runs >= 3 && merged,
            "runs were made ({max_runs} at most) and merged ({merged})"
        );
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

    /// Runs numbered from 1, oldest first, of these row counts.
    fn runs_of(rows: &[u64]) -> Vec<(u64, u64)> {
        rows.iter().zip(1..).map(|(&r, id)| (id, r)).collect()
    }

    #[test]
    fn the_oldest_window_of_one_tier_is_due_and_never_one_around_a_larger_run() {
        assert_eq!(
            due_window(&runs_of(&[640_000, 160_000, 40_000, 40_000, 40_000, 40_000, 40_000])),
            Some(2)
        );
        // A larger newest run, as a commit larger than the ones before makes.
        assert_eq!(due_window(&runs_of(&[10_000, 10_000, 10_000, 40_000])), Some(0));
        assert_eq!(due_window(&runs_of(&[10_000, 10_000, 2_440_000, 10_000])), None);
        assert_eq!(due_window(&runs_of(&[10_000, 40_000, 10_000, 10_000])), None);
        assert_eq!(due_window(&runs_of(&[300_000; 4])), None, "capped");
        assert_eq!(due_window(&runs_of(&[40_000; 3])), None);
    }

    /// Writes as an ingest whose runs merge on a second thread makes them: each commit's writer
    /// takes over the one before's runs and filters, and puts in place the run merged from the
    /// snapshot of the commit before it, if any, unless a removal changed its runs since. Every
    /// read after every commit finds what a map holds, each run's header counts its blocks' rows,
    /// and merged runs were put in and refused.
    #[test]
    fn runs_merged_from_snapshots_and_put_in_place_read_back_as_a_map() {
        let db = memory_db();
        let mut rng = SplitMix64::new(12);
        let mut model = Model::new();
        let mut block_rows = 0;
        let mut kept = None;
        let mut waiting: Option<MergedRun> = None;
        let (mut installed, mut refused) = (0, 0);
        let never = AtomicBool::new(false);
        for round in 0..60u64 {
            let txn = db.begin_write().unwrap();
            {
                let mut w = AttemptWriter::open_kept(&txn, block_rows, kept.take()).unwrap();
                w.merges_in_background();
                if model.is_empty() {
                    w.append("~", 1, b"last").unwrap();
                    model.insert(("~".to_string(), 1), b"last".to_vec());
                }
                for _ in 0..(rng.next_u64() % 60 + 1) {
                    let key = if rng.next_u64().is_multiple_of(4) {
                        // A row held written again (a completion).
                        let i = (rng.next_u64() % model.len() as u64) as usize;
                        model.keys().nth(i).unwrap().clone()
                    } else {
                        (format!("req_{:016x}", rng.next_u64()), 1)
                    };
                    assert_eq!(w.get(&key.0, key.1).unwrap().as_ref(), model.get(&key), "round {round}");
                    let value = format!("{key:?} in round {round}").into_bytes();
                    w.put(&key.0, key.1, &value).unwrap();
                    model.insert(key, value);
                }
                if round % 9 == 8 {
                    let gone: BTreeSet<(String, u32)> = model
                        .keys()
                        .filter(|k| k.0 != "~" && rng.next_u64().is_multiple_of(5))
                        .cloned()
                        .collect();
                    w.remove(&gone).unwrap();
                    model.retain(|k, _| !gone.contains(k));
                }
                if let Some(run) = waiting.take() {
                    if w.install(run).unwrap() {
                        installed += 1;
                    } else {
                        refused += 1;
                    }
                }
                let (rows, k) = w.finish_keeping().unwrap();
                block_rows = rows;
                kept = Some(k);
            }
            txn.commit().unwrap();
            read_back(&db, &model);
            let txn = db.begin_read().unwrap();
            let (runs, dir) = (
                txn.open_table(ATTEMPT_RUN).unwrap(),
                txn.open_table(ATTEMPT_RUN_DIR).unwrap(),
            );
            let list = run_list(&dir).unwrap();
            let k: &KeptRuns = kept.as_ref().unwrap();
            assert_eq!(k.run_list, list, "round {round}");
            if let Some(filters) = &k.filters {
                let ids: Vec<u64> = filters.iter().map(|(id, _)| *id).collect();
                assert_eq!(
                    ids,
                    list.iter().rev().map(|(id, _)| *id).collect::<Vec<_>>(),
                    "round {round}"
                );
            }
            for &(id, rows) in &list {
                let mut held = 0;
                for b in runs.range::<(u64, &str, u32)>((id, "", 0)..(id + 1, "", 0)).unwrap() {
                    held += block_rows_of(b.unwrap().1.value());
                }
                assert_eq!(held, rows, "round {round}: run {id}");
            }
            waiting = merge_committed(&txn, &never).unwrap();
        }
        assert!(
            installed >= 5 && refused >= 1,
            "{installed} put in place, {refused} refused"
        );
    }
}

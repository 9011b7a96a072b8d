//! The attempt rows' compressed blocks (format version 8): runs of rows in key order, each block
//! stored as one value of [`crate::storage::tables::ATTEMPT_BLOCK`] under its last key.
//!
//! A stored block takes at most [`STORED_MAX`] bytes, so that it fills one 32 KiB redb page and no
//! more (redb sizes pages in powers of two: a block a little over would take 64 KiB). How many rows
//! that is depends on how well they pack; the writer aims at about 90% of it from the last block's
//! ratio ([`raw_target`]) and splits a block that comes out over. Its stored value is
//!
//! ```text
//! 0x00 0x00           the filtered layout's tag (format version 8)
//! varint filter_len
//! key filter          a Bloom filter of the block's keys (crate::storage::key_filter)
//! varint rows
//! varint keys_len     the keys section's length, unpacked
//! varint keys_packed  the keys section's length, packed
//! keys section        zstd frame: per row  varint job_id length, job_id, varint attempt_no,
//!                                         varint value length
//! varint values_len   the values section's length, unpacked
//! varint frame_raw    the unpacked length of every values frame but the last
//! values section      the rows' values back to back, cut every frame_raw bytes into zstd
//!                     frames, each as  varint packed length, zstd frame
//! ```
//!
//! Keys and values are packed apart (zstd level [`ZSTD_LEVEL`]); the values in frames of
//! [`FRAME_RAW`] bytes, so that one job's lookup unpacks the keys and the one or two frames its
//! rows lie in, not the whole block ([`Block::job_values`]). The values are the stored attempt
//! values byte for byte (`AttemptRecord::V1`), so the hash chain's entries still match.
//!
//! The key filter answers "may this block hold (job_id, attempt_no)?" without unpacking it: the
//! write path's check for a new key that lands inside the blocks' range (a router's random ids)
//! costs a probe instead of a block's unpacking ([`may_hold`]).
//!
//! Format version 7 wrote the same layout without the filter, after the one tag byte 0x00; such a
//! block is still read (every key "may" be in it) until a write rewrites it. The two tags cannot be
//! confused: a block holds at least one row, so the row count's first byte is never 0.
//! Format version 6 wrote the one-frame layout, still read: no tag (a block starts with its row
//! count, never 0), and the values section one zstd frame after `values_len`. A version 6 file
//! keeps its blocks as they are until a write rewrites them ([`to_format_6`] makes one).
//!
//! On the drill's attempts a row takes about 23 bytes packed, keys included, where its value
//! alone took 118 (BENCHMARKS.md).

use crate::storage::varint;

/// The most bytes a stored block takes: one 32 KiB redb leaf page less room for the page's header
/// and the block's key. About 1,300 drill attempts at zstd's ratio on them.
pub const STORED_MAX: usize = (32 << 10) - 256;

/// The unpacked bytes (values and keys) to fill a block to, so that it packs to about 90% of
/// [`STORED_MAX`] at the ratio `packed` / `raw` seen last; three times [`STORED_MAX`] when there is
/// none yet.
pub fn raw_target(raw: usize, packed: usize) -> usize {
    if raw == 0 || packed == 0 {
        return 3 * STORED_MAX;
    }
    let target = (STORED_MAX as f64 * 0.9 * raw as f64 / packed as f64) as usize;
    target.clamp(STORED_MAX / 2, 16 * STORED_MAX)
}

/// The unpacked bytes of each values frame but a block's last: one job's lookup unpacks the frames
/// its rows lie in. On the drill's attempts, 16 KiB frames pack the values to 22.2 bytes a row
/// against 20.9 as one frame a block, and one unpacks in about 20 µs against 121 µs for the
/// block's (BENCHMARKS.md).
pub const FRAME_RAW: usize = 16 << 10;

/// The first byte of a block in the framed layouts (format versions 7 and 8); in format version
/// 8 the second byte is 0 too ([`FILTERED`]).
const FRAMED: u8 = 0;

/// The first two bytes of a block with a key filter (format version 8).
const FILTERED: [u8; 2] = [0, 0];

/// The zstd level the blocks are packed at: level 1 packs the drill's attempt values to about 21
/// bytes a row (level 3: 20.9) at about twice level 3's speed.
pub const ZSTD_LEVEL: i32 = 1;

thread_local! {
    /// One zstd context a thread, kept: making one costs more than packing a small block.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

/// Appends `raw` packed (one zstd frame) to `out`.
pub(crate) fn pack(out: &mut Vec<u8>, raw: &[u8]) {
    let start = out.len();
    out.resize(start + zstd::zstd_safe::compress_bound(raw.len()), 0);
    let n = COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("a zstd context is made"));
        }
        c.as_mut()
            .expect("made above")
            .compress_to_buffer(raw, &mut out[start..])
            .expect("the output holds zstd's bound")
    });
    out.truncate(start + n);
}

/// Unpacks `packed`, which must unpack to exactly `len` bytes, onto the end of `out`.
pub(crate) fn unpack_onto(out: &mut Vec<u8>, packed: &[u8], len: usize) -> Result<(), String> {
    let start = out.len();
    out.resize(start + len, 0);
    let got = DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("no zstd context: {e}"))?);
        }
        d.as_mut()
            .expect("made above")
            .decompress_to_buffer(packed, &mut out[start..])
            .map_err(|e| format!("a section does not unpack: {e}"))
    });
    match got {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(format!("a section unpacks to {n} bytes, not {len}")),
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

fn get_usize(bytes: &[u8], at: &mut usize) -> Result<usize, String> {
    usize::try_from(varint::get(bytes, at)?).map_err(|_| "a length does not fit in memory".to_string())
}

/// A stored block's values section, not yet unpacked.
enum Values<'a> {
    /// Format version 6: one zstd frame.
    One(&'a [u8]),
    /// Format version 7: frames of `frame_raw` unpacked bytes (the last shorter), each after its
    /// packed length.
    Framed { frame_raw: usize, frames: &'a [u8] },
}

/// A stored block's parts, not yet unpacked.
struct Sections<'a> {
    rows: usize,
    keys_len: usize,
    keys: &'a [u8],
    values_len: usize,
    values: Values<'a>,
}

/// Where a stored block's row count starts, whether its values are framed, and its key filter
/// if it has one.
fn layout(stored: &[u8]) -> Result<(usize, bool, Option<&[u8]>), String> {
    if stored.starts_with(&FILTERED) {
        let mut at = FILTERED.len();
        let len = get_usize(stored, &mut at)?;
        let filter = stored
            .get(at..at.saturating_add(len))
            .ok_or("the key filter runs past the block")?;
        Ok((at + len, true, Some(filter)))
    } else if stored.first() == Some(&FRAMED) {
        Ok((1, true, None))
    } else {
        Ok((0, false, None))
    }
}

/// Whether a stored block may hold `key`: `false` means it does not, read from its key filter
/// without unpacking it; a block without one (format version 7 or 6) may hold any key.
///
/// Errors: the text of a filter that does not read.
pub fn may_hold(stored: &[u8], key: (&str, u32)) -> Result<bool, String> {
    match layout(stored)? {
        (_, _, Some(filter)) => crate::storage::key_filter::may_hold(filter, key.0, key.1),
        _ => Ok(true),
    }
}

fn sections(stored: &[u8]) -> Result<Sections<'_>, String> {
    let (mut at, framed, _) = layout(stored)?;
    let rows = get_usize(stored, &mut at)?;
    let keys_len = get_usize(stored, &mut at)?;
    let keys_packed = get_usize(stored, &mut at)?;
    let keys = stored
        .get(at..at.saturating_add(keys_packed))
        .ok_or("the keys section runs past the block")?;
    at += keys_packed;
    let values_len = get_usize(stored, &mut at)?;
    let values = if framed {
        let frame_raw = get_usize(stored, &mut at)?;
        if frame_raw == 0 && values_len > 0 {
            return Err("the values frames are 0 bytes long".into());
        }
        Values::Framed {
            frame_raw,
            frames: &stored[at..],
        }
    } else {
        Values::One(&stored[at..])
    };
    Ok(Sections {
        rows,
        keys_len,
        keys,
        values_len,
        values,
    })
}

impl Sections<'_> {
    /// Unpacks the keys section and reads it ([`read_keys`]).
    fn keys(&self) -> Result<(Vec<u8>, Vec<RowAt>), String> {
        let mut keys = Vec::new();
        unpack_onto(&mut keys, self.keys, self.keys_len)?;
        let rows = read_keys(&keys, self.rows, self.values_len)?;
        Ok((keys, rows))
    }

    /// Unpacks the values frames that hold the value bytes `range` onto the end of `out`, and
    /// returns where in `out` the range starts: the whole section for the one-frame layout.
    /// `range` lies within `values_len` (the keys were read against it).
    fn values_onto(&self, out: &mut Vec<u8>, range: std::ops::Range<usize>) -> Result<usize, String> {
        let base = out.len();
        match self.values {
            Values::One(frame) => {
                unpack_onto(out, frame, self.values_len)?;
                Ok(base + range.start)
            }
            Values::Framed { frame_raw, frames } => {
                let whole = range.start == 0 && range.end == self.values_len;
                let first = range.start / frame_raw.max(1);
                let mut at = 0;
                let mut frame = 0usize;
                while frame.saturating_mul(frame_raw) < range.end || (whole && at < frames.len()) {
                    let packed = get_usize(frames, &mut at)?;
                    let bytes = frames
                        .get(at..at.saturating_add(packed))
                        .ok_or("a values frame runs past the block")?;
                    at += packed;
                    if frame >= first {
                        let raw = self
                            .values_len
                            .checked_sub(frame.saturating_mul(frame_raw))
                            .filter(|left| *left > 0)
                            .ok_or("the block has more values frames than values")?
                            .min(frame_raw);
                        unpack_onto(out, bytes, raw)?;
                    }
                    frame += 1;
                }
                if whole && out.len() - base != self.values_len {
                    return Err(format!(
                        "the values frames unpack to {} bytes, not {}",
                        out.len() - base,
                        self.values_len
                    ));
                }
                Ok(base + range.start - first * frame_raw)
            }
        }
    }
}

/// The number of rows a stored block holds, read from its first bytes.
///
/// Errors: the text of a header that does not read.
pub fn block_rows(stored: &[u8]) -> Result<usize, String> {
    let (mut at, _, _) = layout(stored)?;
    get_usize(stored, &mut at)
}

/// The unpacked bytes of a stored block's keys and values, read from its header: with the stored
/// length, the ratio it packed at ([`raw_target`]), without unpacking it.
///
/// Errors: the text of a header that does not read.
pub fn block_raw_bytes(stored: &[u8]) -> Result<usize, String> {
    let s = sections(stored)?;
    Ok(s.keys_len + s.values_len)
}

/// Where one row's key and value lie in an unpacked [`Block`].
#[derive(Debug, Clone, Copy)]
struct RowAt {
    job: (u32, u32),
    attempt_no: u32,
    value_end: u32,
}

/// One block unpacked: its rows' keys and values, in key order.
#[derive(Debug, Default)]
pub struct Block {
    keys: Vec<u8>,
    values: Vec<u8>,
    rows: Vec<RowAt>,
}

/// Reads the keys section of a block, checking it against the values' length and the key order.
fn read_keys(keys: &[u8], rows: usize, values_len: usize) -> Result<Vec<RowAt>, String> {
    let mut out = Vec::with_capacity(rows);
    let mut at = 0;
    let mut value_end = 0usize;
    let mut prev: Option<(&str, u32)> = None;
    while at < keys.len() {
        let job_len = get_usize(keys, &mut at)?;
        let job_start = at;
        let job = keys
            .get(at..at.saturating_add(job_len))
            .ok_or("a job_id runs past the keys section")?;
        let job = std::str::from_utf8(job).map_err(|_| "a job_id is not UTF-8".to_string())?;
        at += job_len;
        let attempt_no = u32::try_from(varint::get(keys, &mut at)?).map_err(|_| "an attempt_no is over u32")?;
        value_end += get_usize(keys, &mut at)?;
        if prev.is_some_and(|p| p >= (job, attempt_no)) {
            return Err("the keys are not in order".into());
        }
        prev = Some((job, attempt_no));
        let to_u32 = |n: usize| u32::try_from(n).map_err(|_| "a block is over 4 GiB".to_string());
        out.push(RowAt {
            job: (to_u32(job_start)?, to_u32(job_start + job_len)?),
            attempt_no,
            value_end: to_u32(value_end)?,
        });
    }
    if out.len() != rows || value_end != values_len {
        return Err(format!(
            "the block says {rows} rows and {values_len} value bytes, its keys {} and {value_end}",
            out.len()
        ));
    }
    Ok(out)
}

impl Block {
    /// Unpacks a stored block.
    ///
    /// Errors: the text of what does not read (a section that does not unpack, keys out of order,
    /// lengths that disagree); the caller names the block.
    pub fn decode(stored: &[u8]) -> Result<Self, String> {
        let s = sections(stored)?;
        let (keys, rows) = s.keys()?;
        let mut values = Vec::new();
        s.values_onto(&mut values, 0..s.values_len)?;
        Ok(Block { keys, values, rows })
    }

    /// Unpacks a stored block's values onto the end of `bytes`, and the end offset in `bytes` of
    /// each onto `ends`: what the query scan needs (see [`crate::AttemptChunk`]). Errors as
    /// [`Block::decode`].
    pub fn values_onto(stored: &[u8], bytes: &mut Vec<u8>, ends: &mut Vec<usize>) -> Result<(), String> {
        let s = sections(stored)?;
        let (_, rows) = s.keys()?;
        let base = s.values_onto(bytes, 0..s.values_len)?;
        ends.extend(rows.iter().map(|r| base + r.value_end as usize));
        Ok(())
    }

    /// The rows of one job a stored block holds, as (attempt_no, stored value) in attempt_no
    /// order: the keys are unpacked, and of the values only the frames these rows lie in (the
    /// whole section in the one-frame layout). Errors as [`Block::decode`].
    pub fn job_values(stored: &[u8], job_id: &str) -> Result<Vec<(u32, Vec<u8>)>, String> {
        let s = sections(stored)?;
        let (keys, rows) = s.keys()?;
        let key = |r: &RowAt| (&keys[r.job.0 as usize..r.job.1 as usize], r.attempt_no);
        let first = rows.partition_point(|r| key(r) < (job_id.as_bytes(), 0));
        let count = rows[first..]
            .iter()
            .take_while(|r| key(r).0 == job_id.as_bytes())
            .count();
        if count == 0 {
            return Ok(Vec::new());
        }
        let end_of = |i: usize| if i == 0 { 0 } else { rows[i - 1].value_end as usize };
        let mut values = Vec::new();
        let (start, end) = (end_of(first), rows[first + count - 1].value_end as usize);
        let at = s.values_onto(&mut values, start..end)?;
        Ok(rows[first..first + count]
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let from = at + end_of(first + i) - start;
                (r.attempt_no, values[from..at + r.value_end as usize - start].to_vec())
            })
            .collect())
    }

    /// The stored value of the row holding `key` in a stored block, if it holds one: the keys are
    /// unpacked, and of the values only the frames the row lies in (the whole section in the
    /// one-frame layout). Errors as [`Block::decode`].
    pub fn row_value(stored: &[u8], key: (&str, u32)) -> Result<Option<Vec<u8>>, String> {
        let s = sections(stored)?;
        let (keys, rows) = s.keys()?;
        let key_of = |r: &RowAt| (&keys[r.job.0 as usize..r.job.1 as usize], r.attempt_no);
        let Ok(i) = rows.binary_search_by(|r| key_of(r).cmp(&(key.0.as_bytes(), key.1))) else {
            return Ok(None);
        };
        let (start, end) = (
            if i == 0 { 0 } else { rows[i - 1].value_end as usize },
            rows[i].value_end as usize,
        );
        let mut values = Vec::new();
        let at = s.values_onto(&mut values, start..end)?;
        Ok(Some(values[at..at + end - start].to_vec()))
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the block holds no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`'s key (job_id, attempt_no).
    pub fn key(&self, i: usize) -> (&str, u32) {
        let r = self.rows[i];
        let job = &self.keys[r.job.0 as usize..r.job.1 as usize];
        // `read_keys` checked every job_id is UTF-8.
        (std::str::from_utf8(job).unwrap_or_default(), r.attempt_no)
    }

    /// Row `i`'s key with the job_id as bytes, unchecked: what merges compare (bytes order as the
    /// strings do), without [`Block::key`]'s UTF-8 check on every comparison.
    pub fn key_bytes(&self, i: usize) -> (&[u8], u32) {
        let r = self.rows[i];
        (&self.keys[r.job.0 as usize..r.job.1 as usize], r.attempt_no)
    }

    /// Row `i`'s stored value.
    pub fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.rows[i - 1].value_end as usize };
        &self.values[start..self.rows[i].value_end as usize]
    }

    /// The row holding `key`, or where it would go: a binary search.
    pub fn find(&self, key: (&str, u32)) -> Result<usize, usize> {
        let mut lo = 0;
        let mut hi = self.rows.len();
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
}

/// Rows pushed in key order, packed into a block by [`BlockBuilder::finish`].
#[derive(Debug, Default)]
pub struct BlockBuilder {
    keys: Vec<u8>,
    values: Vec<u8>,
    rows: Vec<RowAt>,
}

impl BlockBuilder {
    /// Adds a row after every row pushed so far; the caller keeps the key order.
    pub fn push(&mut self, job_id: &str, attempt_no: u32, value: &[u8]) {
        debug_assert!(
            self.last().is_none_or(|l| l < (job_id, attempt_no)),
            "rows pushed in key order"
        );
        varint::put(&mut self.keys, job_id.len() as u64);
        let start = self.keys.len() as u32;
        self.keys.extend_from_slice(job_id.as_bytes());
        let end = self.keys.len() as u32;
        varint::put(&mut self.keys, u64::from(attempt_no));
        varint::put(&mut self.keys, value.len() as u64);
        self.values.extend_from_slice(value);
        self.rows.push(RowAt {
            job: (start, end),
            attempt_no,
            value_end: self.values.len() as u32,
        });
    }

    /// Every row of an unpacked block, in order, after the rows pushed so far.
    pub fn push_block(&mut self, block: &Block) {
        for i in 0..block.len() {
            let (job, no) = block.key(i);
            self.push(job, no, block.value(i));
        }
    }

    /// The number of rows pushed.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The bytes pushed, keys and values, unpacked: a block is full at [`raw_target`].
    pub fn raw_bytes(&self) -> usize {
        self.keys.len() + self.values.len()
    }

    fn row(&self, i: usize) -> ((&str, u32), &[u8]) {
        let r = self.rows[i];
        let job = &self.keys[r.job.0 as usize..r.job.1 as usize];
        let start = if i == 0 { 0 } else { self.rows[i - 1].value_end as usize };
        (
            (std::str::from_utf8(job).unwrap_or_default(), r.attempt_no),
            &self.values[start..r.value_end as usize],
        )
    }

    /// [`BlockBuilder::finish`], cutting the rows in two (and again) while a packed block comes
    /// out over [`STORED_MAX`]: the blocks in key order, each with its last key.
    pub fn finish_within(&mut self) -> Vec<((String, u32), Vec<u8>)> {
        let rows = self.rows.len();
        let Some(packed) = self.packed() else {
            return Vec::new();
        };
        if packed.1.len() <= STORED_MAX || rows < 2 {
            self.clear();
            return vec![packed];
        }
        let mut halves = [BlockBuilder::default(), BlockBuilder::default()];
        for i in 0..rows {
            let ((job, no), value) = self.row(i);
            halves[usize::from(i >= rows / 2)].push(job, no, value);
        }
        self.clear();
        let [mut a, mut b] = halves;
        let mut out = a.finish_within();
        out.extend(b.finish_within());
        out
    }

    /// The rows pushed, packed: their last key and the stored block (filtered layout).
    fn packed(&self) -> Option<((String, u32), Vec<u8>)> {
        self.packed_as(true)
    }

    /// The rows pushed, packed in the framed layout, with the key filter (format version 8) or
    /// without it (version 7).
    fn packed_as(&self, filtered: bool) -> Option<((String, u32), Vec<u8>)> {
        let (job, no) = self.last()?;
        let last = (job.to_string(), no);
        let mut out = Vec::with_capacity(self.values.len() / 3 + self.rows.len() * 2 + 64);
        if filtered {
            out.extend_from_slice(&FILTERED);
            let filter =
                crate::storage::key_filter::build((0..self.rows.len()).map(|i| self.row(i).0), self.rows.len());
            varint::put(&mut out, filter.len() as u64);
            out.extend_from_slice(&filter);
        } else {
            out.push(FRAMED);
        }
        self.put_header(&mut out);
        varint::put(&mut out, FRAME_RAW as u64);
        let mut frame = Vec::new();
        for raw in self.values.chunks(FRAME_RAW) {
            frame.clear();
            pack(&mut frame, raw);
            varint::put(&mut out, frame.len() as u64);
            out.extend_from_slice(&frame);
        }
        Some((last, out))
    }

    /// Puts a stored block's header after the tag: the row count, the keys section (packed)
    /// and the values' length.
    fn put_header(&self, out: &mut Vec<u8>) {
        varint::put(out, self.rows.len() as u64);
        varint::put(out, self.keys.len() as u64);
        let mut keys = Vec::new();
        pack(&mut keys, &self.keys);
        varint::put(out, keys.len() as u64);
        out.extend_from_slice(&keys);
        varint::put(out, self.values.len() as u64);
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.rows.clear();
    }

    /// The last key pushed.
    pub fn last(&self) -> Option<(&str, u32)> {
        self.rows.last().map(|r| {
            let job = &self.keys[r.job.0 as usize..r.job.1 as usize];
            (std::str::from_utf8(job).unwrap_or_default(), r.attempt_no)
        })
    }

    /// The row holding `key` among those pushed: a binary search.
    pub fn get(&self, key: (&str, u32)) -> Option<&[u8]> {
        let key_of = |r: &RowAt| {
            let job = &self.keys[r.job.0 as usize..r.job.1 as usize];
            (std::str::from_utf8(job).unwrap_or_default(), r.attempt_no)
        };
        let i = self.rows.binary_search_by(|r| key_of(r).cmp(&key)).ok()?;
        let start = if i == 0 { 0 } else { self.rows[i - 1].value_end as usize };
        Some(&self.values[start..self.rows[i].value_end as usize])
    }

    /// Packs the rows pushed into a stored block and empties the builder (its buffers kept).
    /// Returns the block's last key, owned, and the stored bytes; `None` when nothing was pushed.
    pub fn finish(&mut self) -> Option<((String, u32), Vec<u8>)> {
        let packed = self.packed();
        self.clear();
        packed
    }
}

/// A stored block (any layout) in format version 7's framed layout without a key filter, rows
/// unchanged: to hand a file back to an older laneledger, and for tests that a version 7 file
/// still reads.
///
/// Errors: the text of what does not read, as [`Block::decode`].
pub fn to_format_7(stored: &[u8]) -> Result<Vec<u8>, String> {
    let mut b = BlockBuilder::default();
    b.push_block(&Block::decode(stored)?);
    Ok(b.packed_as(false).map(|(_, out)| out).unwrap_or_default())
}

/// A stored block (any layout) in format version 6's one-frame layout, rows unchanged: to
/// hand a file back to an older laneledger, and for tests that a version 6 file still reads.
///
/// Errors: the text of what does not read, as [`Block::decode`].
pub fn to_format_6(stored: &[u8]) -> Result<Vec<u8>, String> {
    let mut b = BlockBuilder::default();
    b.push_block(&Block::decode(stored)?);
    let mut out = Vec::new();
    b.put_header(&mut out);
    pack(&mut out, &b.values);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        for j in 0..300u32 {
            for n in 1..=(j % 3 + 1) {
                let job = format!("job-{j:06}");
                let value: Vec<u8> = format!("{job}/{n} free ok {}", j * 7 + n).into_bytes();
                out.push((job, n, value));
            }
        }
        out.push(("job-ü".into(), u32::MAX, Vec::new()));
        out
    }

    #[test]
    fn a_block_gives_back_every_key_and_value_it_was_built_from() {
        let rows = rows();
        let mut b = BlockBuilder::default();
        for (job, n, v) in &rows {
            b.push(job, *n, v);
        }
        assert_eq!(b.get(("job-000004", 2)), Some(&b"job-000004/2 free ok 30"[..]));
        assert_eq!(b.get(("job-000004", 3)), None);
        let (last, stored) = b.finish().unwrap();
        assert!(b.is_empty() && b.finish().is_none());
        assert_eq!(last, ("job-ü".to_string(), u32::MAX));
        assert_eq!(block_rows(&stored), Ok(rows.len()));
        assert!(
            stored.len() < rows.iter().map(|r| r.2.len()).sum::<usize>(),
            "keys and values packed take less than the values"
        );

        let block = Block::decode(&stored).unwrap();
        assert_eq!(block.len(), rows.len());
        for (i, (job, n, v)) in rows.iter().enumerate() {
            assert_eq!(block.key(i), (job.as_str(), *n));
            assert_eq!(block.value(i), v.as_slice());
            assert_eq!(block.find((job, *n)), Ok(i));
        }
        assert_eq!(block.find(("job-000000", 0)), Err(0));
        assert_eq!(block.find(("job-000001", 3)), Err(3));
        assert_eq!(block.find(("zzz", 0)), Err(rows.len()));

        let (mut bytes, mut ends) = (b"before".to_vec(), vec![6]);
        Block::values_onto(&stored, &mut bytes, &mut ends).unwrap();
        let mut start = 6;
        for ((_, _, v), end) in rows.iter().zip(&ends[1..]) {
            assert_eq!(&bytes[start..*end], v.as_slice());
            start = *end;
        }
    }

    /// Rows that do not pack (random bytes) past a page's worth come out as several blocks, each
    /// within [`STORED_MAX`], that hold every row in order.
    #[test]
    fn a_block_over_a_page_is_cut_into_blocks_within_it() {
        let mut rng = crate::drill::SplitMix64::new(3);
        let mut b = BlockBuilder::default();
        let mut rows = Vec::new();
        for j in 0..400u32 {
            let value: Vec<u8> = (0..200).map(|_| rng.next_u64() as u8).collect();
            b.push(&format!("job-{j:04}"), 1, &value);
            rows.push((format!("job-{j:04}"), value));
        }
        assert!(b.raw_bytes() > 2 * STORED_MAX);
        let blocks = b.finish_within();
        assert!(b.is_empty());
        assert!(blocks.len() >= 3, "{} blocks", blocks.len());
        let mut back = Vec::new();
        for (last, stored) in &blocks {
            assert!(stored.len() <= STORED_MAX, "{}", stored.len());
            let block = Block::decode(stored).unwrap();
            assert_eq!(block.key(block.len() - 1), (last.0.as_str(), last.1));
            for i in 0..block.len() {
                back.push((block.key(i).0.to_string(), block.value(i).to_vec()));
            }
        }
        assert_eq!(back, rows);
    }

    /// One job's rows read the same from the framed layout and from format version 6's one
    /// frame, and the framed lookup unpacks only the frames they lie in: with the block's tail
    /// cut off, the first jobs still read while the whole block does not.
    #[test]
    fn one_job_reads_alike_from_either_layout_and_only_its_frames() {
        let mut rows = Vec::new();
        for j in 0..400u32 {
            for n in 1..=(j % 4 + 1) {
                let value = format!("job-{j:05}/{n} {}", "free ok ".repeat((j % 9) as usize * 4));
                rows.push((format!("job-{j:05}"), n, value.into_bytes()));
            }
        }
        let mut b = BlockBuilder::default();
        for (job, n, v) in &rows {
            b.push(job, *n, v);
        }
        assert!(b.values.len() > 4 * FRAME_RAW, "{} value bytes", b.values.len());
        let (_, filtered) = b.finish().unwrap();
        let framed = to_format_7(&filtered).unwrap();
        let old = to_format_6(&framed).unwrap();
        assert_eq!(
            (&filtered[..2], framed[0], framed[1], old[0]),
            (&FILTERED[..], FRAMED, 0xe8, 0xe8),
            "the tags, and 1,000 rows' first varint byte"
        );
        // The filter: 10 bits a row.
        assert_eq!(filtered.len() - framed.len(), 1 + 2 + 1 + 1000 * 10 / 8);
        assert_eq!(block_raw_bytes(&framed), block_raw_bytes(&old));
        assert_eq!(block_raw_bytes(&filtered), block_raw_bytes(&old));
        assert_eq!(
            (block_rows(&filtered), block_rows(&framed), block_rows(&old)),
            (Ok(1000), Ok(1000), Ok(1000))
        );
        assert_eq!(
            Block::decode(&filtered).unwrap().keys,
            Block::decode(&framed).unwrap().keys
        );
        for job in ["job-00000", "job-00399", "job-07"] {
            assert_eq!(Block::job_values(&filtered, job), Block::job_values(&framed, job));
        }

        let (a, b) = (Block::decode(&framed).unwrap(), Block::decode(&old).unwrap());
        assert_eq!(a.len(), rows.len());
        for (i, (job, n, v)) in rows.iter().enumerate() {
            assert_eq!((a.key(i), a.value(i)), ((job.as_str(), *n), v.as_slice()));
            assert_eq!((b.key(i), b.value(i)), ((job.as_str(), *n), v.as_slice()));
        }
        let mut ends = [Vec::new(), Vec::new()];
        let mut bytes = [Vec::new(), Vec::new()];
        for (i, stored) in [&framed, &old].into_iter().enumerate() {
            Block::values_onto(stored, &mut bytes[i], &mut ends[i]).unwrap();
        }
        assert_eq!((&bytes[0], &ends[0]), (&bytes[1], &ends[1]));

        for job in (0..400)
            .map(|j| format!("job-{j:05}"))
            .chain(["job-".into(), "zzz".into()])
        {
            let want: Vec<(u32, Vec<u8>)> = rows.iter().filter(|r| r.0 == job).map(|r| (r.1, r.2.clone())).collect();
            assert_eq!(Block::job_values(&framed, &job).unwrap(), want, "{job}");
            assert_eq!(Block::job_values(&old, &job).unwrap(), want, "{job}");
        }

        for (job, n, v) in rows.iter().step_by(3) {
            for stored in [&filtered, &framed, &old] {
                assert_eq!(
                    Block::row_value(stored, (job, *n)).unwrap().as_ref(),
                    Some(v),
                    "{job}/{n}"
                );
            }
        }
        for missing in [("job-00000", 2), ("job-", 1), ("zzz", 1)] {
            assert_eq!(Block::row_value(&filtered, missing), Ok(None));
        }
        let cut = &framed[..framed.len() - 1];
        assert_eq!(Block::decode(cut).unwrap_err(), "a values frame runs past the block");
        assert_eq!(Block::job_values(cut, "job-00001").unwrap().len(), 2);
        assert_eq!(
            Block::row_value(cut, ("job-00001", 2)).unwrap().as_ref(),
            Some(&rows[2].2)
        );
        assert!(Block::job_values(&old[..old.len() - 1], "job-00001").is_err());
    }

    /// The key filter answers for every key held, and turns away nearly every key not held;
    /// a block of format version 7 or 6, with no filter, may hold any key.
    #[test]
    fn a_blocks_filter_holds_its_keys_and_turns_away_others() {
        let rows = rows();
        let mut b = BlockBuilder::default();
        for (job, n, v) in &rows {
            b.push(job, *n, v);
        }
        let (_, stored) = b.finish().unwrap();
        for (job, n, _) in &rows {
            assert_eq!(may_hold(&stored, (job, *n)), Ok(true), "{job}/{n}");
        }
        let others: Vec<(String, u32)> = (0..2000u32).map(|j| (format!("job-{j:06}"), 7)).collect();
        let passed = others
            .iter()
            .filter(|(j, n)| may_hold(&stored, (j, *n)).unwrap())
            .count();
        assert!(passed < 60, "{passed} of 2,000 keys not held passed the filter");
        for old in [to_format_7(&stored).unwrap(), to_format_6(&stored).unwrap()] {
            assert!(others.iter().all(|(j, n)| may_hold(&old, (j, *n)) == Ok(true)));
        }
    }

    /// A format version 6 block of one row starts with the byte 1 (its row count), and one of
    /// 128 rows with 0x80: neither is taken for a tag.
    #[test]
    fn small_format_6_blocks_are_not_taken_for_tagged_ones() {
        for count in [1u32, 128, 256] {
            let mut b = BlockBuilder::default();
            for j in 0..count {
                b.push(&format!("job-{j:04}"), 1, format!("value {j}").as_bytes());
            }
            let (_, stored) = b.finish().unwrap();
            let old = to_format_6(&stored).unwrap();
            assert_ne!(old[0], 0);
            assert_eq!(block_rows(&old), Ok(count as usize));
            let block = Block::decode(&old).unwrap();
            assert_eq!((block.len(), block.key(0)), (count as usize, ("job-0000", 1)));
            assert_eq!(may_hold(&old, ("anything", 1)), Ok(true));
        }
    }

    #[test]
    fn the_raw_target_packs_to_nine_tenths_of_a_page() {
        assert_eq!(raw_target(0, 0), 3 * STORED_MAX);
        assert_eq!(raw_target(300, 100), (STORED_MAX as f64 * 0.9 * 3.0) as usize);
        assert_eq!(raw_target(100, 100), (STORED_MAX as f64 * 0.9) as usize);
        assert_eq!(raw_target(100, 1000), STORED_MAX / 2, "at least half a page");
        assert_eq!(raw_target(1000, 1), 16 * STORED_MAX, "at most sixteen pages");
    }

    #[test]
    fn a_damaged_block_is_an_error_not_a_panic() {
        let mut b = BlockBuilder::default();
        for (job, n, v) in rows() {
            b.push(&job, n, &v);
        }
        let (_, stored) = b.finish().unwrap();
        for cut in [0, 1, 3, 10, stored.len() / 2, stored.len() - 1] {
            assert!(Block::decode(&stored[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = stored.clone();
        // The row count's first byte, after the tag and the key filter.
        let (at, _, _) = layout(&stored).unwrap();
        flipped[at] ^= 1;
        let (n, bytes) = (rows().len(), rows().iter().map(|r| r.2.len()).sum::<usize>());
        assert_eq!(
            Block::decode(&flipped).unwrap_err(),
            format!(
                "the block says {} rows and {bytes} value bytes, its keys {n} and {bytes}",
                n ^ 1
            )
        );
    }
}

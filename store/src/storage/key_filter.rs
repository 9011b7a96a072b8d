//! A Bloom filter over an attempt block's keys (format version 8): whether a block may hold a
//! (job_id, attempt_no), answered from a few hundred stored bytes without unpacking the block.
//!
//! The write path asks, for every attempt whose key does not sort above every key held, whether
//! that key is already held, and the one block whose key range covers it is the only place it can
//! be. A router's random ids (UUIDs, `chatcmpl-…`, trace ids) land inside that range nearly every
//! time, and unpacking a block to answer took nearly all of such an ingest's time. With the
//! filter, a new key costs one probe of the block's stored bytes; a held key (a re-delivery, a
//! completion) still unpacks the block, as before.
//!
//! A sorted run's filter ([`crate::storage::attempt_store`]) is larger and *blocked* (format
//! version 10): [`RUN_BITS_PER_KEY`] bits a key, because a key that passes costs a read of one of
//! the run's blocks, a random page of the file, and a new key is asked of every run (twenty at
//! 10 M attempts), so at a block's 1% a sixth of a random-id ingest's new keys read a page they
//! did not need; and all of a key's probes in one 64-byte line of the filter, because a run's
//! filter is a megabyte or more and each probe of a plain filter is a miss of the CPU's caches
//! (asking twenty runs was a sixth of the writer's time in a 10 M random-id ingest).
//!
//! Layout of a plain filter: one byte `k` (the number of probes), then the bit array,
//! [`BITS_PER_KEY`] bits a key rounded up to whole bytes. A key's probes are `h1 + i·h2 (mod bits)`
//! for `i` in `0..k` (Kirsch and Mitzenmacher's double hashing), from one 64-bit XXH3 of the
//! job_id's bytes and the attempt number's four little-endian bytes. XXH3 is specified byte for
//! byte, so a filter stored by one build reads the same in any other.
//!
//! Layout of a blocked filter: one byte `0x80 | k`, then lines of 64 bytes (512 bits),
//! [`RUN_BITS_PER_KEY`] bits a key rounded up to whole lines. A key's line is the top 32 bits of
//! the hash times the number of lines, shifted right by 32; its probes are the top nine bits of
//! `g`, `g·φ`, `g·φ²`, … (32-bit products, `g` the hash's low 32 bits, `φ` = 0x9E3779B9). A
//! reader takes the kind, `k` and the size from the bytes, so runs stored by format 9 (plain
//! filters) read as they are.

use twox_hash::XxHash3_64;

/// Bits of filter a key: about 1% of keys not held pass (with [`PROBES`] probes).
pub const BITS_PER_KEY: usize = 10;

/// Probes a key: near the best for [`BITS_PER_KEY`] (10 · ln 2 ≈ 6.9).
pub const PROBES: u8 = 7;

/// Bits of filter a key of a sorted run: about one in 1,000 keys not held pass its blocked filter
/// (with [`RUN_PROBES`] probes; one in 2,000 would pass a plain one).
pub const RUN_BITS_PER_KEY: usize = 16;

/// Probes a key of a sorted run: near the best for [`RUN_BITS_PER_KEY`] (16 · ln 2 ≈ 11.1).
pub const RUN_PROBES: u8 = 11;

/// The bit of a filter's first byte that marks it blocked (the probe count in the others).
const BLOCKED: u8 = 0x80;

/// Bytes a line of a blocked filter: one cache line.
const LINE: usize = 64;

/// The 64-bit hash a key's probes come from.
pub fn hash(job_id: &str, attempt_no: u32) -> u64 {
    let mut buf = [0u8; 128];
    let job = job_id.as_bytes();
    if job.len() + 4 <= buf.len() {
        buf[..job.len()].copy_from_slice(job);
        buf[job.len()..job.len() + 4].copy_from_slice(&attempt_no.to_le_bytes());
        XxHash3_64::oneshot(&buf[..job.len() + 4])
    } else {
        let mut long = Vec::with_capacity(job.len() + 4);
        long.extend_from_slice(job);
        long.extend_from_slice(&attempt_no.to_le_bytes());
        XxHash3_64::oneshot(&long)
    }
}

/// The bit positions of the probes of a key of hash `h` ([`hash`]).
fn probes_of(h: u64, k: u8, bits: u64) -> impl Iterator<Item = u64> {
    let (h1, h2) = (h & 0xffff_ffff, (h >> 32) | 1);
    (0..u64::from(k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
}

/// The filter of `keys` (`count` of them), to store.
pub fn build<'a>(keys: impl Iterator<Item = (&'a str, u32)>, count: usize) -> Vec<u8> {
    build_hashed(keys.map(|(job, no)| hash(job, no)), count)
}

/// The filter of the keys whose [`hash`]es these are (`count` of them), to store: the same bytes
/// as [`build`] of the keys.
pub fn build_hashed(hashes: impl Iterator<Item = u64>, count: usize) -> Vec<u8> {
    let bytes = (count * BITS_PER_KEY).div_ceil(8).max(8);
    let mut out = vec![0u8; 1 + bytes];
    out[0] = PROBES;
    let bits = (bytes * 8) as u64;
    for h in hashes {
        for p in probes_of(h, PROBES, bits) {
            out[1 + (p / 8) as usize] |= 1 << (p % 8);
        }
    }
    out
}

/// The blocked filter of a run's keys, whose [`hash`]es these are (`count` of them), to store:
/// [`RUN_BITS_PER_KEY`] bits a key, rounded up to whole lines, and [`RUN_PROBES`] probes.
pub fn build_blocked(hashes: impl Iterator<Item = u64>, count: usize) -> Vec<u8> {
    let lines = (count * RUN_BITS_PER_KEY).div_ceil(LINE * 8).max(1);
    let mut out = vec![0u8; 1 + lines * LINE];
    out[0] = BLOCKED | RUN_PROBES;
    for h in hashes {
        let line = &mut out[1 + line_of(h, lines) * LINE..][..LINE];
        for bit in line_probes(h, RUN_PROBES) {
            line[bit / 8] |= 1 << (bit % 8);
        }
    }
    out
}

/// The line of a blocked filter of `lines` lines that a key of hash `h` lies in.
fn line_of(h: u64, lines: usize) -> usize {
    (((h >> 32) * lines as u64) >> 32) as usize
}

/// The bits, within its line, of the probes of a key of hash `h`.
fn line_probes(h: u64, k: u8) -> impl Iterator<Item = usize> {
    let mut g = h as u32;
    (0..k).map(move |_| {
        let bit = (g >> 23) as usize;
        g = g.wrapping_mul(0x9E37_79B9);
        bit
    })
}

/// Whether the keys `filter` was built from may include (job_id, attempt_no): `false` means they
/// do not. Errors: the text of a filter that does not read (no bit array, or no probe count).
pub fn may_hold(filter: &[u8], job_id: &str, attempt_no: u32) -> Result<bool, String> {
    may_hold_hashed(filter, hash(job_id, attempt_no))
}

/// [`may_hold`] for the key whose [`hash`] is `h`: a key asked of many filters (one a run) is
/// hashed once.
pub fn may_hold_hashed(filter: &[u8], h: u64) -> Result<bool, String> {
    let (&k, array) = filter.split_first().ok_or("the key filter is empty")?;
    if k & BLOCKED != 0 {
        let k = k & !BLOCKED;
        if array.is_empty() || array.len() % LINE != 0 || k == 0 {
            return Err(format!(
                "the blocked key filter has {} bytes and {k} probes",
                array.len()
            ));
        }
        let line = &array[line_of(h, array.len() / LINE) * LINE..][..LINE];
        return Ok(line_probes(h, k).all(|bit| line[bit / 8] & (1 << (bit % 8)) != 0));
    }
    if array.is_empty() || k == 0 {
        return Err(format!("the key filter has {} bytes and {k} probes", array.len()));
    }
    let bits = (array.len() * 8) as u64;
    Ok(probes_of(h, k, bits).all(|p| array[(p / 8) as usize] & (1 << (p % 8)) != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_built_in_is_held_and_about_one_in_a_hundred_others_pass() {
        let keys: Vec<(String, u32)> = (0..5000u32)
            .map(|i| (format!("req_{:024x}", i * 7919), i % 4 + 1))
            .collect();
        let filter = build(keys.iter().map(|(j, n)| (j.as_str(), *n)), keys.len());
        assert_eq!(filter.len(), 1 + 5000 * 10 / 8);
        assert_eq!(filter[0], PROBES);
        for (j, n) in &keys {
            assert!(may_hold(&filter, j, *n).unwrap(), "{j}/{n}");
        }
        let passed = (0..100_000u32)
            .filter(|i| may_hold(&filter, &format!("req_{:024x}", i * 7919 + 1), 1).unwrap())
            .count();
        // 10 bits and 7 probes a key: 0.82% expected.
        assert!(
            (400..1300).contains(&passed),
            "{passed} of 100,000 keys not held passed"
        );
        // The same job with another attempt number is another key.
        let other_attempt = (0..5000u32)
            .filter(|i| may_hold(&filter, &format!("req_{:024x}", i * 7919), 9).unwrap())
            .count();
        assert!(other_attempt < 100, "{other_attempt}");
    }

    #[test]
    fn a_run_filter_holds_every_key_and_lets_about_one_in_a_thousand_others_pass() {
        let keys: Vec<u64> = (0..20_000u32)
            .map(|i| hash(&format!("req_{:024x}", i * 7919), 1))
            .collect();
        let filter = build_blocked(keys.iter().copied(), keys.len());
        assert_eq!(filter.len(), 1 + (20_000 * 16usize).div_ceil(512) * 64);
        assert_eq!(filter[0], 0x80 | RUN_PROBES);
        assert!(keys.iter().all(|&h| may_hold_hashed(&filter, h).unwrap()));
        let passed = (0..200_000u32)
            .filter(|i| may_hold(&filter, &format!("req_{:024x}", i * 7919 + 1), 1).unwrap())
            .count();
        // 16 bits and 11 probes a key in 512-bit lines: about 0.1%, against a plain filter's
        // 0.046%. XXH3 is fixed, so the count is too.
        assert_eq!(passed, 186, "{passed} of 200,000 keys not held passed");
        // A plain filter (what format 9 stored for a run) still reads.
        let plain = build_hashed(keys.iter().copied(), keys.len());
        assert_eq!(plain[0], PROBES);
        assert!(keys.iter().all(|&h| may_hold_hashed(&plain, h).unwrap()));
    }

    #[test]
    fn the_probes_are_fixed_by_the_key_bytes() {
        // XXH3-64 of "job-1" followed by 1u32 little-endian: a stored filter must read the same
        // in every build, so the hash may never change.
        assert_eq!(hash("job-1", 1), XxHash3_64::oneshot(b"job-1\x01\x00\x00\x00"));
        let long = "x".repeat(300);
        let mut bytes = long.clone().into_bytes();
        bytes.extend_from_slice(&7u32.to_le_bytes());
        assert_eq!(hash(&long, 7), XxHash3_64::oneshot(&bytes));
        let filter = build([("job-1", 1), (long.as_str(), 7)].into_iter(), 2);
        assert_eq!(filter.len(), 9);
        assert!(may_hold(&filter, "job-1", 1).unwrap() && may_hold(&filter, &long, 7).unwrap());
    }

    #[test]
    fn a_damaged_filter_is_an_error() {
        assert!(may_hold(&[], "a", 1).is_err());
        assert!(may_hold(&[7], "a", 1).is_err());
        assert!(may_hold(&[0, 255], "a", 1).is_err());
        assert!(may_hold(&[0x8b], "a", 1).is_err());
        assert!(may_hold(&[0x8b, 255, 255], "a", 1).is_err());
        assert!(may_hold(&[0x80; 65], "a", 1).is_err());
    }
}

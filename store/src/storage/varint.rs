//! LEB128 varints: the length that frames each entry of a chain block ([`crate::storage::chain`]), and
//! the field lengths and attempt numbers of an idem_key index block ([`crate::storage::idem_index`]).

/// Appends `v` as LEB128: seven bits a byte, lowest first, the high bit set on every byte but
/// the last (1 byte below 128, 10 bytes at most).
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the LEB128 varint at `*at` and moves `*at` past it.
///
/// Errors: the text of a varint cut by the end of `bytes`, or of one running over 64 bits.
pub(crate) fn get(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let Some(&b) = bytes.get(*at) else {
            return Err(format!("a varint is cut at byte {at}"));
        };
        *at += 1;
        if shift > 63 {
            return Err(format!("a varint runs over 64 bits at byte {at}"));
        }
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_take_their_leb128_bytes_and_read_back() {
        for (v, bytes) in [
            (0u64, vec![0x00]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (300, vec![0xac, 0x02]),
            (
                u64::MAX,
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut out = Vec::new();
            put(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            let mut at = 0;
            assert_eq!(get(&out, &mut at), Ok(v));
            assert_eq!(at, bytes.len());
        }
    }

    #[test]
    fn a_cut_or_overlong_varint_is_an_error() {
        let mut at = 0;
        assert_eq!(
            get(&[0x80, 0x80], &mut at),
            Err("a varint is cut at byte 2".to_string())
        );
        let mut at = 0;
        assert_eq!(
            get(&[0x80; 11], &mut at),
            Err("a varint runs over 64 bits at byte 11".to_string())
        );
    }
}

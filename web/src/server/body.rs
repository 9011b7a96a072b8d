//! Write request bodies into records: gzip undone, then NDJSON, a JSON array or CSV, each record
//! decoded by the same rules as `laneledger ingest` (SPEC 1, `store::parse`).
//!
//! A record that fails its rules becomes a [`Framed::Reject`] (kept in `ingest_reject`, answered
//! `rejected`); only a body that cannot be framed at all (bad gzip, a JSON array that is not
//! valid JSON, no record) is a [`BodyError`], answered 400 and written nowhere.

use std::io::Read;

use axum::http::{HeaderMap, header};
use laneledger_store::format::parse::{Framed, InputFormat, LineReader, RecordDecoder};
use laneledger_store::{Reject, now_micros};
use serde_json::value::RawValue;

/// Why a body could not be framed into records.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    /// The body, or the body once un-gzipped, is larger than the limit (bytes) (HTTP 413).
    #[error("the body is larger than {0} bytes once decompressed")]
    TooLarge(usize),
    /// `Content-Encoding` other than `gzip` or `identity` (HTTP 415).
    #[error("Content-Encoding {0:?} is not supported; send gzip or identity")]
    Encoding(String),
    /// The gzip stream is damaged (HTTP 400).
    #[error("the gzip body cannot be read: {0}")]
    Gzip(String),
    /// The body starts with `[` but is not a valid JSON array (HTTP 400).
    #[error("the body is not a valid JSON array: {0}")]
    Array(String),
    /// The body holds no record (HTTP 400).
    #[error("the body holds no record")]
    Empty,
}

/// Undoes `Content-Encoding: gzip`, refusing output larger than `limit` bytes.
///
/// Errors: [`BodyError::Encoding`], [`BodyError::Gzip`], [`BodyError::TooLarge`].
pub fn decompress(headers: &HeaderMap, body: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_lowercase())
        .unwrap_or_default();
    match encoding.as_str() {
        "" | "identity" => {
            if body.len() > limit {
                return Err(BodyError::TooLarge(limit));
            }
            Ok(body.to_vec())
        }
        "gzip" | "x-gzip" => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(body)
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| BodyError::Gzip(e.to_string()))?;
            if out.len() > limit {
                return Err(BodyError::TooLarge(limit));
            }
            Ok(out)
        }
        other => Err(BodyError::Encoding(other.to_string())),
    }
}

/// How a body is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON object a line (`application/x-ndjson`, the default).
    Ndjson,
    /// A JSON array of objects (`application/json` whose first byte is `[`).
    Array,
    /// A header row, then one record a row (`text/csv`).
    Csv,
}

/// The body's layout: `text/csv` is CSV; otherwise a body whose first non-blank byte is `[` is a
/// JSON array, and anything else NDJSON.
pub fn body_format(headers: &HeaderMap, body: &[u8]) -> BodyFormat {
    let csv = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("text/csv"));
    if csv {
        return BodyFormat::Csv;
    }
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => BodyFormat::Array,
        _ => BodyFormat::Ndjson,
    }
}

/// Frames `body` into records decoded by `D`, naming `source` in rejects. Line numbers are the
/// NDJSON line, the CSV row's first line, or the array element (1-based).
///
/// Errors: [`BodyError::Array`] for an array that is not valid JSON (bad UTF-8, nesting deeper
/// than 128, a syntax error), [`BodyError::Empty`] when no record is found.
pub fn frame<D: RecordDecoder>(
    source: &str,
    format: BodyFormat,
    body: &[u8],
) -> Result<Vec<Framed<D::Record>>, BodyError> {
    frame_into::<D, _>(source, format, body, 0, |f| f)
}

/// [`frame`], each framed record turned by `each` as it is read, into a vector made with room for
/// `records` (the count [`count_records`] gave): a body's records are held once, in the shape the
/// writer takes, not first as framed records then again converted (a record in either shape is
/// about 300 bytes, so for a body of tiny records that copy, not the body, is what costs).
pub fn frame_into<D: RecordDecoder, T>(
    source: &str,
    format: BodyFormat,
    body: &[u8],
    records: usize,
    mut each: impl FnMut(Framed<D::Record>) -> T,
) -> Result<Vec<T>, BodyError> {
    let mut out: Vec<T> = Vec::with_capacity(records);
    match format {
        BodyFormat::Ndjson | BodyFormat::Csv => {
            let input = if format == BodyFormat::Csv {
                InputFormat::Csv
            } else {
                InputFormat::Ndjson
            };
            // Reading from memory cannot fail, so every item is Ok.
            out.extend(
                LineReader::<&[u8], D>::new(source, body, input)
                    .filter_map(Result::ok)
                    .map(&mut each),
            );
        }
        BodyFormat::Array => {
            let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
            let elements: Vec<&RawValue> = serde_json::from_slice(body).map_err(|e| BodyError::Array(e.to_string()))?;
            out.reserve(elements.len());
            out.extend(elements.into_iter().enumerate().map(|(i, element)| {
                let line = i as u64 + 1;
                let raw = element.get().to_string();
                each(match D::from_json(&raw) {
                    Ok(record) => Framed::Record { line, raw, record },
                    Err((field, reason)) => Framed::Reject(Reject {
                        source: source.to_string(),
                        line,
                        field,
                        reason,
                        raw,
                        received_at: now_micros(),
                    }),
                })
            }));
        }
    }
    if out.is_empty() {
        return Err(BodyError::Empty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use laneledger_store::format::parse::AttemptDecoder;

    const A: &str =
        r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z"}"#;

    fn reasons(framed: &[Framed<laneledger_store::Attempt>]) -> Vec<String> {
        framed
            .iter()
            .map(|f| match f {
                Framed::Record { line, .. } => format!("{line}: ok"),
                Framed::Reject(r) => format!("{}: {}", r.line, r.reason),
            })
            .collect()
    }

    #[test]
    fn ndjson_array_and_csv_frame_alike() {
        let nd = format!("{A}\n\n{A}\r\n");
        let f = frame::<AttemptDecoder>("t", BodyFormat::Ndjson, nd.as_bytes()).unwrap();
        assert_eq!(reasons(&f), ["1: ok", "3: ok"]);
        let arr = format!(" [ {A} , {A} ]");
        assert_eq!(body_format(&HeaderMap::new(), arr.as_bytes()), BodyFormat::Array);
        let f = frame::<AttemptDecoder>("t", BodyFormat::Array, arr.as_bytes()).unwrap();
        assert_eq!(reasons(&f), ["1: ok", "2: ok"]);
        let csv = "job_id,idem_key,attempt_no,lane,started_at\nj1,k1,1,free,2026-11-23T10:00:00Z\n";
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv"));
        assert_eq!(body_format(&h, csv.as_bytes()), BodyFormat::Csv);
        let f = frame::<AttemptDecoder>("t", BodyFormat::Csv, csv.as_bytes()).unwrap();
        assert_eq!(reasons(&f), ["2: ok"]);
    }

    #[test]
    fn hostile_records_are_rejected_one_by_one() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let body = [
            b"{\"job_id\":\"j\xff\"}".to_vec(),
            br#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z","tokens_in":NaN}"#.to_vec(),
            br#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z","tokens_in":1e400}"#.to_vec(),
            br#"{"job_id":"j1","job_id":"j2","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z"}"#.to_vec(),
            deep.into_bytes(),
            A.as_bytes().to_vec(),
        ]
        .join(&b'\n');
        let f = frame::<AttemptDecoder>("t", BodyFormat::Ndjson, &body).unwrap();
        let r = reasons(&f);
        assert_eq!(r.len(), 6);
        assert_eq!(r[0], "1: not valid UTF-8");
        for (i, line) in r[1..5].iter().enumerate() {
            assert!(
                line.starts_with(&format!("{}: ", i + 2)) && !line.ends_with("ok"),
                "{line}"
            );
        }
        assert!(r[3].contains("duplicate"), "{}", r[3]);
        assert_eq!(r[5], "6: ok");
    }

    #[test]
    fn a_broken_array_is_one_error() {
        for body in [
            b"[{\"a\":1}".to_vec(),
            b"[\"\xff\"]".to_vec(),
            b"[NaN]".to_vec(),
            b"[1e400".to_vec(),
        ] {
            let e = frame::<AttemptDecoder>("t", BodyFormat::Array, &body).unwrap_err();
            assert!(matches!(e, BodyError::Array(_)), "{e:?}");
        }
        // 10,000-deep nesting inside an array: one element, rejected (it is not an object).
        let deep = format!("[{}{}]", "[".repeat(10_000), "]".repeat(10_000));
        let f = frame::<AttemptDecoder>("t", BodyFormat::Array, deep.as_bytes()).unwrap();
        assert_eq!(f.len(), 1);
        assert!(matches!(&f[0], Framed::Reject(r) if r.line == 1), "{:?}", reasons(&f));
        assert_eq!(
            frame::<AttemptDecoder>("t", BodyFormat::Ndjson, b"\n \n").unwrap_err(),
            BodyError::Empty
        );
        assert_eq!(
            frame::<AttemptDecoder>("t", BodyFormat::Array, b"[]").unwrap_err(),
            BodyError::Empty
        );
    }

    #[test]
    fn gzip_is_undone_within_the_limit() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![b' '; 10_000]).unwrap();
        let gz = enc.finish().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(decompress(&h, &gz, 10_000).unwrap().len(), 10_000);
        assert_eq!(decompress(&h, &gz, 9_999).unwrap_err(), BodyError::TooLarge(9_999));
        assert!(matches!(decompress(&h, b"not gzip", 100), Err(BodyError::Gzip(_))));
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        assert_eq!(decompress(&h, b"x", 100).unwrap_err(), BodyError::Encoding("br".into()));
    }
}

/// How many records `body` holds at most, counted without decoding any: NDJSON's non-blank lines,
/// CSV's non-blank lines less the header (a quoted field spanning lines counts once a line), a
/// JSON array's top-level elements. Used to refuse a body past the per-request record cap before
/// the records (and a reject for each bad one) are built.
pub fn count_records(format: BodyFormat, body: &[u8]) -> usize {
    let non_blank_lines = || {
        body.split(|b| *b == b'\n')
            .filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
            .count()
    };
    match format {
        BodyFormat::Ndjson => non_blank_lines(),
        BodyFormat::Csv => non_blank_lines().saturating_sub(1),
        BodyFormat::Array => {
            // Commas at depth 1 outside strings, plus one when the array is not empty.
            let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
            let (mut commas, mut any) = (0usize, false);
            for &b in body {
                if in_string {
                    match (escaped, b) {
                        (true, _) => escaped = false,
                        (false, b'\\') => escaped = true,
                        (false, b'"') => in_string = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => {
                        in_string = true;
                        any |= depth == 1;
                    }
                    b'[' | b'{' => {
                        any |= depth == 1;
                        depth += 1;
                    }
                    b']' | b'}' => depth = depth.saturating_sub(1),
                    b',' if depth == 1 => commas += 1,
                    b if depth == 1 && !b.is_ascii_whitespace() => any = true,
                    _ => {}
                }
            }
            if any { commas + 1 } else { 0 }
        }
    }
}

#[cfg(test)]
mod count_tests {
    use super::*;

    #[test]
    fn records_are_counted_without_decoding() {
        assert_eq!(count_records(BodyFormat::Ndjson, b"{}\n\n  \n{\"a\":1}\n{}"), 3);
        assert_eq!(count_records(BodyFormat::Csv, b"job_id,lane\nj1,free\n\nj2,paid\n"), 2);
        assert_eq!(count_records(BodyFormat::Array, b" [ ] "), 0);
        assert_eq!(count_records(BodyFormat::Array, b"[{}]"), 1);
        assert_eq!(
            count_records(BodyFormat::Array, br#"[{"a":[1,2,{"b":"x,]"}]}, {}, "s,\"t", 3]"#),
            4
        );
        let million = format!("[{}]", vec!["{}"; 1_000_000].join(","));
        assert_eq!(count_records(BodyFormat::Array, million.as_bytes()), 1_000_000);
    }
}

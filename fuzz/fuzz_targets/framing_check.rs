//! The record parser's invariants, checked on any input: shared by the libFuzzer target
//! (`record_parser.rs`) and the bounded mutation test in `store/tests/parser_fuzz.rs`.
//!
//! For NDJSON and CSV, attempts and gate decisions: reading never panics and never fails (the
//! input is in memory); every line is a record or a reject with a reason; line numbers only grow;
//! an NDJSON record's raw text decodes again to the same record; and the flat-object JSON reader
//! reads each line as serde_json does, where it reads it at all.

use laneledger_store::format::decision::DecisionDecoder;
use laneledger_store::format::parse::{AttemptDecoder, Framed, InputFormat, LineReader, RecordDecoder};

/// Checks every invariant on `data`; panics on the first that fails.
pub fn check(data: &[u8]) {
    for line in data.split(|&b| b == b'\n') {
        if let Ok(line) = std::str::from_utf8(line) {
            let disagreement = laneledger_store::format::parse::flat_reader_disagreement(line);
            assert_eq!(disagreement, None, "{line:?}");
        }
    }
    for format in [InputFormat::Ndjson, InputFormat::Csv] {
        check_one::<AttemptDecoder>(data, format);
        check_one::<DecisionDecoder>(data, format);
    }
}

fn check_one<D: RecordDecoder>(data: &[u8], format: InputFormat)
where
    D::Record: PartialEq + std::fmt::Debug,
{
    let mut last = 0;
    for item in LineReader::<&[u8], D>::new("fuzz", data, format) {
        let framed = item.expect("reading from memory cannot fail");
        let line = match &framed {
            Framed::Record { line, .. } => *line,
            Framed::Reject(r) => {
                assert!(!r.reason.is_empty(), "a reject without a reason: {r:?}");
                r.line
            }
        };
        assert!(line > last, "line {line} after line {last}");
        last = line;
        if let (InputFormat::Ndjson, Framed::Record { raw, record, .. }) = (format, &framed) {
            let again = D::from_json(raw).expect("a record's raw text decodes again");
            assert_eq!(&again, record);
        }
    }
}

//! Framing a router's export into records for a mapping: NDJSON (one JSON value a line, read as it
//! streams), one JSON document (an array of records, or one object: a bucket's object file, a
//! pretty-printed export), CSV with a header row, and OpenTelemetry export requests (one record
//! per span). A line that is not JSON becomes a reject naming it; the lines after it are read.

use std::collections::VecDeque;
use std::io::{BufRead, Read};

use serde_json::{Map, Value};

use super::engine::SourceRecord;
use super::otlp::spans_from_json;
use super::spec::InputShape;
use crate::format::parse::MAX_LINE_BYTES;
use crate::model::record::Reject;
use crate::model::time::now_micros;

/// One framed item: a record, or a reject of text that is not one.
pub type Item = Result<SourceRecord, Reject>;

/// The most bytes one input read as a single JSON document may hold: 1 GiB.
pub const MAX_DOCUMENT_BYTES: u64 = 1 << 30;

/// Reads one input's records for a mapping of the given [`InputShape`].
///
/// An `Err` is an I/O error on the input itself; a bad line is `Ok(Err(Reject))`.
pub struct SourceReader<R: BufRead> {
    source: String,
    shape: InputShape,
    reader: Option<R>,
    csv: Option<csv::Reader<R>>,
    header: Vec<String>,
    line: u64,
    started: bool,
    ready: VecDeque<Item>,
    bytes_read: u64,
}

impl<R: BufRead> SourceReader<R> {
    /// Reads `reader`, naming it `source` in rejects.
    pub fn new(source: impl Into<String>, reader: R, shape: InputShape) -> Self {
        SourceReader {
            source: source.into(),
            shape,
            reader: Some(reader),
            csv: None,
            header: Vec::new(),
            line: 0,
            started: false,
            ready: VecDeque::new(),
            bytes_read: 0,
        }
    }

    /// Bytes consumed so far (for a progress bar).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn reject(&self, line: u64, reason: String, raw: String) -> Item {
        Err(Reject {
            source: self.source.clone(),
            line,
            field: None,
            reason,
            raw,
            received_at: now_micros(),
        })
    }

    /// Queues the records of one JSON value read at `line`.
    fn push_value(&mut self, line: u64, raw: &str, value: Value, array_positions: bool) {
        match (self.shape, value) {
            (InputShape::Otlp, v) => match spans_from_json(&v) {
                Ok(spans) => {
                    for span in spans {
                        let raw = span.to_string();
                        self.ready.push_back(Ok(SourceRecord { line, raw, value: span }));
                    }
                }
                Err(reason) => {
                    let r = self.reject(
                        line,
                        format!("not an OpenTelemetry export request: {reason}"),
                        clip(raw),
                    );
                    self.ready.push_back(r);
                }
            },
            (_, Value::Array(items)) if array_positions => {
                for (i, item) in items.into_iter().enumerate() {
                    let raw = item.to_string();
                    self.ready.push_back(Ok(SourceRecord {
                        line: i as u64 + 1,
                        raw,
                        value: item,
                    }));
                }
            }
            (_, value) => self.ready.push_back(Ok(SourceRecord {
                line,
                raw: raw.to_string(),
                value,
            })),
        }
    }

    /// The next non-blank line, BOM and CR stripped: `(line number, text)`.
    fn next_line(&mut self) -> std::io::Result<Option<(u64, Result<String, String>)>> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            let mut buf = Vec::new();
            let n = reader
                .by_ref()
                .take(MAX_LINE_BYTES as u64 + 2)
                .read_until(b'\n', &mut buf)?;
            if n == 0 {
                return Ok(None);
            }
            self.bytes_read += n as u64;
            self.line += 1;
            if buf.len() > MAX_LINE_BYTES + 1 && !buf.ends_with(b"\n") {
                // Skip the rest of an over-long line.
                let mut rest = Vec::new();
                let skipped = reader.read_until(b'\n', &mut rest)?;
                self.bytes_read += skipped as u64;
                return Ok(Some((
                    self.line,
                    Err(format!("line longer than {MAX_LINE_BYTES} bytes")),
                )));
            }
            let mut bytes: &[u8] = &buf;
            if self.line == 1 {
                bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            }
            let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some((
                self.line,
                std::str::from_utf8(bytes)
                    .map(str::to_string)
                    .map_err(|_| "not valid UTF-8".to_string()),
            )));
        }
    }

    /// Starts a JSON input: NDJSON when the first line is a JSON value on its own, else the whole
    /// input as one document.
    fn start_json(&mut self) -> std::io::Result<()> {
        let Some((line, first)) = self.next_line()? else {
            return Ok(());
        };
        let first = match first {
            Ok(t) => t,
            Err(reason) => {
                let r = self.reject(line, reason, String::new());
                self.ready.push_back(r);
                return Ok(());
            }
        };
        if let Ok(v) = serde_json::from_str::<Value>(&first) {
            // NDJSON, or a one-line document; a one-line array is records by position.
            let array = v.is_array();
            self.push_value(line, &first, v, array);
            return Ok(());
        }
        // A document over several lines.
        let mut text = first;
        text.push('\n');
        if let Some(reader) = self.reader.as_mut() {
            let n = reader.by_ref().take(MAX_DOCUMENT_BYTES).read_to_string(&mut text)?;
            self.bytes_read += n as u64;
        }
        self.reader = None;
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => self.push_value(line, &text, v, true),
            Err(e) => {
                let r = self.reject(
                    line,
                    format!("not JSON: line {line} is not a JSON value on its own, and the input is not one JSON document ({e})"),
                    clip(&text),
                );
                self.ready.push_back(r);
            }
        }
        Ok(())
    }

    fn next_csv(&mut self) -> Option<std::io::Result<Item>> {
        if self.csv.is_none() {
            let reader = self.reader.take()?;
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(reader);
            let mut header = csv::StringRecord::new();
            match rdr.read_record(&mut header) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Ok(self.reject(1, format!("bad CSV header: {e}"), String::new()))),
            }
            self.header = header
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let h = if i == 0 { h.trim_start_matches('\u{feff}') } else { h };
                    h.trim().to_string()
                })
                .collect();
            self.csv = Some(rdr);
        }
        let rdr = self.csv.as_mut()?;
        let mut row = csv::StringRecord::new();
        match rdr.read_record(&mut row) {
            Ok(false) => None,
            Ok(true) => {
                let line = row.position().map_or(0, |p| p.line());
                self.bytes_read = row.position().map_or(self.bytes_read, |p| p.byte());
                let raw = row.iter().map(csv_cell).collect::<Vec<_>>().join(",");
                if row.len() != self.header.len() {
                    return Some(Ok(self.reject(
                        line,
                        format!(
                            "expected {} fields as in the header, found {}",
                            self.header.len(),
                            row.len()
                        ),
                        raw,
                    )));
                }
                let mut m = Map::new();
                for (h, cell) in self.header.iter().zip(row.iter()) {
                    if cell.is_empty() {
                        continue;
                    }
                    let t = cell.trim_start();
                    let v = match t.as_bytes().first() {
                        Some(b'{' | b'[') => serde_json::from_str(t).unwrap_or_else(|_| Value::String(cell.into())),
                        _ => Value::String(cell.to_string()),
                    };
                    m.insert(h.clone(), v);
                }
                Some(Ok(Ok(SourceRecord {
                    line,
                    raw,
                    value: Value::Object(m),
                })))
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                Some(Ok(self.reject(line, format!("bad CSV row: {e}"), String::new())))
            }
        }
    }
}

impl<R: BufRead> Iterator for SourceReader<R> {
    type Item = std::io::Result<Item>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.shape == InputShape::Csv {
            return self.next_csv();
        }
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(Ok(item));
            }
            if !self.started {
                self.started = true;
                if let Err(e) = self.start_json() {
                    return Some(Err(e));
                }
                continue;
            }
            let (line, text) = match self.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            match text {
                Err(reason) => return Some(Ok(self.reject(line, reason, String::new()))),
                Ok(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(v) => self.push_value(line, &text, v, false),
                    Err(e) => return Some(Ok(self.reject(line, format!("bad JSON: {e}"), clip(&text)))),
                },
            }
        }
    }
}

/// A CSV cell as CSV text again (quoted when it must be).
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// At most 64 KiB of a text kept with a reject.
fn clip(s: &str) -> String {
    let mut end = s.len().min(64 << 10);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

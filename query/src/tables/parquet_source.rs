//! A Parquet export read as records for a mapping (Langfuse's blob-storage export writes Parquet
//! by default): each row becomes one JSON object, column name to value, as the JSON exports have
//! it.

use std::fs::File;
use std::path::Path;

use arrow::json::LineDelimitedWriter;
use laneledger_store::ingest::mapping::SourceRecord;
use laneledger_store::ingest::mapping::source::Item;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde_json::Value;

/// Rows read per Arrow batch.
const BATCH_ROWS: usize = 4096;

/// The rows of the Parquet file at `path` as source records (`line` = the 1-based row number,
/// `raw` = the row as JSON); `source` names the file in errors.
///
/// Errors: the file cannot be opened or is not Parquet. A row batch that cannot be read later is
/// an I/O error of the iterator.
pub fn parquet_records(
    path: &Path,
    source: &str,
) -> std::io::Result<impl Iterator<Item = std::io::Result<Item>> + use<>> {
    let file = File::open(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
        .map_err(|e| std::io::Error::other(format!("{source}: not a Parquet file: {e}")))?;
    Ok(Rows {
        reader,
        ready: Vec::new().into_iter(),
        row: 0,
        source: source.to_string(),
    })
}

struct Rows {
    reader: ParquetRecordBatchReader,
    ready: std::vec::IntoIter<Value>,
    row: u64,
    source: String,
}

impl Iterator for Rows {
    type Item = std::io::Result<Item>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(value) = self.ready.next() {
                self.row += 1;
                return Some(Ok(Ok(SourceRecord {
                    line: self.row,
                    raw: value.to_string(),
                    value,
                })));
            }
            let batch = match self.reader.next()? {
                Ok(b) => b,
                Err(e) => return Some(Err(std::io::Error::other(format!("{}: {e}", self.source)))),
            };
            let mut buf = Vec::new();
            let mut writer = LineDelimitedWriter::new(&mut buf);
            if let Err(e) = writer.write(&batch).and_then(|()| writer.finish()) {
                return Some(Err(std::io::Error::other(format!("{}: {e}", self.source))));
            }
            let rows: Result<Vec<Value>, _> = buf
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(serde_json::from_slice)
                .collect();
            match rows {
                Ok(rows) => self.ready = rows.into_iter(),
                Err(e) => return Some(Err(std::io::Error::other(format!("{}: {e}", self.source)))),
            }
        }
    }
}

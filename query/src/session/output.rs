//! Query results as text: an aligned table, CSV (RFC 4180 with a header row) or JSON.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::pretty::pretty_format_batches;

use crate::error::Result;
use crate::session::QueryResult;

/// Output formats for a query result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned text table.
    Table,
    /// A header row, then RFC 4180 rows: CRLF line ends, fields quoted where needed.
    Csv,
    /// A JSON array of objects, one a row; NULLs are kept as `null`.
    Json,
}

/// Formats `result` in `format`.
pub fn format_result(result: &QueryResult, format: OutputFormat) -> Result<String> {
    let nonempty: Vec<RecordBatch> = result.batches.iter().filter(|b| b.num_rows() > 0).cloned().collect();
    match format {
        OutputFormat::Table => {
            let batches = if nonempty.is_empty() {
                vec![RecordBatch::new_empty(result.schema.clone())]
            } else {
                nonempty
            };
            Ok(format!("{}\n", pretty_format_batches(&batches)?))
        }
        OutputFormat::Csv | OutputFormat::Json => {
            let mut stream = TextStream::new(format, result.schema.clone())?;
            let mut buf = Vec::new();
            for b in &nonempty {
                buf.extend(stream.batch(b)?);
            }
            buf.extend(stream.finish()?);
            Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
        }
    }
}

/// CSV or JSON made a batch at a time, for an answer streamed rather than held
/// ([`crate::Session::query_stream`]): [`TextStream::batch`] for each batch, then
/// [`TextStream::finish`]. [`format_result`] joins the same pieces.
#[derive(Debug)]
pub struct TextStream {
    format: OutputFormat,
    schema: arrow::datatypes::SchemaRef,
    /// Whether a non-empty batch was written (CSV: the header is out; JSON: a `,` goes first).
    started: bool,
}

impl TextStream {
    /// A stream of `format` (CSV or JSON; [`OutputFormat::Table`] is aligned over the whole
    /// answer and cannot be streamed) for an answer of `schema`.
    ///
    /// Errors: [`crate::Error::Plan`] for [`OutputFormat::Table`].
    pub fn new(format: OutputFormat, schema: arrow::datatypes::SchemaRef) -> Result<Self> {
        if format == OutputFormat::Table {
            return Err(crate::Error::Plan("an aligned table cannot be streamed".into()));
        }
        Ok(TextStream {
            format,
            schema,
            started: false,
        })
    }

    /// The text of `batch` (the JSON array's `[` included when it is the first).
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        if batch.num_rows() == 0 {
            return Ok(buf);
        }
        match self.format {
            OutputFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(!self.started)
                    .with_line_terminator(arrow::csv::writer::Terminator::CRLF)
                    .build(&mut buf);
                w.write(batch)?;
            }
            _ => {
                {
                    let mut w = arrow::json::WriterBuilder::new()
                        .with_explicit_nulls(true)
                        .build::<_, arrow::json::writer::JsonArray>(&mut buf);
                    w.write(batch)?;
                    w.finish()?;
                }
                // `[` + rows + `]`: the rows go on after the ones before, the `]` at the end.
                buf.pop();
                buf[0] = if self.started { b',' } else { b'[' };
            }
        }
        self.started = true;
        Ok(buf)
    }

    /// The text that ends the answer: the CSV header of an answer with no rows, the JSON `]`.
    pub fn finish(self) -> Result<Vec<u8>> {
        match (self.format, self.started) {
            (OutputFormat::Csv, true) => Ok(Vec::new()),
            (OutputFormat::Csv, false) => {
                let mut buf = Vec::new();
                {
                    let mut w = arrow::csv::WriterBuilder::new()
                        .with_header(true)
                        .with_line_terminator(arrow::csv::writer::Terminator::CRLF)
                        .build(&mut buf);
                    w.write(&RecordBatch::new_empty(self.schema.clone()))?;
                }
                Ok(buf)
            }
            (_, true) => Ok(b"]\n".to_vec()),
            (_, false) => Ok(b"[]\n".to_vec()),
        }
    }
}

/// A result as text cells for a page: the column names, and at most `max_rows` rows of cells
/// (`NULL` for a null), formatted as the table output formats them.
pub fn text_cells(result: &QueryResult, max_rows: usize) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let names = result.schema.fields().iter().map(|f| f.name().clone()).collect();
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in &result.batches {
        if rows.len() >= max_rows {
            break;
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for i in 0..batch.num_rows().min(max_rows - rows.len()) {
            rows.push(formatters.iter().map(|f| f.value(i).to_string()).collect());
        }
    }
    Ok((names, rows))
}

/// A table of text cells (a review section computed in Rust rather than by one SQL statement) as
/// a [`QueryResult`] of nullable text columns, so that it formats like any query result.
/// `None` is NULL; each row must have one cell per column.
pub fn text_table(columns: &[String], rows: &[Vec<Option<String>>]) -> Result<QueryResult> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = (0..columns.len())
        .map(|i| {
            Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| r.get(i).cloned().flatten())
                    .collect::<Vec<Option<String>>>(),
            )) as ArrayRef
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    Ok(QueryResult {
        schema,
        batches: vec![batch],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed text, batch by batch, is what [`format_result`] gives for the whole answer in
    /// one batch: one batch, several (with empty ones among them), none; nulls, quotes and commas.
    #[test]
    fn streamed_csv_and_json_equal_the_whole_answers() {
        use datafusion::arrow::array::Int64Array;
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = |from: i64, rows: i64| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter(
                        (from..from + rows).map(|i| (i % 3 != 0).then_some(i)),
                    )),
                    Arc::new(StringArray::from_iter(
                        (from..from + rows).map(|i| (i % 4 != 1).then(|| format!("say \"{i}\", then,"))),
                    )),
                ],
            )
            .unwrap()
        };
        let answers = [
            vec![batch(0, 5)],
            vec![batch(0, 3), batch(3, 0), batch(3, 4), batch(7, 1)],
            vec![batch(0, 0)],
            vec![],
        ];
        for batches in answers {
            // The answer as one batch: what the pieces joined must read as, however it was cut.
            let whole = QueryResult {
                schema: schema.clone(),
                batches: vec![datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap()],
            };
            for format in [OutputFormat::Csv, OutputFormat::Json] {
                let mut stream = TextStream::new(format, schema.clone()).unwrap();
                let mut text = Vec::new();
                for b in &batches {
                    text.extend(stream.batch(b).unwrap());
                }
                text.extend(stream.finish().unwrap());
                assert_eq!(
                    String::from_utf8(text).unwrap(),
                    format_result(&whole, format).unwrap(),
                    "{format:?}, {} batches",
                    batches.len()
                );
            }
        }
        assert!(TextStream::new(OutputFormat::Table, schema).is_err());
    }

    #[test]
    fn a_text_table_formats_as_csv_and_json() {
        let columns = vec!["figure".to_string(), "state".to_string()];
        let rows = vec![
            vec![Some("free admits, \"missed\"".to_string()), None],
            vec![Some("decisions".to_string()), Some("pass".to_string())],
        ];
        let t = text_table(&columns, &rows).unwrap();
        assert_eq!(
            format_result(&t, OutputFormat::Csv).unwrap(),
            "figure,state\r\n\"free admits, \"\"missed\"\"\",\r\ndecisions,pass\r\n"
        );
        assert_eq!(
            format_result(&t, OutputFormat::Json).unwrap(),
            "[{\"figure\":\"free admits, \\\"missed\\\"\",\"state\":null},{\"figure\":\"decisions\",\"state\":\"pass\"}]\n"
        );
    }
}

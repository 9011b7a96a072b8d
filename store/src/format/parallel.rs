//! Decoding one NDJSON input on several threads, yielding its records in input order.
//!
//! Decoding (JSON parsing and the field rules) is most of the reading side of an ingest. Cutting
//! the input into lines must go in order but costs a `memchr` a line: [`ParallelLineReader`] cuts
//! on the calling thread into chunks of whole lines, one buffer each, and worker threads run a
//! [`LineReader`] over each chunk, numbered on from the lines before it; the decoded chunks are put
//! back in order. What it yields is exactly what one [`LineReader`] over the whole input yields
//! (rejects' `received_at` aside). CSV is not cut this way (a quoted cell may span lines).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::parse::{Framed, InputFormat, LineReader, MAX_LINE_BYTES, RecordDecoder};

/// Bytes of input per chunk handed to a worker (whole lines; a chunk ends after the line that
/// crosses this): large enough that handing it over costs nothing per line, small enough that the
/// workers share the input evenly.
pub const CHUNK_BYTES: usize = 256 << 10;

/// A chunk to decode: its sequence number, the lines before it, its whole lines.
type Chunk = (u64, u64, Vec<u8>);

/// A decoded chunk: its sequence number, and its records, or the message of a decoder that
/// panicked.
type Decoded<T> = (u64, Result<Vec<Framed<T>>, String>);

/// Appends the next line of `r` to `chunk`, at most `max` bytes of it and a `\n`; returns `None`
/// at the end of input, else the line's full length. The bytes past `max` are skipped: the
/// worker's [`LineReader`] sees a line longer than [`MAX_LINE_BYTES`] and rejects it as one over
/// the whole input would, with the same text.
fn append_line_bounded<R: BufRead>(r: &mut R, chunk: &mut Vec<u8>, max: usize) -> std::io::Result<Option<usize>> {
    let mut total = 0usize;
    let mut saw_any = false;
    loop {
        let available = r.fill_buf()?;
        if available.is_empty() {
            if saw_any {
                chunk.push(b'\n');
            }
            return Ok(saw_any.then_some(total));
        }
        saw_any = true;
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        let room = max.saturating_sub(total);
        chunk.extend_from_slice(&available[..take.min(room)]);
        total += take;
        r.consume(take + usize::from(done));
        if done {
            chunk.push(b'\n');
            return Ok(Some(total));
        }
    }
}

/// Iterates the records of one NDJSON input as [`LineReader`] does, decoding them on `threads`
/// worker threads (see the module's documentation). An `Err` is an I/O error reading the input
/// (yielded after every record before it), or a decoder that panicked.
pub struct ParallelLineReader<R: BufRead, D: RecordDecoder> {
    reader: R,
    chunk_bytes: usize,
    /// Chunks handed out and not yet yielded, at most this many (memory stays bounded).
    max_in_flight: u64,
    to_workers: Option<Sender<Chunk>>,
    from_workers: Receiver<Decoded<D::Record>>,
    workers: Vec<JoinHandle<()>>,
    lines: u64,
    bytes_read: u64,
    sent: u64,
    yielded: u64,
    arrived: BTreeMap<u64, Vec<Framed<D::Record>>>,
    ready: std::vec::IntoIter<Framed<D::Record>>,
    cutting_done: bool,
    input_error: Option<std::io::Error>,
}

impl<R: BufRead, D> ParallelLineReader<R, D>
where
    D: RecordDecoder + 'static,
    D::Record: Send + 'static,
{
    /// Reads the NDJSON `reader` (named `source` in rejects), decoding on `threads` threads (at
    /// least one) in chunks of about `chunk_bytes` bytes.
    pub fn new(source: impl Into<String>, reader: R, threads: usize, chunk_bytes: usize) -> Self {
        let source: String = source.into();
        let (to_workers, chunks) = channel::<Chunk>();
        let (done, from_workers) = channel::<Decoded<D::Record>>();
        let chunks = Arc::new(Mutex::new(chunks));
        let threads = threads.max(1);
        let workers = (0..threads)
            .map(|_| {
                let chunks = Arc::clone(&chunks);
                let done = done.clone();
                let source = source.clone();
                std::thread::spawn(move || {
                    loop {
                        // The lock is held only to take the next chunk (nothing panics while it is
                        // held); a poisoned lock ends the worker.
                        let next = match chunks.lock() {
                            Ok(chunks) => chunks.recv(),
                            Err(_) => return,
                        };
                        let Ok((seq, lines_before, bytes)) = next else { return };
                        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            LineReader::<&[u8], D>::after_lines(
                                source.as_str(),
                                &bytes[..],
                                InputFormat::Ndjson,
                                lines_before,
                            )
                            // Reading a slice cannot fail.
                            .filter_map(std::io::Result::ok)
                            .collect::<Vec<_>>()
                        }))
                        .map_err(|panic| {
                            panic
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_default()
                        });
                        if done.send((seq, decoded)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        ParallelLineReader {
            reader,
            chunk_bytes: chunk_bytes.max(1),
            max_in_flight: 2 * threads as u64 + 1,
            to_workers: Some(to_workers),
            from_workers,
            workers,
            lines: 0,
            bytes_read: 0,
            sent: 0,
            yielded: 0,
            arrived: BTreeMap::new(),
            ready: Vec::new().into_iter(),
            cutting_done: false,
            input_error: None,
        }
    }

    /// Bytes cut so far (for a progress bar): ahead of the records yielded by the chunks in
    /// flight.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Cuts the next chunk of whole lines and hands it to a worker; at the end of the input (or
    /// at an I/O error, kept for after the records before it) cutting stops.
    fn send_chunk(&mut self) {
        let lines_before = self.lines;
        let mut bytes = Vec::with_capacity(self.chunk_bytes + self.chunk_bytes / 4);
        while bytes.len() < self.chunk_bytes {
            // As LineReader reads a line: its first MAX_LINE_BYTES + 2 bytes (a `\r` and a
            // byte-order mark may still be stripped), so that a longer one is seen as too long.
            match append_line_bounded(&mut self.reader, &mut bytes, MAX_LINE_BYTES + 2) {
                Ok(Some(len)) => {
                    self.lines += 1;
                    self.bytes_read += len as u64 + 1;
                }
                Ok(None) => {
                    self.cutting_done = true;
                    break;
                }
                Err(e) => {
                    self.input_error = Some(e);
                    self.cutting_done = true;
                    break;
                }
            }
        }
        if bytes.is_empty() {
            return;
        }
        match &self.to_workers {
            Some(to_workers) if to_workers.send((self.sent, lines_before, bytes)).is_ok() => self.sent += 1,
            // Every worker is gone: the chunk cannot be decoded, and must not vanish silently.
            _ => {
                self.cutting_done = true;
                self.input_error = Some(std::io::Error::other("the decoding threads stopped"));
            }
        }
    }

    /// Stops reading: nothing more is cut, and the chunks in flight are not waited for.
    fn stop(&mut self) {
        self.cutting_done = true;
        self.sent = self.yielded;
    }
}

impl<R: BufRead, D> Iterator for ParallelLineReader<R, D>
where
    D: RecordDecoder + 'static,
    D::Record: Send + 'static,
{
    type Item = std::io::Result<Framed<D::Record>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.ready.next() {
                return Some(Ok(record));
            }
            while !self.cutting_done && self.sent - self.yielded < self.max_in_flight {
                self.send_chunk();
            }
            if self.yielded == self.sent {
                return self.input_error.take().map(Err);
            }
            while !self.arrived.contains_key(&self.yielded) {
                match self.from_workers.recv() {
                    Ok((seq, Ok(records))) => {
                        self.arrived.insert(seq, records);
                    }
                    Ok((_, Err(panic))) => {
                        self.stop();
                        return Some(Err(std::io::Error::other(format!(
                            "a line could not be decoded: the decoder panicked ({panic})"
                        ))));
                    }
                    // Every worker is gone: only a panic outside the decoder could do that.
                    Err(_) => {
                        self.stop();
                        return Some(Err(std::io::Error::other("the decoding threads stopped")));
                    }
                }
            }
            let records = self.arrived.remove(&self.yielded).unwrap_or_default();
            self.ready = records.into_iter();
            self.yielded += 1;
        }
    }
}

impl<R: BufRead, D: RecordDecoder> Drop for ParallelLineReader<R, D> {
    fn drop(&mut self) {
        // Closing the channel ends the workers once they finish the chunk in hand.
        self.to_workers = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::decision::DecisionDecoder;
    use crate::format::parse::AttemptDecoder;

    /// Every item, I/O errors as text, with a reject's `received_at` zeroed (the clock differs
    /// between two reads).
    fn settled<T>(items: impl Iterator<Item = std::io::Result<Framed<T>>>) -> Vec<Result<Framed<T>, String>> {
        items
            .map(|i| {
                i.map(|f| match f {
                    Framed::Reject(mut r) => {
                        r.received_at = 0;
                        Framed::Reject(r)
                    }
                    record => record,
                })
                .map_err(|e| e.to_string())
            })
            .collect()
    }

    fn same_as_one_thread<D>(input: &[u8]) -> usize
    where
        D: RecordDecoder + 'static,
        D::Record: Send + 'static + PartialEq + std::fmt::Debug,
    {
        let serial = settled(LineReader::<&[u8], D>::new("in.x", input, InputFormat::Ndjson));
        for (threads, chunk) in [(1, 1), (2, 1), (2, 100), (3, 700), (4, CHUNK_BYTES)] {
            let parallel = settled(ParallelLineReader::<&[u8], D>::new("in.x", input, threads, chunk));
            assert_eq!(parallel, serial, "{threads} threads, chunks of {chunk} bytes");
        }
        serial.len()
    }

    const GOOD: &str = r#"{"job_id":"j1","attempt_no":1,"idem_key":"k1","lane":"free","model":"m","started_at":"2026-05-01T10:00:00Z","ended_at":"2026-05-01T10:00:02Z","outcome":"ok","tokens_in":10,"tokens_out":5}"#;

    #[test]
    fn lines_come_out_in_input_order_with_every_reject_where_it_was() {
        let mut input = String::from("\u{feff}");
        for i in 0..40 {
            match i % 7 {
                0 => input.push_str("not json"),
                1 => input.push_str("\n   \r\n"),
                2 => input.push_str(&GOOD.replace("\"attempt_no\":1", "\"attempt_no\":0")),
                3 => input.push_str(&format!("{}\r", GOOD.replace("j1", &format!("j{i}")))),
                _ => input.push_str(&GOOD.replace("k1", &format!("k{i}"))),
            }
            input.push('\n');
        }
        // The last line without its newline.
        input.push_str(GOOD);
        let n = same_as_one_thread::<AttemptDecoder>(input.as_bytes());
        assert_eq!(n, 41 - 6);
        let rejects = LineReader::<&[u8], AttemptDecoder>::new("in.x", input.as_bytes(), InputFormat::Ndjson)
            .filter(|f| matches!(f, Ok(Framed::Reject(_))))
            .count();
        assert_eq!(rejects, 12);
        same_as_one_thread::<DecisionDecoder>(input.as_bytes());
    }

    #[test]
    fn a_line_past_the_limit_and_bytes_that_are_not_utf8_are_rejected_as_on_one_thread() {
        let mut input = Vec::new();
        for len in [
            MAX_LINE_BYTES - 1,
            MAX_LINE_BYTES,
            MAX_LINE_BYTES + 1,
            MAX_LINE_BYTES + 2,
            3 * MAX_LINE_BYTES,
        ] {
            input.extend_from_slice(GOOD.as_bytes());
            input.push(b'\n');
            input.extend(std::iter::repeat_n(b' ', len - 1));
            input.extend_from_slice(b"x\n");
        }
        input.extend_from_slice(b"{\"job_id\":\"\xff\"}\n");
        input.extend_from_slice(GOOD.as_bytes());
        assert_eq!(same_as_one_thread::<AttemptDecoder>(&input), 12);
    }

    #[test]
    fn an_empty_input_yields_nothing() {
        assert_eq!(same_as_one_thread::<AttemptDecoder>(b""), 0);
        assert_eq!(same_as_one_thread::<AttemptDecoder>(b"\n\n \n"), 0);
    }

    /// A reader that fails after its first bytes.
    struct FailsAfter<'a>(&'a [u8]);
    impl std::io::Read for FailsAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("disk went away"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn an_io_error_comes_after_every_record_read_before_it() {
        let input = format!("{GOOD}\n{GOOD}\n");
        let reader = std::io::BufReader::new(FailsAfter(input.as_bytes()));
        let items: Vec<_> = ParallelLineReader::<_, AttemptDecoder>::new("in.x", reader, 2, 1)
            .map(|i| i.map_err(|e| e.to_string()).map(|f| matches!(f, Framed::Record { .. })))
            .collect();
        assert_eq!(items, vec![Ok(true), Ok(true), Err("disk went away".to_string())]);
    }
}

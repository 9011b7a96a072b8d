//! Text columns of few distinct values (lanes, outcomes, key and pool ids, models, error kinds)
//! as Arrow dictionaries: [`LabelBuilder`] writes one, [`Text`] reads a text column whether it is
//! a dictionary or plain `Utf8`.
//!
//! At 10 M attempts a plain `Utf8` copy of `lane`, `outcome`, `key_id`, `pool_id`, `model` and
//! `error_kind` held about 60 bytes a row; as dictionaries they hold a 4-byte key a row and each
//! distinct value once a batch.

use std::sync::Arc;

use datafusion::arrow::array::builder::NullBufferBuilder;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, DictionaryArray, Int32Array, StringArray};
use datafusion::arrow::buffer::{OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::common::HashMap;

use crate::error::{Error, Result};

/// The type of a label column: `Dictionary(Int32, Utf8)`.
pub fn labels_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// Builds a `Dictionary(Int32, Utf8)` column. A value equal to the row before's costs one
/// compare, a `&'static str` (a lane, an outcome, an error kind: the record's enums' names) one
/// compare of its address among the few seen; any other value is looked up by hash.
#[derive(Default)]
pub struct LabelBuilder {
    keys: Vec<i32>,
    nulls: Option<NullBufferBuilder>,
    /// The distinct values, concatenated, and where each starts (one more entry than values).
    bytes: Vec<u8>,
    starts: Vec<i32>,
    /// Every distinct value's key.
    by_hash: HashMap<Box<str>, i32>,
    /// The `&'static str`s appended, by address and length, with their keys.
    statics: Vec<(usize, usize, i32)>,
    /// The key of the last value appended.
    last: Option<i32>,
}

impl LabelBuilder {
    /// Room for `rows` rows.
    pub fn with_capacity(rows: usize) -> Self {
        LabelBuilder {
            keys: Vec::with_capacity(rows),
            starts: vec![0],
            ..Default::default()
        }
    }

    #[inline]
    fn value(&self, key: i32) -> &[u8] {
        let k = key as usize;
        &self.bytes[self.starts[k] as usize..self.starts[k + 1] as usize]
    }

    #[inline]
    fn key_of(&mut self, v: &str) -> i32 {
        if let Some(k) = self.last.filter(|&k| self.value(k) == v.as_bytes()) {
            return k;
        }
        let k = match self.by_hash.get(v) {
            Some(&k) => k,
            None => {
                let k = (self.starts.len() - 1) as i32;
                self.bytes.extend_from_slice(v.as_bytes());
                self.starts.push(self.bytes.len() as i32);
                self.by_hash.insert(v.into(), k);
                k
            }
        };
        self.last = Some(k);
        k
    }

    /// Appends `value`, a `&'static str`: found by its address after the first time.
    #[inline]
    pub fn append_static(&mut self, value: &'static str) {
        let at = (value.as_ptr() as usize, value.len());
        let k = match self.statics.iter().find(|s| (s.0, s.1) == at) {
            Some(s) => s.2,
            None => {
                let k = self.key_of(value);
                self.statics.push((at.0, at.1, k));
                k
            }
        };
        self.keys.push(k);
        if let Some(n) = &mut self.nulls {
            n.append_non_null();
        }
    }

    /// Appends `value` ([`LabelBuilder::append_static`]), or a null.
    #[inline]
    pub fn append_static_option(&mut self, value: Option<&'static str>) {
        match value {
            Some(v) => self.append_static(v),
            None => self.append_option(None),
        }
    }

    /// Appends `value`.
    #[inline]
    pub fn append_value(&mut self, value: &str) {
        let k = self.key_of(value);
        self.keys.push(k);
        if let Some(n) = &mut self.nulls {
            n.append_non_null();
        }
    }

    /// Appends `value`, or a null.
    pub fn append_option(&mut self, value: Option<&str>) {
        match value {
            Some(v) => self.append_value(v),
            None => {
                let rows = self.keys.len();
                self.keys.push(0);
                self.nulls
                    .get_or_insert_with(|| {
                        let mut n = NullBufferBuilder::new(self.keys.capacity());
                        n.append_n_non_nulls(rows);
                        n
                    })
                    .append_null();
            }
        }
    }

    /// The column of the rows appended since the last finish; the builder starts again empty.
    pub fn finish(&mut self) -> DictionaryArray<Int32Type> {
        let keys = Int32Array::new(
            ScalarBuffer::from(std::mem::take(&mut self.keys)),
            self.nulls.take().and_then(|mut n| n.finish()),
        );
        let starts = std::mem::replace(&mut self.starts, vec![0]);
        let bytes = std::mem::take(&mut self.bytes);
        // Every value came in as a `&str` and the offsets grow: both hold by construction.
        let values = StringArray::new(OffsetBuffer::new(ScalarBuffer::from(starts)), bytes.into(), None);
        self.by_hash.clear();
        self.statics.clear();
        self.last = None;
        // Every key indexes a value appended: it holds by construction.
        DictionaryArray::new(keys, Arc::new(values))
    }
}

/// A text column read by row, plain (`Utf8`) or a dictionary of `Utf8` with `Int32` keys: the
/// `job_attempt` label columns are dictionaries in memory and plain in files written before.
#[derive(Clone, Debug)]
pub enum Text {
    /// A `Utf8` column.
    Plain(StringArray),
    /// A dictionary column: row `i` is `values[keys[i]]`.
    Dict {
        /// A key a row.
        keys: Int32Array,
        /// Each distinct value once.
        values: StringArray,
    },
}

impl Text {
    /// `array` as text. Errors: [`Error::Internal`] for any other type.
    pub fn of(array: &ArrayRef) -> Result<Text> {
        match array.data_type() {
            DataType::Utf8 => Ok(Text::Plain(array.as_string::<i32>().clone())),
            DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => {
                let d = array.as_dictionary::<Int32Type>();
                Ok(Text::Dict {
                    keys: d.keys().clone(),
                    values: d.values().as_string::<i32>().clone(),
                })
            }
            other => Err(Error::Internal(format!("a text column of type {other}"))),
        }
    }

    /// Rows.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Text::Plain(a) => a.len(),
            Text::Dict { keys, .. } => keys.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether row `i` holds a value.
    #[inline]
    pub fn is_valid(&self, i: usize) -> bool {
        match self {
            Text::Plain(a) => a.is_valid(i),
            Text::Dict { keys, .. } => keys.is_valid(i),
        }
    }

    /// Whether row `i` is null.
    pub fn is_null(&self, i: usize) -> bool {
        !self.is_valid(i)
    }

    /// Row `i`'s text; for a null row, whatever its slot holds (read [`Text::get`] where nulls
    /// can be).
    #[inline]
    pub fn value(&self, i: usize) -> &str {
        match self {
            Text::Plain(a) => a.value(i),
            Text::Dict { keys, values } => {
                let k = keys.value(i) as usize;
                if k < values.len() { values.value(k) } else { "" }
            }
        }
    }

    /// Row `i`'s text, or `None` where it is null.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&str> {
        self.is_valid(i).then(|| self.value(i))
    }

    /// How many distinct values a dictionary column holds (its keys are below); 0 for plain text.
    pub fn codes(&self) -> usize {
        match self {
            Text::Plain(_) => 0,
            Text::Dict { values, .. } => values.len(),
        }
    }

    /// Row `i`'s dictionary key (below [`Text::codes`]): rows of equal codes hold equal text, so
    /// a caller can look a value up once a batch instead of once a row. `None` for plain text or a
    /// null.
    #[inline]
    pub fn code(&self, i: usize) -> Option<usize> {
        match self {
            Text::Plain(_) => None,
            Text::Dict { keys, .. } => keys.is_valid(i).then(|| keys.value(i) as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &Text) -> Vec<Option<String>> {
        (0..t.len()).map(|i| t.get(i).map(str::to_string)).collect()
    }

    #[test]
    fn builds_what_it_was_given_through_the_linear_and_the_hashed_lookup() {
        let mut b = LabelBuilder::with_capacity(4);
        let mut want = Vec::new();
        // 40 distinct values, each twice, nulls among them.
        for i in 0..80 {
            let v = (i % 7 != 3).then(|| format!("key-{}", (i * 13) % 40));
            b.append_option(v.as_deref());
            want.push(v);
        }
        let d = b.finish();
        assert_eq!(d.values().len(), 40);
        assert_eq!(d.null_count(), 11);
        let a: ArrayRef = Arc::new(d);
        assert_eq!(texts(&Text::of(&a).unwrap()), want);
        // The builder starts again empty, with a dictionary of its own.
        b.append_static("free");
        b.append_value("free");
        b.append_static_option(Some("paid"));
        b.append_static("free");
        let d = b.finish();
        assert_eq!(d.values().len(), 2);
        assert_eq!(d.keys().values().to_vec(), vec![0, 0, 1, 0]);
        assert_eq!(d.null_count(), 0);
        let t = Text::of(&(Arc::new(d) as ArrayRef)).unwrap();
        assert_eq!((t.codes(), t.code(0), t.code(2)), (2, Some(0), Some(1)));
    }

    #[test]
    fn reads_plain_text_the_same_way() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("ok"), None, Some("refused")]));
        let t = Text::of(&a).unwrap();
        assert_eq!(texts(&t), vec![Some("ok".into()), None, Some("refused".into())]);
        assert!(t.is_null(1));
        assert_eq!((t.codes(), t.code(0)), (0, None));
        let n: ArrayRef = Arc::new(Int32Array::from(vec![1]));
        assert!(Text::of(&n).is_err());
    }
}

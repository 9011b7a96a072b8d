//! Small helpers to turn audit rows into Arrow columns.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};

/// A UTF-8 column.
pub fn text<'a>(v: impl IntoIterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<StringArray>())
}

/// An Int64 column.
pub fn int(v: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<Int64Array>())
}

/// A Float64 column.
pub fn float(v: impl IntoIterator<Item = Option<f64>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<Float64Array>())
}

/// A `Timestamp(Microsecond, "UTC")` column.
pub fn ts(v: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(
        v.into_iter()
            .collect::<TimestampMicrosecondArray>()
            .with_timezone("UTC"),
    )
}

/// The type of a [`Labels`] column: a dictionary of text, one 4-byte key a row.
pub fn labels_type() -> datafusion::arrow::datatypes::DataType {
    use datafusion::arrow::datatypes::DataType;
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// A text column of few distinct values built as a dictionary ([`labels_type`]): `key_rest_violation`
/// repeats its key, pool, model, rest and refused kind on millions of rows at 10 M attempts, where
/// plain text held each copy.
pub struct Labels {
    keys: Vec<Option<i32>>,
    values: Vec<String>,
    index: datafusion::common::HashMap<String, i32>,
    /// The key of the last value appended: rows of one key come in runs.
    last: Option<i32>,
}

impl Labels {
    /// Room for `n` rows.
    pub fn with_capacity(n: usize) -> Self {
        Labels {
            keys: Vec::with_capacity(n),
            values: Vec::new(),
            index: Default::default(),
            last: None,
        }
    }

    /// Appends `v` (`None`: NULL).
    pub fn append(&mut self, v: Option<&str>) {
        let Some(v) = v else {
            self.keys.push(None);
            return;
        };
        let key = match self.last.filter(|&k| self.values[k as usize] == v) {
            Some(k) => k,
            None => match self.index.get(v) {
                Some(&k) => k,
                None => {
                    let k = self.values.len() as i32;
                    self.values.push(v.to_string());
                    self.index.insert(v.to_string(), k);
                    k
                }
            },
        };
        self.last = Some(key);
        self.keys.push(Some(key));
    }

    /// The column, in the order appended.
    pub fn finish(self) -> ArrayRef {
        use datafusion::arrow::array::{DictionaryArray, Int32Array};
        let values: ArrayRef = Arc::new(StringArray::from(self.values));
        let keys: Int32Array = self.keys.into_iter().collect();
        Arc::new(DictionaryArray::new(keys, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Int32Type;

    #[test]
    fn labels_keep_each_value_once_and_give_every_row_back() {
        let mut l = Labels::with_capacity(6);
        for v in [Some("k-1"), Some("k-1"), None, Some("k-2"), Some("k-1"), Some("k-2")] {
            l.append(v);
        }
        let col = l.finish();
        assert_eq!(col.data_type(), &labels_type());
        let d = col.as_dictionary::<Int32Type>();
        assert_eq!(
            d.values().as_string::<i32>().iter().flatten().collect::<Vec<_>>(),
            ["k-1", "k-2"]
        );
        let rows: Vec<Option<&str>> = (0..d.len())
            .map(|i| {
                d.is_valid(i)
                    .then(|| d.values().as_string::<i32>().value(d.keys().value(i) as usize))
            })
            .collect();
        assert_eq!(
            rows,
            [Some("k-1"), Some("k-1"), None, Some("k-2"), Some("k-1"), Some("k-2")]
        );
    }
}

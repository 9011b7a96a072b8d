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

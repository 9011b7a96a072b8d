//! `repeat`, `lpad`, `rpad`, `concat` and `concat_ws` with a bound on the strings they build.
//!
//! DataFusion's own versions build whatever they are asked: `repeat(job_id, 100000)` over one
//! batch of 8,192 rows is 16 GB of text, allocated outside the memory pool, and past 2 GiB in one
//! array its 32-bit string offsets overflow and the function panics. These wrappers keep
//! DataFusion's functions (same names, signatures and answers) but first add up the bytes the
//! call would build, from the lengths of its arguments, and refuse past
//! [`MAX_STRING_RESULT_BYTES`] with an error that names the function and the limit (`concat` of
//! such values would otherwise double with each nesting). `array_repeat` and the other array
//! functions are not in this build (DataFusion's `nested_expressions` feature is off): a statement
//! naming one is refused at planning.
//!
//! `string_agg` needs no wrapper: its accumulator reports its size to the aggregation, which holds
//! it in the SQL memory pool, so past `--sql-memory` it is refused with `Resources exhausted` (a
//! test below shows it). `array_agg` is held there too, with the text its string views point to
//! ([`crate::engine::bounded_aggregates`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int32Type, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// The most bytes of text one call of `repeat`, `lpad`, `rpad`, `concat` or `concat_ws` may build
/// for one batch of rows (or for one constant): 64 MiB.
pub const MAX_STRING_RESULT_BYTES: u64 = 64 << 20;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `repeat(s, n)`: `len(s) * n`.
    Repeat,
    /// `lpad(s, n [, fill])` / `rpad`: at most `len(s) + n * (bytes of fill's widest character)`.
    Pad,
    /// `concat(a, b, ...)`: the sum of the arguments' lengths.
    Concat,
    /// `concat_ws(sep, a, b, ...)`: the sum of the arguments' lengths and one separator between
    /// each two (at most).
    ConcatWs,
}

/// A DataFusion string function refused past [`MAX_STRING_RESULT_BYTES`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: ScalarUDF,
    kind: Kind,
    cap: u64,
}

/// Registers the bounded `repeat`, `lpad` and `rpad` in `ctx`, in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    let functions = [
        (datafusion::functions::string::repeat(), Kind::Repeat),
        (datafusion::functions::unicode::lpad(), Kind::Pad),
        (datafusion::functions::unicode::rpad(), Kind::Pad),
        (datafusion::functions::string::concat(), Kind::Concat),
        (datafusion::functions::string::concat_ws(), Kind::ConcatWs),
    ];
    for (f, kind) in functions {
        ctx.register_udf(ScalarUDF::new_from_impl(Bounded {
            inner: f.as_ref().clone(),
            kind,
            cap: MAX_STRING_RESULT_BYTES,
        }));
    }
}

/// The byte length of a string argument in row `i` (`None`: null).
enum Lengths {
    Scalar(Option<u64>),
    Array(Arc<dyn Array>),
}

impl Lengths {
    fn of(v: &ColumnarValue) -> Result<Self> {
        Ok(match v {
            ColumnarValue::Scalar(s) => Lengths::Scalar(match s {
                ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                    v.as_ref().map(|s| s.len() as u64)
                }
                other if other.is_null() => None,
                other => Some(other.to_string().len() as u64),
            }),
            ColumnarValue::Array(a) => Lengths::Array(datafusion::arrow::compute::kernels::length::length(a)?),
        })
    }

    fn at(&self, i: usize) -> Option<u64> {
        match self {
            Lengths::Scalar(v) => *v,
            Lengths::Array(a) if a.is_null(i) => None,
            Lengths::Array(a) => match a.data_type() {
                DataType::Int32 => Some(a.as_primitive::<Int32Type>().value(i).max(0) as u64),
                _ => Some(a.as_primitive::<Int64Type>().value(i).max(0) as u64),
            },
        }
    }
}

/// An integer argument in row `i` (`None`: null), negative counts as 0.
enum Counts {
    Scalar(Option<u64>),
    Array(Int64Array),
}

impl Counts {
    fn of(v: &ColumnarValue) -> Result<Self> {
        Ok(match v {
            ColumnarValue::Scalar(s) => Counts::Scalar(match s.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(v) => v.map(|n| n.max(0) as u64),
                _ => None,
            }),
            ColumnarValue::Array(a) => Counts::Array(
                datafusion::arrow::compute::cast(a, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            ),
        })
    }

    fn at(&self, i: usize) -> Option<u64> {
        match self {
            Counts::Scalar(v) => *v,
            Counts::Array(a) if a.is_null(i) => None,
            Counts::Array(a) => Some(a.value(i).max(0) as u64),
        }
    }
}

/// The widest character of a fill argument in bytes: exact for a constant, 4 (UTF-8's widest)
/// for a column, 1 for the default space.
fn fill_width(fill: Option<&ColumnarValue>) -> u64 {
    match fill {
        None => 1,
        Some(ColumnarValue::Scalar(ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v))) => v
            .as_deref()
            .and_then(|s| s.chars().map(|c| c.len_utf8() as u64).max())
            .unwrap_or(1),
        Some(_) => 4,
    }
}

impl Bounded {
    /// The bytes this call would build at most, saturating; counting stops once past the cap
    /// (`true`: it stopped there, the call builds at least that much).
    fn result_bytes(&self, args: &[ColumnarValue], rows: usize) -> Result<(u64, bool)> {
        let all_scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { rows };
        if matches!(self.kind, Kind::Concat | Kind::ConcatWs) {
            let lengths = args.iter().map(Lengths::of).collect::<Result<Vec<_>>>()?;
            // concat_ws: the separator once more between each two of the other arguments.
            let extra_seps = match self.kind {
                Kind::ConcatWs => args.len().saturating_sub(3) as u64,
                _ => 0,
            };
            let mut total = 0u64;
            for i in 0..rows {
                let sep = lengths.first().and_then(|l| l.at(i)).unwrap_or(0);
                let row = lengths
                    .iter()
                    .map(|l| l.at(i).unwrap_or(0))
                    .fold(sep.saturating_mul(extra_seps), u64::saturating_add);
                total = total.saturating_add(row);
                if total > self.cap && i + 1 < rows {
                    return Ok((total, true));
                }
            }
            return Ok((total, false));
        }
        let (Some(s), Some(n)) = (args.first(), args.get(1)) else {
            return Ok((0, false));
        };
        let (lengths, counts) = (Lengths::of(s)?, Counts::of(n)?);
        let width = fill_width(args.get(2));
        let mut total = 0u64;
        for i in 0..rows {
            let (Some(len), Some(count)) = (lengths.at(i), counts.at(i)) else {
                continue;
            };
            let row = match self.kind {
                Kind::Repeat => len.saturating_mul(count),
                Kind::Pad => len.saturating_add(count.saturating_mul(width)),
                Kind::Concat | Kind::ConcatWs => unreachable!("counted above"),
            };
            total = total.saturating_add(row);
            if total > self.cap && i + 1 < rows {
                return Ok((total, true));
            }
        }
        Ok((total, false))
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (bytes, at_least) = self.result_bytes(&args.args, args.number_rows)?;
        if bytes > self.cap {
            return exec_err!(
                "{} would build more than {} bytes of text in one batch ({}{} bytes), past the limit \
                 for repeat, lpad and rpad (and concat, concat_ws); use smaller counts or fewer rows",
                self.name(),
                self.cap,
                if at_least || bytes == u64::MAX { "at least " } else { "" },
                bytes
            );
        }
        self.inner.invoke_with_args(args)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ctx() -> SessionContext {
        let ctx = SessionContext::new();
        register(&ctx);
        ctx
    }

    async fn one(ctx: &SessionContext, sql: &str) -> Result<String> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
    }

    #[tokio::test]
    async fn small_results_are_datafusions() {
        let ctx = ctx().await;
        let t = one(
            &ctx,
            "SELECT repeat('ab', 3) AS r, lpad('7', 3, '0') AS l, rpad('x', 3) AS p",
        )
        .await
        .unwrap();
        assert!(t.contains("| ababab | 007 | x   |"), "{t}");
    }

    #[tokio::test]
    async fn a_constant_past_the_cap_is_refused_naming_the_limit() {
        let ctx = ctx().await;
        let e = one(&ctx, "SELECT length(repeat('x', 1000000000))").await.unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("repeat would build more than 67108864 bytes of text in one batch (1000000000 bytes)"),
            "{msg}"
        );
        let e = one(&ctx, "SELECT lpad('x', 100000000, 'é')").await.unwrap_err();
        assert!(
            e.to_string()
                .contains("lpad would build more than 67108864 bytes of text in one batch (200000001 bytes)"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn concat_answers_as_datafusions_and_is_refused_past_the_cap() {
        let ctx = ctx().await;
        let t = one(
            &ctx,
            "SELECT concat('a', NULL, 'b', 1) AS c, concat_ws('-', 'x', 'y', 'z') AS w",
        )
        .await
        .unwrap();
        assert!(t.contains("| ab1 | x-y-z |"), "{t}");
        // Two values under the cap each, past it together.
        let e = one(
            &ctx,
            "SELECT length(concat(repeat('x', 40000000), repeat('y', 40000000)))",
        )
        .await
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("concat would build more than 67108864 bytes of text in one batch (80000000 bytes)"),
            "{e}"
        );
        let e = one(
            &ctx,
            "SELECT length(concat_ws(repeat('-', 30000000), 'a', 'b', 'c', 'd'))",
        )
        .await
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("concat_ws would build more than 67108864 bytes of text in one batch (90000004 bytes)"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn string_agg_is_held_in_the_memory_pool() {
        use datafusion::execution::runtime_env::RuntimeEnvBuilder;
        use datafusion::prelude::SessionConfig;
        // A 16 MiB pool; the statement would hold about 100 MB in its accumulator.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(16 << 20, 1.0)
            .build_arc()
            .unwrap();
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        register(&ctx);
        let e = one(
            &ctx,
            "SELECT length(string_agg(repeat(CAST(v AS VARCHAR), 200), ',')) FROM generate_series(1, 100000) t(v)",
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("Resources exhausted"), "{e}");
        // Under the pool the same shape answers.
        let t = one(
            &ctx,
            "SELECT length(string_agg(CAST(v AS VARCHAR), ',')) AS n FROM generate_series(1, 1000) t(v)",
        )
        .await
        .unwrap();
        assert!(t.contains("| 3892 |"), "{t}");
    }

    #[tokio::test]
    async fn a_column_past_the_cap_is_refused_before_it_overflows() {
        let ctx = ctx().await;
        // 10,000 rows of 1 to 5 bytes, 1,000,000 times each: gigabytes in one batch, where
        // DataFusion's own repeat panics.
        let e = one(
            &ctx,
            "SELECT max(length(repeat(CAST(v AS VARCHAR), 1000000))) FROM generate_series(1, 10000) t(v)",
        )
        .await
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("repeat would build more than 67108864 bytes of text in one batch (at least "),
            "{e}"
        );
        // Under the cap, the same shape answers.
        let t = one(
            &ctx,
            "SELECT max(length(repeat(CAST(v AS VARCHAR), 10))) AS m FROM generate_series(1, 10000) t(v)",
        )
        .await
        .unwrap();
        assert!(t.contains("| 50 |"), "{t}");
    }
}

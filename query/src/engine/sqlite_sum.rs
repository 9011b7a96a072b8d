//! `SUM` as SQLite computes it over booleans: true is 1, false is 0 (SPEC 3).
//!
//! Seed 000's `job_rollup` sums comparisons (`SUM(lane = 'free')`) so that it runs on old SQLite
//! builds without `FILTER`. DataFusion's `sum` refuses `Boolean`; this wrapper coerces a boolean
//! argument to `Int64` and hands every other type to DataFusion's own `sum` unchanged.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, ReversedUDAF, Signature, Volatility,
};

/// DataFusion's `sum` with SQLite's boolean rule. Register it with [`sqlite_sum`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SqliteSum {
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

/// The `sum` aggregate to register in place of DataFusion's.
pub fn sqlite_sum() -> AggregateUDF {
    AggregateUDF::new_from_impl(SqliteSum {
        inner: datafusion::functions_aggregate::sum::sum_udaf(),
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

impl AggregateUDFImpl for SqliteSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [t] = arg_types else {
            return plan_err!("sum takes one argument, found {}", arg_types.len());
        };
        let to = match t {
            DataType::Boolean | DataType::Null => DataType::Int64,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => DataType::Int64,
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => DataType::UInt64,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
            DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
            | DataType::Duration(_)
            | DataType::Interval(_) => t.clone(),
            DataType::Dictionary(_, v) => return self.coerce_types(&[(**v).clone()]),
            other => return plan_err!("sum is not defined for {other}"),
        };
        Ok(vec![to])
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }
}

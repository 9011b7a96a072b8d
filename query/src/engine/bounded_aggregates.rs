//! `array_agg` with its whole size reported to the SQL memory pool.
//!
//! DataFusion's `array_agg` keeps the batches it is given and reports their size with Arrow's
//! `get_slice_memory_size`, which counts a string view array's 16-byte views but not the text
//! they point to. Strings are string views by default (`CAST(x AS VARCHAR)`, `repeat` of one), so
//! `array_agg` of long strings held about 100 MB under a 16 MiB pool without being refused. This
//! wrapper keeps DataFusion's `array_agg` (same name, answers and plans) and adds the bytes the
//! views point to (text longer than the 12 bytes a view holds inline) to the size it reports, so
//! past `--sql-memory` the statement is refused with `Resources exhausted` like any other.
//!
//! The added bytes are never taken back when a window frame slides or part of the groups is
//! emitted: the report errs high, which refuses early rather than late.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayData, ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::prelude::SessionContext;

/// Registers the view-counting `array_agg` in `ctx`, in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    ctx.register_udaf(wrap(
        datafusion::functions_aggregate::array_agg::array_agg_udaf()
            .as_ref()
            .clone(),
    ));
}

fn wrap(inner: AggregateUDF) -> AggregateUDF {
    AggregateUDF::new_from_impl(ViewCounted { inner })
}

/// The bytes of text the string or binary views in `data` (and its children: a list's values)
/// point to outside the views themselves: values longer than 12 bytes.
fn view_text_bytes(data: &ArrayData) -> usize {
    let own = match data.data_type() {
        DataType::Utf8View | DataType::BinaryView => data.buffers()[0].typed_data::<u128>()
            [data.offset()..data.offset() + data.len()]
            .iter()
            // A view's low 32 bits are its value's length; up to 12 bytes live in the view.
            .map(|v| (*v as u32) as usize)
            .filter(|len| *len > 12)
            .sum(),
        _ => 0,
    };
    own + data.child_data().iter().map(view_text_bytes).sum::<usize>()
}

fn arrays_view_text_bytes(arrays: &[ArrayRef]) -> usize {
    arrays.iter().map(|a| view_text_bytes(&a.to_data())).sum()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ViewCounted {
    inner: AggregateUDF,
}

impl ViewCounted {
    fn imp(&self) -> &Arc<dyn AggregateUDFImpl> {
        self.inner.inner()
    }
}

impl AggregateUDFImpl for ViewCounted {
    fn name(&self) -> &str {
        self.imp().name()
    }
    fn aliases(&self) -> &[String] {
        self.imp().aliases()
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().human_display(params)
    }
    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_schema_name(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().display_name(params)
    }
    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_display_name(params)
    }
    fn signature(&self) -> &Signature {
        self.imp().signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.imp().return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.imp().return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.imp().is_nullable()
    }
    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Counted {
            inner: self.imp().accumulator(acc_args)?,
            extra: 0,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.imp().state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.imp().groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(GroupsCounted {
            inner: self.imp().create_groups_accumulator(args)?,
            extra: 0,
        }))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Counted {
            inner: self.imp().create_sliding_accumulator(args)?,
            extra: 0,
        }))
    }
    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(self.imp())
            .with_beneficial_ordering(beneficial_ordering)?
            .map(|inner| {
                Arc::new(ViewCounted {
                    inner: AggregateUDF::new_from_shared_impl(inner),
                }) as _
            }))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.imp().order_sensitivity()
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.imp().simplify()
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.imp().reverse_expr() {
            // DataFusion's reversed `array_agg` is its own: keep the reversed one counted too.
            ReversedUDAF::Reversed(udaf) => ReversedUDAF::Reversed(Arc::new(wrap(udaf.as_ref().clone()))),
            other => other,
        }
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.imp().coerce_types(arg_types)
    }
    fn is_descending(&self) -> Option<bool> {
        self.imp().is_descending()
    }
    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.imp().value_from_stats(statistics_args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.imp().default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.imp().supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.imp().supports_within_group_clause()
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.imp().documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.imp().set_monotonicity(data_type)
    }
}

/// An accumulator whose size adds the view text of every batch it was given.
#[derive(Debug)]
struct Counted {
    inner: Box<dyn Accumulator>,
    extra: usize,
}

impl Accumulator for Counted {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.extra += arrays_view_text_bytes(values);
        self.inner.update_batch(values)
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }
    fn size(&self) -> usize {
        self.inner.size() + self.extra
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.extra += arrays_view_text_bytes(states);
        self.inner.merge_batch(states)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// The grouped form of [`Counted`].
struct GroupsCounted {
    inner: Box<dyn GroupsAccumulator>,
    extra: usize,
}

impl GroupsAccumulator for GroupsCounted {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.extra += arrays_view_text_bytes(values);
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let out = self.inner.evaluate(emit_to);
        if matches!(emit_to, EmitTo::All) {
            self.extra = 0;
        }
        out
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let out = self.inner.state(emit_to);
        if matches!(emit_to, EmitTo::All) {
            self.extra = 0;
        }
        out
    }
    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.extra += arrays_view_text_bytes(values);
        self.inner.merge_batch(values, group_indices, total_num_groups)
    }
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size() + self.extra
    }
}

#[cfg(test)]
mod tests {
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::SessionConfig;

    use super::*;

    async fn one(ctx: &SessionContext, sql: &str) -> Result<String> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
    }

    fn pooled(bytes: usize, counted: bool) -> SessionContext {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(bytes, 1.0)
            .build_arc()
            .unwrap();
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        crate::engine::bounded_strings::register(&ctx);
        if counted {
            register(&ctx);
        }
        ctx
    }

    // 100,000 strings of 200 to 1,200 bytes: about 70 MB of text behind string views.
    const LONG: &str =
        "SELECT array_agg(repeat(CAST(v AS VARCHAR), 200)) IS NULL AS n FROM generate_series(1, 100000) t(v)";
    const LONG_GROUPED: &str = "SELECT count(a) AS groups FROM (SELECT v % 7 AS g, array_agg(repeat(CAST(v AS VARCHAR), 200)) AS a \
         FROM generate_series(1, 100000) t(v) GROUP BY v % 7)";

    #[tokio::test]
    async fn datafusions_own_array_agg_misses_the_text_behind_views() {
        // Why the wrapper exists: without it the statement answers under a 16 MiB pool.
        let t = one(&pooled(16 << 20, false), LONG).await.unwrap();
        assert!(t.contains("| false |"), "{t}");
    }

    #[tokio::test]
    async fn array_agg_of_long_strings_is_refused_past_the_pool() {
        let ctx = pooled(16 << 20, true);
        for sql in [LONG, LONG_GROUPED] {
            let e = one(&ctx, sql).await.unwrap_err();
            assert!(e.to_string().contains("Resources exhausted"), "{sql}: {e}");
        }
        // Under the pool, the same shapes answer as DataFusion's own.
        let t = one(
            &ctx,
            "SELECT array_agg(repeat(CAST(v AS VARCHAR), 5) ORDER BY v DESC) AS a FROM generate_series(1, 3) t(v)",
        )
        .await
        .unwrap();
        assert!(t.contains("| [33333, 22222, 11111] |"), "{t}");
        let t = one(&ctx, &LONG_GROUPED.replace("100000", "700")).await.unwrap();
        assert!(t.contains("| 7      |"), "{t}");
    }

    #[test]
    fn view_text_counts_only_what_is_not_inline() {
        use datafusion::arrow::array::{Array, ListArray, StringViewArray};
        let a = StringViewArray::from(vec![Some("short"), None, Some("exactly12byt"), Some("thirteen byte")]);
        assert_eq!(view_text_bytes(&a.to_data()), 13);
        assert_eq!(view_text_bytes(&a.slice(0, 3).to_data()), 0);
        let list = ListArray::new(
            Arc::new(datafusion::arrow::datatypes::Field::new_list_field(
                DataType::Utf8View,
                true,
            )),
            datafusion::arrow::buffer::OffsetBuffer::from_lengths([4]),
            Arc::new(a),
            None,
        );
        assert_eq!(view_text_bytes(&list.to_data()), 13);
    }
}

//! Plain words for the planning errors users meet most: a misspelt table name gets the nearest
//! table the session has ("did you mean"), and DataFusion's "While expanding wildcard" for a
//! column selected beside an aggregate without `GROUP BY` says what to change. Other errors pass
//! through as they are.

use datafusion::error::DataFusionError;
use datafusion::execution::context::SessionContext;

use crate::error::Error;

/// The query layer's error for a statement that failed to plan, with a hint when
/// [`explain`] has one. `ctx` gives the table and view names a misspelt name is matched against.
pub(crate) fn plan_error(ctx: &SessionContext, e: DataFusionError) -> Error {
    match Error::from(e) {
        Error::Plan(message) => Error::Plan(explain(&message, &table_names(ctx))),
        other => other,
    }
}

/// The names of the session's tables and views (its default schema), sorted.
fn table_names(ctx: &SessionContext) -> Vec<String> {
    let mut names = ctx
        .catalog("datafusion")
        .and_then(|c| c.schema("public"))
        .map(|s| s.table_names())
        .unwrap_or_default();
    names.sort();
    names
}

/// `message` (a planning error's text) rewritten in words when it is one of the errors this
/// module knows; otherwise `message` unchanged. `tables` are the names a missing table's name is
/// compared with.
pub fn explain(message: &str, tables: &[String]) -> String {
    if let Some(name) = missing_table(message) {
        return match nearest(name, tables) {
            Some(near) => format!("table {name} not found; did you mean {near}?"),
            None => {
                format!("table {name} not found; `SELECT table_name FROM information_schema.tables` lists the tables")
            }
        };
    }
    if let Some(column) = ungrouped_column(message) {
        return format!(
            "column {column} is selected beside an aggregate (COUNT, SUM, …) but is not in GROUP BY \
             (a `*` selects every column): add `GROUP BY {column}`, or put it inside an aggregate \
             such as `MIN({column})`"
        );
    }
    message.to_string()
}

/// The table name of DataFusion's "table 'datafusion.public.NAME' not found", without the default
/// catalog and schema (a name may hold dots or slashes of its own: `'/etc/passwd'`).
fn missing_table(message: &str) -> Option<&str> {
    let start = message.find("table '")? + "table '".len();
    let rest = &message[start..];
    let quoted = &rest[..rest.find("' not found")?];
    Some(quoted.strip_prefix("datafusion.public.").unwrap_or(quoted))
}

/// The column of DataFusion's "column \"TABLE.NAME\" must appear in the GROUP BY clause or must be
/// part of an aggregate function", without its table.
fn ungrouped_column(message: &str) -> Option<&str> {
    let head = message.find("must appear in the GROUP BY clause")?;
    let before = &message[..head];
    let start = before.rfind("column \"")? + "column \"".len();
    let quoted = before[start..].trim_end().strip_suffix('"')?;
    Some(quoted.rsplit('.').next().unwrap_or(quoted))
}

/// The name in `names` nearest to `name` by edit distance (case-insensitive), when it is near
/// enough to be a typo: at most a third of the longer name's length, and at least 1 edit allowed.
fn nearest<'a>(name: &str, names: &'a [String]) -> Option<&'a str> {
    let name = name.to_lowercase();
    names
        .iter()
        .map(|n| (edit_distance(&name, &n.to_lowercase()), n))
        .filter(|(d, n)| *d <= (name.chars().count().max(n.chars().count()) / 3).max(1))
        .min_by_key(|(d, n)| (*d, n.len()))
        .map(|(_, n)| n.as_str())
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(above + 1).min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<String> {
        [
            "job_attempt",
            "job_rollup",
            "job_week",
            "ingest_reject",
            "weekly_metrics",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn a_misspelt_table_gets_the_nearest_name() {
        let message = "Error during planning: table 'datafusion.public.job_atempt' not found";
        assert_eq!(
            explain(message, &tables()),
            "table job_atempt not found; did you mean job_attempt?"
        );
        let message = "Error during planning: table 'datafusion.public.JOB_ROLUP' not found";
        assert_eq!(
            explain(message, &tables()),
            "table JOB_ROLUP not found; did you mean job_rollup?"
        );
    }

    #[test]
    fn a_name_far_from_every_table_lists_where_to_look() {
        let message = "Error during planning: table 'datafusion.public.invoices' not found";
        assert_eq!(
            explain(message, &tables()),
            "table invoices not found; `SELECT table_name FROM information_schema.tables` lists the tables"
        );
    }

    #[test]
    fn a_path_as_a_table_keeps_its_dots_and_slashes() {
        let message = "Error during planning: table 'datafusion.public./etc/passwd.csv' not found";
        assert_eq!(
            explain(message, &tables()),
            "table /etc/passwd.csv not found; `SELECT table_name FROM information_schema.tables` lists the tables"
        );
    }

    #[test]
    fn a_column_outside_group_by_is_explained() {
        let message = "Error during planning: Column in SELECT must be in GROUP BY or an aggregate function: \
             While expanding wildcard, column \"job_attempt.job_id\" must appear in the GROUP BY clause or \
             must be part of an aggregate function, currently only \"count(Int64(1))\" appears in the \
             SELECT clause satisfies this requirement";
        assert_eq!(
            explain(message, &tables()),
            "column job_id is selected beside an aggregate (COUNT, SUM, …) but is not in GROUP BY (a `*` \
             selects every column): add `GROUP BY job_id`, or put it inside an aggregate such as `MIN(job_id)`"
        );
    }

    #[test]
    fn other_errors_pass_through() {
        let message = "Error during planning: Invalid function 'cout'";
        assert_eq!(explain(message, &tables()), message);
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("job_atempt", "job_attempt"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}

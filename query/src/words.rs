//! Numbers in the words the command line and the site print: with their nouns (`1 day`,
//! `2 days`, `0 days`), and with thousands separators (`355,200`, `1,184.0`).

/// `n` followed by `one` when `n` is 1, else by `many`: `counted(1, "day", "days")` is `1 day`.
pub fn counted(n: impl Into<u128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A ratio for people: `—` when it has no denominator, else `decimals` places with thousands
/// separators (`1,184.0`).
pub fn format_ratio(v: Option<f64>, decimals: usize) -> String {
    match v {
        None => "—".to_string(),
        Some(x) => group_thousands(&format!("{x:.decimals$}")),
    }
}

/// A count with thousands separators (`355,200`).
pub fn format_count(n: i64) -> String {
    group_thousands(&n.to_string())
}

fn group_thousands(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{counted, format_count, format_ratio};

    #[test]
    fn one_takes_the_singular_and_every_other_number_the_plural() {
        assert_eq!(counted(1u32, "day", "days"), "1 day");
        assert_eq!(counted(0u32, "day", "days"), "0 days");
        assert_eq!(counted(2u64, "attempt", "attempts"), "2 attempts");
        assert_eq!(counted(1usize as u64, "chain entry", "chain entries"), "1 chain entry");
    }

    #[test]
    fn ratios_without_denominator_show_a_dash() {
        assert_eq!(format_ratio(None, 1), "—");
        assert_eq!(format_ratio(Some(1184.0), 1), "1,184.0");
        assert_eq!(format_ratio(Some(0.15), 3), "0.150");
        assert_eq!(format_count(355_200), "355,200");
        assert_eq!(format_count(-1_000), "-1,000");
        assert_eq!(format_count(999), "999");
    }
}

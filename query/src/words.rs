//! Numbers with their nouns in the messages the command line and the site print: `1 day`,
//! `2 days`, `0 days`.

/// `n` followed by `one` when `n` is 1, else by `many`: `counted(1, "day", "days")` is `1 day`.
pub fn counted(n: impl Into<u128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn one_takes_the_singular_and_every_other_number_the_plural() {
        assert_eq!(counted(1u32, "day", "days"), "1 day");
        assert_eq!(counted(0u32, "day", "days"), "0 days");
        assert_eq!(counted(2u64, "attempt", "attempts"), "2 attempts");
        assert_eq!(counted(1usize as u64, "chain entry", "chain entries"), "1 chain entry");
    }
}

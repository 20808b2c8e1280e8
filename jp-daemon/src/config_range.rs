//! The one range check of jpd's configuration keys, shared by every stage's config (a
//! leaf: it knows no stage), so that each key refuses a value out of range with the same
//! one-line error: `key = value is out of range start..=end`.
use std::fmt::Display;
use std::ops::RangeInclusive;

use serde::{Deserialize, Deserializer};

/// `v` if `range` holds it, else the error naming `key`.
pub fn check<T: PartialOrd + Display>(
    key: &str,
    v: T,
    range: &RangeInclusive<T>,
) -> Result<T, String> {
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{key} = {v} is out of range {}..={}",
            range.start(),
            range.end()
        ))
    }
}

/// A key's value, deserialized and [`check`]ed.
pub fn deserialize<'de, D, T>(d: D, key: &str, range: RangeInclusive<T>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + Display,
{
    check(key, T::deserialize(d)?, &range).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_key_value_and_range() {
        assert_eq!(check("max_open", 3u32, &(1..=8)), Ok(3));
        assert_eq!(
            check("max_open", 9u32, &(1..=8)),
            Err("max_open = 9 is out of range 1..=8".to_string())
        );
        assert_eq!(
            check("budget_percent", 0.0, &(0.01..=50.0)),
            Err("budget_percent = 0 is out of range 0.01..=50".to_string())
        );
    }
}

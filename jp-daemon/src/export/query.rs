//! The exporters' query strings, parsed by `application/x-www-form-urlencoded`'s
//! rules (serde_urlencoded: `+` and percent escapes decoded), so `seconds=%35` is
//! `seconds=5` as every HTTP client means it, and a malformed escape is a 400 with a
//! message rather than a value read as it came.

/// The pairs of a query string, decoded; `Err` is the message for a 400.
fn pairs(query: Option<&str>) -> Result<Vec<(String, String)>, String> {
    serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| format!("the query string is not form-urlencoded: {e}"))
}

/// The last value of `key`, decoded, or `None` when absent.
fn value(query: Option<&str>, key: &str) -> Result<Option<String>, String> {
    Ok(pairs(query)?
        .into_iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v))
}

/// `pid` from a query string: `Ok(None)` when absent.
pub fn pid(query: Option<&str>) -> Result<Option<u32>, String> {
    value(query, "pid")?
        .map(|v| {
            v.parse()
                .map_err(|_| format!("pid={v:?} is not a process id"))
        })
        .transpose()
}

/// `seconds` from a query string (`default` when absent, capped by `max`); `Err` is
/// the message for a 400.
pub fn seconds(query: Option<&str>, default: u64, max: u64) -> Result<u64, String> {
    let Some(v) = value(query, "seconds")? else {
        return Ok(default.min(max));
    };
    let seconds = v
        .parse::<u64>()
        .map_err(|_| format!("seconds={v:?} is not a whole number of seconds"))?;
    if seconds > max {
        return Err(format!(
            "seconds={seconds} is more than export.max_profile_seconds = {max}"
        ));
    }
    Ok(seconds)
}

/// A yes/no switch (`all=1`): absent is no; `1`/`true`/`yes` and `0`/`false`/`no`.
pub fn flag(query: Option<&str>, key: &str) -> Result<bool, String> {
    match value(query, key)?.as_deref() {
        None | Some("0" | "false" | "no") => Ok(false),
        Some("1" | "true" | "yes" | "") => Ok(true),
        Some(v) => Err(format!("{key}={v:?} is not 1 or 0")),
    }
}

/// A flame graph's sample type (`type=offcpu`): `Ok(None)` when absent.
pub fn sample_type(query: Option<&str>) -> Result<Option<jp_mct::SampleType>, String> {
    value(query, "type")?
        .map(|v| {
            jp_mct::SampleType::parse(&v)
                .ok_or_else(|| format!("type={v:?} is not one of bytecodes, cpu, offcpu, wall"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parameter() {
        assert_eq!(seconds(None, 30, 300), Ok(30));
        assert_eq!(seconds(Some("seconds=5"), 30, 300), Ok(5));
        assert_eq!(seconds(Some("debug=1&seconds=0"), 30, 300), Ok(0));
        assert_eq!(seconds(None, 30, 10), Ok(10));
        assert_eq!(
            seconds(Some("seconds=500"), 30, 300),
            Err("seconds=500 is more than export.max_profile_seconds = 300".into())
        );
        assert_eq!(
            seconds(Some("seconds=-1"), 30, 300),
            Err("seconds=\"-1\" is not a whole number of seconds".into())
        );
    }

    #[test]
    fn values_are_percent_decoded() {
        assert_eq!(seconds(Some("seconds=%35"), 30, 300), Ok(5));
        assert_eq!(pid(Some("x=a+b&pid=%34%32")), Ok(Some(42)));
        assert_eq!(pid(Some("p%69d=7")), Ok(Some(7)), "the key is decoded too");
        assert_eq!(pid(Some("pid=1&pid=2")), Ok(Some(2)), "the last one wins");
        assert_eq!(pid(Some("seconds=3")), Ok(None));
        assert_eq!(
            pid(Some("pid=")),
            Err("pid=\"\" is not a process id".into())
        );
        assert_eq!(
            pid(Some("pid=%2D1")),
            Err("pid=\"-1\" is not a process id".into())
        );
    }

    #[test]
    fn flags_and_sample_types() {
        assert_eq!(flag(None, "all"), Ok(false));
        assert_eq!(flag(Some("pid=1&all=1"), "all"), Ok(true));
        assert_eq!(flag(Some("all=0"), "all"), Ok(false));
        assert_eq!(
            flag(Some("all=2"), "all"),
            Err("all=\"2\" is not 1 or 0".into())
        );
        assert_eq!(sample_type(None), Ok(None));
        assert_eq!(
            sample_type(Some("type=wall")),
            Ok(Some(jp_mct::SampleType::Wall))
        );
        assert_eq!(
            sample_type(Some("type=x")),
            Err("type=\"x\" is not one of bytecodes, cpu, offcpu, wall".into())
        );
    }
}

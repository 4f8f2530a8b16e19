//! Settings from the environment and the command line, validated: a bad value is one
//! line naming the setting and its valid range, never a panic or a silent default.

use std::time::Duration;

use crate::HostError;

/// Seconds, as given to `--timeout`, `--grace` or a `*_TIMEOUT` variable: finite and
/// within `min..=max`.
pub fn seconds(name: &str, text: &str, min: f64, max: f64) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (min..=max).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{name}={text:?}: expected seconds from {min} to {max}"
        )),
    }
}

/// An integer within `min..=max`.
pub fn integer(name: &str, text: &str, min: u64, max: u64) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!(
            "{name}={text:?}: expected an integer from {min} to {max}"
        )),
    }
}

/// `name` from the environment as seconds, if set.
pub fn env_seconds(name: &str, min: f64, max: f64) -> Result<Option<Duration>, HostError> {
    match std::env::var(name) {
        Ok(v) => seconds(name, &v, min, max)
            .map(Some)
            .map_err(HostError::Setting),
        Err(_) => Ok(None),
    }
}

/// `name` from the environment as an integer, if set.
pub fn env_integer(name: &str, min: u64, max: u64) -> Result<Option<u64>, HostError> {
    match std::env::var(name) {
        Ok(v) => integer(name, &v, min, max)
            .map(Some)
            .map_err(HostError::Setting),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_the_setting_and_the_range() {
        for bad in ["-1", "NaN", "1e300", "inf", "", "ten"] {
            let e = seconds("--timeout", bad, 0.001, 1e6).unwrap_err();
            assert!(
                e.contains("--timeout") && e.contains("0.001 to 1000000"),
                "{e}"
            );
        }
        assert_eq!(
            seconds("T", "2.5", 0.0, 10.0),
            Ok(Duration::from_millis(2500))
        );
        for bad in ["0", "70000", "abc", "-3", "1099511627776"] {
            let e = integer("VOLLEY_UDP_MTU", bad, 256, 65_000).unwrap_err();
            assert!(
                e.contains("VOLLEY_UDP_MTU") && e.contains("256 to 65000"),
                "{e}"
            );
        }
        assert_eq!(integer("P", " 4000 ", 1, 65535), Ok(4000));
    }
}

//! Durations as flags give them: `2.5` (seconds), `90m`, `24h`.

use std::time::Duration;

/// A duration: seconds (fractions allowed), or a number with a unit, `s`,
/// `m`, `h` or `d` (`90m`, `24h`); more than zero, at most a year.
pub fn parse(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1.0),
        Some((at, 'm')) => (&text[..at], 60.0),
        Some((at, 'h')) => (&text[..at], 3600.0),
        Some((at, 'd')) => (&text[..at], 86400.0),
        _ => (text, 1.0),
    };
    let seconds = number
        .parse::<f64>()
        .map(|number| number * unit)
        .map_err(|_| {
            format!("'{text}' is not a duration: seconds, or a number and s, m, h or d (90m, 24h)")
        })?;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 366.0 * 86400.0) {
        return Err(format!("'{text}' is not a duration between 0 and a year"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_fractions_and_refuse_nonsense() {
        assert_eq!(parse("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("90m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse("1.5d"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse("3s"), Ok(Duration::from_secs(3)));
        for bad in [
            "0", "-1", "abc", "inf", "NaN", "1e12", "h", "5w", "400d", "1hh",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}

//! Signal names as jobs write them (`kill_signal = "SIGTERM"`, `alloc signal -s HUP`).

use crate::error::DriverError;
use nix::sys::signal::Signal;
use std::str::FromStr;

/// Nomad's default `kill_signal` on Unix.
pub const DEFAULT_KILL_SIGNAL: Signal = Signal::SIGINT;

/// Parses `"SIGTERM"`, `"TERM"`, `"sigterm"` or `"15"`. Empty text is `default`.
pub fn parse_signal(text: &str, default: Signal) -> Result<Signal, DriverError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(default);
    }
    if let Ok(number) = trimmed.parse::<i32>() {
        return Signal::try_from(number).map_err(|_| DriverError::UnknownSignal(text.to_string()));
    }
    let upper = trimmed.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&name).map_err(|_| DriverError::UnknownSignal(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_default() {
        let rows = [
            ("SIGTERM", Signal::SIGTERM),
            ("TERM", Signal::SIGTERM),
            ("sighup", Signal::SIGHUP),
            (" SIGKILL ", Signal::SIGKILL),
            ("9", Signal::SIGKILL),
            ("", Signal::SIGINT),
            ("USR1", Signal::SIGUSR1),
        ];
        for (text, want) in rows {
            assert_eq!(
                parse_signal(text, Signal::SIGINT).unwrap(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn unknown_signals_are_refused() {
        for text in ["SIGNOPE", "0", "999", "-1", "SIG"] {
            assert!(
                matches!(
                    parse_signal(text, Signal::SIGINT),
                    Err(DriverError::UnknownSignal(_))
                ),
                "{text:?}"
            );
        }
    }
}

//! The mock driver's task config, with the keys and meanings of Nomad's `mock_driver`.

use crate::error::DriverError;
use crate::limits::{MOCK_DURATION_MAX, MOCK_REPEAT_MAX};
use serde_json::{Map, Value};
use std::time::Duration;

use super::NAME;

/// What a mock task does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MockTaskConfig {
    /// How long the task runs before it exits by itself.
    pub run_for: Duration,
    pub exit_code: i32,
    pub exit_signal: i32,
    /// Reported as the exit's `err`.
    pub exit_err_msg: Option<String>,
    /// `signal` fails with this message.
    pub signal_error: Option<String>,
    /// `start` fails with this message…
    pub start_error: Option<String>,
    /// …as a recoverable error when true.
    pub start_error_recoverable: bool,
    /// `start` takes this long.
    pub start_block_for: Duration,
    /// After a stop request, the task takes this long to exit.
    pub kill_after: Duration,
    pub stdout: MockOutput,
    pub stderr: MockOutput,
}

/// Text written when the task starts, then `repeat` more times, `every` apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MockOutput {
    pub text: String,
    pub repeat: u64,
    pub every: Duration,
}

/// Keys Nomad's mock driver has that Caravan's accepts without acting on them.
const IGNORED_KEYS: [&str; 5] = [
    "plugin_exit_after",
    "driver_ip",
    "driver_advertise",
    "driver_port_map",
    "exec_command",
];

const KEYS: [&str; 15] = [
    "run_for",
    "exit_code",
    "exit_signal",
    "exit_err_msg",
    "signal_error",
    "start_error",
    "start_error_recoverable",
    "start_block_for",
    "kill_after",
    "stdout_string",
    "stdout_repeat",
    "stdout_repeat_duration",
    "stderr_string",
    "stderr_repeat",
    "stderr_repeat_duration",
];

impl MockTaskConfig {
    pub fn parse(map: &Map<String, Value>) -> Result<MockTaskConfig, DriverError> {
        if let Some(key) = map
            .keys()
            .find(|k| !KEYS.contains(&k.as_str()) && !IGNORED_KEYS.contains(&k.as_str()))
        {
            return Err(DriverError::invalid(
                NAME,
                format!("unknown key {key:?}; expected one of {}", KEYS.join(", ")),
            ));
        }
        let r = Reader(map);
        Ok(MockTaskConfig {
            run_for: r.duration("run_for")?,
            exit_code: r.int("exit_code")?,
            exit_signal: r.int("exit_signal")?,
            exit_err_msg: r.text("exit_err_msg")?,
            signal_error: r.text("signal_error")?,
            start_error: r.text("start_error")?,
            start_error_recoverable: r.boolean("start_error_recoverable")?,
            start_block_for: r.duration("start_block_for")?,
            kill_after: r.duration("kill_after")?,
            stdout: r.output("stdout")?,
            stderr: r.output("stderr")?,
        })
    }
}

/// Typed reads of the config map; each error names its key.
struct Reader<'a>(&'a Map<String, Value>);

impl Reader<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn wrong(key: &str, want: &str, got: &Value) -> DriverError {
        DriverError::invalid(NAME, format!("{key} must be {want}, not {got}"))
    }

    fn text(&self, key: &str) -> Result<Option<String>, DriverError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Self::wrong(key, "a string", other)),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, DriverError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
            Some(other) => Err(Self::wrong(key, "a boolean", other)),
        }
    }

    /// A whole number: JSON integer, integral float (HCL numbers), or its text.
    fn int64(&self, key: &str) -> Result<i64, DriverError> {
        let Some(v) = self.get(key) else {
            return Ok(0);
        };
        let n = match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        n.ok_or_else(|| Self::wrong(key, "a whole number", v))
    }

    fn int(&self, key: &str) -> Result<i32, DriverError> {
        let n = self.int64(key)?;
        i32::try_from(n).map_err(|_| DriverError::invalid(NAME, format!("{key} {n} is too large")))
    }

    /// A Go duration (`"1.5s"`, `"10m"`); a bare number is nanoseconds.
    fn duration(&self, key: &str) -> Result<Duration, DriverError> {
        let nanos = match self.get(key) {
            None => return Ok(Duration::ZERO),
            Some(Value::String(s)) if s.is_empty() => return Ok(Duration::ZERO),
            Some(Value::String(s)) => model::Duration::parse(s)
                .map_err(|e| DriverError::invalid(NAME, format!("{key}: {e}")))?
                .as_nanos(),
            Some(Value::Number(_)) => self.int64(key)?,
            Some(other) => return Err(Self::wrong(key, "a duration such as \"10s\"", other)),
        };
        let nanos = u64::try_from(nanos)
            .map_err(|_| DriverError::invalid(NAME, format!("{key} must not be negative")))?;
        let d = Duration::from_nanos(nanos);
        if d > MOCK_DURATION_MAX {
            return Err(DriverError::invalid(
                NAME,
                format!("{key} {d:?} is longer than the mock's limit {MOCK_DURATION_MAX:?}"),
            ));
        }
        Ok(d)
    }

    fn output(&self, stream: &str) -> Result<MockOutput, DriverError> {
        let repeat_key = format!("{stream}_repeat");
        let repeat = self.int64(&repeat_key)?;
        let repeat = u64::try_from(repeat)
            .ok()
            .filter(|r| *r <= MOCK_REPEAT_MAX)
            .ok_or_else(|| {
                DriverError::invalid(
                    NAME,
                    format!("{repeat_key} must be between 0 and {MOCK_REPEAT_MAX}"),
                )
            })?;
        Ok(MockOutput {
            text: self.text(&format!("{stream}_string"))?.unwrap_or_default(),
            repeat,
            every: self.duration(&format!("{stream}_repeat_duration"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<MockTaskConfig, DriverError> {
        MockTaskConfig::parse(v.as_object().unwrap())
    }

    #[test]
    fn every_key() {
        let cfg = parse(json!({
            "run_for": "1.5s", "exit_code": 3, "exit_signal": 9.0, "exit_err_msg": "boom",
            "signal_error": "no", "start_error": "nope", "start_error_recoverable": true,
            "start_block_for": "10ms", "kill_after": "2s",
            "stdout_string": "hi\n", "stdout_repeat": "4", "stdout_repeat_duration": "100ms",
            "stderr_string": "err", "stderr_repeat": 0,
        }))
        .unwrap();
        assert_eq!(cfg.run_for, Duration::from_millis(1500));
        assert_eq!((cfg.exit_code, cfg.exit_signal), (3, 9));
        assert_eq!(cfg.exit_err_msg.as_deref(), Some("boom"));
        assert_eq!(cfg.signal_error.as_deref(), Some("no"));
        assert_eq!(cfg.start_error.as_deref(), Some("nope"));
        assert!(cfg.start_error_recoverable);
        assert_eq!(cfg.start_block_for, Duration::from_millis(10));
        assert_eq!(cfg.kill_after, Duration::from_secs(2));
        assert_eq!(
            cfg.stdout,
            MockOutput {
                text: "hi\n".into(),
                repeat: 4,
                every: Duration::from_millis(100)
            }
        );
        assert_eq!(cfg.stderr.text, "err");
    }

    #[test]
    fn empty_config_runs_for_zero_and_exits_zero() {
        assert_eq!(parse(json!({})).unwrap(), MockTaskConfig::default());
    }

    #[test]
    fn errors_name_the_key() {
        let rows = [
            (json!({"run_for": "soon"}), "run_for"),
            (json!({"run_for": "-1s"}), "run_for must not be negative"),
            (json!({"run_for": "48h"}), "longer than the mock's limit"),
            (
                json!({"exit_code": 1.5}),
                "exit_code must be a whole number",
            ),
            (
                json!({"exit_code": 1e12}),
                "exit_code 1000000000000 is too large",
            ),
            (json!({"start_error_recoverable": 1}), "must be a boolean"),
            (
                json!({"stdout_repeat": -1}),
                "stdout_repeat must be between",
            ),
            (json!({"command": "/bin/sh"}), "unknown key \"command\""),
        ];
        for (config, want) in rows {
            let err = parse(config.clone()).unwrap_err().to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }
}

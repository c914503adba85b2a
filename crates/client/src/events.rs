//! Task events with Nomad's names and display messages, and the task state changes they mark.

use crate::limits::TASK_EVENTS_MAX;
use crate::time::{format_unix_nanos, now_unix_ns};
use model::alloc::{
    TaskEvent, TaskState, TaskStatus, TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED,
    TASK_EVENT_DOWNLOADING_ARTIFACTS, TASK_EVENT_DRIVER_FAILURE, TASK_EVENT_KILLED,
    TASK_EVENT_KILLING, TASK_EVENT_LEADER_DEAD, TASK_EVENT_NOT_RESTARTING, TASK_EVENT_RECEIVED,
    TASK_EVENT_RESTARTING, TASK_EVENT_RESTART_SIGNAL, TASK_EVENT_SETUP, TASK_EVENT_SETUP_FAILURE,
    TASK_EVENT_SIBLING_FAILED, TASK_EVENT_SIGNALING, TASK_EVENT_STARTED, TASK_EVENT_TERMINATED,
};
use std::time::Duration;

/// Nomad's event while `shutdown_delay` runs before a kill.
pub const TASK_EVENT_WAITING_SHUTDOWN_DELAY: &str = "Waiting for shutdown delay";

/// Nomad's event when a prestart hook fails (`dispatch_payload: …`).
pub const TASK_EVENT_HOOK_FAILED: &str = "Task hook failed";
/// Nomad's template manager reports under this source name ("Template failed: …").
pub const TASK_EVENT_TEMPLATE: &str = "Template";

fn event(kind: &str, display: impl Into<String>) -> TaskEvent {
    TaskEvent {
        event_type: kind.to_string(),
        time: now_unix_ns(),
        display_message: display.into(),
        ..TaskEvent::default()
    }
}

pub fn received() -> TaskEvent {
    event(TASK_EVENT_RECEIVED, "Task received by client")
}

pub fn setup() -> TaskEvent {
    let mut e = event(TASK_EVENT_SETUP, "Building Task Directory");
    e.message = "Building Task Directory".into();
    e
}

/// A setting the task's driver cannot apply, said once when the task is set up.
pub fn setup_note(message: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_SETUP, message);
    e.message = message.to_string();
    e
}

pub fn setup_failure(error: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_SETUP_FAILURE, error);
    e.setup_error = error.to_string();
    e.fails_task = true;
    e
}

pub fn downloading_artifacts() -> TaskEvent {
    event(
        TASK_EVENT_DOWNLOADING_ARTIFACTS,
        "Client is downloading artifacts",
    )
}

/// An artifact could not be fetched; the start counts as failed under the restart policy.
pub fn artifact_failed(error: &str) -> TaskEvent {
    let mut e = event(
        TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED,
        format!("Failed to download artifacts: {error}"),
    );
    e.download_error = error.to_string();
    e
}

/// A template could not be rendered: the task fails, as Nomad's template manager kills it.
pub fn template_failed(error: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_TEMPLATE, format!("Template failed: {error}"));
    e.message = error.to_string();
    e.fails_task = true;
    e
}

/// A prestart hook failed (`hook`: its name, as Nomad's `dispatch_payload`).
pub fn hook_failed(hook: &str, error: &str) -> TaskEvent {
    let text = format!("{hook}: {error}");
    let mut e = event(TASK_EVENT_HOOK_FAILED, text.clone());
    e.message = text;
    e
}

pub fn started() -> TaskEvent {
    event(TASK_EVENT_STARTED, "Task started by client")
}

pub fn driver_failure(error: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_DRIVER_FAILURE, error);
    e.driver_error = error.to_string();
    e
}

pub fn terminated(exit: &drivers::ExitResult) -> TaskEvent {
    let mut text = format!("Exit Code: {}", exit.exit_code);
    if exit.signal != 0 {
        text.push_str(&format!(", Signal: {}", exit.signal));
    }
    if let Some(err) = &exit.err {
        text.push_str(&format!(", Exit Message: {err:?}"));
    }
    if exit.oom_killed {
        text = format!("OOM Killed, {text}");
    }
    let mut e = event(TASK_EVENT_TERMINATED, text);
    e.exit_code = exit.exit_code;
    e.signal = exit.signal;
    e.message = exit.err.clone().unwrap_or_default();
    if exit.oom_killed {
        e.details.insert("oom_killed".into(), "true".into());
    }
    e
}

pub fn restarting(delay: Duration, reason: &str) -> TaskEvent {
    let mut e = event(
        TASK_EVENT_RESTARTING,
        format!(
            "{reason} - Task restarting in {}",
            model::Duration::from(delay)
        ),
    );
    e.restart_reason = reason.to_string();
    e.start_delay = i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX);
    e
}

pub fn not_restarting(reason: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_NOT_RESTARTING, reason);
    e.restart_reason = reason.to_string();
    e.fails_task = true;
    e
}

/// `alloc signal`: Nomad's "Signaling" event.
pub fn signaling(signal: &str) -> TaskEvent {
    let mut e = event(
        TASK_EVENT_SIGNALING,
        format!("Task being sent signal {signal}"),
    );
    e.task_signal = signal.to_string();
    e
}

/// The reason `alloc restart` gives, as Nomad's.
pub const REASON_USER_RESTART: &str = "User requested restart";

/// The reason a re-rendered `change_mode = "restart"` template gives, as Nomad's.
pub const REASON_TEMPLATE_RESTART: &str = "Template with change_mode restart re-rendered";

/// Nomad's event for a task hook's message (a template's change script ran).
pub const TASK_EVENT_HOOK_MESSAGE: &str = "Task hook message";

/// A re-rendered `change_mode = "signal"` template: Nomad's "Signaling" event.
pub fn template_signaling(signal: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_SIGNALING, "Template re-rendered");
    e.task_signal = signal.to_string();
    e
}

/// A re-rendered template's `change_script` ran and exited 0.
pub fn template_script_ran(script: &model::task::ChangeScript, code: i32) -> TaskEvent {
    event(
        TASK_EVENT_HOOK_MESSAGE,
        format!(
            "Template successfully ran script {} with arguments: {:?}. Exit code: {code}",
            script.command, script.args
        ),
    )
}

/// A re-rendered template's `change_script` failed (could not run, or exited non-zero).
pub fn template_script_failed(
    script: &model::task::ChangeScript,
    error: &str,
    code: i32,
) -> TaskEvent {
    event(
        TASK_EVENT_HOOK_FAILED,
        format!(
            "Template failed to run script {} with arguments {:?} on change: {error} Exit code: {code}",
            script.command, script.args
        ),
    )
}

/// Why the template manager kills the task (a signal it could not send, a failed script with
/// `fail_on_error`).
pub fn template_kill(why: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_KILLING, why);
    e.kill_reason = why.to_string();
    e
}

/// `alloc restart`: Nomad's "Restart Signaled" event.
pub fn restart_signaled(reason: &str) -> TaskEvent {
    let mut e = event(TASK_EVENT_RESTART_SIGNAL, reason);
    e.restart_reason = reason.to_string();
    e
}

pub fn waiting_shutdown_delay(delay: Duration) -> TaskEvent {
    event(
        TASK_EVENT_WAITING_SHUTDOWN_DELAY,
        format!(
            "Waiting for shutdown_delay of {} before killing the task.",
            model::Duration::from(delay)
        ),
    )
}

pub fn killing(timeout: Duration) -> TaskEvent {
    let mut e = event(
        TASK_EVENT_KILLING,
        format!(
            "Sent interrupt. Waiting {} before force killing",
            model::Duration::from(timeout)
        ),
    );
    e.kill_timeout = model::Duration::from(timeout);
    e
}

/// The client stops the task itself: it has not reached the servers for the group's
/// `stop_on_client_after`.
pub fn killing_disconnected(after: Duration) -> TaskEvent {
    event(
        TASK_EVENT_KILLING,
        format!(
            "The client has been disconnected from the servers for longer than stop_on_client_after ({})",
            model::Duration::from(after)
        ),
    )
}

pub fn killed(error: Option<&str>) -> TaskEvent {
    match error {
        None => event(TASK_EVENT_KILLED, "Task successfully killed"),
        Some(err) => {
            let mut e = event(TASK_EVENT_KILLED, format!("Task killed with error: {err}"));
            e.kill_error = err.to_string();
            e
        }
    }
}

pub fn sibling_failed(sibling: &str) -> TaskEvent {
    let mut e = event(
        TASK_EVENT_SIBLING_FAILED,
        format!("Task's sibling {sibling:?} failed"),
    );
    e.failed_sibling = sibling.to_string();
    e
}

pub fn leader_dead() -> TaskEvent {
    event(TASK_EVENT_LEADER_DEAD, "Leader Task in Group dead")
}

/// Appends `e`, keeping the newest [`TASK_EVENTS_MAX`]; an event that fails the task marks it.
pub fn push(state: &mut TaskState, e: TaskEvent) {
    if e.fails_task {
        state.failed = true;
    }
    state.events.push(e);
    let excess = state.events.len().saturating_sub(TASK_EVENTS_MAX);
    state.events.drain(..excess);
}

/// Moves the task to `to` (`pending`, `running`, `dead`), recording start and finish times as
/// Nomad does: `StartedAt` on every start, `FinishedAt` once.
pub fn transition(state: &mut TaskState, to: TaskStatus) {
    let now = format_unix_nanos(now_unix_ns());
    if to == TaskStatus::Running && state.state != TaskStatus::Running {
        state.started_at = Some(now.clone());
    }
    if to == TaskStatus::Dead && state.finished_at.is_none() {
        state.finished_at = Some(now);
    }
    state.state = to;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_capped_and_failures_mark_the_task() {
        let mut s = TaskState::default();
        for _ in 0..15 {
            push(&mut s, started());
        }
        assert_eq!(s.events.len(), TASK_EVENTS_MAX);
        assert!(!s.failed);
        push(&mut s, not_restarting("Policy allows no restarts"));
        assert!(s.failed);
        assert_eq!(s.events.last().unwrap().event_type, "Not Restarting");
    }

    #[test]
    fn display_messages() {
        let exit = drivers::ExitResult {
            exit_code: 137,
            signal: 9,
            oom_killed: true,
            err: None,
        };
        assert_eq!(
            terminated(&exit).display_message,
            "OOM Killed, Exit Code: 137, Signal: 9"
        );
        assert_eq!(
            restarting(Duration::from_millis(1500), "Restart within policy").display_message,
            "Restart within policy - Task restarting in 1.5s"
        );
        assert_eq!(
            killing(Duration::from_secs(5)).display_message,
            "Sent interrupt. Waiting 5s before force killing"
        );
    }

    #[test]
    fn times_follow_the_state() {
        let mut s = TaskState::default();
        transition(&mut s, TaskStatus::Running);
        let first = s.started_at.clone();
        assert!(first.is_some());
        transition(&mut s, TaskStatus::Dead);
        let finished = s.finished_at.clone();
        transition(&mut s, TaskStatus::Dead);
        assert_eq!(s.finished_at, finished);
    }
}

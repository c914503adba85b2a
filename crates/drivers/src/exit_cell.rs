//! A task's exit, set once and awaited by any number of callers.

use crate::driver::ExitResult;
use tokio::sync::watch;

/// When and how a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exited {
    pub result: ExitResult,
    pub at_unix_ns: i64,
}

/// Set once by the task's monitor; read by `wait`, `inspect`, `stop`.
///
/// The `watch` channel holds `None` until the exit is known. Receivers never hold a borrow across
/// an `.await` (`wait_for` clones out of it).
pub(crate) struct ExitCell {
    tx: watch::Sender<Option<Exited>>,
}

impl ExitCell {
    pub fn new() -> ExitCell {
        ExitCell {
            tx: watch::Sender::new(None),
        }
    }

    /// Records the exit; the first record wins, later ones are ignored.
    pub fn set(&self, result: ExitResult) {
        let at_unix_ns = crate::now_unix_ns();
        self.tx.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(Exited { result, at_unix_ns });
            true
        });
    }

    pub fn get(&self) -> Option<Exited> {
        self.tx.borrow().clone()
    }

    pub fn has_exited(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// Resolves once the exit is recorded. Cancel-safe.
    pub async fn wait(&self) -> Exited {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while we borrow it.
        let exited = rx
            .wait_for(Option::is_some)
            .await
            .expect("the exit cell's sender outlives its receivers");
        exited.clone().expect("wait_for returned a recorded exit")
    }

    /// Waits for the exit for at most `limit`; `None` if it did not come.
    pub async fn wait_timeout(&self, limit: std::time::Duration) -> Option<Exited> {
        tokio::time::timeout(limit, self.wait()).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn first_exit_wins_and_every_waiter_sees_it() {
        let cell = std::sync::Arc::new(ExitCell::new());
        assert!(cell.wait_timeout(Duration::from_millis(10)).await.is_none());
        let waiter = {
            let cell = cell.clone();
            tokio::spawn(async move { cell.wait().await })
        };
        cell.set(ExitResult {
            exit_code: 3,
            ..Default::default()
        });
        cell.set(ExitResult {
            exit_code: 4,
            ..Default::default()
        });
        assert_eq!(waiter.await.unwrap().result.exit_code, 3);
        assert_eq!(cell.wait().await.result.exit_code, 3);
        assert!(cell.has_exited());
    }
}

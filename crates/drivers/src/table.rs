//! The tasks a driver instance knows, by task id.

use crate::error::DriverError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Task id → task. The mutex guards only the map; it is held for a lookup or an insert and never
/// across an `.await`, so callers clone the `Arc` out and work on the task without it.
pub(crate) struct TaskTable<T> {
    tasks: Mutex<HashMap<String, Arc<T>>>,
}

impl<T> TaskTable<T> {
    pub fn new() -> TaskTable<T> {
        TaskTable {
            tasks: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<T>>> {
        // A panic while holding this lock cannot leave the map half-changed (single operations),
        // so a poisoned lock is still consistent.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, task_id: &str) -> Result<Arc<T>, DriverError> {
        self.lock()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))
    }

    pub fn contains(&self, task_id: &str) -> bool {
        self.lock().contains_key(task_id)
    }

    /// Adds the task; refuses an id already present.
    pub fn insert(&self, task_id: &str, task: Arc<T>) -> Result<(), DriverError> {
        let mut tasks = self.lock();
        if tasks.contains_key(task_id) {
            return Err(DriverError::TaskExists(task_id.to_string()));
        }
        tasks.insert(task_id.to_string(), task);
        Ok(())
    }

    pub fn remove(&self, task_id: &str) {
        self.lock().remove(task_id);
    }
}

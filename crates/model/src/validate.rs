//! Validation reports every problem at once, each at a [`Path`].

use crate::path::Path;
use std::fmt;

/// One problem found by validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: Path,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem validation found, in the order the spec lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    pub errors: Vec<FieldError>,
}

impl ValidationErrors {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, path: &Path, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.clone(),
            message: message.into(),
        });
    }

    /// Adds an error when `ok` is false.
    pub fn check(&mut self, ok: bool, path: &Path, message: impl Into<String>) {
        if !ok {
            self.add(path, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn into_result(self) -> Result<(), ValidationErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        writeln!(f, "{n} error{} occurred:", if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            writeln!(f, "\t* {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

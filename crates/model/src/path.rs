//! Paths to a place in a job, written the way a job file author reads them:
//! `group "web" > task "api" > resources.memory`.

use std::fmt;

/// A location inside a job spec. Labeled blocks are joined with ` > `; plain attributes and unlabeled
/// blocks with `.`; list positions as `[i]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path {
    text: String,
    after_block: bool,
}

impl Path {
    pub fn root() -> Path {
        Path::default()
    }

    /// A labeled block: `group "web"`.
    pub fn block(&self, kind: &str, label: &str) -> Path {
        let mut text = self.text.clone();
        if !text.is_empty() {
            text.push_str(" > ");
        }
        text.push_str(&format!("{kind} {label:?}"));
        Path {
            text,
            after_block: true,
        }
    }

    /// An attribute or unlabeled block: `resources`, then `.memory`.
    pub fn field(&self, name: &str) -> Path {
        let mut text = self.text.clone();
        if self.after_block {
            text.push_str(" > ");
        } else if !text.is_empty() {
            text.push('.');
        }
        text.push_str(name);
        Path {
            text,
            after_block: false,
        }
    }

    /// A position in a list: `service[0]`.
    pub fn index(&self, i: usize) -> Path {
        Path {
            text: format!("{}[{i}]", self.text),
            after_block: false,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_root(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether `self` is `other` or lies inside it.
    pub fn starts_with(&self, other: &Path) -> bool {
        let Some(rest) = self.text.strip_prefix(&other.text) else {
            return false;
        };
        other.text.is_empty() || rest.is_empty() || rest.starts_with(['.', '[', ' '])
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_a_job_file() {
        let p = Path::root()
            .block("group", "web")
            .block("task", "api")
            .field("resources")
            .field("memory");
        assert_eq!(
            p.as_str(),
            "group \"web\" > task \"api\" > resources.memory"
        );
        assert_eq!(
            Path::root().field("update").field("canary").as_str(),
            "update.canary"
        );
        assert_eq!(
            Path::root()
                .block("group", "g")
                .field("service")
                .index(1)
                .field("port")
                .as_str(),
            "group \"g\" > service[1].port"
        );
        assert!(p.starts_with(&Path::root().block("group", "web")));
        assert!(!Path::root()
            .field("updates")
            .starts_with(&Path::root().field("update")));
    }
}

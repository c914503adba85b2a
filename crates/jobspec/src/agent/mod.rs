//! Nomad agent configuration files (HCL2, the HCL1 forms real configs use, and JSON) read into
//! one [`AgentConfig`], with Nomad's merge rules for several files and directories.
//!
//! Owns: reading files and directories of `*.hcl`/`*.json`, rewriting HCL1 forms for hcl-edit
//! without moving lines, the generic value tree with key positions, checking it against the
//! configuration's shape (collecting every unknown key and wrong type with file:line:col and key
//! path), Nomad's weak typing (`"true"`, `"10"`), Go durations, and merging.
//! Never does: apply defaults on its own (callers merge onto [`AgentConfig::default_values`] or
//! [`AgentConfig::dev`]), evaluate expressions or interpolations, read environment variables, or
//! touch the network. Reads only the paths it is given.

mod config;
mod duration;
mod error;
mod hcl;
pub(crate) mod hcl1;
mod json;
mod schema;
mod tree;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub use config::{
    AclConfig, Addresses, AgentConfig, ClientConfig, HostVolume, PluginConfig, Ports, Reserved,
    ServerConfig, ServerJoin, TlsConfig,
};
pub use duration::{format_go_duration, parse_go_duration};
pub use error::{AgentConfigError, Diagnostic, Pos};

use error::display_path;
use schema::{Issue, Kind};
use tree::Tree;

/// Reads one configuration from `src`; `filename` picks the format (`.json` is JSON, anything
/// else HCL) and names the file in errors.
pub fn parse_str(src: &str, filename: &str) -> Result<AgentConfig, AgentConfigError> {
    let parsed = if is_json(filename) {
        json::parse(src)
    } else {
        hcl::parse(src)
    };
    let tree = parsed.map_err(|e| {
        AgentConfigError::Invalid(vec![Diagnostic::syntax(filename, src, e.offset, e.message)])
    })?;
    decode(tree, src, filename)
}

/// Reads one configuration file, its format chosen by extension.
pub fn load_file(path: &Path) -> Result<AgentConfig, AgentConfigError> {
    let src = std::fs::read_to_string(path).map_err(|source| AgentConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&src, &path.display().to_string())
}

/// Reads and merges, in order, every path given: a file is read whatever its extension; a
/// directory contributes its `*.hcl` and `*.json` files in lexical order (editor backups and
/// hidden files skipped). Problems from all files are reported together.
pub fn load_paths(paths: &[PathBuf]) -> Result<AgentConfig, AgentConfigError> {
    let mut merged = AgentConfig::default();
    let mut problems = Vec::new();
    for path in paths {
        for file in config_files(path)? {
            match load_file(&file) {
                Ok(config) => merged = merged.merge(config),
                Err(AgentConfigError::Invalid(list)) => problems.extend(list),
                Err(io) => return Err(io),
            }
        }
    }
    if problems.is_empty() {
        Ok(merged)
    } else {
        Err(AgentConfigError::Invalid(problems))
    }
}

fn is_json(filename: &str) -> bool {
    Path::new(filename)
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"))
}

/// `path` itself, or the configuration files in it when it is a directory.
fn config_files(path: &Path) -> Result<Vec<PathBuf>, AgentConfigError> {
    let io = |source| AgentConfigError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !std::fs::metadata(path).map_err(io)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let file = entry.map_err(io)?.path();
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if file.is_file() && is_config_name(name) {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

/// `*.hcl` and `*.json`, skipping what editors leave behind (`.#x.hcl`, `x.hcl~`, `#x.hcl#`).
fn is_config_name(name: &str) -> bool {
    let temporary = name.starts_with('.')
        || name.ends_with('~')
        || (name.starts_with('#') && name.ends_with('#'));
    !temporary && (name.ends_with(".hcl") || name.ends_with(".json"))
}

/// Checks the tree against the configuration's shape and deserializes it.
fn decode(tree: Tree, src: &str, filename: &str) -> Result<AgentConfig, AgentConfigError> {
    let Tree {
        value,
        spans,
        mut issues,
    } = tree;
    let root = Kind::Block(AgentConfig::FIELDS);
    let checked = schema::check(Value::Object(value), &root, &mut Vec::new(), &mut issues);
    if !issues.is_empty() {
        let mut list: Vec<Diagnostic> = issues
            .into_iter()
            .map(|i| diagnostic(i, &spans, src, filename))
            .collect();
        list.sort_by_key(|d| d.pos);
        return Err(AgentConfigError::Invalid(list));
    }
    serde_json::from_value(checked.unwrap_or(Value::Object(Map::new()))).map_err(|e| {
        AgentConfigError::Invalid(vec![Diagnostic {
            file: filename.to_string(),
            pos: None,
            key: String::new(),
            message: format!("internal error: the checked configuration did not decode: {e}"),
            snippet: None,
        }])
    })
}

fn diagnostic(issue: Issue, spans: &tree::Spans, src: &str, filename: &str) -> Diagnostic {
    let offset = issue.offset.or_else(|| spans.find(&issue.path));
    Diagnostic {
        file: filename.to_string(),
        pos: offset.map(|o| Pos::of_offset(src, o)),
        key: display_path(&issue.path),
        message: issue.message,
        snippet: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn empty_files_are_empty_configs() {
        assert_eq!(parse_str("", "a.hcl").unwrap(), AgentConfig::default());
        assert_eq!(
            parse_str("# nothing\n", "a.hcl").unwrap(),
            AgentConfig::default()
        );
        assert_eq!(parse_str("{}", "a.json").unwrap(), AgentConfig::default());
    }

    #[test]
    fn interpolations_are_kept_as_written() {
        let config = parse_str("name = \"${node.unique.name}-x\"\n", "a.hcl").unwrap();
        assert_eq!(config.name.as_deref(), Some("${node.unique.name}-x"));
    }

    #[test]
    fn crlf_files_read_like_lf_files() {
        let lf = "region = \"eu\"\nports { http = 1 rpc = 2 }\nclient {\n  enabled = true\n}\n";
        let crlf = lf.replace('\n', "\r\n");
        assert_eq!(
            parse_str(&crlf, "a.hcl").unwrap(),
            parse_str(lf, "a.hcl").unwrap()
        );
    }

    #[test]
    fn format_follows_the_extension() {
        assert!(parse_str("{\"region\": \"eu\"}", "agent.JSON").is_ok());
        let err = parse_str("[1]", "agent.json").unwrap_err();
        assert_eq!(err.to_string(), "agent.json:1:1: syntax error: the configuration must be a JSON object\n 1 | [1]\n   | ^");
    }

    #[test]
    fn json_unknown_keys_have_positions() {
        let err = parse_str(
            "{\n  \"client\": {\"enabled\": true, \"nodeclass\": \"x\"}\n}",
            "c.json",
        )
        .unwrap_err();
        let diagnostic = &err.diagnostics()[0];
        assert_eq!(diagnostic.pos, Some(Pos { line: 2, col: 31 }));
        assert_eq!(diagnostic.key, "client.nodeclass");
        assert!(
            diagnostic.message.contains("did you mean \"node_class\"?"),
            "{diagnostic}"
        );
    }

    #[test]
    fn free_form_sections_are_kept() {
        let config = parse_str("consul {\n  address = \"127.0.0.1:8500\"\n}\n", "a.hcl").unwrap();
        assert_eq!(config.consul, Some(json!({"address": "127.0.0.1:8500"})));
    }

    fn hclish() -> impl Strategy<Value = String> {
        let pieces = [
            "a",
            "b.c",
            "\"k\"",
            "=",
            " = ",
            "{",
            "}",
            "[",
            "]",
            ",",
            " ",
            "\n",
            "1",
            "-2",
            "\"s\"",
            "# c\n",
            "/* c */",
            "<<EOT\nx\nEOT\n",
            "\"${x}\"",
            "client",
            "meta",
            "\"",
            "(",
            ")",
            "é",
        ];
        proptest::collection::vec(proptest::sample::select(pieces.to_vec()), 0..40)
            .prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn never_panics_and_keeps_lines(src in hclish()) {
            if let Ok(out) = hcl1::normalize(&src) {
                prop_assert_eq!(out.text.matches('\n').count(), src.matches('\n').count());
                prop_assert!(out.map.to_original(out.text.len()) <= src.len());
            }
            let _ = parse_str(&src, "fuzz.hcl");
            let _ = parse_str(&src, "fuzz.json");
        }
    }
}

//! Nomad's template language: Go's `text/template` with consul-template's functions, minus the
//! ones that need Consul or Vault (refused by name with the reason); Nomad's own read the
//! servers through the host.
//!
//! Pure apart from the [`Host`] it is given: the task environment (`env`) and the files the
//! template may read (`file`), both decided by the caller.

mod eval;
mod funcs;
mod parse;
mod value;

use parse::{Arg, Node, Pipeline};
use std::fmt;

/// What a template can reach outside itself.
pub(crate) trait Host {
    /// `{{ env "NAME" }}`: a variable of the task environment.
    fn env(&self, name: &str) -> Option<String>;
    /// `{{ file "path" }}`: a file's contents, or why it cannot be read.
    fn file(&self, path: &str) -> Result<String, String>;
    /// The servers' API as the task's identity reaches it (`nomadService`, `nomadVar`, ...).
    fn nomad(&self) -> Option<&crate::task_hooks::nomad_api::NomadApi> {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenderOptions<'a> {
    pub left_delim: &'a str,
    pub right_delim: &'a str,
    /// `error_on_missing_key`: a missing map key is an error instead of `<no value>`.
    pub err_missing_key: bool,
}

impl Default for RenderOptions<'_> {
    fn default() -> Self {
        RenderOptions {
            left_delim: "{{",
            right_delim: "}}",
            err_missing_key: false,
        }
    }
}

/// A template that cannot be parsed or executed, with the line of the action at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    pub line: usize,
    pub message: String,
}

impl TemplateError {
    fn at(line: usize, message: impl Into<String>) -> TemplateError {
        TemplateError {
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses and executes `src`. Every function is checked before anything runs, so a refused
/// function fails the template even in a branch that would not run.
pub(crate) fn render(
    src: &str,
    opts: &RenderOptions<'_>,
    host: &dyn Host,
) -> Result<String, TemplateError> {
    let nodes = parse::parse(src, opts.left_delim, opts.right_delim)?;
    check_nodes(&nodes)?;
    let mut ev = eval::Eval {
        host,
        err_missing_key: opts.err_missing_key,
        vars: vec![(String::new(), value::Value::Nil)],
        out: String::new(),
    };
    ev.nodes(&nodes, &value::Value::Nil)?;
    Ok(ev.out)
}

fn check_nodes(nodes: &[Node]) -> Result<(), TemplateError> {
    for n in nodes {
        match n {
            Node::Text(_) => {}
            Node::Action(p) => check_pipe(p)?,
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                check_pipe(&b.pipe)?;
                check_nodes(&b.body)?;
                check_nodes(&b.otherwise)?;
            }
        }
    }
    Ok(())
}

fn check_pipe(p: &Pipeline) -> Result<(), TemplateError> {
    for cmd in &p.cmds {
        for a in &cmd.args {
            check_arg(a, p.line)?;
        }
    }
    Ok(())
}

fn check_arg(a: &Arg, line: usize) -> Result<(), TemplateError> {
    match a {
        Arg::Func(name) => funcs::check(name).map_err(|e| TemplateError::at(line, e)),
        Arg::Sub(p) => check_pipe(p),
        Arg::Field(base, _) => check_arg(base, line),
        Arg::Lit(_) | Arg::Dot | Arg::Var(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct FakeHost {
        env: BTreeMap<String, String>,
        files: BTreeMap<String, String>,
    }

    impl Host for FakeHost {
        fn env(&self, name: &str) -> Option<String> {
            self.env.get(name).cloned()
        }
        fn file(&self, path: &str) -> Result<String, String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| format!("no file {path}"))
        }
    }

    fn host() -> FakeHost {
        FakeHost {
            env: [
                ("NOMAD_TASK_NAME", "web"),
                ("LIST", "a,b,c"),
                (
                    "JSON",
                    r#"{"name":"x","ports":[80,443],"nested":{"k":"v"}}"#,
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            files: [("local/in.txt".to_string(), "  file body \n".to_string())].into(),
        }
    }

    fn check(src: &str) -> String {
        match render(src, &RenderOptions::default(), &host()) {
            Ok(s) => s,
            Err(e) => format!("ERROR {e}"),
        }
    }

    #[test]
    fn functions_and_actions() {
        let rows = [
            ("plain text", "plain text"),
            (r#"{{ env "NOMAD_TASK_NAME" }}"#, "web"),
            (r#"[{{ env "MISSING" }}]"#, "[]"),
            (r#"{{ env "NOMAD_TASK_NAME" | toUpper }}"#, "WEB"),
            (r#"{{ "MiXed" | toLower }}"#, "mixed"),
            (r#"{{ file "local/in.txt" | trimSpace }}"#, "file body"),
            (
                r#"{{ range split "," (env "LIST") }}<{{ . }}>{{ end }}"#,
                "<a><b><c>",
            ),
            (r#"{{ env "LIST" | split "," | join "-" }}"#, "a-b-c"),
            (r#"{{ replaceAll "," ";" (env "LIST") }}"#, "a;b;c"),
            (r#"{{ "hello" | base64Encode }}"#, "aGVsbG8="),
            (r#"{{ "aGVsbG8=" | base64Decode }}"#, "hello"),
            (
                r#"{{ with parseJSON (env "JSON") }}{{ .name }}:{{ .nested.k }}{{ end }}"#,
                "x:v",
            ),
            (
                r#"{{ range $i, $p := (env "JSON" | parseJSON).ports }}{{ $i }}={{ $p }} {{ end }}"#,
                "0=80 1=443 ",
            ),
            (
                r#"{{ (parseJSON (env "JSON")).nested | toJSON }}"#,
                r#"{"k":"v"}"#,
            ),
            (r#"{{ (parseJSON (env "JSON")).missing }}"#, "<no value>"),
            (
                r#"{{ if eq (env "NOMAD_TASK_NAME") "web" }}yes{{ else }}no{{ end }}"#,
                "yes",
            ),
            (
                r#"{{ if eq 1 2 }}a{{ else if lt 1 2 }}b{{ else }}c{{ end }}"#,
                "b",
            ),
            (
                r#"{{ $x := "v1" }}{{ if true }}{{ $x = "v2" }}{{ end }}{{ $x }}"#,
                "v2",
            ),
            (
                r#"{{ range split "," "" }}x{{ else }}empty{{ end }}"#,
                "empty",
            ),
            ("a  {{- \"b\" -}}  c", "abc"),
            ("{{/* a comment */}}x", "x"),
            (r#"{{ printf "%s-%d" "n" 3 }}"#, "n-3"),
            (
                r#"{{ len (split "," "a,b") }} {{ index (split "," "a,b") 1 }}"#,
                "2 b",
            ),
            (
                r#"{{ and 1 0 }} {{ or 0 "" "z" }} {{ not false }}"#,
                "0 z true",
            ),
            (r#"{{ "a,b" | contains "," }} {{ "x}}" }}"#, "true x}}"),
        ];
        for (src, want) in rows {
            assert_eq!(check(src), want, "{src}");
        }
    }

    #[test]
    fn errors_name_the_line_and_the_cause() {
        let rows = [
            (
                r#"{{ key "a/b" }}"#,
                "line 1: function \"key\" is not supported yet (needs Consul",
            ),
            (
                "x\n{{ if false }}{{ secret \"s\" }}{{ end }}",
                "line 2: function \"secret\" is not supported yet (needs Vault",
            ),
            (
                r#"{{ nomadVar "nomad/jobs" }}"#,
                "nomadVar: this template has no access to the servers",
            ),
            (r#"{{ service "db" }}"#, "needs Consul"),
            ("{{ nope }}", "line 1: function \"nope\" not defined"),
            ("{{ if true }}x", "line 1: {{if}} has no matching {{end}}"),
            ("{{ end }}", "unexpected {{end}}"),
            ("{{ \"a\" ", "unclosed action"),
            (r#"{{ base64Decode "%%" }}"#, "base64Decode:"),
            (r#"{{ parseJSON "{" }}"#, "parseJSON:"),
            ("{{ $nope }}", "undefined variable: $nope"),
            (
                r#"{{ range "s" }}{{ end }}"#,
                "range can't iterate over a string",
            ),
            (
                "{{ define \"x\" }}{{ end }}",
                "not supported in Caravan templates yet",
            ),
        ];
        for (src, want) in rows {
            let got = check(src);
            assert!(
                got.starts_with("ERROR") && got.contains(want),
                "{src}: {got}"
            );
        }
    }

    #[test]
    fn delimiters_and_missing_keys() {
        let opts = RenderOptions {
            left_delim: "[[",
            right_delim: "]]",
            err_missing_key: false,
        };
        let out = render(r#"{{ raw }} [[ env "NOMAD_TASK_NAME" ]]"#, &opts, &host()).unwrap();
        assert_eq!(out, "{{ raw }} web");
        let strict = RenderOptions {
            err_missing_key: true,
            ..RenderOptions::default()
        };
        let err = render(r#"{{ (parseJSON "{}").gone }}"#, &strict, &host()).unwrap_err();
        assert_eq!(err.to_string(), "line 1: map has no entry for key \"gone\"");
    }
}

//! The entry points: a job file (with variables) in, a `model::Job` and the spans of what it set out.

use crate::decode;
use crate::eval::Scope;
use crate::reader::{DecodeCx, Reader};
use crate::source::{Diagnostic, Diagnostics, SourceFile, Span};
use crate::tree::Builder;
use crate::vars::{self, VarValue};
use hcl::edit::structure::{Body as EditBody, Structure};
use hcl::edit::Span as _;
use model::{Job, Path, ValidationErrors};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// How to read a job file: variable values from outside and whether `file()` may read the disk.
#[derive(Debug, Clone, Default)]
pub struct ParseOptions {
    /// `-var name=value` flags, in order.
    pub vars: Vec<String>,
    /// `-var-file` paths, in order.
    pub var_files: Vec<std::path::PathBuf>,
    /// Var files given as text (name for errors, content), read after `var_files`; the HTTP parse
    /// endpoint's `Variables` arrive this way.
    pub var_texts: Vec<(String, String)>,
    /// The environment to take `NOMAD_VAR_*` from (pass `std::env::vars()` from the CLI).
    pub env: Vec<(String, String)>,
    /// Let `file()` and friends read files relative to the job file (false for API parses).
    pub allow_fs: bool,
}

/// A parsed job and where each of its attributes was written, for pointing later errors at the file.
#[derive(Debug, Clone)]
pub struct ParsedJob {
    pub job: Job,
    pub file: SourceFile,
    /// Model path text (`group "web" > task "api" > resources.memory`) → span.
    pub spans: BTreeMap<String, Span>,
}

impl ParsedJob {
    /// The span of `path`, or of the nearest enclosing attribute or block that has one.
    pub fn span_of(&self, path: &Path) -> Option<&Span> {
        let mut text = path.to_string();
        loop {
            if let Some(span) = self.spans.get(&text) {
                return Some(span);
            }
            let cut = [text.rfind(" > "), text.rfind('.'), text.rfind('[')]
                .into_iter()
                .flatten()
                .max()?;
            text.truncate(cut);
        }
    }

    /// Validation errors as diagnostics pointing into the job file.
    pub fn locate(&self, errors: &ValidationErrors) -> Diagnostics {
        Diagnostics(
            errors
                .errors
                .iter()
                .map(|e| {
                    self.file
                        .diagnostic(self.span_of(&e.path), e.path.to_string(), &e.message)
                })
                .collect(),
        )
    }

    /// Canonicalizes a copy of the job and validates it, with errors located in the file.
    pub fn validate(&self) -> Result<Job, Diagnostics> {
        let mut job = self.job.clone();
        job.canonicalize();
        job.validate().map_err(|errs| self.locate(&errs))?;
        Ok(job)
    }
}

/// Reads a job file from disk; `file()` resolves relative to its directory when `allow_fs` is set.
pub fn parse_file(path: &std::path::Path, opts: &ParseOptions) -> Result<ParsedJob, Diagnostics> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: name.clone(),
            location: None,
            subject: String::new(),
            message: format!("cannot read the job file: {e}"),
        }])
    })?;
    let base = path.parent().map(|p| {
        if p.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            p.to_path_buf()
        }
    });
    parse_source(SourceFile::new(name, text), base, opts)
}

/// Reads a job from text; `name` is used in error positions (Nomad's API uses "input.hcl").
pub fn parse_str(text: &str, name: &str, opts: &ParseOptions) -> Result<ParsedJob, Diagnostics> {
    let base = opts.allow_fs.then(|| std::path::PathBuf::from("."));
    parse_source(SourceFile::new(name, text), base, opts)
}

fn parse_source(
    file: SourceFile,
    base: Option<std::path::PathBuf>,
    opts: &ParseOptions,
) -> Result<ParsedJob, Diagnostics> {
    let _guard = crate::functions::with_file_access(if opts.allow_fs { base } else { None });
    let body = hcl::edit::parser::parse_body(&file.text)
        .map_err(|e| Diagnostics(vec![syntax_error(&file, &e)]))?;
    let given = outside_values(opts)?;
    let mut b = Builder::new(&file);
    let mut scope = Scope::new();
    vars::declare_variables(&mut b, &body, &given, &mut scope);
    vars::declare_locals(&mut b, &body, &mut scope);
    let job_block = top_level(&mut b, &body);
    let Some(job_block) = job_block else {
        return Err(b.diags);
    };
    let tree = b.block(job_block, &scope, &Path::root());
    let mut diags = b.diags;
    let cx = RefCell::new(DecodeCx {
        file: &file,
        diags: Diagnostics::default(),
        spans: BTreeMap::new(),
    });
    let id = tree.labels.first().cloned().unwrap_or_default();
    let mut reader = Reader::new(&tree.body, Path::root(), tree.span.clone(), &cx);
    if tree.labels.len() != 1 {
        reader.error("a job block takes exactly one label, its ID: job \"example\" { … }");
    }
    let job = decode::job(&mut reader, id);
    reader.finish();
    let cx = cx.into_inner();
    diags.0.extend(cx.diags.0);
    let parsed = ParsedJob {
        job,
        spans: cx.spans,
        file: file.clone(),
    };
    if !diags.is_empty() {
        // Every error at once: what validation finds in the rest of the job too, except where a
        // field already has an error (a value that could not be read is left unset, and
        // validation would only complain about it again).
        if let Err(more) = parsed.validate() {
            let reported: Vec<String> = diags.0.iter().map(|d| d.subject.clone()).collect();
            let already = |subject: &str| {
                reported.iter().any(|r| {
                    !r.is_empty()
                        && (subject == r
                            || subject.starts_with(&format!("{r}."))
                            || subject.starts_with(&format!("{r} >"))
                            || subject.starts_with(&format!("{r}[")))
                })
            };
            diags
                .0
                .extend(more.0.into_iter().filter(|d| !already(&d.subject)));
        }
        diags.0.sort_by_key(|d| {
            d.location
                .as_ref()
                .map_or((usize::MAX, usize::MAX), |l| (l.line, l.col))
        });
        return Err(diags);
    }
    Ok(parsed)
}

/// The file's one `job` block; `variable`, `variables` and `locals` are the only other top-level blocks.
fn top_level<'b>(b: &mut Builder, body: &'b EditBody) -> Option<&'b hcl::edit::structure::Block> {
    let mut job = None;
    for s in body.iter() {
        match s {
            Structure::Block(blk) if blk.ident.as_str() == "job" => {
                if job.is_some() {
                    b.error(blk.span().as_ref(), &Path::root(), "only one job block is allowed per file");
                } else {
                    job = Some(blk);
                }
            }
            Structure::Block(blk) if matches!(blk.ident.as_str(), "variable" | "variables" | "locals") => {}
            Structure::Block(blk) => b.error(blk.span().as_ref(), &Path::root().field(blk.ident.as_str()), format!("unknown top-level block {:?}; a job file holds one job block, and variable, variables and locals blocks", blk.ident.as_str())),
            Structure::Attribute(a) => b.error(a.span().as_ref(), &Path::root().field(a.key.as_str()), "attributes are not allowed at the top level; put them inside the job block or a locals block"),
        }
    }
    if job.is_none() && b.diags.is_empty() {
        b.error(
            Some(&(0..0)),
            &Path::root(),
            "no job block found: a job file needs job \"name\" { … }",
        );
    }
    job
}

/// Values from the environment, var files and `-var` flags, in that order (later wins).
fn outside_values(opts: &ParseOptions) -> Result<Vec<(String, VarValue)>, Diagnostics> {
    let mut given = Vec::new();
    for (k, v) in &opts.env {
        if let Some(name) = k.strip_prefix("NOMAD_VAR_") {
            given.push((
                name.to_string(),
                VarValue::Text {
                    value: v.clone(),
                    origin: format!("the environment variable {k}"),
                },
            ));
        }
    }
    let mut diags = Diagnostics::default();
    for path in &opts.var_files {
        let name = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => match vars::read_var_file(&SourceFile::new(name, text)) {
                Ok(values) => given.extend(values),
                Err(d) => diags.push(d),
            },
            Err(e) => diags.push(Diagnostic {
                file: name,
                location: None,
                subject: String::new(),
                message: format!("cannot read the var file: {e}"),
            }),
        }
    }
    for (name, text) in &opts.var_texts {
        match vars::read_var_file(&SourceFile::new(name.clone(), text.clone())) {
            Ok(values) => given.extend(values),
            Err(d) => diags.push(d),
        }
    }
    for flag in &opts.vars {
        match flag.split_once('=') {
            Some((k, v)) => given.push((
                k.trim().to_string(),
                VarValue::Text {
                    value: v.to_string(),
                    origin: format!("-var {k}"),
                },
            )),
            None => diags.push(Diagnostic {
                file: "-var".into(),
                location: None,
                subject: flag.clone(),
                message: "a -var flag takes name=value".into(),
            }),
        }
    }
    if diags.is_empty() {
        Ok(given)
    } else {
        Err(diags)
    }
}

/// A syntax error from hcl-edit as a diagnostic at its line and column.
pub fn syntax_error(file: &SourceFile, e: &hcl::edit::parser::Error) -> Diagnostic {
    let loc = e.location();
    let message = e
        .message()
        .lines()
        .next()
        .unwrap_or("invalid syntax")
        .trim()
        .to_string();
    file.diagnostic(
        Some(&(loc.offset()..loc.offset())),
        "",
        format!("syntax error: {message}"),
    )
}

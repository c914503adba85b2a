//! Executes a parsed template: pipelines, variables with their scopes, and the control actions.

use super::funcs;
use super::parse::{Arg, Branch, Command, Node, Pipeline};
use super::value::Value;
use super::{Host, TemplateError};
use crate::limits::TEMPLATE_OUTPUT_BYTES_MAX;
use std::fmt::Write;

pub(super) struct Eval<'a> {
    pub host: &'a dyn Host,
    pub err_missing_key: bool,
    /// Variables in scope, innermost last; `$` (the root) is the first.
    pub vars: Vec<(String, Value)>,
    pub out: String,
}

type Result<T> = std::result::Result<T, TemplateError>;

impl Eval<'_> {
    pub fn nodes(&mut self, nodes: &[Node], dot: &Value) -> Result<()> {
        for node in nodes {
            match node {
                Node::Text(t) => self.write(t, 0)?,
                Node::Action(p) => {
                    let v = self.pipe(p, dot)?;
                    if p.vars.is_empty() {
                        let line = p.line;
                        let mut text = String::new();
                        let _ = write!(text, "{v}");
                        self.write(&text, line)?;
                    }
                }
                Node::If(b) => self.branch(b, dot, |v| v.truthy(), false)?,
                Node::With(b) => self.branch(b, dot, |v| v.truthy(), true)?,
                Node::Range(b) => self.range(b, dot)?,
            }
        }
        Ok(())
    }

    fn write(&mut self, text: &str, line: usize) -> Result<()> {
        if self.out.len() + text.len() > TEMPLATE_OUTPUT_BYTES_MAX {
            return Err(TemplateError::at(
                line.max(1),
                format!("the output grows past {TEMPLATE_OUTPUT_BYTES_MAX} bytes"),
            ));
        }
        self.out.push_str(text);
        Ok(())
    }

    /// `if` and `with`: the body when the value is true (`with` sets dot to it), else the rest.
    fn branch(
        &mut self,
        b: &Branch,
        dot: &Value,
        test: fn(&Value) -> bool,
        sets_dot: bool,
    ) -> Result<()> {
        let scope = self.vars.len();
        let v = self.pipe(&b.pipe, dot)?;
        let result = if test(&v) {
            let inner = if sets_dot { &v } else { dot };
            self.nodes(&b.body, inner)
        } else {
            self.nodes(&b.otherwise, dot)
        };
        self.vars.truncate(scope);
        result
    }

    fn range(&mut self, b: &Branch, dot: &Value) -> Result<()> {
        let scope = self.vars.len();
        let mut p = b.pipe.clone();
        let names = std::mem::take(&mut p.vars);
        let v = self.pipe(&p, dot)?;
        let items: Vec<(Value, Value)> = match v {
            Value::Nil => Vec::new(),
            Value::List(l) => l
                .into_iter()
                .enumerate()
                .map(|(i, v)| (Value::Int(i64::try_from(i).unwrap_or(i64::MAX)), v))
                .collect(),
            Value::Map(m) => m.into_iter().map(|(k, v)| (Value::Str(k), v)).collect(),
            Value::Int(n) => (0..n.max(0))
                .map(|i| (Value::Int(i), Value::Int(i)))
                .collect(),
            other => {
                return Err(TemplateError::at(
                    b.pipe.line,
                    format!("range can't iterate over a {}", other.kind()),
                ))
            }
        };
        if items.is_empty() {
            let r = self.nodes(&b.otherwise, dot);
            self.vars.truncate(scope);
            return r;
        }
        for (key, item) in items {
            match names.as_slice() {
                [one] => self.vars.push((one.clone(), item.clone())),
                [k, v] => {
                    self.vars.push((k.clone(), key));
                    self.vars.push((v.clone(), item.clone()));
                }
                _ => {}
            }
            let r = self.nodes(&b.body, &item);
            self.vars.truncate(scope);
            r?;
        }
        Ok(())
    }

    fn pipe(&mut self, p: &Pipeline, dot: &Value) -> Result<Value> {
        let mut piped = None;
        for cmd in &p.cmds {
            piped = Some(self.command(cmd, dot, piped, p.line)?);
        }
        let v = piped.unwrap_or(Value::Nil);
        for name in &p.vars {
            if p.declare {
                self.vars.push((name.clone(), v.clone()));
            } else {
                let slot = self.vars.iter_mut().rev().find(|(n, _)| n == name);
                match slot {
                    Some((_, old)) => *old = v.clone(),
                    None => {
                        return Err(TemplateError::at(
                            p.line,
                            format!("undefined variable: ${name}"),
                        ))
                    }
                }
            }
        }
        Ok(v)
    }

    fn command(
        &mut self,
        cmd: &Command,
        dot: &Value,
        piped: Option<Value>,
        line: usize,
    ) -> Result<Value> {
        if let Arg::Func(name) = &cmd.args[0] {
            let mut args = Vec::with_capacity(cmd.args.len());
            for a in &cmd.args[1..] {
                args.push(self.arg(a, dot, line)?);
            }
            args.extend(piped);
            return funcs::call(name, args, self.host).map_err(|e| TemplateError::at(line, e));
        }
        if cmd.args.len() > 1 || piped.is_some() {
            return Err(TemplateError::at(
                line,
                "can't give an argument to a non-function",
            ));
        }
        self.arg(&cmd.args[0], dot, line)
    }

    fn arg(&mut self, a: &Arg, dot: &Value, line: usize) -> Result<Value> {
        match a {
            Arg::Lit(v) => Ok(v.clone()),
            Arg::Dot => Ok(dot.clone()),
            Arg::Var(name) => self.var(name, line),
            Arg::Func(name) => {
                funcs::call(name, Vec::new(), self.host).map_err(|e| TemplateError::at(line, e))
            }
            Arg::Sub(p) => {
                let scope = self.vars.len();
                let v = self.pipe(p, dot);
                self.vars.truncate(scope);
                v
            }
            Arg::Field(base, fields) => {
                let mut v = self.arg(base, dot, line)?;
                for f in fields {
                    v = self.field(v, f, line)?;
                }
                Ok(v)
            }
        }
    }

    fn var(&self, name: &str, line: usize) -> Result<Value> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| TemplateError::at(line, format!("undefined variable: ${name}")))
    }

    fn field(&self, v: Value, name: &str, line: usize) -> Result<Value> {
        match v {
            Value::Map(mut m) => match m.remove(name) {
                Some(v) => Ok(v),
                None if self.err_missing_key => Err(TemplateError::at(
                    line,
                    format!("map has no entry for key {name:?}"),
                )),
                None => Ok(Value::Nil),
            },
            Value::Nil if !self.err_missing_key => Ok(Value::Nil),
            Value::Nil => Err(TemplateError::at(
                line,
                format!("nil data; no entry for key {name:?}"),
            )),
            other => Err(TemplateError::at(
                line,
                format!("can't evaluate field {name} in a {}", other.kind()),
            )),
        }
    }
}

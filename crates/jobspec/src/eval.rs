//! Expression evaluation for job files on top of hcl-rs: runtime references stay text, and `try`/`can`
//! get the lazy arguments they need.
//!
//! hcl-rs evaluates expressions and templates but knows nothing of Nomad's runtime references. A job file
//! writes `"${attr.kernel.name}"` or `"${NOMAD_ALLOC_ID}"` for the client to fill in at run time, so an
//! interpolation whose variables are not declared at parse time (anything but `var`, `local` and block
//! iterators) is escaped to `$${…}` before evaluation and comes out as the literal text `${…}`.

use hcl::eval::{Context, Evaluate};
use hcl::expr::{Expression, FuncCall, Heredoc, ObjectKey, TemplateExpr, TraversalOperator};
use hcl::Value;
use std::collections::BTreeSet;

/// The evaluation context of one place in a job file: functions, declared variables, and their names.
#[derive(Clone)]
pub struct Scope<'a> {
    pub ctx: Context<'a>,
    declared: BTreeSet<String>,
    /// `var.x` and `local.y` whose value could not be worked out (already reported): an expression
    /// that fails and mentions one of them is not reported again.
    poisoned: BTreeSet<String>,
}

impl<'a> Scope<'a> {
    /// A scope with the function library and nothing declared.
    pub fn new() -> Scope<'a> {
        let mut ctx = Context::new();
        crate::functions::register(&mut ctx);
        Scope {
            ctx,
            declared: BTreeSet::new(),
            poisoned: BTreeSet::new(),
        }
    }

    /// Marks `name` (`var.x` or `local.y`) as failed, its error already reported.
    pub fn poison(&mut self, name: String) {
        self.poisoned.insert(name);
    }

    pub fn is_poisoned(&self, name: &str) -> bool {
        self.poisoned.contains(name)
    }

    /// Whether source text mentions a failed `var.x` or `local.y`: an error evaluating it is then a
    /// consequence of an error already reported.
    pub fn mentions_poisoned(&self, text: &str) -> bool {
        self.poisoned.iter().any(|name| mentions(text, name))
    }

    /// Declares (or replaces) a root variable such as `var`, `local` or a `dynamic` iterator.
    pub fn declare(&mut self, name: &str, value: Value) {
        self.ctx.declare_var(name.to_string(), value);
        self.declared.insert(name.to_string());
    }

    /// A copy of this scope with one more variable.
    pub fn with(&self, name: &str, value: Value) -> Scope<'a> {
        let mut child = self.clone();
        child.declare(name, value);
        child
    }

    pub fn is_declared(&self, name: &str) -> bool {
        self.declared.contains(name)
    }

    /// Evaluates an expression: runtime references stay as `${…}` text; `try` and `can` work.
    pub fn eval(&self, expr: &Expression) -> Result<Value, String> {
        let mut expr = expr.clone();
        self.prepare(&mut expr, &BTreeSet::new())?;
        expr.evaluate(&self.ctx).map_err(|e| describe_error(&e))
    }

    /// Rewrites `expr` in place so hcl-rs can evaluate it: escapes runtime interpolations and
    /// replaces `try(…)`/`can(…)` calls by their values. `bound` holds names a `for` binds here.
    fn prepare(&self, expr: &mut Expression, bound: &BTreeSet<String>) -> Result<(), String> {
        match expr {
            Expression::TemplateExpr(t) => {
                let raw = match &mut **t {
                    TemplateExpr::QuotedString(s) => s,
                    TemplateExpr::Heredoc(Heredoc { template, .. }) => template,
                };
                *raw = self.escape_runtime_refs(raw, bound);
            }
            Expression::FuncCall(call) if is_lazy(call) && bound.is_empty() => {
                *expr = Expression::from(self.eval_lazy(call)?);
            }
            Expression::ForExpr(f) => {
                self.prepare(&mut f.collection_expr, bound)?;
                let mut inner = bound.clone();
                inner.insert(f.value_var.to_string());
                if let Some(k) = &f.key_var {
                    inner.insert(k.to_string());
                }
                for e in [
                    Some(&mut f.value_expr),
                    f.key_expr.as_mut(),
                    f.cond_expr.as_mut(),
                ]
                .into_iter()
                .flatten()
                {
                    self.prepare(e, &inner)?;
                }
            }
            other => {
                for child in children_mut(other) {
                    self.prepare(child, bound)?;
                }
            }
        }
        Ok(())
    }

    /// `try(a, b, …)` is the first argument that evaluates; `can(a)` says whether `a` does.
    fn eval_lazy(&self, call: &FuncCall) -> Result<Value, String> {
        let name = call.name.name.as_str();
        if name == "can" {
            let [arg] = call.args.as_slice() else {
                return Err("can: expected exactly one argument".into());
            };
            return Ok(Value::Bool(self.eval(arg).is_ok()));
        }
        let mut last_err = String::from("try: expected at least one argument");
        for arg in &call.args {
            match self.eval(arg) {
                Ok(v) => return Ok(v),
                Err(e) => last_err = e,
            }
        }
        Err(format!(
            "try: no argument could be evaluated; the last error was: {last_err}"
        ))
    }

    /// Turns `${expr}` into `$${expr}` wherever `expr` uses a variable not declared at parse time.
    fn escape_runtime_refs(&self, raw: &str, bound: &BTreeSet<String>) -> String {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(pos) = rest.find("${") {
            let escaped = pos > 0 && rest[..pos].ends_with('$');
            let Some(len) = interpolation_len(&rest[pos..]) else {
                break;
            };
            out.push_str(&rest[..pos]);
            let whole = &rest[pos..pos + len];
            let inner = whole[2..len - 1].trim_matches('~');
            if !escaped && self.is_runtime(inner, bound) {
                out.push('$');
            }
            out.push_str(whole);
            rest = &rest[pos + len..];
        }
        out.push_str(rest);
        out
    }

    fn is_runtime(&self, inner: &str, bound: &BTreeSet<String>) -> bool {
        let Ok(parsed) = hcl::edit::parser::parse_expr(inner) else {
            // `${env["PATH"]}` and the like that hcl cannot parse alone are left to the evaluator.
            return false;
        };
        let expr = Expression::from(parsed);
        let mut roots = BTreeSet::new();
        collect_roots(&expr, &mut BTreeSet::new(), &mut roots);
        roots
            .iter()
            .any(|r| !self.is_declared(r) && !bound.contains(r))
    }
}

impl Default for Scope<'_> {
    fn default() -> Self {
        Scope::new()
    }
}

/// Whether `text` holds the reference `name` (`var.x`) as a whole, not as part of `var.xy` or `a.var.x`.
pub fn mentions(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(ident)
    })
}

fn is_lazy(call: &FuncCall) -> bool {
    call.name.namespace.is_empty() && matches!(call.name.name.as_str(), "try" | "can")
}

/// The length of the `${…}` at the start of `s`, counting nested braces and quoted strings.
fn interpolation_len(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if in_string => {
                chars.next();
            }
            '"' => in_string = !in_string,
            '{' if !in_string => depth += 1,
            '}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Root variable names an expression reads, leaving out names its own `for` expressions bind.
fn collect_roots(expr: &Expression, bound: &mut BTreeSet<String>, roots: &mut BTreeSet<String>) {
    match expr {
        Expression::Variable(v) => {
            if !bound.contains(v.as_str()) {
                roots.insert(v.to_string());
            }
        }
        Expression::ForExpr(f) => {
            collect_roots(&f.collection_expr, bound, roots);
            let mut inner = bound.clone();
            inner.insert(f.value_var.to_string());
            if let Some(k) = &f.key_var {
                inner.insert(k.to_string());
            }
            for e in [
                Some(&f.value_expr),
                f.key_expr.as_ref(),
                f.cond_expr.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                collect_roots(e, &mut inner, roots);
            }
        }
        other => {
            for child in children(other) {
                collect_roots(child, bound, roots);
            }
        }
    }
}

fn children(expr: &Expression) -> Vec<&Expression> {
    match expr {
        Expression::Array(items) => items.iter().collect(),
        Expression::Object(obj) => obj
            .iter()
            .flat_map(|(k, v)| {
                let key = match k {
                    ObjectKey::Expression(e) => Some(e),
                    _ => None,
                };
                key.into_iter().chain(std::iter::once(v))
            })
            .collect(),
        Expression::Traversal(t) => std::iter::once(&t.expr)
            .chain(t.operators.iter().filter_map(|op| match op {
                TraversalOperator::Index(e) => Some(e),
                _ => None,
            }))
            .collect(),
        Expression::FuncCall(call) => call.args.iter().collect(),
        Expression::Parenthesis(e) => vec![&**e],
        Expression::Conditional(c) => vec![&c.cond_expr, &c.true_expr, &c.false_expr],
        Expression::Operation(op) => match &**op {
            hcl::expr::Operation::Unary(u) => vec![&u.expr],
            hcl::expr::Operation::Binary(b) => vec![&b.lhs_expr, &b.rhs_expr],
        },
        _ => Vec::new(),
    }
}

fn children_mut(expr: &mut Expression) -> Vec<&mut Expression> {
    match expr {
        Expression::Array(items) => items.iter_mut().collect(),
        Expression::Object(obj) => obj.values_mut().collect(),
        Expression::Traversal(t) => {
            let hcl::expr::Traversal { expr, operators } = &mut **t;
            std::iter::once(expr)
                .chain(operators.iter_mut().filter_map(|op| match op {
                    TraversalOperator::Index(e) => Some(e),
                    _ => None,
                }))
                .collect()
        }
        Expression::FuncCall(call) => call.args.iter_mut().collect(),
        Expression::Parenthesis(e) => vec![&mut **e],
        Expression::Conditional(c) => {
            let hcl::expr::Conditional {
                cond_expr,
                true_expr,
                false_expr,
            } = &mut **c;
            vec![cond_expr, true_expr, false_expr]
        }
        Expression::Operation(op) => match &mut **op {
            hcl::expr::Operation::Unary(u) => vec![&mut u.expr],
            hcl::expr::Operation::Binary(b) => vec![&mut b.lhs_expr, &mut b.rhs_expr],
        },
        _ => Vec::new(),
    }
}

/// hcl-rs errors, said for a job file author: the message, then the expression it came from.
fn describe_error(err: &hcl::eval::Error) -> String {
    use hcl::eval::ErrorKind;
    let msg = match err.kind() {
        ErrorKind::UndefinedVar(v) if v.as_str() == "var" || v.as_str() == "local" => {
            format!("no {v} values are declared in this file")
        }
        ErrorKind::NoSuchKey(k) => format!("no such key or attribute {k:?}"),
        ErrorKind::FuncCall(name, msg) => format!("{name}(): {msg}"),
        ErrorKind::UndefinedFunc(name) => format!("unknown function {name}()"),
        other => other.to_string(),
    };
    match err.expr() {
        Some(e) => format!(
            "{msg} (in `{}`)",
            hcl::format::to_string(e).unwrap_or_default()
        ),
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_in(scope: &Scope, src: &str) -> Result<Value, String> {
        let body = hcl::edit::parser::parse_body(&format!("x = {src}\n")).unwrap();
        let attr = body.get_attribute("x").unwrap();
        scope.eval(&Expression::from(attr.value.clone()))
    }

    fn scope() -> Scope<'static> {
        let mut s = Scope::new();
        s.declare(
            "var",
            hcl::value!({ name = "web", n = 3, tags = ["a", "b"] }),
        );
        s
    }

    #[test]
    fn runtime_references_stay_text() {
        let s = scope();
        assert_eq!(
            eval_in(&s, r#""${attr.kernel.name}""#).unwrap(),
            Value::from("${attr.kernel.name}")
        );
        assert_eq!(
            eval_in(&s, r#""${NOMAD_ALLOC_ID}-${var.name}""#).unwrap(),
            Value::from("${NOMAD_ALLOC_ID}-web")
        );
        assert_eq!(
            eval_in(&s, r#""${meta.rack}""#).unwrap(),
            Value::from("${meta.rack}")
        );
        assert_eq!(
            eval_in(&s, r#""${node.unique.name}""#).unwrap(),
            Value::from("${node.unique.name}")
        );
        assert_eq!(
            eval_in(&s, r#""${env["HOME"]}""#).unwrap(),
            Value::from("${env[\"HOME\"]}")
        );
        // Nomad's explicit escape still works.
        assert_eq!(
            eval_in(&s, r#""$${var.name}""#).unwrap(),
            Value::from("${var.name}")
        );
    }

    #[test]
    fn declared_variables_and_for_bindings_evaluate() {
        let s = scope();
        assert_eq!(eval_in(&s, "var.n * 2").unwrap(), Value::from(6));
        assert_eq!(
            eval_in(&s, r#""${join(",", [for t in var.tags : upper(t)])}""#).unwrap(),
            Value::from("A,B")
        );
        assert!(eval_in(&s, "var.missing").is_err());
    }

    #[test]
    fn mentions_matches_whole_references_only() {
        assert!(mentions("x = var.a", "var.a"));
        assert!(mentions("\"${var.a}-x\"", "var.a"));
        assert!(!mentions("var.ab", "var.a"));
        assert!(!mentions("x.var.a", "var.a"));
        assert!(!mentions("var.a-b", "var.a"));
    }

    #[test]
    fn try_and_can_are_lazy() {
        let s = scope();
        assert_eq!(
            eval_in(&s, r#"try(var.missing, "fallback")"#).unwrap(),
            Value::from("fallback")
        );
        assert_eq!(eval_in(&s, "can(var.missing)").unwrap(), Value::Bool(false));
        assert_eq!(eval_in(&s, "can(var.name)").unwrap(), Value::Bool(true));
        assert!(eval_in(&s, "try(var.a, var.b)")
            .unwrap_err()
            .contains("try"));
    }
}

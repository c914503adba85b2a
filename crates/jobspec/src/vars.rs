//! Input variables and locals: `variable` blocks with types, defaults and validation, `locals`,
//! and values from `NOMAD_VAR_*`, `-var-file` and `-var` (later sources win, in that order).

use crate::eval::Scope;
use crate::source::{SourceFile, Span};
use crate::tree::{type_name, Builder};
use hcl::edit::structure::{Block as EditBlock, Body as EditBody, Structure};
use hcl::edit::Span as _;
use hcl::expr::{Expression, ObjectKey};
use hcl::{Map, Value};
use model::Path;

/// A variable's type constraint, as written in `type = …`.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Any,
    String,
    Number,
    Bool,
    List(Box<Ty>),
    Set(Box<Ty>),
    Map(Box<Ty>),
    Tuple(Vec<Ty>),
    /// Attributes with their types; `true` marks `optional(…)`.
    Object(Vec<(String, Ty, bool)>),
}

/// A value for a variable from outside the file: its text and where it came from.
#[derive(Debug, Clone)]
pub enum VarValue {
    /// From `-var name=value` or `NOMAD_VAR_name`: text, converted to the declared type.
    Text { value: String, origin: String },
    /// From a var file: already a value, with its file and span.
    Value {
        value: Value,
        file: SourceFile,
        span: Span,
    },
}

struct Declared {
    name: String,
    ty: Ty,
    default: Option<Value>,
    validations: Vec<(Expression, Expression, Span)>,
    span: Span,
    /// The default was written but could not be evaluated or converted (already reported).
    bad_default: bool,
}

/// Declares `var` on `scope` from the file's `variable` blocks and the outside values.
pub fn declare_variables(
    b: &mut Builder,
    body: &EditBody,
    given: &[(String, VarValue)],
    scope: &mut Scope,
) {
    let mut declared: Vec<Declared> = Vec::new();
    for s in body.iter() {
        let Structure::Block(blk) = s else { continue };
        let found = match blk.ident.as_str() {
            "variable" => read_variable(b, blk, scope).into_iter().collect(),
            "variables" => read_variables_block(b, blk, scope),
            _ => Vec::new(),
        };
        for d in found {
            if declared.iter().any(|e| e.name == d.name) {
                b.error(
                    Some(&d.span),
                    &Path::root().block("variable", &d.name),
                    format!("variable {:?} is declared twice", d.name),
                );
            } else {
                declared.push(d);
            }
        }
    }
    for (name, v) in given {
        if !declared.iter().any(|d| &d.name == name) {
            let (span, file) = match v {
                VarValue::Value { span, file, .. } => (Some(span.clone()), Some(file)),
                VarValue::Text { .. } => (None, None),
            };
            let origin = match v {
                VarValue::Text { origin, .. } => format!(" (from {origin})"),
                VarValue::Value { .. } => String::new(),
            };
            let hint = crate::reader::did_you_mean(name, declared.iter().map(|d| d.name.as_str()));
            let msg = format!("a value was given for undeclared variable {name:?}{origin}{hint}; declare it with a variable \"{name}\" block");
            match file {
                Some(f) => {
                    b.diags
                        .push(f.diagnostic(span.as_ref(), format!("variable {name:?}"), msg))
                }
                None if origin.contains("NOMAD_VAR_") => {}
                // A -var flag has no place in the file: point at its start.
                None => b.error(Some(&(0..0)), &Path::root().block("variable", name), msg),
            }
        }
    }
    let mut values = Map::new();
    for d in &declared {
        match resolve_variable(b, d, given) {
            Some(v) => {
                values.insert(d.name.clone(), v);
            }
            None => scope.poison(format!("var.{}", d.name)),
        }
    }
    scope.declare("var", Value::Object(values));
    for d in &declared {
        if !scope.is_poisoned(&format!("var.{}", d.name)) {
            check_validations(b, d, scope);
        }
    }
}

/// A `variables { name = default … }` block: each attribute declares a variable of any type with
/// that default, as Nomad's parser allows.
fn read_variables_block(b: &mut Builder, blk: &EditBlock, scope: &Scope) -> Vec<Declared> {
    let mut out = Vec::new();
    for s in blk.body.iter() {
        match s {
            Structure::Attribute(a) => {
                let name = a.key.as_str().to_string();
                let span = a.span().unwrap_or_default();
                let (default, bad_default) = match scope.eval(&Expression::from(a.value.clone())) {
                    Ok(v) => (Some(v), false),
                    Err(e) => {
                        b.error(
                            Some(&span),
                            &Path::root().field("variables").field(&name),
                            e,
                        );
                        (None, true)
                    }
                };
                out.push(Declared {
                    name,
                    ty: Ty::Any,
                    default,
                    validations: Vec::new(),
                    span,
                    bad_default,
                });
            }
            Structure::Block(inner) => b.error(
                inner.span().as_ref(),
                &Path::root().field("variables").field(inner.ident.as_str()),
                "a variables block holds name = default lines only; use a variable \"name\" { … } block for types and validation",
            ),
        }
    }
    out
}

fn read_variable(b: &mut Builder, blk: &EditBlock, scope: &Scope) -> Option<Declared> {
    let span = blk.span().unwrap_or_default();
    let Some(name) = blk.labels.first().map(|l| l.as_str().to_string()) else {
        b.error(
            Some(&span),
            &Path::root().field("variable"),
            "a variable block needs a name: variable \"name\" { … }",
        );
        return None;
    };
    let path = Path::root().block("variable", &name);
    let mut d = Declared {
        name,
        ty: Ty::Any,
        default: None,
        validations: Vec::new(),
        span,
        bad_default: false,
    };
    for s in blk.body.iter() {
        match s {
            Structure::Attribute(a) => {
                let aspan = a.span().unwrap_or_default();
                let expr = Expression::from(a.value.clone());
                match a.key.as_str() {
                    "type" => match parse_type(&expr) {
                        Ok(t) => d.ty = t,
                        Err(e) => b.error(Some(&aspan), &path.field("type"), e),
                    },
                    "default" => match scope.eval(&expr) {
                        Ok(v) => d.default = Some(v),
                        Err(e) => {
                            d.bad_default = true;
                            b.error(Some(&aspan), &path.field("default"), e);
                        }
                    },
                    "description" | "sensitive" | "nullable" => {}
                    other => b.error(Some(&aspan), &path.field(other), "unknown attribute; a variable takes type, default, description, sensitive, nullable and validation blocks"),
                }
            }
            Structure::Block(v) if v.ident.as_str() == "validation" => {
                let cond = v
                    .body
                    .get_attribute("condition")
                    .map(|a| Expression::from(a.value.clone()));
                let msg = v
                    .body
                    .get_attribute("error_message")
                    .map(|a| Expression::from(a.value.clone()));
                match (cond, msg) {
                    (Some(c), Some(m)) => d.validations.push((c, m, v.span().unwrap_or_default())),
                    _ => b.error(
                        v.span().as_ref(),
                        &path.field("validation"),
                        "a validation block needs condition and error_message",
                    ),
                }
            }
            Structure::Block(other) => b.error(
                other.span().as_ref(),
                &path.field(other.ident.as_str()),
                "unknown block in a variable; only validation blocks are allowed",
            ),
        }
    }
    if let Some(def) = d.default.take() {
        match convert(def, &d.ty) {
            Ok(v) => d.default = Some(v),
            Err(e) => {
                d.bad_default = true;
                b.error(
                    Some(&d.span),
                    &path.field("default"),
                    format!("the default does not match the type: {e}"),
                );
            }
        }
    }
    Some(d)
}

fn resolve_variable(b: &mut Builder, d: &Declared, given: &[(String, VarValue)]) -> Option<Value> {
    let path = Path::root().block("variable", &d.name);
    let Some((_, last)) = given.iter().rev().find(|(n, _)| n == &d.name) else {
        if d.default.is_none() && !d.bad_default {
            b.error(Some(&d.span), &path, format!("variable {:?} has no default and no value was given; set it with -var {}=…, -var-file or NOMAD_VAR_{}", d.name, d.name, d.name));
        }
        return d.default.clone();
    };
    let converted = match last {
        VarValue::Text { value, origin } => from_text(value, &d.ty)
            .map_err(|e| format!("the value from {origin} is not valid: {e}")),
        VarValue::Value { value, .. } => convert(value.clone(), &d.ty),
    };
    match converted {
        Ok(v) => Some(v),
        Err(e) => {
            match last {
                VarValue::Value { file, span, .. } => {
                    b.diags
                        .push(file.diagnostic(Some(span), path.to_string(), e))
                }
                VarValue::Text { .. } => b.error(Some(&d.span), &path, e),
            }
            None
        }
    }
}

fn check_validations(b: &mut Builder, d: &Declared, scope: &Scope) {
    let path = Path::root().block("variable", &d.name).field("validation");
    for (cond, msg, span) in &d.validations {
        match scope.eval(cond) {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => {
                let text = match scope.eval(msg) {
                    Ok(Value::String(s)) => s,
                    _ => "the value is not valid".to_string(),
                };
                b.error(
                    Some(span),
                    &path,
                    format!("invalid value for variable {:?}: {text}", d.name),
                );
            }
            Ok(other) => b.error(
                Some(span),
                &path.field("condition"),
                format!("condition must be a bool, got {}", type_name(&other)),
            ),
            Err(e) => b.error(Some(span), &path.field("condition"), e),
        }
    }
}

/// Declares `local` on `scope` from every `locals` block; a local may use others, in any order.
pub fn declare_locals(b: &mut Builder, body: &EditBody, scope: &mut Scope) {
    let mut pending: Vec<(String, Expression, Span)> = Vec::new();
    for s in body.iter() {
        if let Structure::Block(blk) = s {
            if blk.ident.as_str() != "locals" {
                continue;
            }
            for s in blk.body.iter() {
                match s {
                    Structure::Attribute(a) => {
                        let name = a.key.as_str().to_string();
                        let span = a.span().unwrap_or_default();
                        if pending.iter().any(|(n, _, _)| n == &name) {
                            b.error(
                                Some(&span),
                                &Path::root().field("locals").field(&name),
                                "this local is defined twice",
                            );
                            continue;
                        }
                        pending.push((name, Expression::from(a.value.clone()), span));
                    }
                    Structure::Block(inner) => b.error(
                        inner.span().as_ref(),
                        &Path::root().field("locals"),
                        "locals blocks hold attributes only",
                    ),
                }
            }
        }
    }
    let mut values = Map::new();
    scope.declare("local", Value::Object(values.clone()));
    // Evaluate in rounds: each round settles the locals whose dependencies are known.
    while !pending.is_empty() {
        let mut errors = Vec::new();
        let before = pending.len();
        pending.retain(|(name, expr, span)| match scope.eval(expr) {
            Ok(v) => {
                values.insert(name.clone(), v);
                false
            }
            Err(e) => {
                errors.push((name.clone(), span.clone(), e));
                true
            }
        });
        scope.declare("local", Value::Object(values.clone()));
        if pending.len() == before {
            // Report the locals that fail on their own; one that fails because another failed local
            // (or variable) failed would only repeat that error. A cycle is reported whole.
            let stalled: Vec<String> = errors
                .iter()
                .map(|(n, _, _)| format!("local.{n}"))
                .collect();
            let own: Vec<bool> = errors
                .iter()
                .map(|(_, span, _)| {
                    let text = b.text(span);
                    !scope.mentions_poisoned(text)
                        && !stalled.iter().any(|n| crate::eval::mentions(text, n))
                })
                .collect();
            let none_own = !own.contains(&true);
            for ((name, span, e), own) in errors.into_iter().zip(own) {
                if own || (none_own && !scope.mentions_poisoned(b.text(&span))) {
                    b.error(Some(&span), &Path::root().field("locals").field(&name), e);
                }
            }
            for name in stalled {
                scope.poison(name);
            }
            break;
        }
    }
}

/// Reads a type expression: `string`, `list(number)`, `map(any)`, `object({ a = string })`, ….
pub fn parse_type(expr: &Expression) -> Result<Ty, String> {
    match expr {
        Expression::Variable(v) => match v.as_str() {
            "any" => Ok(Ty::Any),
            "string" => Ok(Ty::String),
            "number" => Ok(Ty::Number),
            "bool" => Ok(Ty::Bool),
            other => Err(format!("unknown type {other:?}; expected string, number, bool, any, list(…), set(…), map(…), object({{…}}) or tuple([…])")),
        },
        Expression::FuncCall(call) => {
            let name = call.name.name.as_str();
            let [arg] = call.args.as_slice() else {
                return Err(format!("{name}(…) takes exactly one argument"));
            };
            match name {
                "list" => Ok(Ty::List(Box::new(parse_type(arg)?))),
                "set" => Ok(Ty::Set(Box::new(parse_type(arg)?))),
                "map" => Ok(Ty::Map(Box::new(parse_type(arg)?))),
                "tuple" => match arg {
                    Expression::Array(items) => Ok(Ty::Tuple(items.iter().map(parse_type).collect::<Result<_, _>>()?)),
                    _ => Err("tuple takes a list of types: tuple([string, number])".into()),
                },
                "object" => parse_object_type(arg),
                other => Err(format!("unknown type constructor {other}(…)")),
            }
        }
        _ => Err("a type must be a type keyword such as string, or a type constructor such as list(string)".into()),
    }
}

fn parse_object_type(arg: &Expression) -> Result<Ty, String> {
    let Expression::Object(obj) = arg else {
        return Err("object takes an object of attribute types: object({ name = string })".into());
    };
    let mut attrs = Vec::new();
    for (k, v) in obj.iter() {
        let key = match k {
            ObjectKey::Identifier(i) => i.to_string(),
            ObjectKey::Expression(Expression::String(s)) => s.clone(),
            _ => return Err("object attribute names must be plain names".into()),
        };
        let (ty, optional) = match v {
            Expression::FuncCall(call) if call.name.name.as_str() == "optional" => {
                match call.args.first() {
                    Some(inner) => (parse_type(inner)?, true),
                    None => return Err("optional(…) takes a type".into()),
                }
            }
            other => (parse_type(other)?, false),
        };
        attrs.push((key, ty, optional));
    }
    Ok(Ty::Object(attrs))
}

/// Converts a value to a type the way HCL does: numbers and bools to strings and back, lists to sets, ….
pub fn convert(v: Value, ty: &Ty) -> Result<Value, String> {
    match (ty, v) {
        (Ty::Any, v) => Ok(v),
        (_, Value::Null) => Ok(Value::Null),
        (Ty::String, Value::String(s)) => Ok(Value::String(s)),
        (Ty::String, Value::Number(n)) => Ok(Value::String(n.to_string())),
        (Ty::String, Value::Bool(b)) => Ok(Value::String(b.to_string())),
        (Ty::Number, Value::Number(n)) => Ok(Value::Number(n)),
        (Ty::Number, Value::String(s)) => parse_number(&s),
        (Ty::Bool, Value::Bool(b)) => Ok(Value::Bool(b)),
        (Ty::Bool, Value::String(s)) => parse_bool(&s),
        (Ty::List(inner) | Ty::Set(inner), Value::Array(items)) => {
            convert_items(items, inner, matches!(ty, Ty::Set(_)))
        }
        (Ty::Map(inner), Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| {
                convert(v, inner)
                    .map(|v| (k.clone(), v))
                    .map_err(|e| format!("[{k:?}]: {e}"))
            })
            .collect::<Result<Map<_, _>, _>>()
            .map(Value::Object),
        (Ty::Tuple(types), Value::Array(items)) if types.len() == items.len() => items
            .into_iter()
            .zip(types)
            .enumerate()
            .map(|(i, (v, t))| convert(v, t).map_err(|e| format!("[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        (Ty::Object(attrs), Value::Object(map)) => convert_object(map, attrs),
        (ty, v) => Err(format!(
            "expected {}, got {}",
            describe_ty(ty),
            type_name(&v)
        )),
    }
}

fn convert_items(items: Vec<Value>, inner: &Ty, set: bool) -> Result<Value, String> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    for (i, v) in items.into_iter().enumerate() {
        let v = convert(v, inner).map_err(|e| format!("[{i}]: {e}"))?;
        if !set || !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(Value::Array(out))
}

fn convert_object(
    mut map: Map<String, Value>,
    attrs: &[(String, Ty, bool)],
) -> Result<Value, String> {
    let mut out = Map::new();
    for (name, ty, optional) in attrs {
        match map.shift_remove(name) {
            Some(v) => {
                out.insert(
                    name.clone(),
                    convert(v, ty).map_err(|e| format!("attribute {name:?}: {e}"))?,
                );
            }
            None if *optional => {
                out.insert(name.clone(), Value::Null);
            }
            None => return Err(format!("attribute {name:?} is required")),
        }
    }
    if let Some((extra, _)) = map.iter().next() {
        return Err(format!("unexpected attribute {extra:?}"));
    }
    Ok(Value::Object(out))
}

fn describe_ty(ty: &Ty) -> String {
    match ty {
        Ty::Any => "any value".into(),
        Ty::String => "a string".into(),
        Ty::Number => "a number".into(),
        Ty::Bool => "a bool".into(),
        Ty::List(t) => format!("a list of {}", describe_ty(t)),
        Ty::Set(t) => format!("a set of {}", describe_ty(t)),
        Ty::Map(t) => format!("a map of {}", describe_ty(t)),
        Ty::Tuple(_) => "a tuple".into(),
        Ty::Object(_) => "an object".into(),
    }
}

fn parse_number(s: &str) -> Result<Value, String> {
    let t = s.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Ok(Value::from(i));
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(hcl::Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| format!("expected a number, got {s:?}"))
}

fn parse_bool(s: &str) -> Result<Value, String> {
    match s {
        "true" => Ok(Value::Bool(true)),
        "false" => Ok(Value::Bool(false)),
        _ => Err(format!("expected true or false, got {s:?}")),
    }
}

/// Converts text from `-var` or `NOMAD_VAR_*`: primitive types take it as is; others parse it as HCL.
pub fn from_text(text: &str, ty: &Ty) -> Result<Value, String> {
    match ty {
        Ty::String | Ty::Any => Ok(Value::String(text.to_string())),
        Ty::Number => parse_number(text),
        Ty::Bool => parse_bool(text),
        _ => {
            let body = hcl::edit::parser::parse_body(&format!("v = {text}\n"))
                .map_err(|e| format!("cannot read {text:?} as HCL: {}", e.message()))?;
            let expr = body
                .get_attribute("v")
                .map(|a| Expression::from(a.value.clone()))
                .ok_or("empty value")?;
            let v = Scope::new().eval(&expr)?;
            convert(v, ty)
        }
    }
}

/// Reads a var file (`name = value` lines in HCL, or a JSON object) into values with their spans.
pub fn read_var_file(
    file: &SourceFile,
) -> Result<Vec<(String, VarValue)>, crate::source::Diagnostic> {
    if file.name.ends_with(".json") {
        let json: serde_json::Value = serde_json::from_str(&file.text).map_err(|e| {
            let offset = offset_of(&file.text, e.line(), e.column());
            file.diagnostic(Some(&(offset..offset)), "", format!("invalid JSON: {e}"))
        })?;
        let serde_json::Value::Object(map) = json else {
            return Err(file.diagnostic(
                None,
                "",
                "a JSON var file must be an object of variable names to values",
            ));
        };
        return Ok(map
            .into_iter()
            .map(|(k, v)| {
                let value = hcl::to_value(&v).unwrap_or(Value::Null);
                (
                    k,
                    VarValue::Value {
                        value,
                        file: file.clone(),
                        span: 0..0,
                    },
                )
            })
            .collect());
    }
    let body = hcl::edit::parser::parse_body(&file.text)
        .map_err(|e| crate::parse::syntax_error(file, &e))?;
    let scope = Scope::new();
    let mut out = Vec::new();
    for s in body.iter() {
        let Structure::Attribute(a) = s else {
            return Err(file.diagnostic(
                s.span().as_ref(),
                "",
                "a var file holds only name = value lines",
            ));
        };
        let span = a.span().unwrap_or_default();
        let value = scope
            .eval(&Expression::from(a.value.clone()))
            .map_err(|e| file.diagnostic(Some(&span), a.key.as_str(), e))?;
        out.push((
            a.key.as_str().to_string(),
            VarValue::Value {
                value,
                file: file.clone(),
                span,
            },
        ));
    }
    Ok(out)
}

fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + col.saturating_sub(1)).min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(src: &str) -> Ty {
        let body = hcl::edit::parser::parse_body(&format!("t = {src}\n")).unwrap();
        parse_type(&Expression::from(
            body.get_attribute("t").unwrap().value.clone(),
        ))
        .unwrap()
    }

    fn errors_of(src: &str, vars: &[&str]) -> Vec<String> {
        let opts = crate::parse::ParseOptions {
            vars: vars.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        };
        match crate::parse::parse_str(src, "job.hcl", &opts) {
            Ok(_) => Vec::new(),
            Err(d) => d
                .iter()
                .map(|d| format!("{}: {}", d.subject, d.message))
                .collect(),
        }
    }

    #[test]
    fn a_failed_variable_or_local_is_reported_once() {
        let job = r#"
variable "image" { type = string }
variable "n" {
  type = number
  validation {
    condition     = var.n > 0
    error_message = "n must be positive."
  }
}
locals {
  tag   = "${local.base}:1"
  image = "${var.image}-${local.tag}"
}
job "j" {
  group "g" {
    count = var.n
    task "t" {
      driver = "docker"
      config { image = local.image }
    }
  }
}
"#;
        let errs = errors_of(job, &["n=many"]);
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(errs[0].contains("\"image\" has no default"), "{errs:#?}");
        assert!(errs[1].contains("-var n is not valid"), "{errs:#?}");
        assert!(errs[2].starts_with("locals.tag: "), "{errs:#?}");
    }

    #[test]
    fn a_cycle_of_locals_is_reported() {
        let job = "locals {\n  a = local.b\n  b = local.a\n}\njob \"j\" {}\n";
        let errs = errors_of(job, &[]);
        // Both locals, and (every error at once) the empty job's own problem.
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(
            errs[2].ends_with("a job needs at least one group"),
            "{errs:#?}"
        );
    }

    #[test]
    fn variables_blocks_declare_untyped_variables() {
        let job = "variables {\n  a = 1\n}\nvariable \"a\" {}\njob \"j\" {}\n";
        let errs = errors_of(job, &[]);
        assert_eq!(
            errs,
            vec![
                "variable \"a\": variable \"a\" is declared twice",
                ": a job needs at least one group"
            ]
        );
    }

    #[test]
    fn types_parse_and_convert() {
        assert_eq!(ty("list(string)"), Ty::List(Box::new(Ty::String)));
        assert_eq!(from_text("3", &ty("number")).unwrap(), Value::from(3));
        assert_eq!(from_text("true", &ty("bool")).unwrap(), Value::Bool(true));
        assert_eq!(
            from_text(r#"["a", "b"]"#, &ty("list(string)")).unwrap(),
            hcl::value!(["a", "b"])
        );
        assert_eq!(
            from_text("[1, 1, 2]", &ty("set(number)")).unwrap(),
            hcl::value!([1, 2])
        );
        assert_eq!(
            convert(Value::from(5), &ty("string")).unwrap(),
            Value::from("5")
        );
        let obj = ty("object({ name = string, port = optional(number) })");
        assert_eq!(
            convert(hcl::value!({ name = "a" }), &obj).unwrap(),
            hcl::value!({ name = "a", port = null })
        );
        assert!(convert(hcl::value!({ port = 1 }), &obj)
            .unwrap_err()
            .contains("\"name\" is required"));
        assert!(from_text("x", &ty("number")).is_err());
    }
}

//! Node pool specification files (`caravan node pool apply`), as Nomad's: HCL
//! `node_pool "name" { description = "…" meta { k = "v" } }`, or the API's JSON
//! (`{"Name": …, "Description": …, "Meta": {…}}`). Every problem names its line:col.

use crate::agent::Pos;
use hcl::edit::expr::{Expression, ObjectKey};
use hcl::edit::parser;
use hcl::edit::structure::{Body, Structure};
use hcl::edit::Span;
use model::node_pool::NodePool;
use std::collections::BTreeMap;

/// Why a specification was refused: every problem, one per line, `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct NodePoolSpecError(pub Vec<String>);

/// Reads a node pool specification (`json`: the API's JSON form).
pub fn parse(text: &str, file: &str, json: bool) -> Result<NodePool, NodePoolSpecError> {
    if json {
        let pool: NodePool = model::json::from_str(text)
            .map_err(|e| NodePoolSpecError(vec![format!("{file}: {e}")]))?;
        return check(pool, file);
    }
    let at = |span: Option<std::ops::Range<usize>>| -> String {
        let pos = Pos::of_offset(text, span.map_or(0, |r| r.start));
        format!("{file}:{}:{}", pos.line, pos.col)
    };
    let body: Body = parser::parse_body(text).map_err(|e| {
        NodePoolSpecError(vec![format!(
            "{file}:{}:{}: {}",
            e.location().line(),
            e.location().column(),
            e.message()
        )])
    })?;
    let mut errors = Vec::new();
    let mut pools = Vec::new();
    for s in body.iter() {
        match s {
            Structure::Block(b) if b.ident.as_str() == "node_pool" => {
                if b.labels.len() != 1 {
                    errors.push(format!(
                        "{}: node_pool needs one label, its name: node_pool \"prod\" {{ … }}",
                        at(b.span())
                    ));
                    continue;
                }
                let mut pool = NodePool {
                    name: b.labels[0].as_str().to_string(),
                    ..NodePool::default()
                };
                for inner in b.body.iter() {
                    match inner {
                        Structure::Attribute(a) if a.key.as_str() == "description" => {
                            match &a.value {
                                Expression::String(s) => pool.description = s.value().clone(),
                                _ => errors.push(format!(
                                    "{}: description: expected a string",
                                    at(a.value.span())
                                )),
                            }
                        }
                        Structure::Attribute(a) if a.key.as_str() == "meta" => match &a.value {
                            Expression::Object(o) => {
                                for (k, v) in o.iter() {
                                    let key = match k {
                                        ObjectKey::Ident(i) => i.as_str().to_string(),
                                        ObjectKey::Expression(Expression::String(s)) => {
                                            s.value().clone()
                                        }
                                        _ => {
                                            errors.push(format!(
                                                "{}: meta: expected a name",
                                                at(k.span())
                                            ));
                                            continue;
                                        }
                                    };
                                    meta_value(&mut pool.meta, key, v.expr(), &at, &mut errors);
                                }
                            }
                            _ => errors.push(format!(
                                "{}: meta: expected a map of strings",
                                at(a.value.span())
                            )),
                        },
                        Structure::Block(m) if m.ident.as_str() == "meta" => {
                            for item in m.body.iter() {
                                match item {
                                    Structure::Attribute(a) => meta_value(
                                        &mut pool.meta,
                                        a.key.as_str().to_string(),
                                        &a.value,
                                        &at,
                                        &mut errors,
                                    ),
                                    Structure::Block(x) => errors.push(format!(
                                        "{}: meta: blocks are not allowed here",
                                        at(x.span())
                                    )),
                                }
                            }
                        }
                        Structure::Block(sc) if sc.ident.as_str() == "scheduler_config" => {
                            errors.push(format!(
                                "{}: scheduler_config is not supported yet (a Nomad Enterprise \
                                 feature); use caravan operator scheduler set-config",
                                at(sc.span())
                            ));
                        }
                        other => {
                            let (name, span) = match other {
                                Structure::Attribute(a) => (a.key.as_str().to_string(), a.span()),
                                Structure::Block(b) => (b.ident.as_str().to_string(), b.span()),
                            };
                            errors.push(format!(
                                "{}: unknown {name:?}; node_pool takes description, meta and scheduler_config",
                                at(span)
                            ));
                        }
                    }
                }
                pools.push((pool, b.span()));
            }
            Structure::Block(b) => errors.push(format!(
                "{}: unknown block {:?}; expected node_pool \"name\" {{ … }}",
                at(b.span()),
                b.ident.as_str()
            )),
            Structure::Attribute(a) => errors.push(format!(
                "{}: unknown attribute {:?}; expected node_pool \"name\" {{ … }}",
                at(a.span()),
                a.key.as_str()
            )),
        }
    }
    if pools.len() > 1 {
        errors.push(format!(
            "{}: one node_pool per file",
            at(pools[1].1.clone())
        ));
    }
    if pools.is_empty() && errors.is_empty() {
        errors.push(format!("{file}: no node_pool block"));
    }
    if !errors.is_empty() {
        return Err(NodePoolSpecError(errors));
    }
    let (pool, span) = pools.remove(0);
    pool.validate()
        .map_err(|e| NodePoolSpecError(vec![format!("{}: {e}", at(span))]))?;
    Ok(pool)
}

fn check(pool: NodePool, file: &str) -> Result<NodePool, NodePoolSpecError> {
    pool.validate()
        .map_err(|e| NodePoolSpecError(vec![format!("{file}: {e}")]))?;
    Ok(pool)
}

fn meta_value(
    meta: &mut BTreeMap<String, String>,
    key: String,
    value: &Expression,
    at: &dyn Fn(Option<std::ops::Range<usize>>) -> String,
    errors: &mut Vec<String>,
) {
    match value {
        Expression::String(s) => {
            meta.insert(key, s.value().clone());
        }
        _ => errors.push(format!(
            "{}: meta.{key}: expected a string",
            at(value.span())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nomads_spec() {
        let pool = parse(
            "node_pool \"prod\" {\n  description = \"Production\"\n  meta {\n    team = \"web\"\n  }\n}\n",
            "prod.hcl",
            false,
        )
        .unwrap();
        assert_eq!(pool.name, "prod");
        assert_eq!(pool.description, "Production");
        assert_eq!(pool.meta["team"], "web");
        let pool = parse(r#"{"Name": "gpu", "Meta": {"a": "b"}}"#, "gpu.json", true).unwrap();
        assert_eq!((pool.name.as_str(), pool.meta["a"].as_str()), ("gpu", "b"));
    }

    #[test]
    fn every_problem_at_its_place() {
        let err = parse(
            "node_pool \"bad name\" {\n  colour = \"red\"\n  scheduler_config {\n  }\n}\n",
            "p.hcl",
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("p.hcl:2:3: unknown \"colour\""), "{err}");
        assert!(
            err.contains("p.hcl:3:3: scheduler_config is not supported yet"),
            "{err}"
        );
        let err = parse("node_pool \"bad name\" {}\n", "p.hcl", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.hcl:1:1: invalid name \"bad name\""),
            "{err}"
        );
        let err = parse("node_pool \"x\" {\n", "p.hcl", false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("p.hcl:"), "{err}");
    }
}

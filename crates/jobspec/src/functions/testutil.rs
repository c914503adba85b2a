//! Test helpers: evaluate real HCL expressions through hcl-rs with every function registered.

use hcl::eval::{Context, Evaluate};
use hcl::Value;

/// Evaluates `expr` (HCL expression syntax) with all functions declared.
pub(super) fn try_eval(expr: &str) -> Result<Value, String> {
    let body = hcl::parse(&format!("x = {expr}\n")).map_err(|e| format!("parse error: {e}"))?;
    let attr = body
        .attributes()
        .next()
        .ok_or_else(|| "no attribute parsed".to_string())?;
    let mut ctx = Context::new();
    super::register(&mut ctx);
    attr.expr().evaluate(&ctx).map_err(|e| e.to_string())
}

/// Evaluates `expr`, panicking (in tests only) if it fails.
pub(super) fn eval(expr: &str) -> Value {
    match try_eval(expr) {
        Ok(v) => v,
        Err(e) => panic!("{expr}: unexpected error: {e}"),
    }
}

/// Evaluates `expr`, which must fail, and returns the error message.
pub(super) fn eval_err(expr: &str) -> String {
    match try_eval(expr) {
        Ok(v) => panic!("{expr}: expected an error, got {v:?}"),
        Err(e) => e,
    }
}

/// Parses the expected value from HCL expression syntax (no functions involved).
pub(super) fn v(expr: &str) -> Value {
    eval(expr)
}

/// Asserts `expr` evaluates to the value written (in HCL) as `want`.
#[track_caller]
pub(super) fn check(expr: &str, want: &str) {
    assert_eq!(eval(expr), v(want), "{expr}");
}

/// Asserts `expr` fails with a message containing `needle`.
#[track_caller]
pub(super) fn check_err(expr: &str, needle: &str) {
    let e = eval_err(expr);
    assert!(
        e.contains(needle),
        "{expr}: error {e:?} does not contain {needle:?}"
    );
}

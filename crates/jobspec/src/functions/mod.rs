//! The HCL function library Nomad job files use (Nomad's jobspec2 function set,
//! with Terraform/cty semantics), for hcl-rs evaluation contexts.
//!
//! Every function takes its arguments as `any` and converts them itself, so errors
//! name the function and the argument (`substr: length must be >= -1, got -5`) and
//! numbers/bools are accepted where strings are wanted, as in HCL.
//! `try` and `can` are not here: they need unevaluated arguments (the evaluator has them).
//! File-system functions obey the per-thread setting made by [`with_file_access`].

use hcl::eval::{Context, Func, FuncDef, ParamType};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::PathBuf;

mod args;
mod cidr;
mod collections;
mod convert;
mod crypto;
mod datetime;
mod encoding;
mod filesystem;
mod format;
mod numeric;
mod strings;

#[cfg(test)]
mod testutil;

/// How one function is declared: its name, the arguments it always takes and
/// whether more may follow (functions with optional arguments check the upper bound).
pub(crate) struct Spec {
    name: &'static str,
    params: usize,
    variadic: bool,
    func: Func,
}

impl Spec {
    /// A function taking exactly `params` arguments.
    pub(crate) const fn fixed(name: &'static str, params: usize, func: Func) -> Spec {
        Spec {
            name,
            params,
            variadic: false,
            func,
        }
    }

    /// A function taking at least `params` arguments.
    pub(crate) const fn variadic(name: &'static str, params: usize, func: Func) -> Spec {
        Spec {
            name,
            params,
            variadic: true,
            func,
        }
    }

    fn def(&self) -> FuncDef {
        let builder = FuncDef::builder().params(std::iter::repeat_n(ParamType::Any, self.params));
        let builder = if self.variadic {
            builder.variadic_param(ParamType::Any)
        } else {
            builder
        };
        builder.build(self.func)
    }
}

/// Every function table, one per module.
const TABLES: &[&[Spec]] = &[
    strings::FUNCS,
    format::FUNCS,
    collections::FUNCS,
    numeric::FUNCS,
    encoding::FUNCS,
    convert::FUNCS,
    crypto::FUNCS,
    filesystem::FUNCS,
    cidr::FUNCS,
    datetime::FUNCS,
];

/// Declares every function on `ctx`.
pub fn register(ctx: &mut Context<'_>) {
    for spec in TABLES.iter().flat_map(|t| t.iter()) {
        ctx.declare_func(spec.name, spec.def());
    }
}

/// The names of every function [`register`] declares.
#[cfg(test)]
fn names() -> impl Iterator<Item = &'static str> {
    TABLES.iter().flat_map(|t| t.iter()).map(|s| s.name)
}

thread_local! {
    /// `None`: file functions are disabled; `Some(dir)`: relative paths resolve against `dir`.
    static FILE_ACCESS: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Sets, for the current thread, the directory `file()`/`fileexists()`/`fileset()`/`abspath`
/// resolve relative paths against, and whether file-system functions are allowed at all
/// (Nomad's AllowFS: the HTTP parse endpoint disallows them). `None` disables them: they
/// then fail with "file functions are disabled here (…)". Until this is called on a thread,
/// file functions are disabled there.
///
/// Returns a guard that restores the previous setting when dropped.
#[must_use = "the setting is undone when the guard is dropped"]
pub fn with_file_access(base_dir: Option<PathBuf>) -> FileAccessGuard {
    let previous = FILE_ACCESS.with(|cell| cell.replace(base_dir));
    FileAccessGuard {
        previous,
        _not_send: PhantomData,
    }
}

/// Restores the previous file-access setting of this thread when dropped.
#[derive(Debug)]
pub struct FileAccessGuard {
    previous: Option<PathBuf>,
    /// The setting is per thread, so the guard must be dropped on the thread that made it.
    _not_send: PhantomData<*const ()>,
}

impl Drop for FileAccessGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        FILE_ACCESS.with(|cell| {
            *cell.borrow_mut() = previous;
        });
    }
}

/// The current thread's base directory, or the "disabled" error for function `f`.
pub(crate) fn file_base(f: &str) -> Result<PathBuf, String> {
    FILE_ACCESS
        .with(|cell| cell.borrow().clone())
        .ok_or_else(|| {
            format!(
                "{f}: file functions are disabled here (job files submitted to the server \
             for parsing may not read the file system)"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::testutil::{eval, eval_err};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_unique_and_exclude_try_and_can() {
        let mut all: Vec<_> = names().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "duplicate function names");
        assert!(!all.contains(&"try") && !all.contains(&"can"));
        // Nomad's jobspec2 set, less `try`/`can` (evaluator) and `convert` (needs type expressions).
        let nomad = "abs abspath base64decode base64encode basename bcrypt ceil chomp chunklist cidrhost \
            cidrnetmask cidrsubnet cidrsubnets coalesce coalescelist compact concat contains csvdecode \
            dirname distinct element file filebase64 fileexists fileset flatten floor format formatdate \
            formatlist indent index join jsondecode jsonencode keys length log lookup lower max md5 merge \
            min parseint pathexpand pow range regex_replace replace reverse rsadecrypt setintersection \
            setproduct setunion sha1 sha256 sha512 signum slice sort split strlen strrev substr timeadd \
            title trim trimprefix trimspace trimsuffix upper urlencode uuidv4 uuidv5 values yamldecode \
            yamlencode zipmap";
        for name in nomad.split_whitespace() {
            assert!(all.contains(&name), "{name} is not declared");
        }
    }

    fn any_value() -> impl Strategy<Value = hcl::Value> {
        use hcl::Value;
        let samples = [
            "%d %s %v %[2]q %-08.3f %e %g %x",
            "10.0.0.0/8",
            "fd00::/56",
            "2020-01-01T00:00:00Z",
            "1h30m",
            "a,b\n1,2",
            "{\"a\":[1]}",
            "/(a)/",
            "(?P<x>a)",
            "dns",
            "YYYY-MM-DD'T'hh:mm:ssZ",
            "**/{a,b}*",
            "~/x",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-3i64..70).prop_map(Value::from),
            (-1e12f64..1e12)
                .prop_map(|f| hcl::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,10}".prop_map(Value::from),
            proptest::sample::select(samples.to_vec()).prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[a-c]", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Every function returns a value or an error for any arguments; none panics.
        #[test]
        fn no_function_panics(pick in 0usize..1000, args in proptest::collection::vec(any_value(), 0..5)) {
            use hcl::eval::Evaluate;
            let all: Vec<_> = names().collect();
            let name = all[pick % all.len()];
            let mut call = hcl::expr::FuncCall::builder(name);
            for a in args {
                call = call.arg(hcl::Expression::from(a));
            }
            let mut ctx = Context::new();
            register(&mut ctx);
            let _ = call.build().evaluate(&ctx);
        }
    }

    #[test]
    fn guard_restores_previous_setting() {
        let outer = with_file_access(Some(PathBuf::from("/a")));
        {
            let _inner = with_file_access(None);
            assert!(file_base("file").is_err());
        }
        assert_eq!(file_base("file"), Ok(PathBuf::from("/a")));
        drop(outer);
        assert!(file_base("file").is_err());
    }

    #[test]
    fn arity_errors_come_from_hcl_rs_or_the_function() {
        assert!(eval_err("upper()").contains("expected 1 positional arguments"));
        assert!(eval_err("lookup({a=1})").contains("expected 2 positional"));
        assert!(eval_err(r#"lookup({a=1}, "a", 1, 2)"#)
            .contains("lookup: expected 2 to 3 arguments, got 4"));
        assert_eq!(eval("upper(\"a\")"), hcl::Value::from("A"));
    }
}

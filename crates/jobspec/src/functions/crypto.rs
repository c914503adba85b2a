//! Hash and UUID functions: md5, sha1, sha256, sha512, uuidv4, uuidv5; bcrypt and
//! rsadecrypt are declared but not supported yet.

use super::args::{string, FnResult};
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::Value;
use sha2::Digest;
use std::fmt::Write as _;
use uuid::Uuid;

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("md5", 1, md5),
    Spec::fixed("sha1", 1, sha1),
    Spec::fixed("sha256", 1, sha256),
    Spec::fixed("sha512", 1, sha512),
    Spec::fixed("uuidv4", 0, uuidv4),
    Spec::fixed("uuidv5", 2, uuidv5),
    Spec::variadic("bcrypt", 0, bcrypt),
    Spec::variadic("rsadecrypt", 0, rsadecrypt),
];

/// Lowercase hex of the digest of the function's string argument.
fn hex_digest<D: Digest>(f: &str, a: &[Value]) -> FnResult {
    let s = string(f, a, 0, "str")?;
    let mut out = String::new();
    for b in D::digest(s.as_bytes()) {
        let _ = write!(out, "{b:02x}");
    }
    Ok(Value::from(out))
}

fn md5(a: FuncArgs) -> FnResult {
    hex_digest::<md5::Md5>("md5", &a)
}

fn sha1(a: FuncArgs) -> FnResult {
    hex_digest::<sha1::Sha1>("sha1", &a)
}

fn sha256(a: FuncArgs) -> FnResult {
    hex_digest::<sha2::Sha256>("sha256", &a)
}

fn sha512(a: FuncArgs) -> FnResult {
    hex_digest::<sha2::Sha512>("sha512", &a)
}

fn uuidv4(_: FuncArgs) -> FnResult {
    Ok(Value::from(Uuid::new_v4().to_string()))
}

fn uuidv5(a: FuncArgs) -> FnResult {
    let ns = string("uuidv5", &a, 0, "namespace")?;
    let name = string("uuidv5", &a, 1, "name")?;
    let namespace = match ns.as_ref() {
        "dns" => Uuid::NAMESPACE_DNS,
        "url" => Uuid::NAMESPACE_URL,
        "oid" => Uuid::NAMESPACE_OID,
        "x500" => Uuid::NAMESPACE_X500,
        other => Uuid::parse_str(other).map_err(|e| {
            format!("uuidv5: namespace must be \"dns\", \"url\", \"oid\", \"x500\" or a UUID, got {other:?} ({e})")
        })?,
    };
    Ok(Value::from(
        Uuid::new_v5(&namespace, name.as_bytes()).to_string(),
    ))
}

fn bcrypt(_: FuncArgs) -> FnResult {
    Err("bcrypt is not supported yet".to_string())
}

fn rsadecrypt(_: FuncArgs) -> FnResult {
    Err("rsadecrypt is not supported yet".to_string())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err, eval};

    #[test]
    fn hashes() {
        check(
            r#"md5("hello world")"#,
            r#""5eb63bbbe01eeed093cb22bb8f5acdc3""#,
        );
        check(
            r#"sha1("hello world")"#,
            r#""2aae6c35c94fcfb415dbe95f408b9ce91ee846ed""#,
        );
        check(
            r#"sha256("hello world")"#,
            r#""b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9""#,
        );
        check(
            r#"sha512("hello world")"#,
            r#""309ecc489c12d6eb4cc40f50c902f2b4d0ed77ee511a7c7a9bcd3ca86d4cd86f989dd35bc5ff499670da34255b45b0cfd830e81f605dcf7dc5542e93ae9cd76f""#,
        );
        check_err("md5([])", "md5: str must be a string, got list");
    }

    #[test]
    fn uuids() {
        let v4 = eval("uuidv4()");
        let s = v4.as_str().unwrap_or_default();
        assert_eq!(s.len(), 36);
        assert_eq!(s.as_bytes()[14], b'4');
        assert_ne!(eval("uuidv4()"), v4);
        check(
            r#"uuidv5("dns", "www.terraform.io")"#,
            r#""a5008fae-b28c-5ba5-96cd-82b4c53552d6""#,
        );
        check(
            r#"uuidv5("url", "https://www.terraform.io/")"#,
            r#""9db6f67c-dd95-5ea0-aa5b-e70e5c5f7cf5""#,
        );
        check(
            r#"uuidv5("6ba7b810-9dad-11d1-80b4-00c04fd430c8", "www.terraform.io")"#,
            r#""a5008fae-b28c-5ba5-96cd-82b4c53552d6""#,
        );
        check_err(r#"uuidv5("nope", "x")"#, "uuidv5: namespace must be");
        check_err(r#"bcrypt("x")"#, "bcrypt is not supported yet");
        check_err(r#"rsadecrypt("x", "k")"#, "rsadecrypt is not supported yet");
    }
}

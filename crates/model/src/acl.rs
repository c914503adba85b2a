//! ACL objects in Nomad's JSON shapes: tokens, policies (their rules stay text here; the language
//! is `acl_policy`), roles, one-time tokens, and namespaces. Times are RFC 3339 text on the wire and
//! unix nanoseconds inside.

use crate::duration::Duration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const TOKEN_TYPE_CLIENT: &str = "client";
pub const TOKEN_TYPE_MANAGEMENT: &str = "management";
/// The policy every request without a token gets (when it exists).
pub const ANONYMOUS_POLICY: &str = "anonymous";
/// The accessor ID of the anonymous token (Nomad's `AnonymousACLToken`).
pub const ANONYMOUS_ACCESSOR_ID: &str = "anonymous";
/// Nomad's policy and role name rule: `^[a-zA-Z0-9-_]{1,128}$`.
pub const MAX_NAME_LEN: usize = 128;
pub const MAX_DESCRIPTION_LEN: usize = 256;
/// Nomad's limit on a token's name.
pub const MAX_TOKEN_NAME_LEN: usize = 256;

/// Whether `name` is a valid policy, role or namespace name (Nomad's `validPolicyName`).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Unix nanoseconds as RFC 3339 on the wire (Go's `time.Time`); `None` is `null`.
pub mod time_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_str(&crate::time::format_unix_nanos(*n)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        match text.as_deref() {
            None | Some("") | Some("0001-01-01T00:00:00Z") => Ok(None),
            Some(t) => crate::time::parse_unix_nanos(t)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not an RFC 3339 time"))),
        }
    }
}

/// Unix nanoseconds as RFC 3339 on the wire; 0 is Go's zero time.
pub mod time_req {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        if *v == 0 {
            return s.serialize_str("0001-01-01T00:00:00Z");
        }
        s.serialize_str(&crate::time::format_unix_nanos(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        Ok(super::time_opt::deserialize(d)?.unwrap_or(0))
    }
}

/// A role a token links to, by ID or by name (either one is enough on the way in).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclTokenRoleLink {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
}

/// Nomad's `ACLToken`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclToken {
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// `client` or `management`.
    #[serde(rename = "Type")]
    pub kind: String,
    #[serde(rename = "Policies")]
    pub policies: Vec<String>,
    #[serde(rename = "Roles")]
    pub roles: Vec<AclTokenRoleLink>,
    #[serde(rename = "Global")]
    pub global: bool,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateTime", with = "time_req")]
    pub create_time: i64,
    #[serde(rename = "ExpirationTime", with = "time_opt")]
    pub expiration_time: Option<i64>,
    #[serde(rename = "ExpirationTTL")]
    pub expiration_ttl: Duration,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AclToken {
    pub fn is_management(&self) -> bool {
        self.kind == TOKEN_TYPE_MANAGEMENT
    }

    /// Whether the token has expired at `now` (unix nanoseconds).
    pub fn is_expired(&self, now: i64) -> bool {
        self.expiration_time.is_some_and(|t| t <= now)
    }

    /// The list form: everything but the secret.
    pub fn stub(&self) -> AclTokenListStub {
        AclTokenListStub {
            accessor_id: self.accessor_id.clone(),
            name: self.name.clone(),
            kind: self.kind.clone(),
            policies: self.policies.clone(),
            roles: self.roles.clone(),
            global: self.global,
            hash: self.hash.clone(),
            create_time: self.create_time,
            expiration_time: self.expiration_time,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    /// Checks a token as a user sent it for create or update (Nomad's `ACLToken.Validate`):
    /// the errors, one per line.
    pub fn validate(&self, min_ttl: i64, max_ttl: i64) -> Result<(), String> {
        let mut errs = Vec::new();
        if self.name.len() > MAX_TOKEN_NAME_LEN {
            errs.push(format!(
                "token name too long (at most {MAX_TOKEN_NAME_LEN} characters)"
            ));
        }
        match self.kind.as_str() {
            TOKEN_TYPE_CLIENT => {
                if self.policies.is_empty() && self.roles.is_empty() {
                    errs.push("client token missing policy or role links".into());
                }
            }
            TOKEN_TYPE_MANAGEMENT => {
                if !self.policies.is_empty() || !self.roles.is_empty() {
                    errs.push(
                        "management token cannot be associated with policies or roles".into(),
                    );
                }
            }
            other => errs.push(format!(
                "token type must be client or management, not {other:?}"
            )),
        }
        let ttl = self.expiration_ttl.0;
        if ttl < 0 {
            errs.push("token expiration TTL cannot be negative".into());
        } else if ttl != 0 && (ttl < min_ttl || ttl > max_ttl) {
            errs.push(format!(
                "expiration time cannot be less than {} or more than {}",
                Duration(min_ttl),
                Duration(max_ttl)
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }
}

/// Nomad's `ACLTokenListStub`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclTokenListStub {
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub kind: String,
    #[serde(rename = "Policies")]
    pub policies: Vec<String>,
    #[serde(rename = "Roles")]
    pub roles: Vec<AclTokenRoleLink>,
    #[serde(rename = "Global")]
    pub global: bool,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateTime", with = "time_req")]
    pub create_time: i64,
    #[serde(rename = "ExpirationTime", with = "time_opt")]
    pub expiration_time: Option<i64>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// Nomad's `ACLPolicy`: the rules are kept as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclPolicy {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Rules")]
    pub rules: String,
    #[serde(rename = "JobACL")]
    pub job_acl: Option<serde_json::Value>,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AclPolicy {
    pub fn stub(&self) -> AclPolicyListStub {
        AclPolicyListStub {
            name: self.name.clone(),
            description: self.description.clone(),
            hash: self.hash.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclPolicyListStub {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclRolePolicyLink {
    #[serde(rename = "Name")]
    pub name: String,
}

/// Nomad's `ACLRole`: a named set of policies tokens can link to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclRole {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Policies")]
    pub policies: Vec<AclRolePolicyLink>,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// Nomad's `OneTimeToken`: exchanged once for the token it names, before it expires.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OneTimeToken {
    #[serde(rename = "OneTimeSecretID")]
    pub one_time_secret_id: String,
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "ExpiresAt", with = "time_req")]
    pub expires_at: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// Nomad's `Namespace`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Namespace {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Quota")]
    pub quota: String,
    #[serde(rename = "Capabilities")]
    pub capabilities: Option<serde_json::Value>,
    #[serde(rename = "NodePoolConfiguration")]
    pub node_pool_configuration: Option<serde_json::Value>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "Hash")]
    pub hash: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl Namespace {
    /// The `default` namespace, which always exists.
    pub fn default_namespace() -> Namespace {
        Namespace {
            name: crate::job::DEFAULT_NAMESPACE.into(),
            description: "Default shared namespace".into(),
            ..Namespace::default()
        }
    }

    /// Nomad's `Namespace.Validate`.
    pub fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        if !valid_name(&self.name) {
            errs.push(format!(
                "invalid name {:?}. Must match regex ^[a-zA-Z0-9-_]{{1,128}}$",
                self.name
            ));
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            errs.push(format!(
                "description longer than {MAX_DESCRIPTION_LEN} characters"
            ));
        }
        if self.quota.is_empty() {
        } else {
            errs.push("quotas are an Enterprise feature: leave Quota empty".into());
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_and_writes_nomads_json() {
        let text = r#"{"AccessorID":"a","SecretID":"s","Name":"n","Type":"client","Policies":["p"],
            "Roles":null,"Global":false,"CreateTime":"2024-05-01T12:00:00Z","ExpirationTime":null,
            "ExpirationTTL":0,"CreateIndex":3,"ModifyIndex":4}"#;
        let token: AclToken = crate::json::from_str(text).expect("decodes");
        assert_eq!(token.create_time, 1_714_564_800_000_000_000);
        assert_eq!(token.expiration_time, None);
        assert!(token.roles.is_empty());
        let back = serde_json::to_value(&token).expect("encodes");
        assert_eq!(back["CreateTime"], "2024-05-01T12:00:00Z");
        assert_eq!(back["ExpirationTime"], serde_json::Value::Null);
        let again: AclToken = serde_json::from_value(back).expect("decodes again");
        assert_eq!(again, token);
    }

    #[test]
    fn token_validation_follows_nomad() {
        let mut t = AclToken {
            kind: TOKEN_TYPE_CLIENT.into(),
            ..AclToken::default()
        };
        assert!(t.validate(1, 100).is_err(), "client token without policies");
        t.policies = vec!["p".into()];
        assert!(t.validate(1, 100).is_ok());
        t.expiration_ttl = Duration(1000);
        assert!(t.validate(1, 100).is_err(), "TTL above the max");
        t.kind = TOKEN_TYPE_MANAGEMENT.into();
        t.expiration_ttl = Duration(0);
        assert!(t.validate(1, 100).is_err(), "management with policies");
        t.kind = "root".into();
        assert!(t.validate(1, 100).is_err());
    }

    #[test]
    fn names_follow_nomads_rule() {
        assert!(valid_name("read-only_1"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"x".repeat(129)));
    }
}

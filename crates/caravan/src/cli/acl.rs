//! `caravan acl bootstrap | policy … | token … | role …` and `caravan namespace …`, printed as
//! Nomad prints them.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_kv, format_list, format_time, json_pretty};
use api::QueryOptions;
use clap::{Args, Subcommand};
use model::acl::{AclPolicy, AclRole, AclRolePolicyLink, AclToken, AclTokenRoleLink, Namespace};

#[derive(Subcommand)]
pub enum AclCommand {
    /// Create the first management token (once; again only after a bootstrap reset)
    Bootstrap(BootstrapArgs),
    /// Work with ACL policies: apply, delete, info, list
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Work with ACL tokens: create, update, delete, info, list, self
    #[command(subcommand)]
    Token(TokenCommand),
    /// Work with ACL roles: create, update, delete, info, list
    #[command(subcommand)]
    Role(RoleCommand),
}

#[derive(Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the token as JSON
    #[arg(long)]
    json: bool,
    /// A file holding the secret to use for the management token (a UUID)
    path: Option<String>,
}

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Create or update a policy from a rules file ("-" reads stdin)
    Apply(PolicyApplyArgs),
    /// Delete a policy
    Delete(NameArgs),
    /// Show a policy and its rules
    Info(NameArgs),
    /// List policies
    List(ListArgs),
}

#[derive(Args)]
pub struct PolicyApplyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The policy's description
    #[arg(long)]
    description: Option<String>,
    name: String,
    path: String,
}

#[derive(Args)]
pub struct NameArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print as JSON
    #[arg(long)]
    json: bool,
    name: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a token
    Create(TokenArgs),
    /// Update a token's name, policies or roles
    Update(TokenUpdateArgs),
    /// Delete a token
    Delete(AccessorArgs),
    /// Show a token
    Info(AccessorArgs),
    /// List tokens
    List(ListArgs),
    /// Show the token in use
    #[command(name = "self")]
    Self_(ListArgs),
}

#[derive(Args)]
pub struct TokenArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// A name for the token
    #[arg(long, default_value = "")]
    name: String,
    /// client or management
    #[arg(long = "type", default_value = "client")]
    kind: String,
    /// A policy to attach (repeatable)
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// A role to attach by ID (repeatable)
    #[arg(long = "role-id")]
    role_ids: Vec<String>,
    /// A role to attach by name (repeatable)
    #[arg(long = "role-name")]
    role_names: Vec<String>,
    /// Replicate the token to every region
    #[arg(long)]
    global: bool,
    /// The token expires this long after it is made (e.g. 1h)
    #[arg(long)]
    ttl: Option<String>,
    /// Print the token as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TokenUpdateArgs {
    #[command(flatten)]
    api: ApiFlags,
    #[arg(long)]
    name: Option<String>,
    #[arg(long = "type")]
    kind: Option<String>,
    #[arg(long = "policy")]
    policies: Vec<String>,
    #[arg(long = "role-id")]
    role_ids: Vec<String>,
    #[arg(long = "role-name")]
    role_names: Vec<String>,
    #[arg(long)]
    json: bool,
    accessor: String,
}

#[derive(Args)]
pub struct AccessorArgs {
    #[command(flatten)]
    api: ApiFlags,
    #[arg(long)]
    json: bool,
    accessor: String,
}

#[derive(Subcommand)]
pub enum RoleCommand {
    /// Create a role
    Create(RoleArgs),
    /// Update a role
    Update(RoleUpdateArgs),
    /// Delete a role by ID
    Delete(AccessorArgs),
    /// Show a role by ID (or by name with -by-name)
    Info(RoleInfoArgs),
    /// List roles
    List(ListArgs),
}

#[derive(Args)]
pub struct RoleArgs {
    #[command(flatten)]
    api: ApiFlags,
    #[arg(long)]
    name: String,
    #[arg(long, default_value = "")]
    description: String,
    #[arg(long = "policy", required = true)]
    policies: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RoleUpdateArgs {
    #[command(flatten)]
    api: ApiFlags,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    description: Option<String>,
    #[arg(long = "policy")]
    policies: Vec<String>,
    #[arg(long)]
    json: bool,
    id: String,
}

#[derive(Args)]
pub struct RoleInfoArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Look the role up by name
    #[arg(long = "by-name")]
    by_name: bool,
    #[arg(long)]
    json: bool,
    id: String,
}

pub fn run(cmd: AclCommand) -> i32 {
    match cmd {
        AclCommand::Bootstrap(a) => bootstrap(a),
        AclCommand::Policy(c) => policy(c),
        AclCommand::Token(c) => token(c),
        AclCommand::Role(c) => role(c),
    }
}

macro_rules! client_or_exit {
    ($flags:expr) => {
        match $flags.client() {
            Ok(c) => c,
            Err(msg) => {
                eprintln!("{msg}");
                return 1;
            }
        }
    };
}

/// Exit 0 after `ok` on success; Nomad's error line and 1 otherwise.
fn done<T>(r: api::Result<T>, context: &str, ok: impl FnOnce(T)) -> i32 {
    match r {
        Ok(v) => {
            ok(v);
            0
        }
        Err(e) => fail(context, &e),
    }
}

/// A list as Nomad prints it: JSON with `-json`, `empty` when there is nothing, else a table of
/// `header` and one `row` per item.
fn print_list<T: serde::Serialize>(
    r: api::Result<Vec<T>>,
    json: bool,
    context: &str,
    empty: Option<&str>,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> i32 {
    done(r, context, |list| {
        if json {
            println!("{}", json_pretty(&list));
        } else if let (true, Some(msg)) = (list.is_empty(), empty) {
            println!("{msg}");
        } else {
            let mut rows = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
            rows.extend(list.iter().map(row));
            println!("{}", format_list(&rows));
        }
    })
}

fn none_if_empty(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// Nomad's `formatToken`.
pub fn format_token(t: &AclToken) -> String {
    let policies = if t.is_management() || t.policies.is_empty() {
        "n/a".to_string()
    } else {
        t.policies.join(", ")
    };
    let roles = if t.roles.is_empty() {
        "n/a".to_string()
    } else {
        t.roles
            .iter()
            .map(|r| format!("{} ({})", r.name, r.id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format_kv(&[
        ("Accessor ID", t.accessor_id.clone()),
        ("Secret ID", t.secret_id.clone()),
        ("Name", none_if_empty(&t.name)),
        ("Type", t.kind.clone()),
        ("Global", t.global.to_string()),
        ("Create Time", format_time(t.create_time)),
        (
            "Expiry Time",
            t.expiration_time.map_or("<none>".into(), format_time),
        ),
        ("Create Index", t.create_index.to_string()),
        ("Modify Index", t.modify_index.to_string()),
        ("Policies", policies),
        ("Roles", roles),
    ])
}

fn print_token(t: &AclToken, json: bool) {
    if json {
        println!("{}", json_pretty(t));
    } else {
        println!("{}", format_token(t));
    }
}

fn bootstrap(a: BootstrapArgs) -> i32 {
    let client = client_or_exit!(a.api);
    let secret = match &a.path {
        None => None,
        Some(p) => {
            let text = if p == "-" {
                let mut s = String::new();
                if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut s) {
                    eprintln!("Error reading the secret from stdin: {e}");
                    return 1;
                }
                s
            } else {
                match std::fs::read_to_string(p) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("Error reading {p}: {e}");
                        return 1;
                    }
                }
            };
            Some(text.trim().to_string())
        }
    };
    block_on(async {
        done(
            client.acl_bootstrap(secret.as_deref()).await,
            "Error bootstrapping",
            |t| print_token(&t, a.json),
        )
    })
}

fn read_rules(path: &str) -> Result<String, String> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("Error reading the rules from stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("Error reading policy file {path}: {e}"))
}

fn policy(cmd: PolicyCommand) -> i32 {
    match cmd {
        PolicyCommand::Apply(a) => {
            let client = client_or_exit!(a.api);
            let rules = match read_rules(&a.path) {
                Ok(r) => r,
                Err(msg) => {
                    eprintln!("{msg}");
                    return 1;
                }
            };
            let p = AclPolicy {
                name: a.name.clone(),
                description: a.description.clone().unwrap_or_default(),
                rules,
                ..AclPolicy::default()
            };
            block_on(async {
                done(
                    client.acl_policy_upsert(&p).await,
                    "Error writing ACL policy",
                    |_| println!("Successfully wrote {:?} ACL policy!", a.name),
                )
            })
        }
        PolicyCommand::Delete(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.acl_policy_delete(&a.name).await,
                    "Error deleting ACL policy",
                    |_| println!("Successfully deleted {:?} ACL policy!", a.name),
                )
            })
        }
        PolicyCommand::Info(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                match client.acl_policy(&a.name).await {
                    Ok(p) if a.json => {
                        println!("{}", json_pretty(&p));
                        0
                    }
                    Ok(p) => {
                        println!(
                            "{}\n\nRules\n\n{}",
                            format_kv(&[
                                ("Name", p.name.clone()),
                                ("Description", none_if_empty(&p.description)),
                                ("CreateIndex", p.create_index.to_string()),
                                ("ModifyIndex", p.modify_index.to_string()),
                            ]),
                            p.rules.trim_end()
                        );
                        0
                    }
                    Err(e) => fail("Error reading ACL policy", &e),
                }
            })
        }
        PolicyCommand::List(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                print_list(
                    client.acl_policies(&QueryOptions::default()).await,
                    a.json,
                    "Error listing ACL policies",
                    Some("No policies found"),
                    &["Name", "Description"],
                    |p| vec![p.name.clone(), none_if_empty(&p.description)],
                )
            })
        }
    }
}

fn role_links(ids: &[String], names: &[String]) -> Vec<AclTokenRoleLink> {
    ids.iter()
        .map(|id| AclTokenRoleLink {
            id: id.clone(),
            name: String::new(),
        })
        .chain(names.iter().map(|n| AclTokenRoleLink {
            id: String::new(),
            name: n.clone(),
        }))
        .collect()
}

fn token(cmd: TokenCommand) -> i32 {
    match cmd {
        TokenCommand::Create(a) => {
            let client = client_or_exit!(a.api);
            let ttl = match a.ttl.as_deref().map(model::duration::Duration::parse) {
                None => model::duration::Duration::ZERO,
                Some(Ok(d)) => d,
                Some(Err(e)) => {
                    eprintln!("Error parsing -ttl: {e}");
                    return 1;
                }
            };
            let t = AclToken {
                name: a.name.clone(),
                kind: a.kind.clone(),
                policies: a.policies.clone(),
                roles: role_links(&a.role_ids, &a.role_names),
                global: a.global,
                expiration_ttl: ttl,
                ..AclToken::default()
            };
            block_on(async {
                done(
                    client.acl_token_create(&t).await,
                    "Error creating token",
                    |t| print_token(&t, a.json),
                )
            })
        }
        TokenCommand::Update(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                let mut t = match client.acl_token(&a.accessor).await {
                    Ok(t) => t,
                    Err(e) => return fail("Error fetching token", &e),
                };
                if let Some(n) = &a.name {
                    t.name = n.clone();
                }
                if let Some(k) = &a.kind {
                    t.kind = k.clone();
                }
                if !a.policies.is_empty() {
                    t.policies = a.policies.clone();
                }
                if !a.role_ids.is_empty() || !a.role_names.is_empty() {
                    t.roles = role_links(&a.role_ids, &a.role_names);
                }
                match client.acl_token_update(&t).await {
                    Ok(t) => {
                        print_token(&t, a.json);
                        0
                    }
                    Err(e) => fail("Error updating token", &e),
                }
            })
        }
        TokenCommand::Delete(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.acl_token_delete(&a.accessor).await,
                    "Error deleting token",
                    |_| println!("Token {} successfully deleted", a.accessor),
                )
            })
        }
        TokenCommand::Info(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.acl_token(&a.accessor).await,
                    "Error fetching token",
                    |t| print_token(&t, a.json),
                )
            })
        }
        TokenCommand::Self_(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.acl_token_self().await,
                    "Error fetching self token",
                    |t| print_token(&t, a.json),
                )
            })
        }
        TokenCommand::List(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                let now = super::output::now_nanos();
                print_list(
                    client.acl_tokens(&QueryOptions::default()).await,
                    a.json,
                    "Error listing tokens",
                    Some("No tokens found"),
                    &["Name", "Type", "Global", "Accessor ID", "Expired"],
                    |t| {
                        vec![
                            none_if_empty(&t.name),
                            t.kind.clone(),
                            t.global.to_string(),
                            t.accessor_id.clone(),
                            t.expiration_time.is_some_and(|e| e <= now).to_string(),
                        ]
                    },
                )
            })
        }
    }
}

fn format_role(r: &AclRole) -> String {
    let policies: Vec<String> = r.policies.iter().map(|p| p.name.clone()).collect();
    format_kv(&[
        ("ID", r.id.clone()),
        ("Name", r.name.clone()),
        ("Description", none_if_empty(&r.description)),
        ("Policies", policies.join(",")),
        ("Create Index", r.create_index.to_string()),
        ("Modify Index", r.modify_index.to_string()),
    ])
}

fn print_role(r: &AclRole, json: bool) {
    if json {
        println!("{}", json_pretty(r));
    } else {
        println!("{}", format_role(r));
    }
}

fn policy_links(names: &[String]) -> Vec<AclRolePolicyLink> {
    names
        .iter()
        .map(|n| AclRolePolicyLink { name: n.clone() })
        .collect()
}

fn role(cmd: RoleCommand) -> i32 {
    match cmd {
        RoleCommand::Create(a) => {
            let client = client_or_exit!(a.api);
            let r = AclRole {
                name: a.name.clone(),
                description: a.description.clone(),
                policies: policy_links(&a.policies),
                ..AclRole::default()
            };
            block_on(async {
                done(
                    client.acl_role_create(&r).await,
                    "Error creating ACL role",
                    |r| print_role(&r, a.json),
                )
            })
        }
        RoleCommand::Update(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                let mut r = match client.acl_role(&a.id).await {
                    Ok(r) => r,
                    Err(e) => return fail("Error reading ACL role", &e),
                };
                if let Some(n) = &a.name {
                    r.name = n.clone();
                }
                if let Some(d) = &a.description {
                    r.description = d.clone();
                }
                if !a.policies.is_empty() {
                    r.policies = policy_links(&a.policies);
                }
                match client.acl_role_update(&r).await {
                    Ok(r) => {
                        print_role(&r, a.json);
                        0
                    }
                    Err(e) => fail("Error updating ACL role", &e),
                }
            })
        }
        RoleCommand::Delete(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.acl_role_delete(&a.accessor).await,
                    "Error deleting ACL role",
                    |_| println!("ACL role {} successfully deleted", a.accessor),
                )
            })
        }
        RoleCommand::Info(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                let r = if a.by_name {
                    client.acl_role_by_name(&a.id).await
                } else {
                    client.acl_role(&a.id).await
                };
                match r {
                    Ok(r) => {
                        print_role(&r, a.json);
                        0
                    }
                    Err(e) => fail("Error reading ACL role", &e),
                }
            })
        }
        RoleCommand::List(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                print_list(
                    client.acl_roles(&QueryOptions::default()).await,
                    a.json,
                    "Error listing ACL roles",
                    Some("No ACL roles found"),
                    &["ID", "Name", "Description", "Policies"],
                    |r| {
                        let policies: Vec<String> =
                            r.policies.iter().map(|p| p.name.clone()).collect();
                        vec![
                            r.id.clone(),
                            r.name.clone(),
                            none_if_empty(&r.description),
                            policies.join(","),
                        ]
                    },
                )
            })
        }
    }
}

#[derive(Subcommand)]
pub enum NamespaceCommand {
    /// Create or update a namespace
    Apply(NamespaceApplyArgs),
    /// Delete a namespace (it must hold no jobs or volumes)
    Delete(NameArgs),
    /// Show a namespace as JSON
    Inspect(NameArgs),
    /// List namespaces
    List(ListArgs),
    /// Show a namespace
    Status(NameArgs),
}

#[derive(Args)]
pub struct NamespaceApplyArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The namespace's description
    #[arg(long)]
    description: Option<String>,
    name: String,
}

pub fn run_namespace(cmd: NamespaceCommand) -> i32 {
    match cmd {
        NamespaceCommand::Apply(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                let mut ns = match client.namespace(&a.name).await {
                    Ok(ns) => ns,
                    Err(e) if e.status() == Some(404) => Namespace {
                        name: a.name.clone(),
                        ..Namespace::default()
                    },
                    Err(e) => return fail("Error reading namespace", &e),
                };
                if let Some(d) = &a.description {
                    ns.description = d.clone();
                }
                match client.namespace_upsert(&ns).await {
                    Ok(()) => {
                        println!("Successfully applied namespace {:?}!", a.name);
                        0
                    }
                    Err(e) => fail("Error applying namespace specification", &e),
                }
            })
        }
        NamespaceCommand::Delete(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.namespace_delete(&a.name).await,
                    "Error deleting namespace",
                    |_| println!("Successfully deleted namespace {:?}!", a.name),
                )
            })
        }
        NamespaceCommand::Inspect(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                done(
                    client.namespace(&a.name).await,
                    "Error reading namespace",
                    |ns| println!("{}", json_pretty(&ns)),
                )
            })
        }
        NamespaceCommand::Status(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                match client.namespace(&a.name).await {
                    Ok(ns) if a.json => {
                        println!("{}", json_pretty(&ns));
                        0
                    }
                    Ok(ns) => {
                        println!(
                            "{}",
                            format_kv(&[
                                ("Name", ns.name.clone()),
                                ("Description", none_if_empty(&ns.description)),
                                ("Quota", none_if_empty(&ns.quota)),
                            ])
                        );
                        if !ns.meta.is_empty() {
                            let pairs: Vec<(&str, String)> = ns
                                .meta
                                .iter()
                                .map(|(k, v)| (k.as_str(), v.clone()))
                                .collect();
                            println!("\nMetadata\n{}", format_kv(&pairs));
                        }
                        0
                    }
                    Err(e) => fail("Error reading namespace", &e),
                }
            })
        }
        NamespaceCommand::List(a) => {
            let client = client_or_exit!(a.api);
            block_on(async {
                print_list(
                    client.namespaces(&QueryOptions::default()).await,
                    a.json,
                    "Error retrieving namespaces",
                    None,
                    &["Name", "Description"],
                    |n| vec![n.name.clone(), none_if_empty(&n.description)],
                )
            })
        }
    }
}

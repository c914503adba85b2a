//! `caravan var list|get|put|purge|init|lock`: Nomad's variables commands.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_kv, format_list, format_time, json_pretty, row};
use anyhow::{bail, Context, Result};
use api::{QueryOptions, VarWriteOutcome, WriteOptions};
use clap::{Args, Subcommand, ValueEnum};
use model::variable::{VariableDecrypted, VariableItems, VariableLock, VariableMetadata};
use std::io::{IsTerminal, Read};
use std::time::Duration;

#[derive(Subcommand)]
pub enum VarCommand {
    /// List variables (paths and times, never their items)
    List(ListArgs),
    /// Show a variable, or one of its items with -item
    Get(GetArgs),
    /// Create or update a variable from key=value pairs, a file, or stdin
    Put(PutArgs),
    /// Delete a variable
    Purge(PurgeArgs),
    /// Write an example variable specification file
    Init(InitArgs),
    /// Hold a variable's lock while a command runs
    Lock(LockArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    Table,
    Json,
    Hcl,
    None,
}

/// `table` on a terminal, `json` otherwise (as Nomad).
fn default_out(out: Option<OutFormat>) -> OutFormat {
    out.unwrap_or(if std::io::stdout().is_terminal() {
        OutFormat::Table
    } else {
        OutFormat::Json
    })
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the list as JSON
    #[arg(long)]
    json: bool,
    /// Most variables to show
    #[arg(long = "per-page")]
    per_page: Option<i32>,
    /// The page token a previous list printed
    #[arg(long = "page-token")]
    page_token: Option<String>,
    /// Only paths starting with this
    prefix: Option<String>,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print only this item's value
    #[arg(long)]
    item: Option<String>,
    /// table, json, hcl or none [default: table on a terminal, else json]
    #[arg(long, value_enum)]
    out: Option<OutFormat>,
    path: String,
}

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Write only if the variable's modify index is this (0: only if it does not exist)
    #[arg(long = "check-index")]
    check_index: Option<u64>,
    /// Write whatever the stored variable's index (without it, an existing variable is only
    /// replaced with -check-index or a spec's modify_index)
    #[arg(long)]
    force: bool,
    /// table, json, hcl or none [default: none]
    #[arg(long, value_enum)]
    out: Option<OutFormat>,
    /// The variable's path, then an optional @spec file (JSON or HCL) or `-` (stdin), then
    /// key=value pairs (`key=` removes an item, `key=@file` reads the value from a file); or the
    /// spec first, with the path taken from it
    #[arg(required = true, num_args = 1..)]
    args: Vec<String>,
}

#[derive(Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Delete only if the variable's modify index is this
    #[arg(long = "check-index")]
    check_index: Option<u64>,
    path: String,
}

#[derive(Args)]
pub struct InitArgs {
    /// Write JSON instead of HCL
    #[arg(long, value_enum)]
    out: Option<OutFormat>,
    /// The file to write [default: spec.nv.hcl, or spec.nv.json with -out json]
    file: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct LockArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// How long the lock lives without a renewal (10s to 24h)
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    ttl: Duration,
    /// After a holder is lost, how long before anyone may take the lock again
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    delay: Duration,
    /// Attempts to acquire before giving up (0: keep trying)
    #[arg(long = "max-retry", default_value_t = 5)]
    max_retry: u32,
    /// The variable holding the lock
    path: String,
    /// The command to run while the lock is held (through /bin/sh -c when it is one word with spaces)
    #[arg(required = true, num_args = 1.., trailing_var_arg = true)]
    command: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = model::Duration::parse(s).map_err(|e| e.to_string())?;
    u64::try_from(d.as_nanos())
        .map(Duration::from_nanos)
        .map_err(|_| format!("{s:?} is negative"))
}

pub fn run(cmd: VarCommand) -> Result<i32> {
    match cmd {
        VarCommand::List(a) => Ok(list(a)),
        VarCommand::Get(a) => Ok(get(a)),
        VarCommand::Put(a) => put(a),
        VarCommand::Purge(a) => Ok(purge(a)),
        VarCommand::Init(a) => init(a),
        VarCommand::Lock(a) => lock(a),
    }
}

fn client_of(api: &ApiFlags) -> Option<api::Client> {
    match api.client() {
        Ok(c) => Some(c),
        Err(msg) => {
            eprintln!("{msg}");
            None
        }
    }
}

fn refuse_wildcard(api: &ApiFlags) -> bool {
    let ns = api.config().namespace.unwrap_or_default();
    if ns == "*" {
        eprintln!("The wildcard namespace (\"*\") is not valid for this command.");
        return true;
    }
    false
}

fn list(args: ListArgs) -> i32 {
    let Some(client) = client_of(&args.api) else {
        return 1;
    };
    block_on(async {
        let opts = QueryOptions {
            prefix: args.prefix.clone(),
            per_page: args.per_page,
            next_token: args.page_token.clone(),
            ..QueryOptions::default()
        };
        let (vars, meta) = match client.vars(&opts).await {
            Ok(v) => v,
            Err(e) => return fail("Error retrieving vars", &e),
        };
        if args.json {
            println!("{}", json_pretty(&vars));
            return 0;
        }
        if vars.is_empty() {
            match args.prefix.as_deref().filter(|p| !p.is_empty()) {
                Some(p) => println!("No matching variables found with prefix {p:?}"),
                None => println!("No variables found"),
            }
            return 0;
        }
        println!("{}", list_table(&vars));
        if let Some(token) = meta.next_token {
            println!("\nNext page token: {token}");
        }
        0
    })
}

fn list_table(vars: &[VariableMetadata]) -> String {
    let mut rows = vec![row!["Namespace", "Path", "Last Updated"]];
    for v in vars {
        rows.push(row![v.namespace, v.path, format_time(v.modify_time)]);
    }
    format_list(&rows)
}

/// Nomad's table: metadata, then the items.
fn table(v: &VariableDecrypted) -> String {
    let mut meta = vec![
        ("Namespace", v.meta.namespace.clone()),
        ("Path", v.meta.path.clone()),
        ("Create Time", format_time(v.meta.create_time)),
    ];
    if v.meta.create_time != v.meta.modify_time {
        meta.push(("Modify Time", format_time(v.meta.modify_time)));
    }
    meta.push(("Check Index", v.meta.modify_index.to_string()));
    let items: Vec<(&str, String)> = v
        .items
        .iter()
        .map(|(k, val)| (k.as_str(), val.clone()))
        .collect();
    format!("{}\n\nItems\n{}", format_kv(&meta), format_kv(&items))
}

fn hcl_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn hcl(v: &VariableDecrypted) -> String {
    let mut out = format!(
        "namespace    = {}\npath         = {}\ncreate_index = {}  # Set by server\nmodify_index = {}  # Set by server; consulted for check-and-set\ncreate_time  = {}  # Set by server\nmodify_time  = {}  # Set by server\n\nitems = {{\n",
        hcl_quote(&v.meta.namespace),
        hcl_quote(&v.meta.path),
        v.meta.create_index,
        v.meta.modify_index,
        v.meta.create_time,
        v.meta.modify_time
    );
    for (k, val) in &v.items {
        out.push_str(&format!("  {} = {}\n", hcl_quote(k), hcl_quote(val)));
    }
    out.push_str("}\n");
    out
}

fn render(v: &VariableDecrypted, out: OutFormat) -> Option<String> {
    match out {
        OutFormat::Table => Some(table(v)),
        OutFormat::Json => Some(json_pretty(v)),
        OutFormat::Hcl => Some(hcl(v)),
        OutFormat::None => None,
    }
}

fn get(args: GetArgs) -> i32 {
    if refuse_wildcard(&args.api) {
        return 1;
    }
    let Some(client) = client_of(&args.api) else {
        return 1;
    };
    block_on(async {
        let v = match client.var_get(&args.path, &QueryOptions::default()).await {
            Ok((v, _)) => v,
            Err(e) if e.is_not_found() => {
                eprintln!("Variable not found");
                return 1;
            }
            Err(e) => return fail("Error retrieving variable", &e),
        };
        if let Some(item) = &args.item {
            return match v.items.get(item) {
                Some(value) => {
                    println!("{value}");
                    0
                }
                None => {
                    eprintln!("Variable does not contain \"{item}\" item");
                    1
                }
            };
        }
        if let Some(text) = render(&v, default_out(args.out)) {
            println!("{}", text.trim_end());
        }
        0
    })
}

/// A variable specification file: JSON as the API writes variables, or HCL as `var init` writes.
#[derive(serde::Deserialize, Default)]
struct Spec {
    #[serde(default, alias = "Path")]
    path: Option<String>,
    #[serde(default, alias = "Items")]
    items: VariableItems,
    #[serde(default, alias = "ModifyIndex")]
    modify_index: Option<u64>,
}

fn read_spec(source: &str) -> Result<Spec> {
    let (text, name) = if source == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the variable from stdin")?;
        (s, "stdin".to_owned())
    } else {
        let s = std::fs::read_to_string(source).with_context(|| format!("reading {source}"))?;
        (s, source.to_owned())
    };
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        model::json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("Failed to parse variable data in {name}: {e}"))
    } else {
        hcl::from_str(&text)
            .map_err(|e| anyhow::anyhow!("Failed to parse variable data in {name}: {e}"))
    }
}

fn cas_conflict(check: u64, conflict: &VariableDecrypted) {
    eprintln!("\nCheck-and-Set conflict\n");
    let last = if conflict.meta.modify_index > 0 {
        format!(
            " It was last updated at {}.",
            format_time(conflict.meta.modify_time)
        )
    } else {
        String::new()
    };
    eprintln!(
        "    Your provided check-index ({check}) does not match the server-side index ({}).{last} If you are sure you want to perform this operation, add the -force or -check-index={} flag before the positional arguments.\n",
        conflict.meta.modify_index, conflict.meta.modify_index
    );
}

fn put(args: PutArgs) -> Result<i32> {
    if refuse_wildcard(&args.api) {
        return Ok(1);
    }
    // `put <@file|-> [k=v...]` or `put <path> [<@file|->] [k=v...]`, as Nomad.
    let is_spec = |a: &str| a == "-" || a.starts_with('@');
    let mut rest: Vec<&str> = args.args.iter().map(String::as_str).collect();
    let mut spec = Spec::default();
    let mut path = None;
    if let Some(first) = rest.first().copied() {
        if is_spec(first) {
            spec = read_spec(first.strip_prefix('@').unwrap_or(first))?;
            rest.remove(0);
        } else {
            path = Some(first.to_owned());
            rest.remove(0);
            if let Some(second) = rest.first().copied().filter(|a| is_spec(a)) {
                spec = read_spec(second.strip_prefix('@').unwrap_or(second))?;
                rest.remove(0);
            }
        }
    }
    let mut items = spec.items;
    for pair in &rest {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("Failed to parse K=V data: {pair:?} is not key=value");
        };
        if k.is_empty() {
            bail!("Failed to parse K=V data: {pair:?} has an empty key");
        }
        if v.is_empty() {
            // `k=` removes the item (from a spec's items).
            items.remove(k);
            continue;
        }
        // `k=@file` reads the value from a file, as Nomad.
        let value = match v.strip_prefix('@') {
            Some(file) => {
                std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
            }
            None => v.to_owned(),
        };
        items.insert(k.to_owned(), value);
    }
    let Some(path) = path.or(spec.path).filter(|p| !p.is_empty()) else {
        bail!("Not enough arguments: give the variable's path (or a spec file with a path)");
    };
    if items.is_empty() {
        bail!("Must supply data: key=value pairs, an @file spec, or - for stdin");
    }
    let Some(client) = client_of(&args.api) else {
        return Ok(1);
    };
    let out = args.out.unwrap_or(OutFormat::None);
    // Without -force a write is a check-and-set: against -check-index, else the spec's modify
    // index, else 0 ("only if it does not exist"), so nothing is overwritten by accident.
    let cas = if args.force {
        None
    } else {
        Some(args.check_index.or(spec.modify_index).unwrap_or(0))
    };
    Ok(block_on(async {
        let mut var = VariableDecrypted::default();
        var.meta.path = path.clone();
        var.items = items;
        match client.var_put(&var, cas, &WriteOptions::default()).await {
            Ok(VarWriteOutcome::Written(v)) => {
                let verb = if v.meta.create_index == v.meta.modify_index {
                    "Created"
                } else {
                    "Updated"
                };
                println!(
                    "{verb} variable {:?} with modify index {}",
                    v.meta.path, v.meta.modify_index
                );
                if let Some(text) = render(&v, out) {
                    println!("{}", text.trim_end());
                }
                0
            }
            Ok(VarWriteOutcome::Conflict(c)) => {
                cas_conflict(cas.unwrap_or_default(), &c);
                1
            }
            Err(e) => fail("Error creating variable", &e),
        }
    }))
}

fn purge(args: PurgeArgs) -> i32 {
    if refuse_wildcard(&args.api) {
        return 1;
    }
    let Some(client) = client_of(&args.api) else {
        return 1;
    };
    block_on(async {
        match client
            .var_delete(&args.path, args.check_index, &WriteOptions::default())
            .await
        {
            Ok(None) => {
                println!("Successfully purged variable {:?}!", args.path);
                0
            }
            Ok(Some(c)) => {
                cas_conflict(args.check_index.unwrap_or_default(), &c);
                1
            }
            Err(e) => fail("Error purging variable", &e),
        }
    })
}

const SPEC_HCL: &str = r#"# A variable specification for `caravan var put <path> @spec.nv.hcl`.
# The path may be given here or on the command line (which wins).
# path = "nomad/jobs/example"

items {
  username = "example"
  password = "change-me"
}
"#;

const SPEC_JSON: &str = r#"{
  "Path": "",
  "Items": {
    "username": "example",
    "password": "change-me"
  }
}
"#;

fn init(args: InitArgs) -> Result<i32> {
    let json = args.out == Some(OutFormat::Json);
    let file = args.file.unwrap_or_else(|| {
        if json {
            "spec.nv.json".into()
        } else {
            "spec.nv.hcl".into()
        }
    });
    if file.exists() {
        bail!(
            "variable specification file {} already exists",
            file.display()
        );
    }
    std::fs::write(&file, if json { SPEC_JSON } else { SPEC_HCL })
        .with_context(|| format!("writing {}", file.display()))?;
    println!(
        "Example variable specification written to {}",
        file.display()
    );
    Ok(0)
}

fn lock(args: LockArgs) -> Result<i32> {
    if refuse_wildcard(&args.api) {
        return Ok(1);
    }
    let Some(client) = client_of(&args.api) else {
        return Ok(1);
    };
    let ttl = model::Duration(i64::try_from(args.ttl.as_nanos()).unwrap_or(i64::MAX));
    let delay = model::Duration(i64::try_from(args.delay.as_nanos()).unwrap_or(i64::MAX));
    let mut var = VariableDecrypted::default();
    var.meta.path = args.path.clone();
    var.meta.lock = Some(VariableLock {
        id: String::new(),
        ttl,
        lock_delay: delay,
    });
    block_on(async {
        // Acquire, retrying a held lock at the TTL's pace.
        let mut attempt = 0u32;
        let held = loop {
            match client
                .var_lock("lock-acquire", &var, &WriteOptions::default())
                .await
            {
                Ok(VarWriteOutcome::Written(v)) => break v,
                Ok(VarWriteOutcome::Conflict(_)) => {
                    attempt += 1;
                    if args.max_retry > 0 && attempt >= args.max_retry {
                        eprintln!(
                            "Could not acquire the lock on {:?}: it is held by another",
                            args.path
                        );
                        return Ok(1);
                    }
                    tokio::time::sleep(args.ttl.min(Duration::from_secs(5))).await;
                }
                Err(e) => return Ok(fail("Error acquiring lock", &e)),
            }
        };
        let lock_id = held
            .meta
            .lock
            .as_ref()
            .map(|l| l.id.clone())
            .unwrap_or_default();
        let mut named = VariableDecrypted::default();
        named.meta.path = args.path.clone();
        named.meta.lock = Some(VariableLock {
            id: lock_id,
            ..VariableLock::default()
        });
        let mut child = if args.command.len() == 1 {
            tokio::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&args.command[0])
                .spawn()
        } else {
            tokio::process::Command::new(&args.command[0])
                .args(&args.command[1..])
                .spawn()
        }
        .with_context(|| format!("starting {:?}", args.command.join(" ")))?;
        let renew_every = (args.ttl / 2).max(Duration::from_secs(1));
        let status = loop {
            tokio::select! {
                s = child.wait() => break s.context("waiting for the command")?,
                () = tokio::time::sleep(renew_every) => {
                    match client.var_lock("lock-renew", &named, &WriteOptions::default()).await {
                        Ok(VarWriteOutcome::Written(_)) => {}
                        Ok(VarWriteOutcome::Conflict(_)) | Err(_) => {
                            eprintln!("Lost the lock on {:?}; stopping the command", args.path);
                            let _ = child.kill().await;
                            return Ok(1);
                        }
                    }
                }
            }
        };
        if let Err(e) = client
            .var_lock("lock-release", &named, &WriteOptions::default())
            .await
        {
            eprintln!("Releasing the lock on {:?} failed: {e}", args.path);
        }
        Ok(status.code().unwrap_or(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_spec_parses_as_put_reads_it() {
        let spec: Spec = hcl::from_str(SPEC_HCL).unwrap();
        assert_eq!(spec.items["username"], "example");
        let spec: Spec = model::json::from_str(SPEC_JSON).unwrap();
        assert_eq!(spec.items["password"], "change-me");
    }

    #[test]
    fn the_table_shows_metadata_then_items() {
        let mut v = VariableDecrypted::default();
        v.meta.namespace = "default".into();
        v.meta.path = "a/b".into();
        v.meta.modify_index = 7;
        v.items.insert("user".into(), "x".into());
        let t = table(&v);
        assert!(t.contains("Check Index = 7"), "{t}");
        assert!(t.contains("Items\nuser = x"), "{t}");
    }
}

//! `caravan job dispatch` and `caravan job periodic force`: run a template job's child now.

use super::connect::{block_on, describe, ApiFlags};
use super::job_status::job_or_exit;
use super::monitor::Monitor;
use super::output::{format_kv, short_id};
use api::WriteOptions;
use base64::Engine as _;
use clap::{Args, Subcommand};
use model::wire::JobDispatchRequest;
use std::io::Read as _;
use std::path::PathBuf;

/// The most input read for a dispatch: one byte past the server's limit, so it can say by how much.
const INPUT_BYTES_READ_MAX: u64 = 16 * 1024 + 1;

#[derive(Subcommand)]
pub enum PeriodicCommand {
    /// Launch a periodic job's child now, whatever its schedule
    Force(ForceArgs),
}

#[derive(Args)]
pub struct ForceArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the evaluation ID and return instead of watching the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A periodic job's ID or ID prefix
    job: String,
}

#[derive(Args)]
pub struct DispatchArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Metadata for the dispatched job: -meta key=value (repeatable)
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// Put this into the dispatched job's ID, after "dispatch-"
    #[arg(long = "id-prefix-template", value_name = "PREFIX")]
    id_prefix_template: Option<String>,
    /// Print the IDs and return instead of watching the evaluation
    #[arg(long)]
    detach: bool,
    /// Full IDs
    #[arg(long)]
    verbose: bool,
    /// A parameterized job's ID or ID prefix
    job: String,
    /// The payload: a file, or - for standard input
    input: Option<PathBuf>,
}

pub fn periodic(cmd: PeriodicCommand) -> i32 {
    match cmd {
        PeriodicCommand::Force(args) => force(args),
    }
}

fn force(args: ForceArgs) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        let resp = match client.periodic_force(&stub.id, &w).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("Error forcing periodic job {:?}: {}", stub.id, describe(&e));
                return 1;
            }
        };
        if args.detach {
            println!("Force periodic successful");
            println!("Evaluation ID: {}", resp.eval_id);
            return 0;
        }
        let client = client.with_namespace(&stub.namespace);
        let code = Monitor::new(&client, args.verbose).run(&resp.eval_id).await;
        code
    })
}

pub fn dispatch(args: DispatchArgs) -> i32 {
    let meta = match parse_meta(&args.meta) {
        Ok(m) => m,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let payload = match args.input.as_deref().map(read_input).transpose() {
        Ok(p) => p.unwrap_or_default(),
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let stub = match job_or_exit(&client, args.job.trim()).await {
            Ok(s) => s,
            Err(code) => return code,
        };
        let req = JobDispatchRequest {
            job_id: stub.id.clone(),
            payload: (!payload.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(&payload)),
            meta,
            id_prefix_template: args.id_prefix_template.clone().unwrap_or_default(),
        };
        let w = WriteOptions::in_namespace(&stub.namespace);
        let resp = match client.dispatch_job(&stub.id, &req, &w).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("Failed to dispatch job: {}", describe(&e));
                return 1;
            }
        };
        let mut lines = vec![("Dispatched Job ID", resp.dispatched_job_id.clone())];
        if !resp.eval_id.is_empty() {
            let id = short_id(&resp.eval_id, args.verbose).to_string();
            lines.push(("Evaluation ID", id));
        }
        println!("{}", format_kv(&lines));
        if args.detach || resp.eval_id.is_empty() {
            return 0;
        }
        println!();
        let client = client.with_namespace(&stub.namespace);
        let code = Monitor::new(&client, args.verbose).run(&resp.eval_id).await;
        code
    })
}

/// `-meta key=value` flags into a map; a flag without `=` is an error naming it.
fn parse_meta(flags: &[String]) -> Result<std::collections::BTreeMap<String, String>, String> {
    flags
        .iter()
        .map(|f| match f.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!(
                "Error parsing -meta {f:?}: expected key=value, e.g. -meta input=file.txt"
            )),
        })
        .collect()
}

/// The payload from a file or standard input (`-`), at most [`INPUT_BYTES_READ_MAX`] bytes.
fn read_input(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin()
            .take(INPUT_BYTES_READ_MAX)
            .read_to_end(&mut buf)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(INPUT_BYTES_READ_MAX).read_to_end(&mut buf))
    };
    read.map_err(|e| format!("Error reading input data {}: {e}", path.display()))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_flags_need_a_key_and_an_equals_sign() {
        let ok = parse_meta(&["a=1".into(), "b=x=y".into(), "c=".into()]).expect("valid");
        assert_eq!(ok["a"], "1");
        assert_eq!(ok["b"], "x=y");
        assert_eq!(ok["c"], "");
        let err = parse_meta(&["novalue".into()]).unwrap_err();
        assert!(
            err.contains("\"novalue\"") && err.contains("key=value"),
            "{err}"
        );
        assert!(parse_meta(&["=v".into()]).is_err());
    }
}

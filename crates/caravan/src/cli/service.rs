//! `caravan service list|info|delete`: Nomad's native service registrations, with Nomad's
//! tables, `-json` and messages.

use crate::cli::connect::{block_on, fail, ApiFlags};
use crate::cli::output::{format_kv, format_list, json_pretty};
use api::{QueryOptions, WriteOptions};
use clap::{Args, Subcommand};
use model::service_registration::ServiceRegistration;

#[derive(Subcommand)]
pub enum ServiceCommand {
    /// List the services registered with the Nomad provider
    ///
    /// With -namespace=* every namespace's services are listed, with a Namespace column.
    List(ListArgs),
    /// Show the instances of one service: job, address, tags, node and allocation
    Info(InfoArgs),
    /// Delete one service registration (it comes back if its allocation still runs it and changes)
    Delete(DeleteArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Output the service registrations in JSON format.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Output the service registrations in JSON format.
    #[arg(long)]
    json: bool,
    /// Display full information (each registration's fields, full IDs).
    #[arg(long)]
    verbose: bool,
    /// Only instances with this tag.
    #[arg(long)]
    tag: Option<String>,
    /// The service's name.
    name: String,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The service's name.
    name: String,
    /// The registration's ID.
    id: String,
}

pub fn run(cmd: ServiceCommand) -> i32 {
    match cmd {
        ServiceCommand::List(a) => list(a),
        ServiceCommand::Info(a) => info(a),
        ServiceCommand::Delete(a) => delete(a),
    }
}

fn list(args: ListArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let all = args.api.namespace.as_deref() == Some("*");
    block_on(async {
        let (mut stubs, _) = match client.list_services(&QueryOptions::default()).await {
            Ok(r) => r,
            Err(e) => return fail("Error listing service registrations", &e),
        };
        if args.json {
            println!("{}", json_pretty(&stubs));
            return 0;
        }
        if stubs.iter().all(|s| s.services.is_empty()) {
            println!("No service registrations found");
            return 0;
        }
        stubs.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        let mut header = vec!["Service Name".to_string()];
        if all {
            header.push("Namespace".into());
        }
        header.push("Tags".into());
        let mut rows = vec![header];
        for ns in &mut stubs {
            ns.services
                .sort_by(|a, b| a.service_name.cmp(&b.service_name));
            for s in &ns.services {
                let mut tags = s.tags.clone();
                tags.sort();
                let mut row = vec![s.service_name.clone()];
                if all {
                    row.push(ns.namespace.clone());
                }
                row.push(format!("[{}]", tags.join(",")));
                rows.push(row);
            }
        }
        println!("{}", format_list(&rows));
        0
    })
}

fn address(r: &ServiceRegistration) -> String {
    if r.port == 0 {
        r.address.clone()
    } else if r.address.contains(':') {
        format!("[{}]:{}", r.address, r.port)
    } else {
        format!("{}:{}", r.address, r.port)
    }
}

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

fn info(args: InfoArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let (mut regs, _) = match client
            .service(
                &args.name,
                args.tag.as_deref(),
                None,
                &QueryOptions::default(),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return fail("Error listing service registrations", &e),
        };
        if args.json {
            println!("{}", json_pretty(&regs));
            return 0;
        }
        if regs.is_empty() {
            println!("No service registrations found");
            return 0;
        }
        regs.sort_by(|a, b| (&a.job_id, &a.id).cmp(&(&b.job_id, &b.id)));
        if args.verbose {
            let blocks: Vec<String> = regs
                .iter()
                .map(|r| {
                    format_kv(&[
                        ("ID", r.id.clone()),
                        ("Service Name", r.service_name.clone()),
                        ("Namespace", r.namespace.clone()),
                        ("Job ID", r.job_id.clone()),
                        ("Alloc ID", r.alloc_id.clone()),
                        ("Node ID", r.node_id.clone()),
                        ("Datacenter", r.datacenter.clone()),
                        ("Address", address(r)),
                        ("Tags", format!("[{}]", r.tags.join(","))),
                    ])
                })
                .collect();
            println!("{}", blocks.join("\n\n"));
            return 0;
        }
        let mut rows = vec![vec![
            "Job ID".to_string(),
            "Address".into(),
            "Tags".into(),
            "Node ID".into(),
            "Alloc ID".into(),
        ]];
        for r in &regs {
            rows.push(vec![
                r.job_id.clone(),
                address(r),
                format!("[{}]", r.tags.join(",")),
                short(&r.node_id),
                short(&r.alloc_id),
            ]);
        }
        println!("{}", format_list(&rows));
        0
    })
}

fn delete(args: DeleteArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client
            .delete_service(&args.name, &args.id, &WriteOptions::default())
            .await
        {
            Ok(_) => {
                println!("Successfully deleted service registration");
                0
            }
            Err(e) => fail("Error deleting service registration", &e),
        }
    })
}

//! `caravan volume register|create|status` and `caravan plugin status`. Spec files are read and
//! checked here exactly as Nomad's CLI would (errors at file:line:col); the agent then answers
//! that CSI volumes are not supported yet (issue #8), which the commands print with exit code 1.

use super::connect::{block_on, fail, ApiFlags};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum VolumeCommand {
    /// Register an existing CSI volume from a volume specification file
    Register(SpecArgs),
    /// Create a CSI volume through its plugin from a volume specification file
    Create(SpecArgs),
    /// List CSI volumes
    Status(StatusArgs),
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// List CSI plugins
    Status(StatusArgs),
}

#[derive(Args)]
pub struct SpecArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The volume specification (HCL)
    file: PathBuf,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: VolumeCommand) -> i32 {
    match cmd {
        VolumeCommand::Register(a) => spec(a, false),
        VolumeCommand::Create(a) => spec(a, true),
        VolumeCommand::Status(a) => list(a, "volumes"),
    }
}

pub fn run_plugin(cmd: PluginCommand) -> i32 {
    match cmd {
        PluginCommand::Status(a) => list(a, "plugins"),
    }
}

fn spec(args: SpecArgs, create: bool) -> i32 {
    let mut volume = match jobspec::volume::parse_volume_file(&args.file) {
        Ok(v) => v,
        Err(diags) => {
            eprintln!("Error parsing the volume specification:\n{diags}");
            return 1;
        }
    };
    if volume.namespace.is_empty() {
        volume.namespace = args
            .api
            .config()
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
    }
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let w = api::WriteOptions::in_namespace(&volume.namespace);
        let result = if create {
            client.create_volume(&volume, &w).await
        } else {
            client.register_volume(&volume, &w).await
        };
        match result {
            Ok(()) => {
                let verb = if create { "Created" } else { "Registered" };
                println!("{verb} volume {:?}", volume.id);
                0
            }
            Err(e) => fail(
                if create {
                    "Error creating volume"
                } else {
                    "Error registering volume"
                },
                &e,
            ),
        }
    })
}

fn list(args: StatusArgs, what: &str) -> i32 {
    let client = match args.api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            return 1;
        }
    };
    block_on(async {
        let result = if what == "volumes" {
            client.list_volumes().await
        } else {
            client.list_plugins().await
        };
        match result {
            Ok(v) => {
                println!("{}", super::output::json_pretty(&v));
                0
            }
            Err(e) => fail(&format!("Error querying {what}"), &e),
        }
    })
}

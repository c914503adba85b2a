//! `caravan system gc` and `caravan system reconcile summaries`, as Nomad's: quiet on success.

use super::connect::{block_on, fail, ApiFlags};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum SystemCommand {
    /// Garbage collect finished jobs, evaluations, allocations, deployments and down nodes now
    Gc(SystemArgs),
    /// Reconcile: summaries
    #[command(subcommand)]
    Reconcile(ReconcileCommand),
}

#[derive(Subcommand)]
pub enum ReconcileCommand {
    /// Rebuild every job summary from its allocations
    Summaries(SystemArgs),
}

#[derive(Args)]
pub struct SystemArgs {
    #[command(flatten)]
    api: ApiFlags,
}

pub fn run(cmd: SystemCommand) -> i32 {
    let (api, gc) = match &cmd {
        SystemCommand::Gc(a) => (&a.api, true),
        SystemCommand::Reconcile(ReconcileCommand::Summaries(a)) => (&a.api, false),
    };
    let client = match api.client() {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("Error initializing client: {msg}");
            return 1;
        }
    };
    block_on(async {
        if gc {
            match client.system_gc().await {
                Ok(()) => 0,
                Err(e) => fail("Error running system garbage-collection", &e),
            }
        } else {
            match client.system_reconcile_summaries().await {
                Ok(()) => 0,
                Err(e) => fail("Error running system summary reconciliation", &e),
            }
        }
    })
}

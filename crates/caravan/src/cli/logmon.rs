//! `caravan logmon <spec json>` (hidden): the per-task log helper raw_exec and exec start. It
//! copies the task's output from two fifos into rotated files and outlives the client like the
//! task does; see `drivers::logmon`.

use clap::Args;

#[derive(Args)]
pub struct LogmonArgs {
    /// The helper's spec (JSON) the driver wrote
    spec: String,
}

/// Runs the helper until the task's output is closed; returns its exit code.
pub fn run(args: LogmonArgs) -> i32 {
    drivers::logmon::run(&args.spec)
}

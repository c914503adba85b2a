//! `caravan executor <spec.json>` (hidden): the exec driver's per-task helper. Single-threaded,
//! no runtime: it isolates itself (cgroup, namespaces, chroot) and then runs the task; see
//! `drivers::exec::executor`.

use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct ExecutorArgs {
    /// The task spec the exec driver wrote (JSON); deleted once read
    spec: PathBuf,
}

/// Runs the helper; its exit code is the task's.
pub fn run(args: ExecutorArgs) -> i32 {
    drivers::exec::executor::run(&args.spec)
}

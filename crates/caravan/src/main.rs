//! `caravan`: the command line. Thin: parses flags, calls the library crates, prints, and exits with
//! codes scripts can trust (0 success, 1 error, as Nomad's CLI).

mod cli;

/// mimalloc instead of glibc's malloc: the server allocates and frees many small objects from
/// many threads (state versions, encoded frames); glibc spent most of its time consolidating and
/// kept freed memory (BENCHMARKS.md, "process allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = cli::run(std::env::args_os().collect());
    std::process::exit(code);
}

//! `caravan`: the command line. Thin: parses flags, calls the library crates, prints, and exits with
//! codes scripts can trust (0 success, 1 error, as Nomad's CLI).

mod cli;

fn main() {
    let code = cli::run(std::env::args_os().collect());
    std::process::exit(code);
}

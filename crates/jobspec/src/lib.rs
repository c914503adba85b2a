//! Nomad's HCL2 job files and agent configuration files, read into Caravan's model.
//!
//! Owns: parsing (hcl-edit, for spans), variables/locals/`-var`/`-var-file`/`NOMAD_VAR_*`, the HCL function
//! library, `dynamic` block expansion, leaving runtime references (`${attr.*}`, `${NOMAD_*}`, …) as text,
//! decoding into `model` types, and errors that name file:line:col and the attribute.
//! Also reads volume specification files, CSI and dynamic host volumes (`volume`), and ACL policy
//! documents (`acl`), and formats HCL files in the canonical layout as `nomad fmt` does (`fmt`).
//! Never does: network I/O. Reads files only where a job file asks (`file()`) and only when allowed.
//! Invariant: a parse either returns a whole job or every error it found, each located in its file.

pub mod acl;
pub mod agent;
mod decode;
pub mod eval;
pub mod fmt;
pub mod functions;
pub mod node_pool;
pub mod parse;
mod reader;
pub mod source;
mod tree;
pub mod vars;
pub mod volume;

pub use parse::{parse_file, parse_str, ParseOptions, ParsedJob};
pub use source::{Diagnostic, Diagnostics, SourceFile};

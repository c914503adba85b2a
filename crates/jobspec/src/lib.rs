//! Nomad's HCL2 job files and agent configuration files, read into Caravan's model.
//!
//! Owns: parsing (hcl-edit, for spans), variables/locals/`-var`/`-var-file`/`NOMAD_VAR_*`, the HCL function
//! library, `dynamic` block expansion, leaving runtime references (`${attr.*}`, `${NOMAD_*}`, …) as text,
//! decoding into `model` types, and errors that name file:line:col and the attribute.
//! Never does: network I/O. Reads files only where a job file asks (`file()`) and only when allowed.
//! Invariant: a parse either returns a whole, canonical-ready model value or every error it found.

pub mod agent;
pub mod functions;

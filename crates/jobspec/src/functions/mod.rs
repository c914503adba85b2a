//! The HCL function library Nomad job files use.

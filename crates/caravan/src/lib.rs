//! Caravan as a library: the agent's wiring ([`agent::Agent`]), so that the `caravan` binary's
//! `agent` command stays thin and tests can run agents in their own process.

pub mod agent;

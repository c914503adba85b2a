//! `caravan agent-info` (the agent's stats, by section, as `nomad agent-info` prints them) and
//! `caravan monitor` (the agent's log lines as it writes them, until interrupted).

use super::connect::{block_on, fail, ApiFlags};
use super::output::json_pretty;
use clap::Args;
use std::io::Write as _;

#[derive(Args)]
pub struct AgentInfoArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Print the agent's whole self-description as JSON
    #[arg(long)]
    json: bool,
}

pub fn agent_info(args: AgentInfoArgs) -> i32 {
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let me = match client.agent_self().await {
            Ok(v) => v,
            Err(e) => return fail("Error querying agent info", &e),
        };
        if args.json {
            println!("{}", json_pretty(&me));
            return 0;
        }
        print!("{}", stats_text(&me["stats"]));
        0
    })
}

/// Nomad's layout: each section's name, then `  key = value` for its keys, all sorted.
fn stats_text(stats: &serde_json::Value) -> String {
    let mut out = String::new();
    let Some(sections) = stats.as_object() else {
        return out;
    };
    let mut names: Vec<&String> = sections.keys().collect();
    names.sort();
    for name in names {
        out.push_str(name);
        out.push('\n');
        if let Some(kv) = sections[name].as_object() {
            let mut keys: Vec<&String> = kv.keys().collect();
            keys.sort();
            for k in keys {
                let v = match &kv[k] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push_str(&format!("  {k} = {v}\n"));
            }
        }
    }
    out
}

#[derive(Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// The least severe lines shown: TRACE, DEBUG, INFO, WARN or ERROR
    #[arg(long = "log-level", default_value = "INFO")]
    log_level: String,
    /// Lines as JSON objects (hclog's @level, @message, @module, @timestamp)
    #[arg(long)]
    json: bool,
    /// Stream this client node's agent's logs instead (through the servers)
    #[arg(long = "node-id", default_value = "")]
    node_id: String,
    /// Stream this server's logs instead (its name, raft ID, address, or "leader")
    #[arg(long = "server-id", default_value = "")]
    server_id: String,
}

pub fn monitor(args: MonitorArgs) -> i32 {
    if !args.node_id.is_empty() && !args.server_id.is_empty() {
        eprintln!("Cannot target node and server simultaneously");
        return 1;
    }
    if telemetry::logs::parse_level(&args.log_level).is_none() {
        eprintln!(
            "Unknown log level: {} (use TRACE, DEBUG, INFO, WARN or ERROR)",
            args.log_level
        );
        return 1;
    }
    let client = match args.api.connect() {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let mut resp = match client
            .agent_monitor(
                &args.log_level,
                args.json,
                Some(&args.node_id),
                Some(&args.server_id),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return fail("Error starting monitor", &e),
        };
        let mut stdout = std::io::stdout();
        loop {
            tokio::select! {
                chunk = resp.chunk() => match chunk {
                    Ok(Some(bytes)) => {
                        if stdout.write_all(&bytes).and_then(|()| stdout.flush()).is_err() {
                            return 0;
                        }
                    }
                    Ok(None) => return 0,
                    Err(e) => {
                        eprintln!("Error receiving logs: {e}");
                        return 1;
                    }
                },
                _ = tokio::signal::ctrl_c() => return 0,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_print_by_sorted_section_and_key() {
        let stats = serde_json::json!({
            "nomad": {"server": "true", "leader": "true"},
            "client": {"node_id": "abc", "known_servers": "127.0.0.1:4647"},
            "raft": {"applied_index": 7}
        });
        assert_eq!(
            stats_text(&stats),
            "client\n  known_servers = 127.0.0.1:4647\n  node_id = abc\nnomad\n  leader = true\n  server = true\nraft\n  applied_index = 7\n"
        );
    }
}

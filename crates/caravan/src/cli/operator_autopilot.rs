//! `caravan operator autopilot get-config|set-config|health`, as Nomad's.

use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_list, row};
use api::autopilot::{AutopilotConfiguration, OperatorHealthReply};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum AutopilotCommand {
    /// Display the current Autopilot configuration
    GetConfig(GetConfigArgs),
    /// Modify the current Autopilot configuration (only the flags given change)
    SetConfig(SetConfigArgs),
    /// Display the current Autopilot health (exit code 1 when the cluster is not healthy)
    Health(HealthArgs),
}

#[derive(Args)]
pub struct GetConfigArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Output the Autopilot configuration in JSON format
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SetConfigArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Remove dead servers from the raft configuration: true or false
    #[arg(long = "cleanup-dead-servers", value_name = "BOOL", value_parser = go_bool)]
    cleanup_dead_servers: Option<bool>,
    /// How many log entries a server may trail the leader by and still be healthy
    #[arg(long = "max-trailing-logs", value_name = "N")]
    max_trailing_logs: Option<u64>,
    /// Never remove dead servers when fewer voters than this would be left
    #[arg(long = "min-quorum", value_name = "N")]
    min_quorum: Option<u64>,
    /// How long a server may go without contact from the leader and still be healthy, e.g. 200ms
    #[arg(long = "last-contact-threshold", value_name = "DURATION", value_parser = go_duration)]
    last_contact_threshold: Option<model::Duration>,
    /// How long a server must be stable (here: how long a voter may stay silent before it counts
    /// as dead), e.g. 10s
    #[arg(long = "server-stabilization-time", value_name = "DURATION", value_parser = go_duration)]
    server_stabilization_time: Option<model::Duration>,
    /// (Nomad Enterprise, refused when true) Use redundancy zones
    #[arg(long = "enable-redundancy-zones", value_name = "BOOL", value_parser = go_bool)]
    enable_redundancy_zones: Option<bool>,
    /// (Nomad Enterprise, refused when true) Disable upgrade migrations
    #[arg(long = "disable-upgrade-migration", value_name = "BOOL", value_parser = go_bool)]
    disable_upgrade_migration: Option<bool>,
    /// (Nomad Enterprise, refused when true) Use custom upgrade versions
    #[arg(long = "enable-custom-upgrades", value_name = "BOOL", value_parser = go_bool)]
    enable_custom_upgrades: Option<bool>,
}

#[derive(Args)]
pub struct HealthArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Output the autopilot health in JSON format
    #[arg(long)]
    json: bool,
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("parse error: {text:?} is not true or false")),
    }
}

/// Go's `time.ParseDuration`.
fn go_duration(text: &str) -> Result<model::Duration, String> {
    model::Duration::parse(text).map_err(|e| e.to_string())
}

pub fn run(cmd: AutopilotCommand) -> i32 {
    match cmd {
        AutopilotCommand::GetConfig(a) => get_config(a),
        AutopilotCommand::SetConfig(a) => set_config(a),
        AutopilotCommand::Health(a) => health(a),
    }
}

fn client(api: &ApiFlags) -> Result<api::Client, i32> {
    api.client().map_err(|msg| {
        eprintln!("{msg}");
        1
    })
}

/// Nomad's `operator autopilot get-config` lines.
fn config_lines(c: &AutopilotConfiguration) -> String {
    [
        format!("CleanupDeadServers = {}", c.cleanup_dead_servers),
        format!("LastContactThreshold = {}", c.last_contact_threshold),
        format!("MaxTrailingLogs = {}", c.max_trailing_logs),
        format!("MinQuorum = {}", c.min_quorum),
        format!("ServerStabilizationTime = {}", c.server_stabilization_time),
        format!("EnableRedundancyZones = {}", c.enable_redundancy_zones),
        format!("DisableUpgradeMigration = {}", c.disable_upgrade_migration),
        format!("EnableCustomUpgrades = {}", c.enable_custom_upgrades),
    ]
    .join("\n")
}

fn get_config(args: GetConfigArgs) -> i32 {
    let client = match client(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client
            .autopilot_get_configuration(&api::QueryOptions::default())
            .await
        {
            Ok((config, _)) if args.json => {
                println!("{}", super::output::json_pretty(&config));
                0
            }
            Ok((config, _)) => {
                println!("{}", config_lines(&config));
                0
            }
            Err(e) => fail("Error querying Autopilot configuration", &e),
        }
    })
}

/// Overlays the flags given on `config` (a flag left out keeps the value, whatever it is).
fn merge(args: &SetConfigArgs, config: &mut AutopilotConfiguration) {
    fn set<T: Copy>(flag: Option<T>, field: &mut T) {
        if let Some(v) = flag {
            *field = v;
        }
    }
    set(args.cleanup_dead_servers, &mut config.cleanup_dead_servers);
    set(args.max_trailing_logs, &mut config.max_trailing_logs);
    set(args.min_quorum, &mut config.min_quorum);
    set(
        args.last_contact_threshold,
        &mut config.last_contact_threshold,
    );
    set(
        args.server_stabilization_time,
        &mut config.server_stabilization_time,
    );
    set(
        args.enable_redundancy_zones,
        &mut config.enable_redundancy_zones,
    );
    set(
        args.disable_upgrade_migration,
        &mut config.disable_upgrade_migration,
    );
    set(
        args.enable_custom_upgrades,
        &mut config.enable_custom_upgrades,
    );
}

/// Nomad's: reads the configuration, overlays the flags given, and writes it back as a
/// check-and-set against the modify index read.
fn set_config(args: SetConfigArgs) -> i32 {
    let client = match client(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        let mut config = match client
            .autopilot_get_configuration(&api::QueryOptions::default())
            .await
        {
            Ok((config, _)) => config,
            Err(e) => return fail("Error querying for Autopilot configuration", &e),
        };
        merge(&args, &mut config);
        match client.autopilot_cas_configuration(&config).await {
            Ok(true) => {
                println!("Configuration updated!");
                0
            }
            Ok(false) => {
                println!("Configuration could not be atomically updated, please try again");
                1
            }
            Err(e) => fail("Error setting Autopilot configuration", &e),
        }
    })
}

fn health(args: HealthArgs) -> i32 {
    let client = match client(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    block_on(async {
        match client.autopilot_server_health().await {
            Ok(reply) => {
                if args.json {
                    println!(
                        "{}",
                        serde_json::to_string(&reply).unwrap_or_else(|e| e.to_string())
                    );
                } else {
                    println!("{}", format_health(&reply));
                }
                i32::from(!reply.healthy)
            }
            Err(e) => fail("Error querying Autopilot configuration", &e),
        }
    })
}

/// Go's `time.Time.String()` of an RFC 3339 UTC timestamp: `2026-01-02 15:04:05 +0000 UTC`.
fn go_time(rfc3339: &str) -> String {
    let Some(nanos) = model::time::parse_unix_nanos(rfc3339) else {
        return rfc3339.to_string();
    };
    let text = model::time::format_unix_nanos(nanos);
    let text = text.trim_end_matches('Z').replacen('T', " ", 1);
    format!("{text} +0000 UTC")
}

/// Nomad's `formatAutopilotState`: the summary, the voters (the first tab-indented, as Nomad's
/// columnize leaves them) and a table of the servers.
fn format_health(reply: &OperatorHealthReply) -> String {
    let voters: Vec<Vec<String>> = reply.voters.iter().map(|v| row![v]).collect();
    let mut servers = vec![row![
        "ID",
        "Name",
        "Address",
        "SerfStatus",
        "Version",
        "Leader",
        "Voter",
        "Healthy",
        "LastContact",
        "LastTerm",
        "LastIndex",
        "StableSince"
    ]];
    for s in &reply.servers {
        servers.push(row![
            s.id,
            s.name,
            s.address,
            s.serf_status,
            s.version,
            s.leader,
            s.voter,
            s.healthy,
            s.last_contact,
            s.last_term,
            s.last_index,
            go_time(&s.stable_since)
        ]);
    }
    format!(
        "Healthy: {}\nFailureTolerance: {}\nLeader: {}\nVoters:  \n\t{}\nServers: \n{}\n",
        reply.healthy,
        reply.failure_tolerance,
        reply.leader,
        format_list(&voters),
        format_list(&servers)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::autopilot::ServerHealth;

    #[test]
    fn flags_parse_as_go_reads_them() {
        assert_eq!(go_bool("T"), Ok(true));
        assert_eq!(go_bool("0"), Ok(false));
        assert!(go_bool("yes").is_err());
        assert_eq!(go_duration("200ms"), Ok(model::Duration::from_millis(200)));
        assert!(go_duration("soon").is_err());
    }

    #[test]
    fn only_the_flags_given_change() {
        let mut config = AutopilotConfiguration::agent_default();
        let args = SetConfigArgs {
            api: ApiFlags::default(),
            cleanup_dead_servers: Some(false),
            max_trailing_logs: None,
            min_quorum: Some(3),
            last_contact_threshold: Some(model::Duration::from_secs(1)),
            server_stabilization_time: None,
            enable_redundancy_zones: Some(false),
            disable_upgrade_migration: None,
            enable_custom_upgrades: None,
        };
        merge(&args, &mut config);
        assert_eq!(
            config,
            AutopilotConfiguration {
                cleanup_dead_servers: false,
                min_quorum: 3,
                last_contact_threshold: model::Duration::from_secs(1),
                ..AutopilotConfiguration::agent_default()
            }
        );
    }

    #[test]
    fn prints_nomads_get_config_and_health() {
        assert_eq!(
            config_lines(&AutopilotConfiguration::agent_default()),
            "CleanupDeadServers = true\nLastContactThreshold = 200ms\nMaxTrailingLogs = 250\n\
             MinQuorum = 0\nServerStabilizationTime = 10s\nEnableRedundancyZones = false\n\
             DisableUpgradeMigration = false\nEnableCustomUpgrades = false"
        );
        let server = |id: &str, leader: bool| ServerHealth {
            id: id.into(),
            name: format!("s{id}.global"),
            address: format!("127.0.0.1:464{id}"),
            serf_status: "alive".into(),
            version: if leader {
                "0.1.0".into()
            } else {
                String::new()
            },
            leader,
            last_contact: if leader {
                model::Duration::ZERO
            } else {
                model::Duration::from_millis(12)
            },
            last_term: 2,
            last_index: 30,
            healthy: true,
            voter: true,
            stable_since: "2026-01-02T03:04:05Z".into(),
        };
        let reply = OperatorHealthReply {
            healthy: true,
            failure_tolerance: 0,
            servers: vec![server("1", true), server("2", false)],
            leader: "1".into(),
            voters: vec!["1".into(), "2".into()],
        };
        assert_eq!(
            format_health(&reply),
            "Healthy: true\nFailureTolerance: 0\nLeader: 1\nVoters:  \n\t1\n2\nServers: \n\
             ID  Name       Address         SerfStatus  Version  Leader  Voter  Healthy  \
             LastContact  LastTerm  LastIndex  StableSince\n\
             1   s1.global  127.0.0.1:4641  alive       0.1.0    true    true   true     \
             0s           2         30         2026-01-02 03:04:05 +0000 UTC\n\
             2   s2.global  127.0.0.1:4642  alive       <none>   false   true   true     \
             12ms         2         30         2026-01-02 03:04:05 +0000 UTC\n"
        );
    }
}

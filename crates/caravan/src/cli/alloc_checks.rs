//! `caravan alloc checks`: the latest results of an allocation's `provider = "nomad"` service
//! checks (Nomad's `command/alloc_checks.go`), and the `Nomad Service Checks:` table of
//! `alloc status` (Nomad's `formatAllocNomadServiceChecks`).

use super::alloc::{connect, find_alloc};
use super::connect::{block_on, fail, ApiFlags};
use super::output::{format_list, format_time, json_pretty, row};
use api::QueryOptions;
use clap::Args;
use model::checks::CheckQueryResult;
use serde::Serialize;
use std::collections::BTreeMap;

/// The checks of one allocation, by check ID, as `/v1/client/allocation/:id/checks` answers.
pub type Checks = BTreeMap<String, CheckQueryResult>;

#[derive(Args)]
pub struct ChecksArgs {
    #[command(flatten)]
    api: ApiFlags,
    /// Full IDs (in the list of allocations an ambiguous prefix matches)
    #[arg(long)]
    verbose: bool,
    /// Print the checks as JSON, by check ID
    #[arg(long)]
    json: bool,
    /// A Go template to format the checks with (not supported: Caravan's CLI has no Go
    /// template engine; use -json)
    #[arg(short = 't', value_name = "TEMPLATE")]
    template: Option<String>,
    /// An allocation ID or ID prefix (at least two characters)
    alloc: String,
}

pub fn checks(args: ChecksArgs) -> i32 {
    let client = match connect(&args.api) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let prefix = args.alloc.trim();
    if prefix.chars().count() == 1 {
        eprintln!("Alloc ID must contain at least two characters.");
        return 1;
    }
    block_on(async {
        let alloc = match find_alloc(&client, prefix, args.verbose).await {
            Ok(a) => a,
            Err(code) => return code,
        };
        let opts = QueryOptions::default().in_namespace(alloc.namespace.clone());
        let checks = match client.allocation_checks(&alloc.id, &opts).await {
            Ok(c) => c,
            Err(e) => return fail("Error querying allocation checks", &e),
        };
        let template = args.template.as_deref().unwrap_or("");
        if args.json || !template.is_empty() {
            return match format_json_or_template(args.json, template, &checks) {
                Ok(out) => {
                    println!("{out}");
                    0
                }
                Err(msg) => {
                    eprintln!("{msg}");
                    1
                }
            };
        }
        print!("{}", checks_text(&checks));
        0
    })
}

/// Nomad's `Format(json, tmpl, checks)`: `-json` is the checks as indented JSON; both flags is an
/// error, and so is a template (Caravan's CLI renders no Go templates).
fn format_json_or_template(json: bool, template: &str, checks: &Checks) -> Result<String, String> {
    match (json, template.is_empty()) {
        (true, false) => Err("Both json and template formatting are not allowed".into()),
        (true, true) => Ok(checks_json(checks)),
        (false, false) => Err(
            "Error formatting the data: Go templates (-t) are not supported by Caravan's CLI; \
             use -json"
                .into(),
        ),
        (false, true) => Err("json or template formatting are not allowed".into()),
    }
}

/// One check as Nomad's CLI encodes it (the Go API's `AllocCheckStatus`: every field, in its
/// order, a zero `StatusCode` and an empty `Task` included).
#[derive(Serialize)]
struct CheckJson<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "Check")]
    check: &'a str,
    #[serde(rename = "Group")]
    group: &'a str,
    #[serde(rename = "Mode")]
    mode: &'a str,
    #[serde(rename = "Output")]
    output: &'a str,
    #[serde(rename = "Service")]
    service: &'a str,
    #[serde(rename = "Task")]
    task: &'a str,
    #[serde(rename = "Status")]
    status: &'a str,
    #[serde(rename = "StatusCode")]
    status_code: i32,
    #[serde(rename = "Timestamp")]
    timestamp: i64,
}

/// `alloc checks -json`: the checks by ID, indented as Nomad's CLI prints JSON.
pub fn checks_json(checks: &Checks) -> String {
    let out: BTreeMap<&str, CheckJson<'_>> = checks
        .iter()
        .map(|(id, c)| {
            let json = CheckJson {
                id: &c.id,
                check: &c.check,
                group: &c.group,
                mode: &c.mode,
                output: &c.output,
                service: &c.service,
                task: &c.task,
                status: &c.status,
                status_code: c.status_code,
                timestamp: c.timestamp,
            };
            (id.as_str(), json)
        })
        .collect();
    json_pretty(&out)
}

/// A group service's check has no task; Nomad shows `(group)`.
fn task_or_group(task: &str) -> &str {
    if task.is_empty() {
        "(group)"
    } else {
        task
    }
}

/// A check's `Timestamp` (Unix seconds) as `alloc status` prints task times (Nomad's
/// `formatTaskTimes`): `N/A` when unset.
fn check_time(unix_secs: i64) -> String {
    if unix_secs <= 0 {
        return "N/A".into();
    }
    format_time(unix_secs.saturating_mul(1_000_000_000))
}

/// The checks in a stable order: by service, then check name, then ID.
fn sorted(checks: &Checks) -> Vec<&CheckQueryResult> {
    let mut all: Vec<&CheckQueryResult> = checks.values().collect();
    all.sort_by(|a, b| (&a.service, &a.check, &a.id).cmp(&(&b.service, &b.check, &b.id)));
    all
}

/// `alloc checks`: a count, a blank line, then each check as `key  =  value` lines (Nomad's
/// `formatList` of `key|=|value`), each followed by a blank line.
pub fn checks_text(checks: &Checks) -> String {
    let mut out = format!("Status of {} Nomad Service Checks\n\n", checks.len());
    for c in sorted(checks) {
        let mut rows = vec![
            row!["ID", "=", c.id],
            row!["Name", "=", c.check],
            row!["Group", "=", c.group],
            row!["Task", "=", task_or_group(&c.task)],
            row!["Service", "=", c.service],
            row!["Status", "=", c.status],
        ];
        if c.status_code > 0 {
            rows.push(row!["StatusCode", "=", c.status_code]);
        }
        rows.push(row!["Mode", "=", c.mode]);
        rows.push(row!["Timestamp", "=", check_time(c.timestamp)]);
        rows.push(row!["Output", "=", c.output]);
        out.push_str(&format_list(&rows));
        out.push_str("\n\n");
    }
    out
}

/// `alloc status`'s `Nomad Service Checks:` table; `None` when there are no checks (Nomad leaves
/// the section out then, and when the checks cannot be read).
pub fn checks_section(checks: &Checks) -> Option<String> {
    if checks.is_empty() {
        return None;
    }
    let mut rows: Vec<Vec<String>> = checks
        .values()
        .map(|c| row![c.service, task_or_group(&c.task), c.check, c.mode, c.status])
        .collect();
    // Nomad sorts the `service|task|name|mode|status` lines as strings.
    rows.sort_by_cached_key(|r| r.join("|"));
    rows.insert(0, row!["Service", "Task", "Name", "Mode", "Status"]);
    Some(format!("Nomad Service Checks:\n{}", format_list(&rows)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, service: &str, name: &str, task: &str) -> CheckQueryResult {
        CheckQueryResult {
            id: id.into(),
            mode: "healthiness".into(),
            status: "success".into(),
            status_code: 0,
            output: "nomad: tcp ok".into(),
            // 2023-11-14T22:13:20Z
            timestamp: 1_700_000_000,
            group: "example.cache[0]".into(),
            task: task.into(),
            service: service.into(),
            check: name.into(),
        }
    }

    fn by_id(list: Vec<CheckQueryResult>) -> Checks {
        list.into_iter().map(|c| (c.id.clone(), c)).collect()
    }

    #[test]
    fn no_checks_is_a_count_and_a_blank_line() {
        assert_eq!(
            checks_text(&Checks::new()),
            "Status of 0 Nomad Service Checks\n\n"
        );
        assert_eq!(checks_section(&Checks::new()), None);
    }

    #[test]
    fn each_check_is_a_key_value_list_like_nomads() {
        let mut http = check("c1", "web", "alive", "server");
        http.status = "failure".into();
        http.status_code = 503;
        http.output = "nomad: http not ok".into();
        let tcp = check("c2", "redis-cache", "alive", "");
        let text = checks_text(&by_id(vec![http, tcp]));
        assert_eq!(
            text,
            "Status of 2 Nomad Service Checks\n\
             \n\
             ID         =  c2\n\
             Name       =  alive\n\
             Group      =  example.cache[0]\n\
             Task       =  (group)\n\
             Service    =  redis-cache\n\
             Status     =  success\n\
             Mode       =  healthiness\n\
             Timestamp  =  2023-11-14T22:13:20Z\n\
             Output     =  nomad: tcp ok\n\
             \n\
             ID          =  c1\n\
             Name        =  alive\n\
             Group       =  example.cache[0]\n\
             Task        =  server\n\
             Service     =  web\n\
             Status      =  failure\n\
             StatusCode  =  503\n\
             Mode        =  healthiness\n\
             Timestamp   =  2023-11-14T22:13:20Z\n\
             Output      =  nomad: http not ok\n\
             \n"
        );
    }

    #[test]
    fn checks_sort_by_service_then_name_then_id_and_empty_values_read_none() {
        let mut pending = check("b", "web", "ready", "");
        pending.output = String::new();
        pending.timestamp = 0;
        let checks = by_id(vec![
            pending,
            check("a", "web", "ready", ""),
            check("z", "db", "zeta", ""),
            check("y", "web", "alive", ""),
        ]);
        let ids: Vec<&str> = sorted(&checks).iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["z", "y", "a", "b"]);
        let text = checks_text(&checks);
        let last = text.rsplit("ID         =  ").next().unwrap();
        assert!(last.starts_with("b\n"), "{text}");
        assert!(last.contains("Timestamp  =  N/A\n"), "{text}");
        assert!(last.ends_with("Output     =  <none>\n\n"), "{text}");
    }

    #[test]
    fn the_status_table_aligns_and_sorts_its_rows() {
        let mut failing = check("c3", "web", "http", "server");
        failing.status = "failure".into();
        failing.mode = "readiness".into();
        let checks = by_id(vec![
            failing,
            check("c1", "web", "alive", ""),
            check("c2", "api", "tcp", ""),
        ]);
        assert_eq!(
            checks_section(&checks).unwrap(),
            "Nomad Service Checks:\n\
             Service  Task     Name   Mode         Status\n\
             api      (group)  tcp    healthiness  success\n\
             web      (group)  alive  healthiness  success\n\
             web      server   http   readiness    failure"
        );
    }

    #[test]
    fn json_is_every_field_of_nomads_api_by_check_id() {
        let checks = by_id(vec![check("c1", "web", "alive", "")]);
        let out = checks_json(&checks);
        assert_eq!(
            out,
            "{\n    \"c1\": {\n        \"ID\": \"c1\",\n        \"Check\": \"alive\",\n        \
             \"Group\": \"example.cache[0]\",\n        \"Mode\": \"healthiness\",\n        \
             \"Output\": \"nomad: tcp ok\",\n        \"Service\": \"web\",\n        \
             \"Task\": \"\",\n        \"Status\": \"success\",\n        \
             \"StatusCode\": 0,\n        \"Timestamp\": 1700000000\n    }\n}"
        );
        assert_eq!(checks_json(&Checks::new()), "{}");
    }

    #[test]
    fn json_and_template_are_exclusive_and_templates_are_refused() {
        let checks = Checks::new();
        assert_eq!(
            format_json_or_template(true, "{{.}}", &checks).unwrap_err(),
            "Both json and template formatting are not allowed"
        );
        assert_eq!(format_json_or_template(true, "", &checks).unwrap(), "{}");
        assert!(format_json_or_template(false, "{{.}}", &checks)
            .unwrap_err()
            .contains("not supported"));
    }
}

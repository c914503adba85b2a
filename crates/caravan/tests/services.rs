//! Native service discovery against a real dev agent: a job's `provider = "nomad"` services are
//! registered while its allocation runs (group services) and its task runs (task services), with
//! the address and port the allocation got, listed through the HTTP API and `caravan service`,
//! and gone when the job stops.

mod common;

use common::*;
use serde_json::Value;

const JOB: &str = r#"
job "shop" {
  group "web" {
    network {
      port "http" {}
    }

    service {
      name     = "shop-web"
      provider = "nomad"
      port     = "http"
      tags     = ["v1", "public"]
    }

    service {
      name = "shop-consul"
      port = "http"
    }

    task "server" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }

      service {
        name     = "shop-task"
        provider = "nomad"
        port     = "http"
      }
    }
  }
}
"#;

fn regs(agent: &Agent, path: &str) -> Vec<Value> {
    agent
        .get(path)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn nomad_services_are_registered_while_they_run_and_listed() {
    let agent = mock_dev_agent("services");
    let dir = temp_dir("services-job");
    let file = dir.join("shop.nomad.hcl");
    std::fs::write(&file, JOB).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &file.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");

    agent.wait_until("both nomad services are registered", || {
        regs(&agent, "/v1/service/shop-web").len() == 1
            && regs(&agent, "/v1/service/shop-task").len() == 1
    });
    let web = &regs(&agent, "/v1/service/shop-web")[0];
    let alloc_id = web["AllocID"].as_str().unwrap().to_string();
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
    assert_eq!(web["Port"], port["Value"], "{web} {port}");
    assert_eq!(web["Address"], port["HostIP"]);
    assert_eq!(web["JobID"], "shop");
    assert_eq!(web["Namespace"], "default");
    assert_eq!(web["Datacenter"], "dc1");
    assert_eq!(
        web["ID"],
        format!("_nomad-task-{alloc_id}-group-web-shop-web-http")
    );
    assert_eq!(web["Tags"], serde_json::json!(["v1", "public"]));
    // The Consul provider's service is not Caravan's to register.
    assert!(regs(&agent, "/v1/service/shop-consul").is_empty());

    let list = agent.get("/v1/services").unwrap();
    let names: Vec<&str> = list[0]["Services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ServiceName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop-task", "shop-web"]);
    assert_eq!(regs(&agent, "/v1/job/shop/services").len(), 2);
    assert_eq!(
        regs(&agent, &format!("/v1/allocation/{alloc_id}/services")).len(),
        2
    );
    assert_eq!(regs(&agent, "/v1/service/shop-web?tag=v1").len(), 1);
    assert!(regs(&agent, "/v1/service/shop-web?tag=v2").is_empty());
    assert_eq!(regs(&agent, "/v1/service/shop-web?choose=1|abc").len(), 1);
    let (status, body) = agent.raw("GET", "/v1/service/shop-web?choose=abc", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("<number>|<key>"), "{body}");

    // The CLI.
    let (code, out, err) = agent.run(&["service", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Service Name"), "{out}");
    assert!(
        out.contains("shop-web") && out.contains("[public,v1]"),
        "{out}"
    );
    let (code, out, err) = agent.run(&["service", "info", "shop-web"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Job ID") && out.contains("shop"), "{out}");
    assert!(out.contains(&alloc_id[..8]), "{out}");
    let (code, out, _) = agent.run(&["service", "info", "-verbose", "shop-web"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("_nomad-task-{alloc_id}")), "{out}");
    let (code, _, err) = agent.run(&["service", "delete", "shop-web", "no-such-id"]);
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");
    let id = web["ID"].as_str().unwrap();
    let (code, out, err) = agent.run(&["service", "delete", "shop-web", id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Successfully deleted"), "{out}");
    assert!(regs(&agent, "/v1/service/shop-web").is_empty());

    // Stopping the job removes what is left.
    let (code, out, err) = agent.run(&["job", "stop", "-detach", "shop"]);
    assert_eq!(code, 0, "{out}{err}");
    agent.wait_until("the job's services are gone", || {
        regs(&agent, "/v1/service/shop-task").is_empty()
    });
    let (code, out, _) = agent.run(&["service", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("No service registrations found"), "{out}");
}

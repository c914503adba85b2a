//! Actions on allocations: `PUT /v1/allocation/:id/stop` (servers), and the client endpoints
//! `/v1/client/allocation/:id/{signal,restart,stats,checks,exec}`, `/v1/client/stats` and followed
//! logs.

use crate::client::{Client, WriteOptions};
use crate::error::{Error, Result};
use crate::nodes::LogOptions;
use model::checks::CheckQueryResult;
use model::wire::AllocStopResponse;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A followed log: chunks of the task's output as the agent sends them.
#[derive(Debug)]
pub struct LogFollow {
    resp: reqwest::Response,
    url: String,
}

impl LogFollow {
    /// The next bytes; `None` once the agent ended the stream (the task is dead and the log
    /// drained). Waits as long as the task writes nothing.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        match self.resp.chunk().await {
            Ok(chunk) => Ok(chunk.map(|c| c.to_vec())),
            Err(e) => Err(Error::Transport {
                url: self.url.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

impl Client {
    /// `PUT /v1/allocation/:id/stop`: the scheduler replaces the allocation.
    pub async fn stop_allocation(&self, alloc_id: &str) -> Result<AllocStopResponse> {
        self.stop_allocation_with(alloc_id, false).await
    }

    /// `PUT /v1/allocation/:id/stop`; with `no_shutdown_delay`, the tasks' `shutdown_delay` is
    /// skipped (`?no_shutdown_delay=true`).
    pub async fn stop_allocation_with(
        &self,
        alloc_id: &str,
        no_shutdown_delay: bool,
    ) -> Result<AllocStopResponse> {
        let params = if no_shutdown_delay {
            vec![("no_shutdown_delay", "true".to_string())]
        } else {
            Vec::new()
        };
        let (resp, _) = self
            .write::<Value, _>(
                Method::PUT,
                &["v1", "allocation", alloc_id, "stop"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(resp)
    }

    /// `POST /v1/client/allocation/:id/signal`; `task` `None`: every running task.
    pub async fn signal_allocation(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<()> {
        let body = json!({"Task": task.unwrap_or(""), "Signal": signal});
        self.write::<Value, Value>(
            Method::POST,
            &["v1", "client", "allocation", alloc_id, "signal"],
            &[],
            Some(&body),
            &WriteOptions::default(),
        )
        .await?;
        Ok(())
    }

    /// `POST /v1/client/allocation/:id/restart`; `task` `None`: every running task, or with
    /// `all_tasks` every task, dead ones included, in lifecycle order.
    pub async fn restart_allocation(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        all_tasks: bool,
    ) -> Result<()> {
        let body = json!({"TaskName": task.unwrap_or(""), "AllTasks": all_tasks});
        self.write::<Value, Value>(
            Method::POST,
            &["v1", "client", "allocation", alloc_id, "restart"],
            &[],
            Some(&body),
            &WriteOptions::default(),
        )
        .await?;
        Ok(())
    }

    /// `GET /v1/client/allocation/:id/stats` (Nomad's `AllocResourceUsage`).
    pub async fn allocation_stats(&self, alloc_id: &str) -> Result<Value> {
        let (v, _) = self
            .query(
                &["v1", "client", "allocation", alloc_id, "stats"],
                &[],
                &crate::QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `GET /v1/client/allocation/:id/checks`: the latest result of each check of the
    /// allocation's `provider = "nomad"` services, by check ID (Nomad's `Allocations().Checks`).
    pub async fn allocation_checks(
        &self,
        alloc_id: &str,
        opts: &crate::QueryOptions,
    ) -> Result<BTreeMap<String, CheckQueryResult>> {
        let (checks, _) = self
            .query(
                &["v1", "client", "allocation", alloc_id, "checks"],
                &[],
                opts,
            )
            .await?;
        Ok(checks)
    }

    /// `GET /v1/client/stats` (Nomad's `HostStats`).
    pub async fn client_stats(&self) -> Result<Value> {
        let (v, _) = self
            .query(
                &["v1", "client", "stats"],
                &[],
                &crate::QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `GET /v1/client/fs/logs/:alloc_id?follow=true&plain=true`: the log from `opts`, then
    /// what the task writes, until it is dead.
    pub async fn alloc_logs_follow(
        &self,
        alloc_id: &str,
        task: &str,
        opts: &LogOptions,
    ) -> Result<LogFollow> {
        let params = [
            ("task", task.to_string()),
            (
                "type",
                if opts.stderr { "stderr" } else { "stdout" }.to_string(),
            ),
            ("offset", opts.offset.to_string()),
            (
                "origin",
                if opts.from_end { "end" } else { "start" }.to_string(),
            ),
            ("plain", "true".to_string()),
            ("follow", "true".to_string()),
        ];
        let segments = ["v1", "client", "fs", "logs", alloc_id];
        let resp = self.get_stream(&segments, &params).await?;
        Ok(LogFollow {
            url: resp.url().to_string(),
            resp,
        })
    }

    /// The WebSocket URL of a job action (`GET /v1/job/:id/action`), and the token to send.
    pub fn action_url(
        &self,
        job_id: &str,
        alloc_id: &str,
        task: &str,
        action: &str,
        tty: bool,
    ) -> (String, Option<String>) {
        let params = [
            ("action", action.to_string()),
            ("allocID", alloc_id.to_string()),
            ("task", task.to_string()),
            ("tty", tty.to_string()),
        ];
        let url = self.ws_url(&["v1", "job", job_id, "action"], &params);
        (url, self.config().token.clone().filter(|t| !t.is_empty()))
    }

    /// The WebSocket URL of `alloc exec` (`GET /v1/client/allocation/:id/exec`), and the token
    /// to send as `X-Nomad-Token`.
    pub fn exec_url(
        &self,
        alloc_id: &str,
        task: &str,
        command: &[String],
        tty: bool,
    ) -> (String, Option<String>) {
        let params = [
            ("task", task.to_string()),
            (
                "command",
                serde_json::to_string(command).unwrap_or_else(|_| "[]".into()),
            ),
            ("tty", tty.to_string()),
        ];
        let url = self.ws_url(&["v1", "client", "allocation", alloc_id, "exec"], &params);
        (url, self.config().token.clone().filter(|t| !t.is_empty()))
    }
}

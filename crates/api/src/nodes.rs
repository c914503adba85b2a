//! `/v1/nodes`, `/v1/node/:id[/allocations]`, `/v1/allocations`, `/v1/allocation/:id`, and the
//! client file endpoints `/v1/client/fs/{logs,cat,ls}/:alloc_id`; the node writes
//! `/v1/node/:id/{drain,eligibility,evaluate}`; a client's dynamic metadata,
//! `/v1/client/metadata`.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use crate::types::AllocFileInfo;
use model::node_meta::{NodeMetaApplyRequest, NodeMetaResponse};
use model::wire::{
    DrainSpec, NodeUpdateDrainRequest, NodeUpdateEligibilityRequest, NodeWriteResponse,
};
use model::{AllocListStub, Allocation, Node, NodeListStub};
use reqwest::Method;
use std::collections::BTreeMap;

/// Which log of a task, and where to start reading it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// `stderr` instead of `stdout`.
    pub stderr: bool,
    /// Bytes to skip: from the start, or with `from_end`, the number of bytes to read from the end.
    pub offset: u64,
    pub from_end: bool,
}

impl Client {
    /// `GET /v1/nodes` (with `q.prefix`: those whose ID starts with it).
    pub async fn list_nodes(&self, q: &QueryOptions) -> Result<(Vec<NodeListStub>, QueryMeta)> {
        self.query(&["v1", "nodes"], &[], q).await
    }

    /// `GET /v1/node/:id`.
    pub async fn get_node(&self, id: &str, q: &QueryOptions) -> Result<(Node, QueryMeta)> {
        self.query(&["v1", "node", id], &[], q).await
    }

    /// `GET /v1/node/:id/allocations`: full allocations, as Nomad answers this one.
    pub async fn node_allocations(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<Allocation>, QueryMeta)> {
        self.query(&["v1", "node", id, "allocations"], &[], q).await
    }

    /// `POST /v1/node/:id/drain`: `Some(spec)` starts (or changes) the node's drain, `None` ends it
    /// (with `mark_eligible`, making the node eligible again).
    pub async fn update_node_drain(
        &self,
        id: &str,
        spec: Option<DrainSpec>,
        mark_eligible: bool,
        meta: BTreeMap<String, String>,
        w: &WriteOptions,
    ) -> Result<NodeWriteResponse> {
        let body = NodeUpdateDrainRequest {
            node_id: id.to_owned(),
            drain_spec: spec,
            mark_eligible,
            meta,
        };
        self.node_write(id, "drain", Some(&body), w).await
    }

    /// `POST /v1/node/:id/eligibility`: `eligible` or `ineligible`.
    pub async fn update_node_eligibility(
        &self,
        id: &str,
        eligible: bool,
        w: &WriteOptions,
    ) -> Result<NodeWriteResponse> {
        let body = NodeUpdateEligibilityRequest {
            node_id: id.to_owned(),
            eligibility: if eligible { "eligible" } else { "ineligible" }.into(),
        };
        self.node_write(id, "eligibility", Some(&body), w).await
    }

    /// `POST /v1/node/:id/evaluate`: evaluations of the node's jobs.
    pub async fn evaluate_node(&self, id: &str, w: &WriteOptions) -> Result<NodeWriteResponse> {
        self.node_write::<()>(id, "evaluate", None, w).await
    }

    async fn node_write<B: serde::Serialize>(
        &self,
        id: &str,
        action: &str,
        body: Option<&B>,
        w: &WriteOptions,
    ) -> Result<NodeWriteResponse> {
        let (mut resp, meta): (NodeWriteResponse, _) = self
            .write(Method::POST, &["v1", "node", id, action], &[], body, w)
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }

    /// `GET /v1/client/metadata[?node_id=]`: a client's metadata, effective, dynamic and static,
    /// read from the client itself (`node_id` empty: the client of the agent asked). Newer than
    /// the node's `Meta` in `/v1/node/:id` until the client has registered it again.
    pub async fn node_meta(&self, node_id: &str, q: &QueryOptions) -> Result<NodeMetaResponse> {
        let params: Vec<(&'static str, String)> = if node_id.is_empty() {
            Vec::new()
        } else {
            vec![("node_id", node_id.to_string())]
        };
        let (meta, _) = self
            .query(&["v1", "client", "metadata"], &params, q)
            .await?;
        Ok(meta)
    }

    /// `POST /v1/client/metadata`: applies dynamic metadata to `req.node_id`'s client (empty: the
    /// agent's own); a `None` value removes a dynamic key or hides a static one. Answers the
    /// client's metadata after the change.
    pub async fn apply_node_meta(
        &self,
        req: &NodeMetaApplyRequest,
        w: &WriteOptions,
    ) -> Result<NodeMetaResponse> {
        let (meta, _) = self
            .write(
                Method::POST,
                &["v1", "client", "metadata"],
                &[],
                Some(req),
                w,
            )
            .await?;
        Ok(meta)
    }

    /// `GET /v1/allocations` (with `q.prefix`: those whose ID starts with it).
    pub async fn list_allocations(
        &self,
        q: &QueryOptions,
    ) -> Result<(Vec<AllocListStub>, QueryMeta)> {
        self.query(&["v1", "allocations"], &[], q).await
    }

    /// `GET /v1/allocation/:id`.
    pub async fn get_allocation(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Allocation, QueryMeta)> {
        self.query(&["v1", "allocation", id], &[], q).await
    }

    /// `GET /v1/client/fs/logs/:alloc_id?plain=true`: a task's log as text (not followed).
    pub async fn alloc_logs(
        &self,
        alloc_id: &str,
        task: &str,
        opts: &LogOptions,
    ) -> Result<String> {
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
        ];
        self.get_text(&["v1", "client", "fs", "logs", alloc_id], &params)
            .await
    }

    /// `GET /v1/client/fs/cat/:alloc_id?path=`: a file of the allocation's directory.
    pub async fn alloc_fs_cat(&self, alloc_id: &str, path: &str) -> Result<String> {
        self.get_text(
            &["v1", "client", "fs", "cat", alloc_id],
            &[("path", path.to_string())],
        )
        .await
    }

    /// `GET /v1/client/fs/ls/:alloc_id?path=`: the entries of a directory of the allocation.
    pub async fn alloc_fs_ls(&self, alloc_id: &str, path: &str) -> Result<Vec<AllocFileInfo>> {
        let (entries, _) = self
            .query(
                &["v1", "client", "fs", "ls", alloc_id],
                &[("path", path.to_string())],
                &QueryOptions::default(),
            )
            .await?;
        Ok(entries)
    }
}

//! Deployments: list, read, their allocations, and the actions (promote, fail, pause/resume,
//! allocation health); `job revert`, which a failed deployment's user reaches for next.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use model::alloc::AllocListStub;
use model::deployment::Deployment;
use model::wire::{
    DeploymentAllocHealthRequest, DeploymentPauseRequest, DeploymentPromoteRequest,
    DeploymentUpdateResponse, JobRegisterResponse, JobRevertRequest,
};
use reqwest::Method;

impl Client {
    /// `GET /v1/deployments` (newest first; `prefix` filters by ID).
    pub async fn list_deployments(&self, q: &QueryOptions) -> Result<(Vec<Deployment>, QueryMeta)> {
        self.query(&["v1", "deployments"], &[], q).await
    }

    /// `GET /v1/deployment/:id`.
    pub async fn get_deployment(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Deployment, QueryMeta)> {
        self.query(&["v1", "deployment", id], &[], q).await
    }

    /// `GET /v1/deployment/allocations/:id`.
    pub async fn deployment_allocations(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<AllocListStub>, QueryMeta)> {
        self.query(&["v1", "deployment", "allocations", id], &[], q)
            .await
    }

    /// `GET /v1/job/:id/deployments`; with `all`, also those of earlier instances of the job.
    pub async fn job_deployments(
        &self,
        job_id: &str,
        all: bool,
        q: &QueryOptions,
    ) -> Result<(Vec<Deployment>, QueryMeta)> {
        let params = if all {
            vec![("all", "true".to_string())]
        } else {
            Vec::new()
        };
        self.query(&["v1", "job", job_id, "deployments"], &params, q)
            .await
    }

    /// `PUT /v1/deployment/promote/:id`: all groups, or the ones named.
    pub async fn promote_deployment(
        &self,
        id: &str,
        groups: &[String],
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let body = DeploymentPromoteRequest {
            deployment_id: id.to_string(),
            all: groups.is_empty(),
            groups: (!groups.is_empty()).then(|| groups.to_vec()),
        };
        self.deployment_write(&["v1", "deployment", "promote", id], &body, w)
            .await
    }

    /// `PUT /v1/deployment/fail/:id`.
    pub async fn fail_deployment(
        &self,
        id: &str,
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let body = serde_json::json!({ "DeploymentID": id });
        self.deployment_write(&["v1", "deployment", "fail", id], &body, w)
            .await
    }

    /// `PUT /v1/deployment/unblock/:id`: a blocked multiregion deployment becomes successful.
    pub async fn unblock_deployment(
        &self,
        id: &str,
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let body = serde_json::json!({ "DeploymentID": id });
        self.deployment_write(&["v1", "deployment", "unblock", id], &body, w)
            .await
    }

    /// `PUT /v1/deployment/pause/:id`: pause (`true`) or resume (`false`).
    pub async fn pause_deployment(
        &self,
        id: &str,
        pause: bool,
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let body = DeploymentPauseRequest {
            deployment_id: id.to_string(),
            pause,
        };
        self.deployment_write(&["v1", "deployment", "pause", id], &body, w)
            .await
    }

    /// `PUT /v1/deployment/allocation-health/:id`.
    pub async fn set_deployment_alloc_health(
        &self,
        id: &str,
        healthy: &[String],
        unhealthy: &[String],
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let body = DeploymentAllocHealthRequest {
            deployment_id: id.to_string(),
            healthy_allocation_ids: Some(healthy.to_vec()),
            unhealthy_allocation_ids: Some(unhealthy.to_vec()),
        };
        self.deployment_write(&["v1", "deployment", "allocation-health", id], &body, w)
            .await
    }

    async fn deployment_write<B: serde::Serialize>(
        &self,
        segments: &[&str],
        body: &B,
        w: &WriteOptions,
    ) -> Result<DeploymentUpdateResponse> {
        let (mut resp, meta): (DeploymentUpdateResponse, _) = self
            .write(Method::PUT, segments, &[], Some(body), w)
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }

    /// `PUT /v1/job/:id/revert`: registers `version`'s spec again as the newest version; with
    /// `enforce_prior_version`, only if the job is at that version now.
    pub async fn revert_job(
        &self,
        job_id: &str,
        version: u64,
        enforce_prior_version: Option<u64>,
        w: &WriteOptions,
    ) -> Result<JobRegisterResponse> {
        let body = JobRevertRequest {
            job_id: job_id.to_string(),
            job_version: version,
            enforce_prior_version,
        };
        let (mut resp, meta): (JobRegisterResponse, _) = self
            .write(
                Method::PUT,
                &["v1", "job", job_id, "revert"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }
}

//! `/v1/job/:id/scale` and `/v1/scaling/policies`, `/v1/scaling/policy/:id`.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use model::scaling::{JobScaleStatus, ScalingPolicy, ScalingPolicyListStub, ScalingRequest};
use model::wire::JobRegisterResponse;
use reqwest::Method;

impl Client {
    /// `GET /v1/job/:id/scale`: each group's desired and actual counts and its scaling events.
    pub async fn job_scale_status(
        &self,
        job_id: &str,
        q: &QueryOptions,
    ) -> Result<(JobScaleStatus, QueryMeta)> {
        self.query(&["v1", "job", job_id, "scale"], &[], q).await
    }

    /// `POST /v1/job/:id/scale`: sets group `group`'s count (with `count`), or only records an
    /// event (without), as `nomad job scale` and the Nomad Autoscaler do.
    pub async fn scale_job(
        &self,
        job_id: &str,
        req: &ScalingRequest,
        w: &WriteOptions,
    ) -> Result<JobRegisterResponse> {
        let (mut resp, meta): (JobRegisterResponse, _) = self
            .write(
                Method::POST,
                &["v1", "job", job_id, "scale"],
                &[],
                Some(req),
                w,
            )
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }

    /// `GET /v1/scaling/policies`, optionally of one job (`job`) or type (`policy_type`).
    pub async fn scaling_policies(
        &self,
        job: Option<&str>,
        policy_type: Option<&str>,
        q: &QueryOptions,
    ) -> Result<(Vec<ScalingPolicyListStub>, QueryMeta)> {
        let mut params = Vec::new();
        if let Some(job) = job {
            params.push(("job", job.to_string()));
        }
        if let Some(t) = policy_type {
            params.push(("type", t.to_string()));
        }
        self.query(&["v1", "scaling", "policies"], &params, q).await
    }

    /// `GET /v1/scaling/policy/:id`.
    pub async fn scaling_policy(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(ScalingPolicy, QueryMeta)> {
        self.query(&["v1", "scaling", "policy", id], &[], q).await
    }
}

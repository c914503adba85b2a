//! `/v1/jobs`, `/v1/job/:id/…`, `/v1/validate/job`.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use crate::types::{
    EvalOptions, JobDeregisterResponse, JobEvaluateRequest, JobListStub, JobPlanRequest,
    JobPlanResponse, JobRegisterRequest, JobSubmission, JobTagResponse, JobValidateRequest,
    JobValidateResponse, JobVersionsResponse, JobsParseRequest, RegisterOptions, RegisterResponse,
};
use model::{AllocListStub, Deployment, Evaluation, Job, JobSummary};
use reqwest::Method;

impl Client {
    /// `POST /v1/jobs`: registers (or updates) a job and, unless it is periodic or parameterized,
    /// creates an evaluation.
    pub async fn register_job(
        &self,
        job: &Job,
        opts: &RegisterOptions,
        w: &WriteOptions,
    ) -> Result<RegisterResponse> {
        let body = JobRegisterRequest {
            job,
            submission: opts.submission.as_ref(),
            enforce_index: opts.enforce_index,
            job_modify_index: opts.job_modify_index,
            policy_override: opts.policy_override,
            preserve_counts: opts.preserve_counts,
        };
        let (mut resp, meta): (RegisterResponse, _) = self
            .write(Method::POST, &["v1", "jobs"], &[], Some(&body), w)
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }

    /// `POST /v1/job/:id/plan`: what registering `job` would do (a dry run of the scheduler that
    /// changes nothing); with `diff`, the change from the current job.
    pub async fn plan_job(
        &self,
        job: &Job,
        diff: bool,
        w: &WriteOptions,
    ) -> Result<JobPlanResponse> {
        let body = JobPlanRequest {
            job,
            diff,
            policy_override: false,
        };
        let (mut resp, meta): (JobPlanResponse, _) = self
            .write(
                Method::POST,
                &["v1", "job", &job.id, "plan"],
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

    /// `GET /v1/jobs`: every job (of the namespace), or those whose ID starts with `q.prefix`.
    pub async fn list_jobs(&self, q: &QueryOptions) -> Result<(Vec<JobListStub>, QueryMeta)> {
        self.query(&["v1", "jobs"], &[], q).await
    }

    /// `GET /v1/job/:id`.
    pub async fn get_job(&self, id: &str, q: &QueryOptions) -> Result<(Job, QueryMeta)> {
        self.query(&["v1", "job", id], &[], q).await
    }

    /// `GET /v1/job/:id/versions`, newest first; with `diffs`, what changed between them.
    pub async fn job_versions(
        &self,
        id: &str,
        diffs: bool,
        q: &QueryOptions,
    ) -> Result<(JobVersionsResponse, QueryMeta)> {
        let params = if diffs {
            vec![("diffs", "true".to_string())]
        } else {
            Vec::new()
        };
        let (mut resp, meta): (JobVersionsResponse, QueryMeta) = self
            .query(&["v1", "job", id, "versions"], &params, q)
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok((resp, meta))
    }

    /// `GET /v1/job/:id/submission?version=N`: the source that version was registered from.
    pub async fn job_submission(
        &self,
        id: &str,
        version: u64,
        q: &QueryOptions,
    ) -> Result<(JobSubmission, QueryMeta)> {
        self.query(
            &["v1", "job", id, "submission"],
            &[("version", version.to_string())],
            q,
        )
        .await
    }

    /// `PUT /v1/job/:id/versions/:name/tag`: names `version` of the job (`None`: the current one).
    pub async fn tag_job_version(
        &self,
        id: &str,
        name: &str,
        version: Option<u64>,
        description: &str,
        w: &WriteOptions,
    ) -> Result<JobTagResponse> {
        let body = serde_json::json!({
            "Version": version.unwrap_or(0),
            "Latest": version.is_none(),
            "Description": description,
        });
        let (resp, _): (JobTagResponse, _) = self
            .write(
                Method::PUT,
                &["v1", "job", id, "versions", name, "tag"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(resp)
    }

    /// `DELETE /v1/job/:id/versions/:name/tag`: removes the name from the version it is on.
    pub async fn untag_job_version(
        &self,
        id: &str,
        name: &str,
        w: &WriteOptions,
    ) -> Result<JobTagResponse> {
        let (resp, _): (JobTagResponse, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "job", id, "versions", name, "tag"],
                &[],
                None,
                w,
            )
            .await?;
        Ok(resp)
    }

    /// `DELETE /v1/job/:id`: stops the job (and with `purge`, forgets it).
    pub async fn deregister_job(
        &self,
        id: &str,
        purge: bool,
        w: &WriteOptions,
    ) -> Result<JobDeregisterResponse> {
        self.deregister_job_opts(id, purge, false, w).await
    }

    /// `DELETE /v1/job/:id` with Nomad's `DeregisterOptions`: `global` stops a multiregion job
    /// in every region it lists.
    pub async fn deregister_job_opts(
        &self,
        id: &str,
        purge: bool,
        global: bool,
        w: &WriteOptions,
    ) -> Result<JobDeregisterResponse> {
        let mut params = Vec::new();
        if purge {
            params.push(("purge", "true".to_string()));
        }
        if global {
            params.push(("global", "true".to_string()));
        }
        let (mut resp, meta): (JobDeregisterResponse, _) = self
            .write::<(), _>(Method::DELETE, &["v1", "job", id], &params, None, w)
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }

    /// `GET /v1/job/:id/summary`.
    pub async fn job_summary(&self, id: &str, q: &QueryOptions) -> Result<(JobSummary, QueryMeta)> {
        self.query(&["v1", "job", id, "summary"], &[], q).await
    }

    /// `GET /v1/job/:id/evaluations`.
    pub async fn job_evaluations(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<Evaluation>, QueryMeta)> {
        self.query(&["v1", "job", id, "evaluations"], &[], q).await
    }

    /// `GET /v1/job/:id/allocations`; with `all`, also those of earlier instances of the job.
    pub async fn job_allocations(
        &self,
        id: &str,
        all: bool,
        q: &QueryOptions,
    ) -> Result<(Vec<AllocListStub>, QueryMeta)> {
        let params = if all {
            vec![("all", "true".to_string())]
        } else {
            Vec::new()
        };
        self.query(&["v1", "job", id, "allocations"], &params, q)
            .await
    }

    /// `GET /v1/job/:id/deployment`: the latest deployment, if the job has had one.
    pub async fn job_latest_deployment(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Option<Deployment>, QueryMeta)> {
        self.query(&["v1", "job", id, "deployment"], &[], q).await
    }

    /// `POST /v1/job/:id/evaluate`: a new evaluation of the job as it is.
    pub async fn evaluate_job(
        &self,
        id: &str,
        force_reschedule: bool,
        w: &WriteOptions,
    ) -> Result<RegisterResponse> {
        let body = JobEvaluateRequest {
            job_id: id,
            eval_options: EvalOptions { force_reschedule },
        };
        let (mut resp, meta): (RegisterResponse, _) = self
            .write(
                Method::POST,
                &["v1", "job", id, "evaluate"],
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

    /// `POST /v1/jobs/parse`: the agent parses HCL2 into a job (with `canonicalize`, defaults filled).
    /// `variables` is var-file text.
    pub async fn parse_job(
        &self,
        hcl: &str,
        canonicalize: bool,
        variables: Option<&str>,
        w: &WriteOptions,
    ) -> Result<Job> {
        let body = JobsParseRequest {
            job_hcl: hcl,
            canonicalize,
            variables,
        };
        let (job, _) = self
            .write(Method::POST, &["v1", "jobs", "parse"], &[], Some(&body), w)
            .await?;
        Ok(job)
    }

    /// `POST /v1/validate/job`: the server's verdict on a job (a 200 even when the job is invalid).
    pub async fn validate_job(&self, job: &Job, w: &WriteOptions) -> Result<JobValidateResponse> {
        let body = JobValidateRequest { job };
        let (resp, _) = self
            .write(
                Method::POST,
                &["v1", "validate", "job"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(resp)
    }
}

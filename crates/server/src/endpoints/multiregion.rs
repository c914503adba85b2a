//! Registering and stopping a multiregion job (Nomad Enterprise's `multiregion`): the server that
//! takes the request registers one copy per listed region, in the rollout order, all at one
//! version, so each region's leader can find its peers' deployments of it
//! (`leader::multiregion`). Copies travel to other regions over their HTTP API (`Agent.Http`)
//! with the caller's token: each region's ACLs judge its own copy.

use super::job::{prepare_job, JobRegisterRequest};
use crate::error::ServerError;
use crate::http_forward::REGION_FORWARDED_HEADER;
use crate::server::Server;
use model::wire::{HttpForwardRequest, JobDeregisterResponse, JobRegisterResponse};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Serialize;

/// A value inside a path or query: everything but unreserved characters (and `/` in job IDs,
/// which Nomad's router takes as part of the ID) is escaped.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
const QUERY: &AsciiSet = &PATH.add(b'/');

/// The longest one region's server may take to answer a step of the fan-out.
const FAN_OUT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn esc_path(s: &str) -> String {
    utf8_percent_encode(s, PATH).to_string()
}

fn esc(s: &str) -> String {
    utf8_percent_encode(s, QUERY).to_string()
}

/// What a region's copy is registered with (`PUT /v1/jobs` in that region).
#[derive(Serialize)]
struct CopyBody<'a> {
    #[serde(rename = "Job")]
    job: &'a model::Job,
    #[serde(rename = "MultiregionVersion")]
    version: u64,
    #[serde(rename = "PreserveCounts")]
    preserve_counts: bool,
    #[serde(rename = "EvalPriority")]
    eval_priority: i32,
    #[serde(rename = "Submission", skip_serializing_if = "Option::is_none")]
    submission: Option<&'a model::job::JobSubmission>,
}

impl Server {
    /// Registers a multiregion job in every region it lists, in order, each copy at the same
    /// version (one past the newest any region holds). `headers` carry the caller's token. The
    /// answer is this region's registration, or the first region's when this one is not listed.
    /// A region that refuses stops the fan-out; the error names it and the regions already done.
    pub async fn job_register_multiregion(
        &self,
        req: JobRegisterRequest,
        headers: Vec<(String, String)>,
    ) -> Result<JobRegisterResponse, ServerError> {
        let mut check = req.job.clone();
        prepare_job(&mut check)?;
        let m = check.multiregion.clone().unwrap_or_default();
        let known = self.regions();
        for r in &m.regions {
            if !known.contains(&r.name) {
                return Err(ServerError::bad_request(format!(
                    "multiregion: region {:?} is not a region this cluster knows (known: {}): \
                     federate its servers first (`caravan server join <serf address>`)",
                    r.name,
                    known.join(", ")
                )));
            }
        }
        let me = self.config().region.clone();
        let ns = check
            .namespace
            .clone()
            .unwrap_or_else(|| model::job::DEFAULT_NAMESPACE.into());
        let mut newest: Option<u64> = None;
        for r in &m.regions {
            let have = if r.name == me {
                self.read_barrier().await?;
                self.state()
                    .snapshot()
                    .job(&ns, &check.id)
                    .and_then(|j| j.version)
            } else {
                self.remote_job_version(&r.name, &ns, &check.id, &headers)
                    .await?
            };
            if let Some(v) = have {
                newest = Some(newest.map_or(v, |n| n.max(v)));
            }
        }
        let version = match newest {
            None => 0,
            Some(v) => v.checked_add(1).ok_or_else(|| {
                ServerError::bad_request("multiregion: the job's version cannot grow further")
            })?,
        };
        // Checked before anything is written anywhere.
        if req.enforce_index {
            let current = self
                .state()
                .snapshot()
                .job(&ns, &check.id)
                .and_then(|j| j.job_modify_index)
                .unwrap_or(0);
            if current != req.job_modify_index {
                return Err(ServerError::bad_request(format!(
                    "Enforcing job modify index {}: job exists with conflicting job modify index: {current}",
                    req.job_modify_index
                )));
            }
        }
        let mut done: Vec<String> = Vec::new();
        let mut answer: Option<JobRegisterResponse> = None;
        let mut warnings: Vec<String> = Vec::new();
        for r in &m.regions {
            let Some(copy) = req.job.for_region(&r.name) else {
                continue;
            };
            let result = if r.name == me {
                let local = JobRegisterRequest {
                    job: copy,
                    multiregion_version: Some(version),
                    enforce_index: false,
                    ..req.clone()
                };
                self.job_register(local).await
            } else {
                self.remote_register(&r.name, &ns, &copy, version, &req, &headers)
                    .await
            };
            let resp = result.map_err(|e| {
                let before = if done.is_empty() {
                    String::new()
                } else {
                    format!(" (already registered in {})", done.join(", "))
                };
                ServerError::new(
                    e.code,
                    format!(
                        "multiregion: registering in region {:?} failed: {}{before}",
                        r.name, e.message
                    ),
                )
            })?;
            if !resp.warnings.is_empty() && !warnings.contains(&resp.warnings) {
                warnings.push(resp.warnings.clone());
            }
            if r.name == me || answer.is_none() {
                answer = Some(resp);
            }
            done.push(r.name.clone());
        }
        let mut answer = answer.unwrap_or_default();
        if m.position(&me).is_none() {
            // Another region's evaluation and index mean nothing here (a caller would look for
            // them in this region): the answer says where the job went instead.
            answer.eval_id.clear();
            answer.eval_create_index = 0;
            answer.job_modify_index = 0;
            answer.index = 0;
            warnings.push(format!(
                "* registered in {}, not in this region ({me:?}): follow it there with -region",
                done.join(", ")
            ));
        }
        answer.warnings = warnings.join("\n");
        Ok(answer)
    }

    /// Stops (or purges) a multiregion job in every region it lists (`job stop -global`); the
    /// answer is this region's. Regions that do not have the job are skipped.
    pub async fn job_deregister_multiregion(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
        headers: Vec<(String, String)>,
    ) -> Result<JobDeregisterResponse, ServerError> {
        self.read_barrier().await?;
        let job = self
            .state()
            .snapshot()
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        let me = self.config().region.clone();
        let regions: Vec<String> = job
            .multiregion
            .as_ref()
            .map(|m| m.regions.iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default();
        for region in regions.iter().filter(|r| **r != me) {
            let uri = format!(
                "/v1/job/{}?namespace={}&purge={purge}&region={}",
                esc_path(job_id),
                esc(namespace),
                esc(region)
            );
            let resp = self
                .call_region::<crate::methods::AgentHttp>(
                    region,
                    &remote("DELETE", &uri, &headers, &[]),
                    FAN_OUT_TIMEOUT,
                )
                .await?;
            if resp.status != 200 && resp.status != 404 {
                return Err(ServerError::new(
                    code_of(resp.status),
                    format!(
                        "multiregion: stopping the job in region {region:?} failed: {}",
                        body_text(&resp)
                    ),
                ));
            }
        }
        self.job_deregister(namespace, job_id, purge).await
    }

    async fn remote_job_version(
        &self,
        region: &str,
        ns: &str,
        job_id: &str,
        headers: &[(String, String)],
    ) -> Result<Option<u64>, ServerError> {
        let uri = format!(
            "/v1/job/{}?namespace={}&region={}",
            esc_path(job_id),
            esc(ns),
            esc(region)
        );
        let resp = self
            .call_region::<crate::methods::AgentHttp>(
                region,
                &remote("GET", &uri, headers, &[]),
                FAN_OUT_TIMEOUT,
            )
            .await?;
        match resp.status {
            404 => Ok(None),
            200 => {
                let body = resp.body_bytes();
                let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                    ServerError::internal(format!(
                        "multiregion: region {region:?} answered a job that is not JSON: {e}"
                    ))
                })?;
                Ok(v.get("Version").and_then(serde_json::Value::as_u64))
            }
            s => Err(ServerError::new(
                code_of(s),
                format!(
                    "multiregion: reading the job in region {region:?} failed: {}",
                    body_text(&resp)
                ),
            )),
        }
    }

    async fn remote_register(
        &self,
        region: &str,
        ns: &str,
        copy: &model::Job,
        version: u64,
        req: &JobRegisterRequest,
        headers: &[(String, String)],
    ) -> Result<JobRegisterResponse, ServerError> {
        let body = serde_json::to_vec(&CopyBody {
            job: copy,
            version,
            preserve_counts: req.preserve_counts,
            eval_priority: req.eval_priority,
            submission: req.submission.as_ref(),
        })
        .map_err(|e| ServerError::internal(format!("encoding the job: {e}")))?;
        let uri = format!("/v1/jobs?namespace={}&region={}", esc(ns), esc(region));
        let resp = self
            .call_region::<crate::methods::AgentHttp>(
                region,
                &remote("PUT", &uri, headers, &body),
                FAN_OUT_TIMEOUT,
            )
            .await?;
        if resp.status != 200 {
            return Err(ServerError::new(code_of(resp.status), body_text(&resp)));
        }
        let body = resp.body_bytes();
        let text = String::from_utf8_lossy(&body);
        model::json::from_str(&text).map_err(|e| {
            ServerError::internal(format!(
                "region {region:?} answered the registration with something else: {e}"
            ))
        })
    }
}

fn remote(
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> HttpForwardRequest {
    let mut headers = headers.to_vec();
    headers.push((REGION_FORWARDED_HEADER.into(), "1".into()));
    if !body.is_empty() {
        headers.push(("content-type".into(), "application/json".into()));
    }
    HttpForwardRequest::new(method, uri, headers, body)
}

fn body_text(resp: &model::wire::HttpForwardResponse) -> String {
    let body = resp.body_bytes();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    format!("{} {text}", resp.status)
}

fn code_of(status: u16) -> rpc::ErrorCode {
    match status {
        400 => rpc::ErrorCode::BadRequest,
        403 => rpc::ErrorCode::PermissionDenied,
        404 => rpc::ErrorCode::NotFound,
        409 => rpc::ErrorCode::Conflict,
        _ => rpc::ErrorCode::Internal,
    }
}

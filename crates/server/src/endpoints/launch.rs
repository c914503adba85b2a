//! Children of template jobs: a periodic job's launch (by the leader's launcher, or now by
//! `job periodic force`) and a parameterized job's dispatch. Each child is registered through
//! `job_register_local`, so it gets its evaluation in the same raft entry as the job.

use super::job::JobRegisterRequest;
use super::{new_id, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use base64::Engine as _;
use model::wire::{JobDispatchRequest, JobDispatchResponse, PeriodicForceResponse};
use model::Job;
use std::collections::BTreeSet;

/// The largest dispatch payload, decoded (Nomad's `DispatchPayloadSizeLimit`).
pub const DISPATCH_PAYLOAD_BYTES_MAX: usize = 16 * 1024;

/// What separates a periodic child's ID from its parent's: `<parent>/periodic-<unix seconds>`.
pub const PERIODIC_LAUNCH_SUFFIX: &str = "/periodic-";
/// …and a dispatched child's: `<parent>/dispatch-<unix seconds>-<8 hex>`.
pub const DISPATCH_LAUNCH_SUFFIX: &str = "/dispatch-";

/// The child a periodic job launches at `launch_s` (Nomad's `deriveJob`): the parent's spec, its own
/// ID and name, no schedule, status and versions as a new job's.
pub(crate) fn periodic_child(parent: &Job, launch_s: i64) -> Job {
    let mut child = fresh_copy(parent);
    child.id = format!("{}{PERIODIC_LAUNCH_SUFFIX}{launch_s}", parent.id);
    child.name.clone_from(&child.id);
    child.periodic = None;
    child
}

/// The parent's spec without what the state store keeps for the parent itself.
fn fresh_copy(parent: &Job) -> Job {
    Job {
        parent_id: parent.id.clone(),
        status: None,
        status_description: None,
        stable: None,
        version: None,
        submit_time: None,
        create_index: None,
        modify_index: None,
        job_modify_index: None,
        ..parent.clone()
    }
}

/// True while a periodic job launches on its schedule (Nomad's `IsPeriodicActive`).
pub(crate) fn periodic_active(job: &Job) -> bool {
    job.periodic
        .as_ref()
        .is_some_and(|p| p.enabled != Some(false))
        && !job.stop
        && job.parameterized.is_none()
        && job.parent_id.is_empty()
}

/// Checks a dispatch against its parameterized job (Nomad's `validateDispatchRequest`) and returns the
/// child, with `id_suffix` (`<unix seconds>-<8 hex>`) in its ID.
pub(crate) fn dispatch_child(
    parent: &Job,
    req: &JobDispatchRequest,
    id_suffix: &str,
) -> Result<Job, ServerError> {
    let Some(params) = parent.parameterized.as_ref().filter(|_| !parent.dispatched) else {
        return Err(ServerError::bad_request(format!(
            "Specified job {:?} is not a parameterized job; only a job with a parameterized block can be dispatched",
            parent.id
        )));
    };
    if parent.stop {
        return Err(ServerError::bad_request(format!(
            "Specified job {:?} is stopped; run it again before dispatching",
            parent.id
        )));
    }
    let payload = decode_payload(req.payload.as_deref())?;
    check_payload(
        params.payload.as_deref().unwrap_or("optional"),
        payload.len(),
    )?;
    check_meta(params, req)?;
    let mut child = fresh_copy(parent);
    child.id = if req.id_prefix_template.is_empty() {
        format!("{}{DISPATCH_LAUNCH_SUFFIX}{id_suffix}", parent.id)
    } else {
        format!(
            "{}{DISPATCH_LAUNCH_SUFFIX}{}-{id_suffix}",
            parent.id, req.id_prefix_template
        )
    };
    child.name.clone_from(&child.id);
    child.dispatched = true;
    child.payload =
        (!payload.is_empty()).then(|| base64::engine::general_purpose::STANDARD.encode(&payload));
    child
        .meta
        .extend(req.meta.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(child)
}

fn decode_payload(payload: Option<&str>) -> Result<Vec<u8>, ServerError> {
    let Some(text) = payload.filter(|p| !p.is_empty()) else {
        return Ok(Vec::new());
    };
    // Refuse a huge body before decoding it: base64 takes 4 characters per 3 bytes.
    if text.len() > DISPATCH_PAYLOAD_BYTES_MAX.div_ceil(3) * 4 + 4 {
        return Err(payload_too_large(text.len() / 4 * 3));
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| ServerError::bad_request(format!("Payload is not valid base64: {e}")))
}

fn payload_too_large(bytes: usize) -> ServerError {
    ServerError::bad_request(format!(
        "Payload exceeds maximum size; {bytes} > {DISPATCH_PAYLOAD_BYTES_MAX} bytes"
    ))
}

fn check_payload(rule: &str, bytes: usize) -> Result<(), ServerError> {
    match rule {
        "forbidden" if bytes > 0 => Err(ServerError::bad_request(
            "Payload is not allowed: the job's parameterized.payload is \"forbidden\"; dispatch without an input",
        )),
        "required" if bytes == 0 => Err(ServerError::bad_request(
            "Payload is not provided: the job's parameterized.payload is \"required\"; give an input file, or - for standard input",
        )),
        _ if bytes > DISPATCH_PAYLOAD_BYTES_MAX => Err(payload_too_large(bytes)),
        _ => Ok(()),
    }
}

fn check_meta(
    params: &model::ParameterizedJobConfig,
    req: &JobDispatchRequest,
) -> Result<(), ServerError> {
    let allowed: BTreeSet<&str> = params
        .meta_required
        .iter()
        .chain(&params.meta_optional)
        .map(String::as_str)
        .collect();
    let unpermitted: Vec<&str> = req
        .meta
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if !unpermitted.is_empty() {
        let allowed: Vec<&str> = allowed.into_iter().collect();
        return Err(ServerError::bad_request(format!(
            "Dispatch provided unpermitted meta keys: {}; the job's parameterized block allows only: {}",
            unpermitted.join(", "),
            if allowed.is_empty() { "(none)".to_string() } else { allowed.join(", ") }
        )));
    }
    let missing: Vec<&str> = params
        .meta_required
        .iter()
        .map(String::as_str)
        .filter(|k| !req.meta.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(ServerError::bad_request(format!(
            "Dispatch did not provide required meta keys: {}; set each with -meta key=value",
            missing.join(", ")
        )));
    }
    Ok(())
}

impl Server {
    /// `POST /v1/job/:id/periodic/force`: launches a periodic job's child now.
    pub async fn periodic_force(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<PeriodicForceResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::PeriodicForce>(
                    &leader,
                    &crate::methods::JobRef {
                        namespace: namespace.to_string(),
                        job_id: job_id.to_string(),
                    },
                )
                .await
            }
            None => self.periodic_force_local(namespace, job_id).await,
        }
    }

    pub(crate) async fn periodic_force_local(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<PeriodicForceResponse, ServerError> {
        let job = self
            .state()
            .snapshot()
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        if job.periodic.is_none() {
            return Err(ServerError::bad_request("job is not periodic"));
        }
        if !periodic_active(&job) {
            return Err(ServerError::bad_request(
                "periodic job is stopped or disabled (periodic.enabled = false); run it again before forcing a launch",
            ));
        }
        let launch_s = now_nanos() / 1_000_000_000;
        let resp = self.periodic_launch_local(&job, launch_s).await?;
        Ok(PeriodicForceResponse {
            eval_id: resp.eval_id,
            eval_create_index: resp.eval_create_index,
            index: resp.index,
        })
    }

    /// Registers `parent`'s child for `launch_s`, with its evaluation.
    pub(crate) async fn periodic_launch_local(
        &self,
        parent: &Job,
        launch_s: i64,
    ) -> Result<model::wire::JobRegisterResponse, ServerError> {
        self.job_register_local(JobRegisterRequest {
            job: periodic_child(parent, launch_s),
            enforce_index: false,
            job_modify_index: 0,
            preserve_counts: false,
            eval_priority: 0,
            submission: None,
            multiregion_version: None,
        })
        .await
    }

    /// `POST /v1/job/:id/dispatch`: runs a parameterized job once with the given input and meta.
    pub async fn job_dispatch(
        &self,
        namespace: &str,
        req: JobDispatchRequest,
    ) -> Result<JobDispatchResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobDispatch>(
                    &leader,
                    &crate::methods::InNamespace {
                        namespace: namespace.to_string(),
                        request: req,
                    },
                )
                .await
            }
            None => self.job_dispatch_local(namespace, req).await,
        }
    }

    pub(crate) async fn job_dispatch_local(
        &self,
        namespace: &str,
        req: JobDispatchRequest,
    ) -> Result<JobDispatchResponse, ServerError> {
        let parent = self
            .state()
            .snapshot()
            .job(namespace, &req.job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        let suffix = format!("{}-{}", now_nanos() / 1_000_000_000, &new_id()[..8]);
        let child = dispatch_child(&parent, &req, &suffix)?;
        let dispatched_job_id = child.id.clone();
        let resp = self
            .job_register_local(JobRegisterRequest {
                job: child,
                enforce_index: true,
                job_modify_index: 0,
                preserve_counts: false,
                eval_priority: 0,
                submission: None,
                multiregion_version: None,
            })
            .await?;
        Ok(JobDispatchResponse {
            dispatched_job_id,
            eval_id: resp.eval_id,
            eval_create_index: resp.eval_create_index,
            job_create_index: resp.job_modify_index,
            index: resp.index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::ParameterizedJobConfig;

    fn parameterized(payload: &str, required: &[&str], optional: &[&str]) -> Job {
        let mut job = Job {
            id: "batch".into(),
            job_type: Some("batch".into()),
            parameterized: Some(ParameterizedJobConfig {
                payload: Some(payload.into()),
                meta_required: required.iter().map(|s| s.to_string()).collect(),
                meta_optional: optional.iter().map(|s| s.to_string()).collect(),
            }),
            ..Job::default()
        };
        job.meta.insert("owner".into(), "ops".into());
        job.version = Some(3);
        job
    }

    fn request(payload: &[u8], meta: &[(&str, &str)]) -> JobDispatchRequest {
        JobDispatchRequest {
            job_id: "batch".into(),
            payload: (!payload.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(payload)),
            meta: meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            id_prefix_template: String::new(),
        }
    }

    #[test]
    fn dispatch_makes_a_child_with_payload_and_merged_meta() {
        let parent = parameterized("optional", &["input"], &["speed"]);
        let req = request(b"hello", &[("input", "a.txt"), ("owner", "x")]);
        // "owner" is not allowed even though the parent has it: only the parameterized keys are.
        let err = dispatch_child(&parent, &req, "1-abcdef01").unwrap_err();
        assert!(
            err.message.contains("unpermitted meta keys: owner"),
            "{err}"
        );

        let req = request(b"hello", &[("input", "a.txt"), ("speed", "fast")]);
        let child = dispatch_child(&parent, &req, "1700000000-abcdef01").expect("valid dispatch");
        assert_eq!(child.id, "batch/dispatch-1700000000-abcdef01");
        assert_eq!(child.name, child.id);
        assert_eq!(child.parent_id, "batch");
        assert!(child.dispatched);
        assert_eq!(child.payload.as_deref(), Some("aGVsbG8="));
        assert_eq!(child.meta["owner"], "ops");
        assert_eq!(child.meta["input"], "a.txt");
        assert_eq!(child.meta["speed"], "fast");
        assert_eq!(child.version, None, "versions start over for the child");

        let mut templated = req.clone();
        templated.id_prefix_template = "nightly".into();
        let child = dispatch_child(&parent, &templated, "1-abcdef01").expect("valid dispatch");
        assert_eq!(child.id, "batch/dispatch-nightly-1-abcdef01");
    }

    /// (payload rule, required, optional, payload, meta, expected in the error)
    type Row<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        &'a [u8],
        &'a [(&'a str, &'a str)],
        &'a str,
    );

    #[test]
    fn dispatch_refusals_say_what_is_wrong() {
        let too_big = vec![b'x'; DISPATCH_PAYLOAD_BYTES_MAX + 1];
        let rows: Vec<Row> = vec![
            ("optional", &["a"], &[], b"", &[], "required meta keys: a"),
            (
                "optional",
                &[],
                &["b"],
                b"",
                &[("c", "1")],
                "unpermitted meta keys: c",
            ),
            ("forbidden", &[], &[], b"in", &[], "Payload is not allowed"),
            ("required", &[], &[], b"", &[], "Payload is not provided"),
            (
                "optional",
                &[],
                &[],
                &too_big,
                &[],
                "Payload exceeds maximum size; 16385 > 16384",
            ),
        ];
        for (rule, required, optional, payload, meta, want) in rows {
            let parent = parameterized(rule, required, optional);
            let err =
                dispatch_child(&parent, &request(payload, meta), "1-abcdef01").expect_err(want);
            assert!(err.message.contains(want), "{want:?} not in {err}");
        }
        let mut req = request(b"", &[]);
        req.payload = Some("not base64!".into());
        let err = dispatch_child(&parameterized("optional", &[], &[]), &req, "1-a").unwrap_err();
        assert!(err.message.contains("not valid base64"), "{err}");

        let plain = Job {
            id: "web".into(),
            ..Job::default()
        };
        let err = dispatch_child(&plain, &request(b"", &[]), "1-a").unwrap_err();
        assert!(err.message.contains("not a parameterized job"), "{err}");
        let mut stopped = parameterized("optional", &[], &[]);
        stopped.stop = true;
        let err = dispatch_child(&stopped, &request(b"", &[]), "1-a").unwrap_err();
        assert!(err.message.contains("stopped"), "{err}");
    }

    #[test]
    fn periodic_child_drops_the_schedule() {
        let parent = Job {
            id: "report".into(),
            periodic: Some(model::PeriodicConfig::default()),
            version: Some(2),
            status: Some("running".into()),
            ..Job::default()
        };
        let child = periodic_child(&parent, 1_700_000_000);
        assert_eq!(child.id, "report/periodic-1700000000");
        assert_eq!(child.parent_id, "report");
        assert!(child.periodic.is_none());
        assert_eq!(child.status, None);
        assert_eq!(child.version, None);
        assert!(periodic_active(&parent));
        assert!(!periodic_active(&child));
    }
}

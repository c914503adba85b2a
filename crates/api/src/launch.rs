//! `/v1/job/:id/dispatch` and `/v1/job/:id/periodic/force`: running template jobs' children.

use crate::client::{Client, WriteOptions};
use crate::error::Result;
use model::wire::{JobDispatchRequest, JobDispatchResponse, PeriodicForceResponse};
use reqwest::Method;

impl Client {
    /// `POST /v1/job/:id/dispatch`: runs a parameterized job once, with `req`'s payload and meta.
    pub async fn dispatch_job(
        &self,
        id: &str,
        req: &JobDispatchRequest,
        w: &WriteOptions,
    ) -> Result<JobDispatchResponse> {
        let (mut resp, meta): (JobDispatchResponse, _) = self
            .write(
                Method::POST,
                &["v1", "job", id, "dispatch"],
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

    /// `POST /v1/job/:id/periodic/force`: launches a periodic job's child now.
    pub async fn periodic_force(
        &self,
        id: &str,
        w: &WriteOptions,
    ) -> Result<PeriodicForceResponse> {
        let (mut resp, meta): (PeriodicForceResponse, _) = self
            .write::<(), _>(
                Method::POST,
                &["v1", "job", id, "periodic", "force"],
                &[],
                None,
                w,
            )
            .await?;
        if resp.index == 0 {
            resp.index = meta.last_index;
        }
        Ok(resp)
    }
}

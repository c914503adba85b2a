//! Native service discovery (`/v1/services`, `/v1/service/:name`), as Nomad's `api.Services`.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use model::service_registration::{ServiceRegistration, ServiceRegistrationListStub};
use reqwest::Method;

impl Client {
    /// `GET /v1/services`: each namespace's service names and tags (`q.namespace = "*"`: all).
    pub async fn list_services(
        &self,
        q: &QueryOptions,
    ) -> Result<(Vec<ServiceRegistrationListStub>, QueryMeta)> {
        self.query(&["v1", "services"], &[], q).await
    }

    /// `GET /v1/service/:name[?tag=][&choose=n|key]`: the instances of one service.
    pub async fn service(
        &self,
        name: &str,
        tag: Option<&str>,
        choose: Option<&str>,
        q: &QueryOptions,
    ) -> Result<(Vec<ServiceRegistration>, QueryMeta)> {
        let mut params = Vec::new();
        if let Some(t) = tag.filter(|t| !t.is_empty()) {
            params.push(("tag", t.to_string()));
        }
        if let Some(c) = choose.filter(|c| !c.is_empty()) {
            params.push(("choose", c.to_string()));
        }
        self.query(&["v1", "service", name], &params, q).await
    }

    /// `DELETE /v1/service/:name/:id`: removes one registration.
    pub async fn delete_service(&self, name: &str, id: &str, w: &WriteOptions) -> Result<u64> {
        let (_, meta): (serde_json::Value, _) = self
            .write::<(), _>(Method::DELETE, &["v1", "service", name, id], &[], None, w)
            .await?;
        Ok(meta.last_index)
    }
}

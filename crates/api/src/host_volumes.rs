//! Dynamic host volumes (`/v1/volume/host/create|register|:id`, `/v1/volumes?type=host`), as
//! Nomad's `api.HostVolumes` calls them.

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::Result;
use model::host_volume::{
    HostVolume, HostVolumeCreateRequest, HostVolumeCreateResponse, HostVolumeStub,
};
use reqwest::Method;
use serde::Deserialize;

/// What a host volume list is narrowed to, besides [`QueryOptions`]'s prefix and namespace
/// (Nomad's `HostVolumeListRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostVolumeListFilter {
    /// Only volumes on this node (`?node_id=`).
    pub node_id: Option<String>,
    /// Only volumes in this node pool (`?node_pool=`).
    pub node_pool: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DeleteReply {
    #[serde(rename = "Index")]
    index: u64,
}

impl Client {
    /// `PUT /v1/volume/host/create`: the client the servers pick (or the volume's `NodeID`) makes
    /// the volume with its plugin; the answer holds it with its ID, node, path and state. The
    /// meta's index is where to start watching it become ready.
    pub async fn create_host_volume(
        &self,
        volume: &HostVolume,
        policy_override: bool,
        w: &WriteOptions,
    ) -> Result<(HostVolumeCreateResponse, QueryMeta)> {
        self.put_host_volume("create", volume, policy_override, w)
            .await
    }

    /// `PUT /v1/volume/host/register`: records a directory that already exists on a node
    /// (`NodeID` and `HostPath` required).
    pub async fn register_host_volume(
        &self,
        volume: &HostVolume,
        policy_override: bool,
        w: &WriteOptions,
    ) -> Result<(HostVolumeCreateResponse, QueryMeta)> {
        self.put_host_volume("register", volume, policy_override, w)
            .await
    }

    async fn put_host_volume(
        &self,
        verb: &str,
        volume: &HostVolume,
        policy_override: bool,
        w: &WriteOptions,
    ) -> Result<(HostVolumeCreateResponse, QueryMeta)> {
        let body = HostVolumeCreateRequest {
            volume: Some(volume.clone()),
            policy_override,
        };
        let (reply, meta): (Option<HostVolumeCreateResponse>, _) = self
            .write(
                Method::PUT,
                &["v1", "volume", "host", verb],
                &[],
                Some(&body),
                w,
            )
            .await?;
        let mut reply = reply.unwrap_or_default();
        if reply.index == 0 {
            reply.index = meta.last_index;
        }
        Ok((reply, meta))
    }

    /// `GET /v1/volume/host/:id`: the volume with the allocations that use it. A blocking query
    /// (`q.index`) answers when it changes.
    pub async fn host_volume(&self, id: &str, q: &QueryOptions) -> Result<(HostVolume, QueryMeta)> {
        self.query(&["v1", "volume", "host", id], &[], q).await
    }

    /// `GET /v1/volumes?type=host[&node_id=][&node_pool=]` (`q`'s prefix and namespace too; `*`
    /// for every namespace).
    pub async fn list_host_volumes(
        &self,
        filter: &HostVolumeListFilter,
        q: &QueryOptions,
    ) -> Result<(Vec<HostVolumeStub>, QueryMeta)> {
        let mut params = vec![("type", "host".to_string())];
        if let Some(n) = filter.node_id.as_deref().filter(|n| !n.is_empty()) {
            params.push(("node_id", n.to_string()));
        }
        if let Some(p) = filter.node_pool.as_deref().filter(|p| !p.is_empty()) {
            params.push(("node_pool", p.to_string()));
        }
        let (list, meta): (Option<Vec<HostVolumeStub>>, _) =
            self.query(&["v1", "volumes"], &params, q).await?;
        Ok((list.unwrap_or_default(), meta))
    }

    /// `DELETE /v1/volume/host/:id[?force=true]`: the client deletes it with its plugin, then the
    /// servers forget it; `force` forgets a volume whose node is gone. The write's index.
    pub async fn delete_host_volume(&self, id: &str, force: bool, w: &WriteOptions) -> Result<u64> {
        let params: Vec<(&'static str, String)> = if force {
            vec![("force", "true".to_string())]
        } else {
            Vec::new()
        };
        let (reply, meta): (Option<DeleteReply>, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volume", "host", id],
                &params,
                None,
                w,
            )
            .await?;
        Ok(reply
            .map(|r| r.index)
            .filter(|i| *i > 0)
            .unwrap_or(meta.last_index))
    }

    /// `GET /v1/volumes/claims[?job_id=&task_group=&volume_name=]` (`q`'s prefix and namespace
    /// too): the sticky host volume claims.
    pub async fn list_host_volume_claims(
        &self,
        filter: &HostVolumeClaimFilter,
        q: &QueryOptions,
    ) -> Result<(Vec<model::host_volume::TaskGroupHostVolumeClaim>, QueryMeta)> {
        let mut params = Vec::new();
        for (key, value) in [
            ("job_id", &filter.job_id),
            ("task_group", &filter.task_group),
            ("volume_name", &filter.volume_name),
        ] {
            if !value.is_empty() {
                params.push((key, value.clone()));
            }
        }
        let (list, meta): (Option<Vec<_>>, _) =
            self.query(&["v1", "volumes", "claims"], &params, q).await?;
        Ok((list.unwrap_or_default(), meta))
    }

    /// `DELETE /v1/volumes/claim/:id`: the group's next placements may go to any node. The
    /// write's index.
    pub async fn delete_host_volume_claim(&self, id: &str, w: &WriteOptions) -> Result<u64> {
        let (_, meta): (Option<serde_json::Value>, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volumes", "claim", id],
                &[],
                None,
                w,
            )
            .await?;
        Ok(meta.last_index)
    }
}

/// What `list_host_volume_claims` keeps (empty: any).
#[derive(Debug, Clone, Default)]
pub struct HostVolumeClaimFilter {
    pub job_id: String,
    pub task_group: String,
    pub volume_name: String,
}

#[cfg(test)]
mod tests {
    use super::HostVolumeListFilter;
    use crate::testing::{Canned, FakeAgent};
    use crate::{Client, Config, QueryOptions, WriteOptions};
    use model::host_volume::{HostVolume, HostVolumeCapability, HostVolumeState};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn client(agent: &FakeAgent) -> Client {
        Client::new(Config {
            address: agent.address().to_string(),
            ..Config::default()
        })
        .unwrap()
    }

    fn spec() -> HostVolume {
        HostVolume {
            name: "data".into(),
            plugin_id: "mkdir".into(),
            requested_capacity_min_bytes: 1 << 30,
            requested_capabilities: vec![HostVolumeCapability {
                attachment_mode: "file-system".into(),
                access_mode: "single-node-writer".into(),
            }],
            parameters: Some(BTreeMap::from([("mode".into(), "0755".into())])),
            ..HostVolume::default()
        }
    }

    #[tokio::test]
    async fn create_puts_the_request_and_reads_the_volume_and_index() {
        let agent = FakeAgent::start();
        agent.on(
            "PUT",
            "/v1/volume/host/create",
            Canned::json(
                r#"{"Volume":{"ID":"2f2a6a3c-3c7b-4f0e-9d43-0e9d2b1c0a11","Name":"data",
                "NodeID":"n1","HostPath":"/d/host_volumes/2f2a","State":"pending"},
                "Warnings":"","Index":17}"#,
            )
            .index(17),
        );
        let c = client(&agent);
        let (resp, meta) = c
            .create_host_volume(&spec(), false, &WriteOptions::in_namespace("prod"))
            .await
            .unwrap();
        let vol = resp.volume.unwrap();
        assert_eq!(vol.id, "2f2a6a3c-3c7b-4f0e-9d43-0e9d2b1c0a11");
        assert_eq!(vol.state, HostVolumeState::Pending);
        assert_eq!(vol.host_path, "/d/host_volumes/2f2a");
        assert_eq!((resp.index, meta.last_index), (17, 17));
        let req = &agent.requests()[0];
        assert_eq!(req.param("namespace").as_deref(), Some("prod"));
        let body = req.json();
        assert_eq!(body["PolicyOverride"], false);
        assert_eq!(body["Volume"]["Name"], "data");
        assert_eq!(body["Volume"]["PluginID"], "mkdir");
        assert_eq!(body["Volume"]["RequestedCapacityMinBytes"], 1u64 << 30);
        assert_eq!(body["Volume"]["Parameters"]["mode"], "0755");
        assert_eq!(
            body["Volume"]["RequestedCapabilities"][0]["AccessMode"],
            "single-node-writer"
        );
    }

    #[tokio::test]
    async fn register_puts_to_its_own_path_and_takes_the_index_from_the_header() {
        let agent = FakeAgent::start();
        agent.on(
            "PUT",
            "/v1/volume/host/register",
            Canned::json(r#"{"Volume":{"ID":"v1","Name":"data","State":"ready"}}"#).index(9),
        );
        let mut vol = spec();
        vol.node_id = "n1".into();
        vol.host_path = "/srv/data".into();
        let (resp, _) = client(&agent)
            .register_host_volume(&vol, true, &WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(resp.index, 9);
        assert_eq!(resp.volume.unwrap().state, HostVolumeState::Ready);
        let body = agent.requests()[0].json();
        assert_eq!(body["PolicyOverride"], true);
        assert_eq!(body["Volume"]["HostPath"], "/srv/data");
        assert_eq!(body["Volume"]["NodeID"], "n1");
    }

    #[tokio::test]
    async fn get_blocks_on_an_index_and_a_missing_volume_is_not_found() {
        let agent = FakeAgent::start();
        agent.on(
            "GET",
            "/v1/volume/host/v1",
            Canned::json(
                r#"{"ID":"v1","Name":"data","State":"ready","Allocations":[{"ID":"a1","ClientStatus":"running"}]}"#,
            )
            .index(21),
        );
        agent.on(
            "GET",
            "/v1/volume/host/nope",
            Canned::error(404, "volume not found"),
        );
        let c = client(&agent);
        let (vol, meta) = c
            .host_volume("v1", &QueryOptions::blocking(20, Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(vol.state, HostVolumeState::Ready);
        assert_eq!(vol.allocations.unwrap()[0].id, "a1");
        assert_eq!(meta.last_index, 21);
        let req = &agent.requests()[0];
        assert_eq!(req.param("index").as_deref(), Some("20"));
        assert_eq!(req.param("wait").as_deref(), Some("5000ms"));
        let err = c
            .host_volume("nope", &QueryOptions::default())
            .await
            .unwrap_err();
        assert!(err.is_not_found(), "{err}");
    }

    #[tokio::test]
    async fn list_sends_type_host_and_the_filters() {
        let agent = FakeAgent::start();
        agent.on(
            "GET",
            "/v1/volumes?type=host",
            Canned::json(r#"[{"ID":"v1","Name":"data","NodeID":"n1","NodePool":"default","State":"ready","CapacityBytes":1234}]"#).index(4),
        );
        let c = client(&agent);
        let (list, _) = c
            .list_host_volumes(
                &HostVolumeListFilter {
                    node_id: Some("n1".into()),
                    node_pool: Some("default".into()),
                },
                &QueryOptions::with_prefix("v").in_namespace("*"),
            )
            .await
            .unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].capacity_bytes, 1234);
        let req = &agent.requests()[0];
        assert_eq!(req.param("type").as_deref(), Some("host"));
        assert_eq!(req.param("node_id").as_deref(), Some("n1"));
        assert_eq!(req.param("node_pool").as_deref(), Some("default"));
        assert_eq!(req.param("prefix").as_deref(), Some("v"));
        assert_eq!(req.param("namespace").as_deref(), Some("*"));

        // No filters: only the type; a `null` body is an empty list.
        let agent = FakeAgent::start();
        agent.on("GET", "/v1/volumes?type=host", Canned::json("null"));
        let (list, _) = client(&agent)
            .list_host_volumes(&HostVolumeListFilter::default(), &QueryOptions::default())
            .await
            .unwrap();
        assert!(list.is_empty());
        assert_eq!(agent.requests()[0].query, "type=host");
    }

    #[tokio::test]
    async fn delete_sends_force_only_when_asked_and_reads_the_index() {
        let agent = FakeAgent::start();
        agent.on(
            "DELETE",
            "/v1/volume/host/v1",
            Canned::json(r#"{"Index":33}"#),
        );
        agent.on(
            "DELETE",
            "/v1/volume/host/busy",
            Canned::error(
                400,
                "volume v1 in use by allocations: [8d3e4bd0-5cc6-4bbc-7c3d-f1f6a8d34c7a]",
            ),
        );
        let c = client(&agent);
        let index = c
            .delete_host_volume("v1", false, &WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(index, 33);
        assert_eq!(agent.requests()[0].param("force"), None);
        c.delete_host_volume("v1", true, &WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(agent.requests()[1].param("force").as_deref(), Some("true"));
        let err = c
            .delete_host_volume("busy", false, &WriteOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(400));
        assert!(err.to_string().contains("in use by allocations"), "{err}");
    }
}

//! CSI volumes and plugins (`/v1/volume/csi/:id`, `/v1/volumes`, `/v1/plugins`, `/v1/plugin/csi/:id`).

use crate::client::{Client, QueryOptions, WriteOptions};
use crate::error::Result;
use model::csi::{CSIPlugin, CSIPluginListStub, CSIVolume, CSIVolumeListStub};
use model::wire::CsiSnapshot;
use reqwest::Method;
use serde::Deserialize;

/// A page of snapshots (`GET /v1/volumes/snapshot`).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct SnapshotPage {
    #[serde(rename = "Snapshots")]
    pub snapshots: Vec<CsiSnapshot>,
    #[serde(rename = "NextToken")]
    pub next_token: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VolumesReply {
    #[serde(rename = "Volumes")]
    volumes: Vec<CSIVolume>,
}

impl Client {
    /// `PUT /v1/volume/csi/:id` (`{"Volumes": [volume]}`).
    pub async fn register_volume(&self, volume: &CSIVolume, w: &WriteOptions) -> Result<()> {
        let body = serde_json::json!({ "Volumes": [volume] });
        let _: (serde_json::Value, _) = self
            .write(
                Method::PUT,
                &["v1", "volume", "csi", &volume.id],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(())
    }

    /// `PUT /v1/volume/csi/:id/create`: the volumes as created (external ID, capacity filled).
    pub async fn create_volume(
        &self,
        volume: &CSIVolume,
        w: &WriteOptions,
    ) -> Result<Vec<CSIVolume>> {
        let body = serde_json::json!({ "Volumes": [volume] });
        let (r, _): (VolumesReply, _) = self
            .write(
                Method::PUT,
                &["v1", "volume", "csi", &volume.id, "create"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(r.volumes)
    }

    /// `DELETE /v1/volume/csi/:id?force=`.
    pub async fn deregister_volume(&self, id: &str, force: bool, w: &WriteOptions) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volume", "csi", id],
                &[("force", force.to_string())],
                None,
                w,
            )
            .await?;
        Ok(())
    }

    /// `DELETE /v1/volume/csi/:id/delete`: deletes it at the provider, then deregisters it.
    pub async fn delete_volume(&self, id: &str, w: &WriteOptions) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volume", "csi", id, "delete"],
                &[],
                None,
                w,
            )
            .await?;
        Ok(())
    }

    /// `DELETE /v1/volume/csi/:id/detach?node=`.
    pub async fn detach_volume(&self, id: &str, node: &str, w: &WriteOptions) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volume", "csi", id, "detach"],
                &[("node", node.to_string())],
                None,
                w,
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/volumes?type=csi`.
    pub async fn list_volumes(&self, q: &QueryOptions) -> Result<Vec<CSIVolumeListStub>> {
        let (v, _) = self
            .query(&["v1", "volumes"], &[("type", "csi".into())], q)
            .await?;
        Ok(v)
    }

    /// `GET /v1/volume/csi/:id`.
    pub async fn volume(&self, id: &str, q: &QueryOptions) -> Result<CSIVolume> {
        let (v, _) = self.query(&["v1", "volume", "csi", id], &[], q).await?;
        Ok(v)
    }

    /// `GET /v1/plugins?type=csi`.
    pub async fn list_plugins(&self, q: &QueryOptions) -> Result<Vec<CSIPluginListStub>> {
        let (v, _) = self
            .query(&["v1", "plugins"], &[("type", "csi".into())], q)
            .await?;
        Ok(v)
    }

    /// `GET /v1/plugin/csi/:id`.
    pub async fn plugin(&self, id: &str, q: &QueryOptions) -> Result<CSIPlugin> {
        let (v, _) = self.query(&["v1", "plugin", "csi", id], &[], q).await?;
        Ok(v)
    }

    /// `PUT /v1/volumes/snapshot`: snapshots `volume_id` (named `name`, or by the plugin).
    pub async fn create_snapshot(
        &self,
        volume_id: &str,
        name: &str,
        parameters: &std::collections::BTreeMap<String, String>,
        w: &WriteOptions,
    ) -> Result<Vec<CsiSnapshot>> {
        let body = serde_json::json!({"Snapshots": [{
            "SourceVolumeID": volume_id, "Name": name, "Parameters": parameters,
        }]});
        let (r, _): (SnapshotPage, _) = self
            .write(
                Method::PUT,
                &["v1", "volumes", "snapshot"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(r.snapshots)
    }

    /// `DELETE /v1/volumes/snapshot?plugin_id=&snapshot_id=`.
    pub async fn delete_snapshot(
        &self,
        plugin_id: &str,
        snapshot_id: &str,
        w: &WriteOptions,
    ) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "volumes", "snapshot"],
                &[
                    ("plugin_id", plugin_id.to_string()),
                    ("snapshot_id", snapshot_id.to_string()),
                ],
                None,
                w,
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/volumes/snapshot?plugin_id=`: one page, as the plugin pages them.
    pub async fn list_snapshots(&self, plugin_id: &str, q: &QueryOptions) -> Result<SnapshotPage> {
        let (v, _) = self
            .query(
                &["v1", "volumes", "snapshot"],
                &[("plugin_id", plugin_id.to_string())],
                q,
            )
            .await?;
        Ok(v)
    }
}

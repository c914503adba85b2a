//! CSI volumes and plugins (`/v1/volume/csi/:id`, `/v1/volumes`, `/v1/plugins`). The agent answers
//! "not supported yet" until issue #8 lands; the calls are here so the CLI can say so precisely.

use crate::client::{Client, QueryOptions, WriteOptions};
use crate::error::Result;
use model::csi::CSIVolume;
use reqwest::Method;

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

    /// `PUT /v1/volume/csi/:id/create`.
    pub async fn create_volume(&self, volume: &CSIVolume, w: &WriteOptions) -> Result<()> {
        let body = serde_json::json!({ "Volumes": [volume] });
        let _: (serde_json::Value, _) = self
            .write(
                Method::PUT,
                &["v1", "volume", "csi", &volume.id, "create"],
                &[],
                Some(&body),
                w,
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/volumes?type=csi`, as raw JSON.
    pub async fn list_volumes(&self) -> Result<serde_json::Value> {
        let (v, _) = self
            .query(
                &["v1", "volumes"],
                &[("type", "csi".into())],
                &QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }

    /// `GET /v1/plugins?type=csi`, as raw JSON.
    pub async fn list_plugins(&self) -> Result<serde_json::Value> {
        let (v, _) = self
            .query(
                &["v1", "plugins"],
                &[("type", "csi".into())],
                &QueryOptions::default(),
            )
            .await?;
        Ok(v)
    }
}

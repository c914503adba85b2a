//! An allocation's CSI volumes (Nomad's `csi_hook`).
//!
//! [`prerun`], before any task starts: for each group `volume` of type `csi` (ID = `source`,
//! plus `[<alloc index>]` with `per_alloc`), keep a mount restored from the client's state that
//! is still a mount; otherwise claim the volume (`CSIVolume.Claim`, write unless `read_only`,
//! retried with backoff while the servers answer with a retryable error), wait for its node
//! plugin to be registered here, and mount it through the volume manager. The host paths go to
//! the task runners, which turn each `volume_mount` into a driver mount.
//!
//! [`spawn_release`], once every task is dead: in the background, unmount each volume, then
//! release its claim (`CSIVolume.Unpublish`, state `Unpublishing`, no access mode: the node step
//! is done), each retried with backoff until it works or [`CSI_CLAIM_RETRY_FOR`] passed.

use crate::context::{find_group, RunnerContext};
use crate::csi::registry::CsiPluginKind;
use crate::csi::volumes::{is_mount, CsiVolumeUsage};
use crate::limits::{CSI_CLAIM_RETRY_DELAY_MAX, CSI_CLAIM_RETRY_FOR, CSI_PLUGIN_WAIT};
use crate::rng::{Backoff, Rng};
use model::alloc::Allocation;
use model::csi::{CSIVolumeClaim, CSIVolumeClaimMode, CSIVolumeClaimState};
use model::group::VolumeRequest;
use model::wire::{CsiVolumeClaimRequest, CsiVolumeClaimResponse, CsiVolumeUnpublishRequest};
use rpc::{ErrorCode, RpcError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::time::Instant;

/// One claimed (and, once `host_path` is set, mounted) volume of an allocation; persisted with
/// the allocation so a restarted client does not mount it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountedVolume {
    /// The volume's ID (with the `per_alloc` suffix).
    pub volume_id: String,
    /// The provider's ID for it.
    pub remote_id: String,
    pub namespace: String,
    pub plugin_id: String,
    pub usage: CsiVolumeUsage,
    /// The node plugin's ID for this node, when known.
    #[serde(default)]
    pub external_node_id: String,
    /// Where it is published on the host; empty when claimed but not mounted.
    pub host_path: PathBuf,
    /// A mount was started: the node may hold a staging or publish mount of it even though
    /// `host_path` is empty (a NodePublish failed after NodeStage, the hook was aborted
    /// mid-mount), so a release unmounts it too.
    #[serde(default)]
    pub mount_started: bool,
}

/// The allocation's volumes: alias → volume.
pub type Volumes = BTreeMap<String, MountedVolume>;

/// The group's CSI volume requests, by alias.
fn csi_requests(alloc: &Allocation) -> Vec<(String, VolumeRequest)> {
    find_group(alloc)
        .map(|(_, g)| {
            g.volumes
                .iter()
                .filter(|(_, v)| v.volume_type == "csi")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the allocation's group asks for any CSI volume.
pub(crate) fn wants_volumes(alloc: &Allocation) -> bool {
    !csi_requests(alloc).is_empty()
}

/// The volume ID a request names for this allocation.
fn volume_id(req: &VolumeRequest, alloc: &Allocation) -> String {
    if req.per_alloc {
        format!("{}[{}]", req.source, alloc.index().unwrap_or(0))
    } else {
        req.source.clone()
    }
}

/// Claims and mounts every CSI volume of the allocation (keeping still-mounted `restored`
/// ones). Returns the volumes claimed so far and, on failure, why it stopped: those claimed
/// must still be released.
pub(crate) async fn prerun(
    ctx: Arc<RunnerContext>,
    alloc: Arc<Allocation>,
    restored: Volumes,
    progress: Progress,
) -> (Volumes, Result<(), String>) {
    let mut out = Tracked {
        volumes: Volumes::new(),
        progress,
    };
    let (volumes, result) = prerun_inner(&ctx, &alloc, &restored, &mut out).await;
    (volumes, result)
}

/// What prerun has claimed (and started mounting) so far, seen by the allocation runner too: a
/// prerun aborted midway (the allocation stopped) still has its claims released and its mounts
/// undone.
pub(crate) type Progress = Arc<std::sync::Mutex<Volumes>>;

/// The volumes, each change also written to the shared progress.
struct Tracked {
    volumes: Volumes,
    progress: Progress,
}

impl Tracked {
    fn insert(&mut self, alias: String, v: MountedVolume) {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(alias.clone(), v.clone());
        self.volumes.insert(alias, v);
    }
}

async fn prerun_inner(
    ctx: &Arc<RunnerContext>,
    alloc: &Arc<Allocation>,
    restored: &Volumes,
    out: &mut Tracked,
) -> (Volumes, Result<(), String>) {
    let ctx = Arc::clone(ctx);
    let alloc = Arc::clone(alloc);
    let requests = csi_requests(&alloc);
    if requests.is_empty() {
        return (out.volumes.clone(), Ok(()));
    }
    if let Err(e) = check_drivers(&ctx, &alloc) {
        return (out.volumes.clone(), Err(e));
    }
    for (alias, req) in requests {
        if let Some(v) = restored.get(&alias) {
            if !v.host_path.as_os_str().is_empty() && is_mount(&v.host_path).unwrap_or(false) {
                tracing::info!(alloc_id = %alloc.id, volume = %v.volume_id, "CSI volume still mounted; not mounting again");
                out.insert(alias, v.clone());
                continue;
            }
        }
        if let Err(e) = claim_and_mount(&ctx, &alloc, &alias, &req, out).await {
            return (out.volumes.clone(), Err(e));
        }
    }
    (out.volumes.clone(), Ok(()))
}

/// Nomad refuses CSI volumes when no task's driver can mount anything.
fn check_drivers(ctx: &RunnerContext, alloc: &Allocation) -> Result<(), String> {
    let Some((_, group)) = find_group(alloc) else {
        return Ok(());
    };
    let any = group.tasks.iter().any(|t| {
        ctx.drivers
            .get(&t.driver)
            .is_some_and(|d| d.capabilities().mounts)
    });
    if any {
        Ok(())
    } else {
        Err("no task supports CSI".into())
    }
}

async fn claim_and_mount(
    ctx: &RunnerContext,
    alloc: &Allocation,
    alias: &str,
    req: &VolumeRequest,
    out: &mut Tracked,
) -> Result<(), String> {
    let id = volume_id(req, alloc);
    let node = ctx.node.get();
    let claim = CsiVolumeClaimRequest {
        namespace: alloc.namespace.clone(),
        volume_id: id.clone(),
        allocation_id: alloc.id.clone(),
        node_id: node.id.clone(),
        external_node_id: String::new(),
        claim: if req.read_only {
            CSIVolumeClaimMode::READ
        } else {
            CSIVolumeClaimMode::WRITE
        },
        access_mode: req.access_mode.clone(),
        attachment_mode: req.attachment_mode.clone(),
        state: CSIVolumeClaimState::TAKEN,
        secret_id: node.secret_id.clone(),
    };
    let resp = claim_with_retry(ctx, claim)
        .await
        .map_err(|e| format!("claiming volume {id:?}: {e}"))?;
    let volume = resp
        .volume
        .ok_or_else(|| format!("claiming volume {id:?}: the answer has no volume"))?;
    let usage = CsiVolumeUsage {
        read_only: req.read_only,
        attachment_mode: req.attachment_mode.clone(),
        access_mode: req.access_mode.clone(),
    };
    let mut mounted = MountedVolume {
        volume_id: id.clone(),
        remote_id: volume.remote_id().to_string(),
        namespace: alloc.namespace.clone(),
        plugin_id: volume.plugin_id.clone(),
        usage,
        external_node_id: String::new(),
        host_path: PathBuf::new(),
        mount_started: false,
    };
    out.insert(alias.to_string(), mounted.clone());
    let plugin = ctx
        .csi
        .registry
        .wait_for(CsiPluginKind::Node, &volume.plugin_id, CSI_PLUGIN_WAIT)
        .await
        .ok_or_else(|| {
            format!(
                "CSI node plugin {:?} for volume {id:?} is not running on this node",
                volume.plugin_id
            )
        })?;
    mounted.external_node_id = plugin.info.node.map(|n| n.node_id).unwrap_or_default();
    // From here the node may hold a mount of it, whatever happens to this call.
    mounted.mount_started = true;
    out.insert(alias.to_string(), mounted.clone());
    mounted.host_path = ctx
        .csi
        .volumes
        .mount_volume(
            &volume.plugin_id,
            &volume,
            &alloc.id,
            &mounted.usage,
            &resp.publish_context,
        )
        .await
        .map_err(|e| format!("mounting volume {id:?}: {e}"))?;
    tracing::info!(alloc_id = %alloc.id, volume = %id, path = %mounted.host_path.display(), "CSI volume mounted");
    out.insert(alias.to_string(), mounted);
    Ok(())
}

/// Whether the servers may accept the same claim later, by code: no leader, unreachable, late,
/// or `Conflict` — the state refuses it for now (the volume's claims are taken, the plugin is
/// not schedulable yet, or the plugin answered FAILED_PRECONDITION because the volume is still
/// attached elsewhere: the claim waits for the other one to be released).
fn claim_retryable(e: &RpcError) -> bool {
    matches!(
        e.code,
        ErrorCode::NoLeader | ErrorCode::Unavailable | ErrorCode::Timeout | ErrorCode::Conflict
    )
}

async fn claim_with_retry(
    ctx: &RunnerContext,
    req: CsiVolumeClaimRequest,
) -> Result<CsiVolumeClaimResponse, RpcError> {
    let give_up = Instant::now() + CSI_CLAIM_RETRY_FOR;
    let mut backoff = Backoff::new(Rng::from_entropy());
    loop {
        match ctx.conn.csi_claim(req.clone()).await {
            Ok(resp) => return Ok(resp),
            Err(e) if claim_retryable(&e) && Instant::now() < give_up => {
                let delay = backoff.next_delay().min(CSI_CLAIM_RETRY_DELAY_MAX);
                tracing::warn!(volume = %req.volume_id, error = %e, retry_in = ?delay, "CSI claim failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Unmounts and releases every volume in the background, each step retried until it works; the
/// handle ends when all are done (the allocation keeps its volumes persisted until then, so a
/// client restarted midway releases them again).
pub(crate) fn spawn_release(
    ctx: Arc<RunnerContext>,
    alloc_id: String,
    volumes: Volumes,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for v in volumes.into_values() {
            release(&ctx, &alloc_id, &v).await;
        }
    })
}

async fn release(ctx: &RunnerContext, alloc_id: &str, v: &MountedVolume) {
    let give_up = Instant::now() + CSI_CLAIM_RETRY_FOR;
    let mut backoff = Backoff::new(Rng::from_entropy());
    if !v.host_path.as_os_str().is_empty() || v.mount_started {
        loop {
            let done = ctx
                .csi
                .volumes
                .unmount_volume(&v.plugin_id, &v.volume_id, &v.remote_id, alloc_id, &v.usage)
                .await;
            match done {
                Ok(()) => break,
                Err(e) if Instant::now() < give_up => {
                    let delay = backoff.next_delay().min(CSI_CLAIM_RETRY_DELAY_MAX);
                    tracing::warn!(volume = %v.volume_id, error = %e, retry_in = ?delay, "CSI unmount failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    tracing::error!(volume = %v.volume_id, error = %e, "CSI unmount failed; giving up");
                    return;
                }
            }
        }
    }
    backoff.reset();
    let node = ctx.node.get();
    let req = CsiVolumeUnpublishRequest {
        namespace: v.namespace.clone(),
        volume_id: v.volume_id.clone(),
        claim: CSIVolumeClaim {
            allocation_id: alloc_id.to_string(),
            node_id: node.id.clone(),
            external_node_id: v.external_node_id.clone(),
            mode: if v.usage.read_only {
                CSIVolumeClaimMode::READ
            } else {
                CSIVolumeClaimMode::WRITE
            },
            access_mode: String::new(),
            attachment_mode: String::new(),
            state: CSIVolumeClaimState::UNPUBLISHING,
            last_error: String::new(),
        },
        secret_id: node.secret_id.clone(),
    };
    loop {
        match ctx.conn.csi_unpublish(req.clone()).await {
            Ok(()) => {
                tracing::info!(%alloc_id, volume = %v.volume_id, "CSI claim released");
                return;
            }
            // The volume is gone: no claim is left to release.
            Err(e) if e.code == ErrorCode::NotFound => return,
            Err(e) if Instant::now() < give_up => {
                let delay = backoff.next_delay().min(CSI_CLAIM_RETRY_DELAY_MAX);
                tracing::warn!(volume = %v.volume_id, error = %e, retry_in = ?delay, "CSI unpublish failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                tracing::error!(volume = %v.volume_id, error = %e, "CSI unpublish failed; giving up");
                return;
            }
        }
    }
}

/// The driver mounts of a task's `volume_mount` blocks for the allocation's mounted CSI
/// volumes; a mount of a CSI volume that is not mounted is an error. Host volumes are not
/// handled here.
pub(crate) fn task_mounts(
    task: &model::Task,
    volumes: &Volumes,
    requests: &BTreeMap<String, VolumeRequest>,
) -> Result<Vec<drivers::MountConfig>, String> {
    let mut out = Vec::new();
    for vm in &task.volume_mounts {
        let Some(req) = requests.get(&vm.volume) else {
            continue;
        };
        if req.volume_type != "csi" {
            continue;
        }
        let mounted = volumes
            .get(&vm.volume)
            .filter(|v| !v.host_path.as_os_str().is_empty())
            .ok_or_else(|| format!("CSI volume {:?} is not mounted", vm.volume))?;
        out.push(drivers::MountConfig {
            host_path: mounted.host_path.clone(),
            task_path: PathBuf::from(&vm.destination),
            readonly: vm.read_only || req.read_only,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_alloc_volume_ids_take_the_alloc_index() {
        let req = VolumeRequest {
            source: "data".into(),
            per_alloc: true,
            ..VolumeRequest::default()
        };
        let alloc = Allocation {
            name: "j.g[3]".into(),
            ..Allocation::default()
        };
        assert_eq!(volume_id(&req, &alloc), "data[3]");
        let shared = VolumeRequest {
            per_alloc: false,
            ..req
        };
        assert_eq!(volume_id(&shared, &alloc), "data");
    }

    #[test]
    fn claims_are_retried_on_transient_answers_only() {
        assert!(claim_retryable(&RpcError::no_leader("x")));
        assert!(claim_retryable(&RpcError::unavailable("x")));
        assert!(claim_retryable(&RpcError::new(
            ErrorCode::Conflict,
            "volume max claims reached"
        )));
        assert!(!claim_retryable(&RpcError::bad_request("bad access mode")));
        assert!(!claim_retryable(&RpcError::not_found("no such volume")));
        assert!(!claim_retryable(&RpcError::permission_denied("x")));
    }

    #[test]
    fn volume_mounts_of_csi_volumes_become_driver_mounts() {
        let task = model::Task {
            volume_mounts: vec![model::task::VolumeMount {
                volume: "data".into(),
                destination: "/srv/data".into(),
                read_only: false,
                ..Default::default()
            }],
            ..model::Task::default()
        };
        let requests = BTreeMap::from([(
            "data".to_string(),
            VolumeRequest {
                volume_type: "csi".into(),
                read_only: true,
                ..VolumeRequest::default()
            },
        )]);
        let mut volumes = Volumes::new();
        let err = task_mounts(&task, &volumes, &requests).unwrap_err();
        assert!(err.contains("not mounted"), "{err}");
        volumes.insert(
            "data".into(),
            MountedVolume {
                volume_id: "v".into(),
                remote_id: "v".into(),
                namespace: "default".into(),
                plugin_id: "hp".into(),
                usage: CsiVolumeUsage {
                    read_only: true,
                    attachment_mode: "file-system".into(),
                    access_mode: "single-node-reader-only".into(),
                },
                external_node_id: String::new(),
                host_path: "/host/v".into(),
                mount_started: true,
            },
        );
        let mounts = task_mounts(&task, &volumes, &requests).unwrap();
        assert_eq!(
            mounts,
            [drivers::MountConfig {
                host_path: "/host/v".into(),
                task_path: "/srv/data".into(),
                readonly: true,
            }]
        );
    }
}

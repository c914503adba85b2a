//! [`PluginInfo`]: what a plugin is and can do, summarised from its capability calls — what a
//! client fingerprints and the servers schedule with.

use std::collections::BTreeMap;

use crate::v1;
use crate::v1::controller_service_capability::rpc::Type as ControllerRpc;
use crate::v1::node_service_capability::rpc::Type as NodeRpc;
use crate::v1::plugin_capability::service::Type as PluginService;

/// A plugin's identity and capabilities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginInfo {
    /// GetPluginInfo's name (domain notation, e.g. `hostpath.csi.caravan`).
    pub name: String,
    /// GetPluginInfo's vendor version.
    pub version: String,
    /// The plugin offers the Controller service (CONTROLLER_SERVICE): volumes need controller
    /// calls before nodes can use them.
    pub controller_service: bool,
    /// Volumes are not equally reachable from every node (VOLUME_ACCESSIBILITY_CONSTRAINTS).
    pub accessibility_constraints: bool,
    /// The controller's capabilities; `None` when it offers no controller service.
    pub controller: Option<ControllerCapabilities>,
    /// The node service's capabilities and info; `None` when it offers no node service.
    pub node: Option<NodeCapabilities>,
}

/// ControllerGetCapabilities, one flag per RPC capability Caravan uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControllerCapabilities {
    /// CREATE_DELETE_VOLUME
    pub create_delete: bool,
    /// PUBLISH_UNPUBLISH_VOLUME: volumes must be attached to a node before it stages them.
    pub publish_unpublish: bool,
    /// LIST_VOLUMES
    pub list_volumes: bool,
    /// LIST_VOLUMES_PUBLISHED_NODES
    pub list_volumes_published_nodes: bool,
    /// GET_CAPACITY
    pub get_capacity: bool,
    /// CREATE_DELETE_SNAPSHOT
    pub snapshots: bool,
    /// LIST_SNAPSHOTS
    pub list_snapshots: bool,
    /// CLONE_VOLUME
    pub clone: bool,
    /// PUBLISH_READONLY
    pub publish_readonly: bool,
    /// EXPAND_VOLUME
    pub expand: bool,
}

/// NodeGetCapabilities and NodeGetInfo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    /// The plugin's own ID for this node (passed to ControllerPublishVolume).
    pub node_id: String,
    /// How many volumes this node can take; 0 means no limit.
    pub max_volumes_per_node: i64,
    /// The topology segments volumes must match to be reachable here; `None` when not reported.
    pub accessible_topology: Option<BTreeMap<String, String>>,
    /// STAGE_UNSTAGE_VOLUME: NodeStageVolume comes before NodePublishVolume.
    pub stage_unstage: bool,
    /// GET_VOLUME_STATS
    pub volume_stats: bool,
    /// EXPAND_VOLUME
    pub expand: bool,
}

impl PluginInfo {
    /// The identity part, from GetPluginInfo and GetPluginCapabilities.
    pub fn from_identity(
        info: &v1::GetPluginInfoResponse,
        caps: &v1::GetPluginCapabilitiesResponse,
    ) -> Self {
        let services: Vec<PluginService> = caps
            .capabilities
            .iter()
            .filter_map(|c| match c.r#type {
                Some(v1::plugin_capability::Type::Service(s)) => {
                    PluginService::try_from(s.r#type).ok()
                }
                _ => None,
            })
            .collect();
        PluginInfo {
            name: info.name.clone(),
            version: info.vendor_version.clone(),
            controller_service: services.contains(&PluginService::ControllerService),
            accessibility_constraints: services
                .contains(&PluginService::VolumeAccessibilityConstraints),
            controller: None,
            node: None,
        }
    }

    /// Records ControllerGetCapabilities.
    pub fn set_controller(&mut self, caps: &v1::ControllerGetCapabilitiesResponse) {
        let rpcs: Vec<ControllerRpc> = caps
            .capabilities
            .iter()
            .filter_map(|c| match c.r#type {
                Some(v1::controller_service_capability::Type::Rpc(r)) => {
                    ControllerRpc::try_from(r.r#type).ok()
                }
                None => None,
            })
            .collect();
        let has = |rpc| rpcs.contains(&rpc);
        self.controller = Some(ControllerCapabilities {
            create_delete: has(ControllerRpc::CreateDeleteVolume),
            publish_unpublish: has(ControllerRpc::PublishUnpublishVolume),
            list_volumes: has(ControllerRpc::ListVolumes),
            list_volumes_published_nodes: has(ControllerRpc::ListVolumesPublishedNodes),
            get_capacity: has(ControllerRpc::GetCapacity),
            snapshots: has(ControllerRpc::CreateDeleteSnapshot),
            list_snapshots: has(ControllerRpc::ListSnapshots),
            clone: has(ControllerRpc::CloneVolume),
            publish_readonly: has(ControllerRpc::PublishReadonly),
            expand: has(ControllerRpc::ExpandVolume),
        });
    }

    /// Records NodeGetCapabilities and NodeGetInfo.
    pub fn set_node(
        &mut self,
        caps: &v1::NodeGetCapabilitiesResponse,
        info: &v1::NodeGetInfoResponse,
    ) {
        let rpcs: Vec<NodeRpc> = caps
            .capabilities
            .iter()
            .filter_map(|c| match c.r#type {
                Some(v1::node_service_capability::Type::Rpc(r)) => NodeRpc::try_from(r.r#type).ok(),
                None => None,
            })
            .collect();
        let topology = info.accessible_topology.as_ref().map(|t| {
            t.segments
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        });
        self.node = Some(NodeCapabilities {
            node_id: info.node_id.clone(),
            max_volumes_per_node: info.max_volumes_per_node,
            accessible_topology: topology,
            stage_unstage: rpcs.contains(&NodeRpc::StageUnstageVolume),
            volume_stats: rpcs.contains(&NodeRpc::GetVolumeStats),
            expand: rpcs.contains(&NodeRpc::ExpandVolume),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(t: PluginService) -> v1::PluginCapability {
        v1::PluginCapability {
            r#type: Some(v1::plugin_capability::Type::Service(
                v1::plugin_capability::Service { r#type: t as i32 },
            )),
        }
    }

    fn controller_rpc(t: i32) -> v1::ControllerServiceCapability {
        v1::ControllerServiceCapability {
            r#type: Some(v1::controller_service_capability::Type::Rpc(
                v1::controller_service_capability::Rpc { r#type: t },
            )),
        }
    }

    #[test]
    fn summary_reads_each_capability_and_ignores_unknown_ones() {
        let info = v1::GetPluginInfoResponse {
            name: "x.example".into(),
            vendor_version: "1.2".into(),
            manifest: Default::default(),
        };
        let caps = v1::GetPluginCapabilitiesResponse {
            capabilities: vec![service(PluginService::ControllerService)],
        };
        let mut summary = PluginInfo::from_identity(&info, &caps);
        assert!(summary.controller_service);
        assert!(!summary.accessibility_constraints);
        summary.set_controller(&v1::ControllerGetCapabilitiesResponse {
            capabilities: vec![
                controller_rpc(ControllerRpc::PublishUnpublishVolume as i32),
                controller_rpc(ControllerRpc::ExpandVolume as i32),
                controller_rpc(9999),
            ],
        });
        let controller = summary.controller.unwrap();
        assert!(controller.publish_unpublish && controller.expand);
        assert!(!controller.create_delete && !controller.snapshots);

        let node_caps = v1::NodeGetCapabilitiesResponse {
            capabilities: vec![v1::NodeServiceCapability {
                r#type: Some(v1::node_service_capability::Type::Rpc(
                    v1::node_service_capability::Rpc {
                        r#type: NodeRpc::StageUnstageVolume as i32,
                    },
                )),
            }],
        };
        let node_info = v1::NodeGetInfoResponse {
            node_id: "n1".into(),
            max_volumes_per_node: 3,
            accessible_topology: Some(v1::Topology {
                segments: [("zone".to_string(), "a".to_string())].into(),
            }),
        };
        summary.set_node(&node_caps, &node_info);
        let node = summary.node.unwrap();
        assert_eq!(node.node_id, "n1");
        assert_eq!(node.max_volumes_per_node, 3);
        assert!(node.stage_unstage && !node.expand);
        assert_eq!(node.accessible_topology.unwrap()["zone"], "a");
    }
}

//! Deployments (Nomad's `upsertDeploymentImpl`).

use super::jobs::update_job_stability;
use super::Txn;
use crate::error::StateError;
use model::deployment::{Deployment, DeploymentStatusUpdate, DEPLOYMENT_STATUS_SUCCESSFUL};

/// `DeploymentUpsert`.
pub(super) fn upsert(tx: &mut Txn, deployment: &Deployment) -> Result<(), StateError> {
    if deployment.id.is_empty() {
        return Err(StateError::invalid("deployment has no ID"));
    }
    upsert_deployment(tx, deployment.clone());
    Ok(())
}

/// Keeps the create index of an existing deployment; a successful deployment marks its job version
/// stable.
pub(super) fn upsert_deployment(tx: &mut Txn, mut deployment: Deployment) {
    let index = tx.index();
    deployment.create_index = tx
        .deployments()
        .get(&deployment.id)
        .map_or(index, |d| d.create_index);
    deployment.modify_index = index;
    let successful = deployment.status == DEPLOYMENT_STATUS_SUCCESSFUL;
    let (ns, job_id, version) = (
        deployment.namespace.clone(),
        deployment.job_id.clone(),
        deployment.job_version,
    );
    tx.put_deployment(deployment);
    if successful {
        update_job_stability(tx, &ns, &job_id, version);
    }
}

/// Nomad's `updateDeploymentStatusImpl`: a plan's status change for a deployment. An unknown
/// deployment (garbage-collected since the plan was made) is skipped rather than failing the plan.
pub(super) fn update_status(tx: &mut Txn, update: &DeploymentStatusUpdate) {
    let Some(current) = tx.deployments().get(&update.deployment_id).cloned() else {
        return;
    };
    let mut deployment = (*current).clone();
    deployment.status.clone_from(&update.status);
    deployment
        .status_description
        .clone_from(&update.status_description);
    upsert_deployment(tx, deployment);
}

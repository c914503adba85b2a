//! `/v1/evaluations`, `/v1/evaluation/:id`, `/v1/evaluation/:id/allocations`.

use crate::client::{Client, QueryMeta, QueryOptions};
use crate::error::Result;
use model::{AllocListStub, Evaluation};

impl Client {
    /// `GET /v1/evaluations` (with `q.prefix`: those whose ID starts with it).
    pub async fn list_evaluations(&self, q: &QueryOptions) -> Result<(Vec<Evaluation>, QueryMeta)> {
        self.query(&["v1", "evaluations"], &[], q).await
    }

    /// `GET /v1/evaluation/:id`. With `q.index`, a blocking query: answers when the evaluation
    /// changes past that index, or after `q.wait`.
    pub async fn get_evaluation(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Evaluation, QueryMeta)> {
        self.query(&["v1", "evaluation", id], &[], q).await
    }

    /// `GET /v1/evaluation/:id/allocations`: the allocations the evaluation placed or changed.
    pub async fn evaluation_allocations(
        &self,
        id: &str,
        q: &QueryOptions,
    ) -> Result<(Vec<AllocListStub>, QueryMeta)> {
        self.query(&["v1", "evaluation", id, "allocations"], &[], q)
            .await
    }
}

impl Client {
    /// `DELETE /v1/evaluations` by ID (the eval broker must be paused): how many went.
    pub async fn delete_evaluations(&self, ids: &[String]) -> Result<u64> {
        let body = serde_json::json!({ "EvalIDs": ids });
        let (resp, _): (serde_json::Value, _) = self
            .write(
                reqwest::Method::DELETE,
                &["v1", "evaluations"],
                &[],
                Some(&body),
                &crate::client::WriteOptions::default(),
            )
            .await?;
        Ok(resp["Count"].as_u64().unwrap_or(0))
    }

    /// `GET /v1/evaluations/count`.
    pub async fn count_evaluations(&self, q: &QueryOptions) -> Result<u64> {
        let (resp, _): (serde_json::Value, _) =
            self.query(&["v1", "evaluations", "count"], &[], q).await?;
        Ok(resp["Count"].as_u64().unwrap_or(0))
    }
}

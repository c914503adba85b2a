//! `/v1/acl/*` and `/v1/namespace(s)`: bootstrap, policies, tokens, one-time tokens, roles,
//! namespaces.

use crate::client::{Client, QueryOptions, WriteOptions};
use crate::error::Result;
use model::acl::{
    AclPolicy, AclPolicyListStub, AclRole, AclToken, AclTokenListStub, Namespace, OneTimeToken,
};
use reqwest::Method;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(default)]
struct OneTimeReply {
    #[serde(rename = "OneTimeToken")]
    one_time_token: Option<OneTimeToken>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ExchangeReply {
    #[serde(rename = "Token")]
    token: Option<AclToken>,
}

impl Client {
    async fn put_json<B: serde::Serialize + ?Sized, T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
        body: Option<&B>,
    ) -> Result<T> {
        let (v, _) = self
            .write(Method::PUT, segments, &[], body, &WriteOptions::default())
            .await?;
        Ok(v)
    }

    async fn delete_path(&self, segments: &[&str]) -> Result<()> {
        let (_, _): (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                segments,
                &[],
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `POST /v1/acl/bootstrap`, with an operator-chosen secret when given.
    pub async fn acl_bootstrap(&self, secret: Option<&str>) -> Result<AclToken> {
        let body = secret.map(|s| serde_json::json!({ "BootstrapSecret": s }));
        let (v, _) = self
            .write(
                Method::POST,
                &["v1", "acl", "bootstrap"],
                &[],
                body.as_ref(),
                &WriteOptions::default(),
            )
            .await?;
        Ok(v)
    }

    pub async fn acl_policies(&self, opts: &QueryOptions) -> Result<Vec<AclPolicyListStub>> {
        Ok(self.query(&["v1", "acl", "policies"], &[], opts).await?.0)
    }

    pub async fn acl_policy(&self, name: &str) -> Result<AclPolicy> {
        let opts = QueryOptions::default();
        Ok(self
            .query(&["v1", "acl", "policy", name], &[], &opts)
            .await?
            .0)
    }

    pub async fn acl_policy_upsert(&self, policy: &AclPolicy) -> Result<()> {
        let _: serde_json::Value = self
            .put_json(&["v1", "acl", "policy", &policy.name], Some(policy))
            .await?;
        Ok(())
    }

    pub async fn acl_policy_delete(&self, name: &str) -> Result<()> {
        self.delete_path(&["v1", "acl", "policy", name]).await
    }

    pub async fn acl_tokens(&self, opts: &QueryOptions) -> Result<Vec<AclTokenListStub>> {
        Ok(self.query(&["v1", "acl", "tokens"], &[], opts).await?.0)
    }

    pub async fn acl_token(&self, accessor_id: &str) -> Result<AclToken> {
        let opts = QueryOptions::default();
        Ok(self
            .query(&["v1", "acl", "token", accessor_id], &[], &opts)
            .await?
            .0)
    }

    pub async fn acl_token_self(&self) -> Result<AclToken> {
        let opts = QueryOptions::default();
        Ok(self
            .query(&["v1", "acl", "token", "self"], &[], &opts)
            .await?
            .0)
    }

    pub async fn acl_token_create(&self, token: &AclToken) -> Result<AclToken> {
        self.put_json(&["v1", "acl", "token"], Some(token)).await
    }

    pub async fn acl_token_update(&self, token: &AclToken) -> Result<AclToken> {
        self.put_json(&["v1", "acl", "token", &token.accessor_id], Some(token))
            .await
    }

    pub async fn acl_token_delete(&self, accessor_id: &str) -> Result<()> {
        self.delete_path(&["v1", "acl", "token", accessor_id]).await
    }

    /// `POST /v1/acl/token/onetime`: a one-time token for the caller's own token.
    pub async fn acl_one_time_token(&self) -> Result<Option<OneTimeToken>> {
        let r: OneTimeReply = self
            .put_json::<(), _>(&["v1", "acl", "token", "onetime"], None)
            .await?;
        Ok(r.one_time_token)
    }

    pub async fn acl_one_time_exchange(&self, secret: &str) -> Result<Option<AclToken>> {
        let body = serde_json::json!({ "OneTimeSecretID": secret });
        let r: ExchangeReply = self
            .put_json(&["v1", "acl", "token", "onetime", "exchange"], Some(&body))
            .await?;
        Ok(r.token)
    }

    pub async fn acl_roles(&self, opts: &QueryOptions) -> Result<Vec<AclRole>> {
        Ok(self.query(&["v1", "acl", "roles"], &[], opts).await?.0)
    }

    pub async fn acl_role(&self, id: &str) -> Result<AclRole> {
        let opts = QueryOptions::default();
        Ok(self.query(&["v1", "acl", "role", id], &[], &opts).await?.0)
    }

    pub async fn acl_role_by_name(&self, name: &str) -> Result<AclRole> {
        let opts = QueryOptions::default();
        Ok(self
            .query(&["v1", "acl", "role", "name", name], &[], &opts)
            .await?
            .0)
    }

    pub async fn acl_role_create(&self, role: &AclRole) -> Result<AclRole> {
        self.put_json(&["v1", "acl", "role"], Some(role)).await
    }

    pub async fn acl_role_update(&self, role: &AclRole) -> Result<AclRole> {
        self.put_json(&["v1", "acl", "role", &role.id], Some(role))
            .await
    }

    pub async fn acl_role_delete(&self, id: &str) -> Result<()> {
        self.delete_path(&["v1", "acl", "role", id]).await
    }

    pub async fn namespaces(&self, opts: &QueryOptions) -> Result<Vec<Namespace>> {
        Ok(self.query(&["v1", "namespaces"], &[], opts).await?.0)
    }

    pub async fn namespace(&self, name: &str) -> Result<Namespace> {
        let opts = QueryOptions::default();
        Ok(self.query(&["v1", "namespace", name], &[], &opts).await?.0)
    }

    pub async fn namespace_upsert(&self, ns: &Namespace) -> Result<()> {
        let _: serde_json::Value = self
            .put_json(&["v1", "namespace", &ns.name], Some(ns))
            .await?;
        Ok(())
    }

    pub async fn namespace_delete(&self, name: &str) -> Result<()> {
        self.delete_path(&["v1", "namespace", name]).await
    }
}

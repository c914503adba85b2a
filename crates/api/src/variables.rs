//! Variables (`/v1/vars`, `/v1/var/:path`) and the root keyring (`/v1/operator/keyring/*`).

use crate::client::{Client, QueryMeta, QueryOptions, WriteOptions};
use crate::error::{ApiError, Error, Result};
use model::variable::{RootKeyMeta, VariableDecrypted, VariableMetadata};
use reqwest::Method;

/// The outcome of a check-and-set or lock write that the agent refused with 409: the variable as
/// it stands (items only when the token may read them).
#[derive(Debug, Clone)]
pub enum VarWriteOutcome {
    Written(VariableDecrypted),
    Conflict(VariableDecrypted),
}

fn var_segments(path: &str) -> Vec<&str> {
    let mut segs = vec!["v1", "var"];
    segs.extend(path.split('/').filter(|s| !s.is_empty()));
    segs
}

/// A 409 whose body is the conflicting variable, else the error as it was.
fn conflict_of(e: Error) -> Result<VariableDecrypted> {
    match e {
        Error::Api(ApiError {
            status: 409,
            message,
        }) => model::json::from_str(&message).map_err(|_| {
            Error::Api(ApiError {
                status: 409,
                message,
            })
        }),
        other => Err(other),
    }
}

impl Client {
    /// Variables' metadata (never their items) whose path starts with `opts.prefix`.
    pub async fn vars(&self, opts: &QueryOptions) -> Result<(Vec<VariableMetadata>, QueryMeta)> {
        self.query(&["v1", "vars"], &[], opts).await
    }

    pub async fn var_get(
        &self,
        path: &str,
        opts: &QueryOptions,
    ) -> Result<(VariableDecrypted, QueryMeta)> {
        self.query(&var_segments(path), &[], opts).await
    }

    /// Writes `var` at its path; with `cas`, only if the stored modify index is that (0: absent).
    pub async fn var_put(
        &self,
        var: &VariableDecrypted,
        cas: Option<u64>,
        opts: &WriteOptions,
    ) -> Result<VarWriteOutcome> {
        let params: Vec<(&'static str, String)> =
            cas.map(|c| ("cas", c.to_string())).into_iter().collect();
        self.var_write(var, &params, opts).await
    }

    /// A PUT of `var` whose 409 carries the conflicting variable.
    async fn var_write(
        &self,
        var: &VariableDecrypted,
        params: &[(&'static str, String)],
        opts: &WriteOptions,
    ) -> Result<VarWriteOutcome> {
        match self
            .write(
                Method::PUT,
                &var_segments(&var.meta.path),
                params,
                Some(var),
                opts,
            )
            .await
        {
            Ok((v, _)) => Ok(VarWriteOutcome::Written(v)),
            Err(e) => conflict_of(e).map(VarWriteOutcome::Conflict),
        }
    }

    /// Deletes the variable at `path`; with `cas`, only if its modify index is that.
    pub async fn var_delete(
        &self,
        path: &str,
        cas: Option<u64>,
        opts: &WriteOptions,
    ) -> Result<Option<VariableDecrypted>> {
        let params: Vec<(&'static str, String)> =
            cas.map(|c| ("cas", c.to_string())).into_iter().collect();
        let written: Result<(serde_json::Value, QueryMeta)> = self
            .write::<(), _>(Method::DELETE, &var_segments(path), &params, None, opts)
            .await;
        match written {
            Ok(_) => Ok(None),
            Err(e) => conflict_of(e).map(Some),
        }
    }

    /// A lock operation (`lock-acquire`, `lock-renew`, `lock-release`) on `var` (its `Lock` names
    /// the TTL and delay for an acquire, the lock ID for the others).
    pub async fn var_lock(
        &self,
        operation: &'static str,
        var: &VariableDecrypted,
        opts: &WriteOptions,
    ) -> Result<VarWriteOutcome> {
        self.var_write(var, &[(operation, String::new())], opts)
            .await
    }

    pub async fn keyring_list(&self) -> Result<Vec<RootKeyMeta>> {
        Ok(self
            .query(
                &["v1", "operator", "keyring", "keys"],
                &[],
                &QueryOptions::default(),
            )
            .await?
            .0)
    }

    /// A new active root key; `full` re-encrypts every variable with it.
    pub async fn keyring_rotate(&self, full: bool) -> Result<Option<RootKeyMeta>> {
        #[derive(serde::Deserialize)]
        struct Out {
            #[serde(rename = "Key")]
            key: Option<RootKeyMeta>,
        }
        let params: Vec<(&'static str, String)> = if full {
            vec![("full", String::new())]
        } else {
            Vec::new()
        };
        let (out, _): (Out, _) = self
            .write::<(), _>(
                Method::PUT,
                &["v1", "operator", "keyring", "rotate"],
                &params,
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(out.key)
    }

    pub async fn keyring_remove(&self, key_id: &str) -> Result<()> {
        let _: (serde_json::Value, _) = self
            .write::<(), _>(
                Method::DELETE,
                &["v1", "operator", "keyring", "key", key_id],
                &[],
                None,
                &WriteOptions::default(),
            )
            .await?;
        Ok(())
    }
}

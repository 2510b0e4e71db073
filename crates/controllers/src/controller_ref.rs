//! Adoption and release of dependents (upstream's `ControllerRefManager`,
//! `ClaimPods`): an owner claims the dependents it controls that its
//! selector still matches, adopts orphans its selector matches (after one
//! live read shows it is not being deleted), and releases those it controls
//! that no longer match. The ReplicaSet, Deployment (over ReplicaSets) and
//! Job controllers share it; a Job also puts its tracking finalizer on what
//! it adopts and takes it off what it releases.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use rudder_runtime::meta::{controller_of, labels_of, selector_matches};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::{Error, api_error, is_status};

/// A namespaced kind of object, as the claim needs it.
pub trait Namespaced:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned
{
}

impl<K> Namespaced for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
{
}

/// The controller reference to `owner` its dependents carry.
pub fn controller_reference<O: Resource<DynamicType = ()>>(owner: &O) -> OwnerReference {
    rudder_runtime::meta::controller_reference(owner).unwrap_or_else(|| OwnerReference {
        api_version: O::api_version(&()).into_owned(),
        kind: O::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// One owner claiming its dependents.
pub struct Claim<'a, O> {
    pub client: &'a Client,
    pub owner: &'a O,
    pub selector: &'a LabelSelector,
    /// What adopted dependents get and released ones lose (the Job's
    /// tracking finalizer), if anything.
    pub finalizer: Option<&'a str>,
}

impl<O: Namespaced> Claim<'_, O> {
    /// The dependents among `candidates` the owner keeps: those it controls
    /// and its selector matches (all it controls while it is being
    /// deleted), plus the orphans it adopted. Dependents of other
    /// controllers are left alone.
    pub async fn claim<D: Namespaced>(
        &self,
        candidates: Vec<Arc<D>>,
    ) -> Result<Vec<Arc<D>>, Error> {
        let uid = self.owner.meta().uid.clone().unwrap_or_default();
        let deleting = self.owner.meta().deletion_timestamp.is_some();
        let mut claimed = Vec::new();
        let mut fresh_checked = false;
        for d in candidates {
            let matches = selector_matches(self.selector, labels_of(&*d));
            match controller_of(&*d) {
                Some(reference) if reference.uid == uid => {
                    if matches || deleting {
                        claimed.push(d);
                    } else {
                        self.release(&*d).await?;
                    }
                }
                Some(_) => {}
                None => {
                    if !matches || deleting || d.meta().deletion_timestamp.is_some() {
                        continue;
                    }
                    if !fresh_checked {
                        self.check_live().await?;
                        fresh_checked = true;
                    }
                    if let Some(adopted) = self.adopt(&*d).await? {
                        claimed.push(Arc::new(adopted));
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// Upstream reads the owner live once before adopting: one being
    /// deleted (its cache behind) must not adopt what the garbage collector
    /// just orphaned.
    async fn check_live(&self) -> Result<(), Error> {
        let owner = self.owner.meta();
        let live = Api::<O>::namespaced(
            self.client.clone(),
            owner.namespace.as_deref().unwrap_or_default(),
        )
        .get_opt(&self.owner.name_any())
        .await
        .map_err(api_error(format!(
            "get {} {} before adopting",
            O::kind(&()),
            self.owner.name_any()
        )))?;
        match live {
            Some(live)
                if live.meta().uid == owner.uid && live.meta().deletion_timestamp.is_none() =>
            {
                Ok(())
            }
            // Its cache is behind: nothing is decided on it.
            _ => Err(Error::Failed(format!(
                "{} {} changed or is being deleted: not adopting",
                O::kind(&()),
                self.owner.name_any()
            ))),
        }
    }

    /// Patches `d` (strategic merge); `None` if it is gone or changed
    /// under us (the uid in the patch guards it, as do `tolerated` codes).
    async fn patch<D: Namespaced>(
        &self,
        d: &D,
        what: &str,
        patch: serde_json::Value,
        tolerated: &[u16],
    ) -> Result<Option<D>, Error> {
        let api: Api<D> = Api::namespaced(
            self.client.clone(),
            d.meta().namespace.as_deref().unwrap_or_default(),
        );
        match api
            .patch(
                &d.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(patched) => Ok(Some(patched)),
            Err(e) if tolerated.iter().any(|code| is_status(&e, *code)) => Ok(None),
            Err(e) => Err(api_error(format!(
                "{what} {} {}",
                D::kind(&()).to_lowercase(),
                d.name_any()
            ))(e)),
        }
    }

    /// Makes the owner the controller of the orphan `d`; `None` if it is
    /// gone or changed under us.
    async fn adopt<D: Namespaced>(&self, d: &D) -> Result<Option<D>, Error> {
        let mut patch = json!({"metadata": {
            "ownerReferences": [controller_reference(self.owner)],
            "uid": d.meta().uid,
        }});
        if let Some(finalizer) = self.finalizer {
            patch["metadata"]["finalizers"] = json!([finalizer]);
        }
        self.patch(d, "adopt", patch, &[404, 409]).await
    }

    /// Removes the owner from the owners of `d` (and the finalizer).
    async fn release<D: Namespaced>(&self, d: &D) -> Result<(), Error> {
        let owner_uid = self.owner.meta().uid.clone().unwrap_or_default();
        let mut patch = json!({"metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "uid": d.meta().uid,
        }});
        if let Some(finalizer) = self.finalizer {
            patch["metadata"]["$deleteFromPrimitiveList/finalizers"] = json!([finalizer]);
        }
        self.patch(d, "release", patch, &[404, 409, 422])
            .await
            .map(drop)
    }
}

//! The garbage collector's calls to the API server (upstream's
//! `operations.go` and `patch.go`): metadata reads, deletes with
//! preconditions, owner-reference patches and finalizer removal — all on
//! any resource, through discovery's mapping of kinds to resources.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::{Client, ResourceExt};
use rudder_api::strategy::Propagation;
use serde_json::json;

use super::graph::Identity;
use crate::discovery::{Resource, Resources};

/// An error of one garbage-collection step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {object}: {source}")]
    Api {
        what: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("no resource serves {kind} in {api_version}")]
    Unmapped { api_version: String, kind: String },
    #[error("cluster-scoped objects cannot refer to namespaced owners")]
    NamespacedOwnerOfClusterScoped,
    #[error("{0}")]
    Other(String),
}

fn api_error<'a>(
    what: &'static str,
    object: &'a Identity,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Api {
        what,
        object: object.to_string(),
        source,
    }
}

/// Whether an API error is a 404.
pub fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// The API of `identity`'s resource, in its namespace when namespaced.
pub fn resource_of<'r>(
    resources: &'r Resources,
    identity: &Identity,
) -> Result<&'r Resource, Error> {
    resources
        .for_kind(&identity.api_version, &identity.kind)
        .ok_or_else(|| Error::Unmapped {
            api_version: identity.api_version.clone(),
            kind: identity.kind.clone(),
        })
}

fn api<K>(client: &Client, resource: &Resource, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<
            DynamicType = kube::api::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    match namespace.filter(|_| resource.namespaced) {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource.api),
        None => Api::all_with(client.clone(), &resource.api),
    }
}

/// The object's metadata as stored now, `None` if it is gone (or its uid
/// is another's: a new object of the same name).
pub async fn get(
    client: &Client,
    resources: &Resources,
    identity: &Identity,
) -> Result<Option<PartialObjectMeta<DynamicObject>>, Error> {
    let resource = resource_of(resources, identity)?;
    let found =
        api::<PartialObjectMeta<DynamicObject>>(client, resource, identity.namespace.as_deref())
            .get_opt(&identity.name)
            .await
            .map_err(api_error("get", identity))?;
    Ok(found.filter(|o| o.metadata.uid.as_deref() == Some(identity.uid.as_str())))
}

fn policy(propagation: Propagation) -> PropagationPolicy {
    match propagation {
        Propagation::Background => PropagationPolicy::Background,
        Propagation::Foreground => PropagationPolicy::Foreground,
        Propagation::Orphan => PropagationPolicy::Orphan,
    }
}

/// Deletes `identity` as it was read (uid and `resource_version`
/// preconditions) with `propagation`. A conflict on the resourceVersion
/// alone, with the owner references unchanged, is retried on the uid
/// alone, as upstream. `Ok(false)` when it was gone already.
pub async fn delete(
    client: &Client,
    resources: &Resources,
    identity: &Identity,
    resource_version: Option<String>,
    owners: &[OwnerReference],
    propagation: Propagation,
) -> Result<bool, Error> {
    let resource = resource_of(resources, identity)?;
    let api = api::<DynamicObject>(client, resource, identity.namespace.as_deref());
    let params = |rv: Option<String>| DeleteParams {
        propagation_policy: Some(policy(propagation)),
        preconditions: Some(Preconditions {
            uid: Some(identity.uid.clone()),
            resource_version: rv,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&identity.name, &params(resource_version)).await {
        Ok(_) => Ok(true),
        Err(e) if not_found(&e) => Ok(false),
        Err(e) if conflict(&e) => {
            let Some(latest) = get(client, resources, identity).await? else {
                return Ok(false);
            };
            if latest.owner_references() != owners {
                return Err(Error::Other(format!(
                    "{identity} changed its owners while being deleted; looking again"
                )));
            }
            match api.delete(&identity.name, &params(None)).await {
                Ok(_) => Ok(true),
                Err(e) if not_found(&e) => Ok(false),
                Err(e) => Err(api_error("delete", identity)(e)),
            }
        }
        Err(e) => Err(api_error("delete", identity)(e)),
    }
}

/// Deletes `identity` if it is still at `resource_version` (and the same
/// uid): `Some(true)` deleted, `Some(false)` gone already, `None` changed
/// since (so the caller reads it again).
pub async fn delete_if_unchanged(
    client: &Client,
    resources: &Resources,
    identity: &Identity,
    resource_version: &str,
    propagation: Propagation,
) -> Result<Option<bool>, Error> {
    let resource = resource_of(resources, identity)?;
    let api = api::<DynamicObject>(client, resource, identity.namespace.as_deref());
    let params = DeleteParams {
        propagation_policy: Some(policy(propagation)),
        preconditions: Some(Preconditions {
            uid: Some(identity.uid.clone()),
            resource_version: Some(resource_version.to_string()),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&identity.name, &params).await {
        Ok(_) => Ok(Some(true)),
        Err(e) if not_found(&e) => Ok(Some(false)),
        Err(e) if conflict(&e) => Ok(None),
        Err(e) => Err(api_error("delete", identity)(e)),
    }
}

/// Patches `identity`'s owner references: those of `remove` deleted, and
/// those of `unblock` set not to block. A strategic merge patch keyed by
/// uid (with the dependent's uid as a precondition); for kinds without
/// strategic merge (custom resources), a JSON merge patch of the remaining
/// list at the resourceVersion read.
pub async fn patch_owners(
    client: &Client,
    resources: &Resources,
    identity: &Identity,
    remove: &[String],
    unblock: &[String],
) -> Result<(), Error> {
    let resource = resource_of(resources, identity)?;
    let api = api::<DynamicObject>(client, resource, identity.namespace.as_deref());
    let mut refs: Vec<serde_json::Value> = remove
        .iter()
        .map(|uid| json!({"$patch": "delete", "uid": uid}))
        .collect();
    refs.extend(
        unblock
            .iter()
            .map(|uid| json!({"uid": uid, "blockOwnerDeletion": false})),
    );
    let strategic = json!({"metadata": {"uid": identity.uid, "ownerReferences": refs}});
    match api
        .patch(
            &identity.name,
            &PatchParams::default(),
            &Patch::Strategic(&strategic),
        )
        .await
    {
        Ok(_) => return Ok(()),
        Err(e) if not_found(&e) => return Ok(()),
        Err(kube::Error::Api(status)) if status.code == 415 => {}
        Err(e) => return Err(api_error("patch the owners of", identity)(e)),
    }
    // Custom resources: the whole list, at the version read.
    let Some(latest) = get(client, resources, identity).await? else {
        return Ok(());
    };
    let remaining: Vec<OwnerReference> = latest
        .owner_references()
        .iter()
        .filter(|r| !remove.contains(&r.uid))
        .map(|r| {
            let mut r = r.clone();
            if unblock.contains(&r.uid) {
                r.block_owner_deletion = Some(false);
            }
            r
        })
        .collect();
    let merge = json!({"metadata": {"resourceVersion": latest.metadata.resource_version, "ownerReferences": remaining}});
    match api
        .patch(
            &identity.name,
            &PatchParams::default(),
            &Patch::Merge(&merge),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(api_error("patch the owners of", identity)(e)),
    }
}

/// Removes `finalizer` from `identity` (retrying conflicts): a JSON merge
/// patch of the remaining list at the resourceVersion read. Removing the
/// last finalizer of an object being deleted deletes it.
pub async fn remove_finalizer(
    client: &Client,
    resources: &Resources,
    identity: &Identity,
    finalizer: &str,
) -> Result<(), Error> {
    /// Upstream's `retry.DefaultBackoff` steps.
    const ATTEMPTS: usize = 5;
    let resource = resource_of(resources, identity)?;
    let api = api::<DynamicObject>(client, resource, identity.namespace.as_deref());
    for _ in 0..ATTEMPTS {
        let Some(latest) = get(client, resources, identity).await? else {
            return Ok(());
        };
        if !latest.finalizers().iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let rest: Vec<&String> = latest
            .finalizers()
            .iter()
            .filter(|f| *f != finalizer)
            .collect();
        let patch = json!({"metadata": {"resourceVersion": latest.metadata.resource_version, "finalizers": rest}});
        match api
            .patch(
                &identity.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) if conflict(&e) => continue,
            Err(e) => return Err(api_error("remove a finalizer of", identity)(e)),
        }
    }
    Err(Error::Other(format!(
        "updateMaxRetries({ATTEMPTS}) has reached. The garbage collector will retry later for owner {identity}"
    )))
}

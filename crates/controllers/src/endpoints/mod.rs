//! The Endpoints, EndpointSlice and EndpointSlice mirroring controllers
//! (upstream's `pkg/controller/endpoint`, `endpointslice` and
//! `endpointslicemirroring`): every Service with a selector gets an
//! Endpoints object and EndpointSlices listing the pods it selects — their
//! IPs, readiness, and each port resolved (a named `targetPort` by the
//! pod's container port of that name); a selector-less Service's manual
//! Endpoints are mirrored into EndpointSlices.

pub mod compute;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::expectations::Seen;
use rudder_runtime::informer::{NAMESPACE_INDEX, Store, key, key_of};
use rudder_runtime::meta::{controller_of, controller_reference};
use rudder_runtime::{Change, Expectations, WorkQueue};
use tokio_util::sync::CancellationToken;

use self::compute::{MANAGED_BY, MIRROR_MANAGER, SERVICE_NAME, SLICE_MANAGER};
use crate::Context;
use crate::is_status;

struct Controller {
    ctx: Arc<Context>,
    services: Store<Service>,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    slices: Store<EndpointSlice>,
    /// For the endpoints' zones (their node's `topology.kubernetes.io/zone`).
    nodes: Store<Node>,
    queue: WorkQueue<String>,
    /// Slices created and not yet seen in the cache, per Service: until
    /// they show, the Service's slices are not written again (a second
    /// identical slice would be made).
    expectations: Expectations,
}

/// Runs the three controllers (one queue of Services) until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let services = ctx.informers.typed::<Service>();
    let pods = ctx.informers.typed::<Pod>();
    let endpoints = ctx.informers.typed::<Endpoints>();
    let slices = ctx.informers.typed::<EndpointSlice>();
    let nodes = ctx.informers.typed::<Node>();
    let mut node_changes = nodes.subscribe();
    let (mut service_changes, mut pod_changes) = (services.subscribe(), pods.subscribe());
    let (mut endpoint_changes, mut slice_changes) = (endpoints.subscribe(), slices.subscribe());
    let c = Arc::new(Controller {
        services: services.store(),
        pods: pods.store(),
        endpoints: endpoints.store(),
        slices: slices.store(),
        nodes: nodes.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        expectations: Expectations::new(ctx.clock.clone()),
        ctx: ctx.clone(),
    });
    services.wait_synced().await;
    pods.wait_synced().await;
    endpoints.wait_synced().await;
    slices.wait_synced().await;
    nodes.wait_synced().await;
    let all = {
        let c = c.clone();
        move || {
            c.services.keys().into_iter().for_each(|k| c.queue.add(k));
            // Endpoints and slices of Services that are gone.
            c.endpoints.keys().into_iter().for_each(|k| c.queue.add(k));
        }
    };
    all();
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = service_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: s, .. } | Change::Deleted(s)) => c.queue.add(key_of(&*s)),
                        Some(Change::Resync) => all(),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { old, new }) => {
                            if old.as_ref().is_some_and(|o| o.metadata.resource_version == new.metadata.resource_version) {
                                continue;
                            }
                            c.pod_changed(&new);
                            if let Some(old) = old.filter(|o| o.metadata.labels != new.metadata.labels) {
                                c.pod_changed(&old);
                            }
                        }
                        Some(Change::Deleted(old)) => c.pod_changed(&old),
                        Some(Change::Resync) => all(),
                    },
                    change = endpoint_changes.next_until(&stop) => match change {
                        None => return,
                        // For a Service's own (repaired, or mirrored); an
                        // Endpoints without a Service is left alone until
                        // the next start (upstream's leftover check).
                        Some(Change::Applied { new: e, .. } | Change::Deleted(e)) => {
                            let key = key_of(&*e);
                            if c.services.get(&key).is_some() {
                                c.queue.add(key);
                            }
                        }
                        Some(Change::Resync) => all(),
                    },
                    change = slice_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) => c.slice_changed(&new, false),
                        Some(Change::Deleted(old)) => c.slice_changed(&old, true),
                        Some(Change::Resync) => all(),
                    },
                    // A node's zone changes its endpoints' zones and hints.
                    change = node_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { old: Some(old), new }) if compute::zone_of(&old) == compute::zone_of(&new) => {}
                        Some(_) => all(),
                    },
                }
            }
        }
    };
    crate::serve(
        "endpoint",
        c.clone(),
        c.queue.clone(),
        ctx.options.endpoint_workers,
        None,
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    /// Queues the Services of `pod`'s namespace that select it.
    fn pod_changed(&self, pod: &Pod) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for service in self.services.by_index(NAMESPACE_INDEX, namespace) {
            let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
            if selector.is_some_and(|sel| {
                !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
            }) {
                self.queue.add(key_of(&*service));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let service = self.services.get(key);
        let selector = service
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.selector.clone())
            .filter(|s| !s.is_empty());
        let endpoints_api: Api<Endpoints> = Api::namespaced(self.ctx.client.clone(), namespace);
        let slices = self.slices_of(namespace, name);
        let slices_current = self
            .expectations
            .satisfied(key, |k| match self.slices.get(k) {
                None => Seen::Absent,
                Some(_) => Seen::Present,
            });
        match (&service, selector) {
            // Gone: its Endpoints goes (its slices are the garbage
            // collector's, owned by it).
            (None, _) => {
                // Leader-election records kept in Endpoints are not ours.
                let leftover = self.endpoints.get(key).is_some_and(|e| {
                    !e.annotations()
                        .contains_key("control-plane.alpha.kubernetes.io/leader")
                });
                // The Services cache may be behind the Endpoints one (an
                // Endpoints written just after its Service, seen by the
                // startup listing or a resync first): a live read decides
                // before anything of the user's is deleted.
                let service_exists = || async {
                    Api::<Service>::namespaced(self.ctx.client.clone(), namespace)
                        .get_opt(name)
                        .await
                        .map(|s| s.is_some())
                };
                if leftover && !service_exists().await? {
                    match endpoints_api.delete(name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(e) if is_status(&e, 404) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(Action::Done)
            }
            (Some(service), Some(selector)) => {
                let pods: Vec<Arc<Pod>> = self
                    .pods
                    .by_index(NAMESPACE_INDEX, namespace)
                    .into_iter()
                    .filter(|p| {
                        let labels = p.metadata.labels.as_ref();
                        selector
                            .iter()
                            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
                    })
                    .collect();
                let found = compute::endpoints_of(service, &pods);
                let wanted = compute::endpoints_object(service, &found);
                self.write_endpoints(&endpoints_api, wanted).await?;
                let zone = |node: &str| self.nodes.get(node).and_then(|n| compute::zone_of(&n));
                let wanted_slices = compute::slices(service, &found, &zone);
                let owner = controller_reference(&**service);
                if slices_current {
                    self.write_slices(key, namespace, slices, wanted_slices, SLICE_MANAGER, owner)
                        .await?;
                }
                Ok(Action::Done)
            }
            // No selector: manual Endpoints, mirrored.
            (Some(service), None) => {
                let manual = self.endpoints.get(key).filter(|e| {
                    e.labels()
                        .get("endpointslice.kubernetes.io/skip-mirror")
                        .map(String::as_str)
                        != Some("true")
                });
                let (wanted, owner) = match &manual {
                    Some(e) => (
                        compute::mirrored_slices(service, e),
                        controller_reference(&**e),
                    ),
                    None => (Vec::new(), None),
                };
                if slices_current {
                    self.write_slices(key, namespace, slices, wanted, MIRROR_MANAGER, owner)
                        .await?;
                }
                Ok(Action::Done)
            }
        }
    }

    /// Queues `slice`'s Service, and marks the slice seen (or gone) for
    /// its expectations: a slice created and deleted before a sync looked
    /// is not waited for until the expectation lapses.
    fn slice_changed(&self, slice: &EndpointSlice, gone: bool) {
        if let Some(service) = slice.labels().get(SERVICE_NAME) {
            let service = key(slice.metadata.namespace.as_deref(), service);
            self.expectations.observed(&service, &key_of(slice), gone);
            self.queue.add(service);
        }
    }

    fn slices_of(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        self.slices
            .by_index(NAMESPACE_INDEX, namespace)
            .into_iter()
            .filter(|s| s.labels().get(SERVICE_NAME).map(String::as_str) == Some(service))
            .collect()
    }

    /// Creates or updates the Endpoints unless it already says `wanted`.
    async fn write_endpoints(
        &self,
        api: &Api<Endpoints>,
        wanted: Endpoints,
    ) -> Result<(), kube::Error> {
        let name = wanted.name_any();
        let existing = self
            .endpoints
            .get_in(wanted.metadata.namespace.as_deref(), &name);
        match existing {
            None => match api.create(&PostParams::default(), &wanted).await {
                Ok(_) => Ok(()),
                // There already (the cache is behind), or the namespace is going.
                Err(e) if is_status(&e, 409) || is_status(&e, 403) => Ok(()),
                Err(e) => Err(e),
            },
            Some(existing) => {
                let same = existing.subsets == wanted.subsets
                    && compute::labels_match(
                        existing.metadata.labels.as_ref(),
                        wanted.metadata.labels.as_ref(),
                    );
                if same {
                    return Ok(());
                }
                let mut updated = (*existing).clone();
                updated.subsets = wanted.subsets;
                updated.metadata.labels = wanted.metadata.labels;
                match api.replace(&name, &PostParams::default(), &updated).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Makes the slices `manager` manages for a Service the `wanted` ones:
    /// existing slices are rewritten in place, missing ones created, extra
    /// ones deleted; slices another manager owns are left alone.
    async fn write_slices(
        &self,
        key: &str,
        namespace: &str,
        existing: Vec<Arc<EndpointSlice>>,
        wanted: Vec<EndpointSlice>,
        manager: &str,
        owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    ) -> Result<(), kube::Error> {
        let api: Api<EndpointSlice> = Api::namespaced(self.ctx.client.clone(), namespace);
        let mut mine: Vec<Arc<EndpointSlice>> = existing
            .into_iter()
            .filter(|s| s.labels().get(MANAGED_BY).map(String::as_str) == Some(manager))
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .filter(|s| {
                owner
                    .as_ref()
                    .is_none_or(|o| controller_of(&**s).is_some_and(|r| r.uid == o.uid))
            })
            .collect();
        mine.sort_by_key(|s| s.name_any());
        let mut by_address_type: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for slice in mine {
            by_address_type
                .entry(slice.address_type.clone())
                .or_default()
                .push(slice);
        }
        let mut reusable: BTreeMap<String, std::collections::VecDeque<Arc<EndpointSlice>>> =
            by_address_type
                .into_iter()
                .map(|(k, v)| (k, v.into()))
                .collect();
        for mut slice in wanted {
            slice.metadata.owner_references = owner.clone().map(|o| vec![o]);
            match reusable
                .get_mut(&slice.address_type)
                .and_then(|q| q.pop_front())
            {
                Some(current) => {
                    if compute::slice_matches(&current, &slice) {
                        continue;
                    }
                    let mut updated = (*current).clone();
                    updated.endpoints = slice.endpoints;
                    updated.ports = slice.ports;
                    updated.metadata.labels = slice.metadata.labels;
                    match api
                        .replace(&current.name_any(), &PostParams::default(), &updated)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    self.expectations.expect_creations(key, 1);
                    match api.create(&PostParams::default(), &slice).await {
                        Ok(created) => self.expectations.created(key, Some(key_of(&created))),
                        Err(e) => {
                            self.expectations.created(key, None);
                            if !is_status(&e, 403) {
                                return Err(e);
                            }
                        }
                    }
                }
            }
        }
        for extra in reusable.into_values().flatten() {
            match api
                .delete(&extra.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

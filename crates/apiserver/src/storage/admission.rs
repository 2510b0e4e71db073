//! The admission the storage layer runs for clients' writes of the main
//! resource (upstream's admission chain, the plugins that need the store):
//!
//! - **Mutating steps** on a new object (after the kind's defaults, before
//!   validation): upstream's LimitRanger defaults, ServiceAccount,
//!   Priority, DefaultTolerationSeconds and DefaultStorageClass, as the
//!   ordered list [`rudder_api::admission::CHAIN`] of pure steps; this
//!   module reads what they need (LimitRanges, the pod's ServiceAccount and
//!   PriorityClass, the default StorageClass) and answers Priority's 403s.
//! - **LimitRanger**'s bounds: pods and claims are held to the ranges —
//!   403 otherwise.
//! - **ResourceQuota**: a create (or an update that grows a Service or a
//!   claim) is measured with [`rudder_api::quota`] against every quota of
//!   the namespace it falls under; one that would exceed a quota is a 403
//!   `exceeded quota`, and one that fits is charged to the quotas'
//!   `status.used` before the write, so concurrent creates cannot overrun a
//!   quota together. Evaluations of one namespace are serialized (upstream
//!   batches them per namespace); the ResourceQuota controller recomputes
//!   the real usage, returning what a failed write was charged.
//!
//! Writes the API server makes itself (its bootstrap objects, the
//! controllers it hosts through the storage layer) skip admission, as
//! upstream's storage-level writes do.

use rudder_api::object::{self, Part};
use rudder_api::quota::{self, ResourceList, Target};
use rudder_api::{ResourceDef, Status, admission, limitrange};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::{ListRequest, MAX_RETRIES, Selectors, Storage, WriteOptions};

/// Quota evaluations are serialized per namespace on one of these locks,
/// chosen by the namespace's hash.
#[derive(Debug)]
pub struct QuotaLocks([tokio::sync::Mutex<()>; 32]);

impl Default for QuotaLocks {
    fn default() -> Self {
        QuotaLocks(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl QuotaLocks {
    fn of(&self, namespace: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        namespace.hash(&mut hasher);
        &self.0[(hasher.finish() % self.0.len() as u64) as usize]
    }
}

/// What LimitRanger acts on: pod creates, claim creates and updates.
fn limited(def: &ResourceDef, creating: bool) -> bool {
    def.group.is_empty()
        && match def.plural.as_ref() {
            "pods" => creating,
            "persistentvolumeclaims" => true,
            _ => false,
        }
}

/// The 403 an admission plugin answers, worded as upstream's
/// `admission.NewForbidden`: `pods "name" is forbidden: why`.
fn forbidden(def: &ResourceDef, object: &Value, why: &str) -> Status {
    let target = def.target();
    let qualified = if target.group.is_empty() {
        target.resource.to_string()
    } else {
        format!("{}.{}", target.resource, target.group)
    };
    let name = ["/metadata/name", "/metadata/generateName"]
        .iter()
        .find_map(|p| object.pointer(p).and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .unwrap_or("Unknown");
    let mut status = Status::forbidden(format!("{qualified} {name:?} is forbidden: {why}"));
    status.details = Some(Box::new(rudder_api::status::Details {
        group: target.group.to_string(),
        kind: target.resource.to_string(),
        name: name.to_string(),
        uid: String::new(),
    }));
    status
}

impl Storage<'_> {
    /// What mutating admission needs for a client's create of `object`.
    pub(super) async fn mutations(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: &Value,
        options: &WriteOptions,
    ) -> Result<Mutations, Status> {
        let ranges = self.limit_ranges(def, namespace, true, options).await?;
        let default_class = if options.admit && wants_default_class(def, object) {
            let classes = self
                .cached(("storage.k8s.io", "v1", "storageclasses"), None)
                .await?;
            default_class(&classes)
        } else {
            None
        };
        let pod =
            options.admit && def.custom.is_none() && def.group.is_empty() && def.plural == "pods";
        let priority = if pod {
            Some(self.pod_priority(def, object).await?)
        } else {
            None
        };
        let service_account = match namespace {
            Some(ns) if pod => self.service_account(ns, object).await?,
            _ => None,
        };
        Ok(Mutations {
            admit: options.admit,
            ranges: ranges.clone(),
            inputs: admission::Inputs {
                limit_ranges: ranges,
                service_account,
                volume_suffix: super::name_suffix(),
                priority,
                default_class,
            },
        })
    }

    /// The ServiceAccount a new pod runs as, if it exists (from the watch
    /// cache, as upstream's admission reads its informer).
    async fn service_account(&self, namespace: &str, pod: &Value) -> Result<Option<Value>, Status> {
        let name = ["/spec/serviceAccountName", "/spec/serviceAccount"]
            .iter()
            .find_map(|p| pod.pointer(p).and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        let accounts = self
            .cached(("", "v1", "serviceaccounts"), Some(namespace))
            .await?;
        Ok(accounts
            .into_iter()
            .find(|a| a.pointer("/metadata/name").and_then(Value::as_str) == Some(name)))
    }

    /// Upstream's Priority admission: a pod's `priorityClassName` (or the
    /// global default class) gives its `priority` and `preemptionPolicy`; a
    /// class that does not exist, or a priority the pod sets itself that
    /// differs, is a 403.
    async fn pod_priority(
        &self,
        def: &ResourceDef,
        pod: &Value,
    ) -> Result<(Option<String>, i64, String), Status> {
        let Some(classes_def) = self
            .state
            .registry()
            .get("scheduling.k8s.io", "v1", "priorityclasses")
            .cloned()
        else {
            return Ok((None, 0, "PreemptLowerPriority".into()));
        };
        let named = pod
            .pointer("/spec/priorityClassName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let class = match named {
            Some(name) => match self.get(&classes_def, None, name).await {
                Ok(found) => Some(found.object),
                Err(status) if status.code == 404 => {
                    return Err(forbidden(
                        def,
                        pod,
                        &format!("no PriorityClass with name {name} was found"),
                    ));
                }
                Err(status) => return Err(status),
            },
            None => global_default(
                &self
                    .cached(("scheduling.k8s.io", "v1", "priorityclasses"), None)
                    .await?,
            ),
        };
        let value = class
            .as_ref()
            .and_then(|c| c.get("value"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let policy = class
            .as_ref()
            .and_then(|c| c.get("preemptionPolicy"))
            .and_then(Value::as_str)
            .unwrap_or("PreemptLowerPriority")
            .to_string();
        if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64)
            && given != value
        {
            return Err(forbidden(
                def,
                pod,
                &format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
                ),
            ));
        }
        if let Some(given) = pod
            .pointer("/spec/preemptionPolicy")
            .and_then(Value::as_str)
            && given != policy
        {
            return Err(forbidden(
                def,
                pod,
                &format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                ),
            ));
        }
        let name = class
            .as_ref()
            .and_then(|c| c.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok((name, value, policy))
    }

    /// The objects of a built-in resource (in `namespace`, or all of them)
    /// from its watch cache — what upstream's admission reads from its
    /// informers — so a write pays no store read for plugins with nothing
    /// to do.
    async fn cached(
        &self,
        (group, version, resource): (&str, &str, &str),
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, Status> {
        let Some(def) = self.state.registry().get(group, version, resource).cloned() else {
            return Ok(Vec::new());
        };
        let cache = self.state.cache(&def);
        cache.wait_for(0).await?;
        let prefix = match namespace {
            Some(ns) => format!("{}{ns}/", def.key_prefix()),
            None => def.key_prefix(),
        };
        Ok(cache
            .snapshot(&prefix, None)
            .objects
            .iter()
            .map(|c| super::served(&def, c.value()))
            .collect())
    }

    /// The objects of the built-in core resource `resource` in `namespace`.
    async fn in_namespace(
        &self,
        resource: &str,
        namespace: &str,
    ) -> Result<(Arc<ResourceDef>, Vec<Value>), Status> {
        let def = self
            .state
            .registry()
            .get("", "v1", resource)
            .cloned()
            .ok_or_else(|| Status::internal(format!("{resource} are not served")))?;
        let all = Selectors::parse(&def, "", "")?;
        let listed = self
            .list(&def, Some(namespace), &all, &ListRequest::default())
            .await?;
        Ok((def, listed.items))
    }

    /// The LimitRanges that apply to a write of `def`'s objects, if it
    /// is one LimitRanger acts on.
    pub(super) async fn limit_ranges(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        creating: bool,
        options: &WriteOptions,
    ) -> Result<Vec<Value>, Status> {
        match namespace {
            Some(ns) if options.admit && limited(def, creating) => {
                self.cached(("", "v1", "limitranges"), Some(ns)).await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// LimitRanger's bounds on a pod or claim already defaulted.
    pub(super) fn check_limits(
        &self,
        def: &ResourceDef,
        ranges: &[Value],
        object: &Value,
    ) -> Result<(), Status> {
        if ranges.is_empty() {
            return Ok(());
        }
        let checked = match def.plural.as_ref() {
            "pods" => limitrange::validate_pod(ranges, object),
            _ => limitrange::validate_claim(ranges, object),
        };
        checked.map_err(|why| forbidden(def, object, &why))
    }

    /// ResourceQuota admission of `object` (replacing `old`, on an
    /// update): refuses what would exceed a quota, charges what fits.
    pub(super) async fn admit_quota(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: &Value,
        old: Option<&Value>,
        options: &WriteOptions,
    ) -> Result<(), Status> {
        let Some(ns) = namespace.filter(|_| def.namespaced && options.admit) else {
            return Ok(());
        };
        let target = Target::new(&def.group, &def.plural);
        if old.is_some() && !target.measures_updates() {
            return Ok(());
        }
        // No quota in the namespace (the common case): nothing to do.
        if self
            .cached(("", "v1", "resourcequotas"), Some(ns))
            .await?
            .is_empty()
        {
            return Ok(());
        }
        let _serial = self.state.quota_locks.of(ns).lock().await;
        for _ in 0..MAX_RETRIES {
            let (quotas_def, quotas) = self.in_namespace("resourcequotas", ns).await?;
            if quotas.is_empty() {
                return Ok(());
            }
            let charged = check_request(&target, def, &quotas, object, old, self.now())?;
            if charged.is_empty() || options.dry_run {
                return Ok(());
            }
            if self.charge(&quotas_def, ns, charged).await? {
                return Ok(());
            }
        }
        Err(forbidden(
            def,
            object,
            "status unknown for quota: the quotas kept changing while the request was admitted",
        ))
    }

    /// Writes each quota's new `status.used`, compare-and-swap on the
    /// version read (not through [`Storage::update`], which admits);
    /// `false` if one changed meanwhile (the request is evaluated again).
    async fn charge(
        &self,
        def: &ResourceDef,
        namespace: &str,
        charged: Vec<(Value, ResourceList)>,
    ) -> Result<bool, Status> {
        for (old, used) in charged {
            let name = super::name_of(&old);
            let revision = super::resource_version(&old)?.unwrap_or_default();
            let mut new = old.clone();
            new["status"]["used"] = quota::to_json(&used);
            object::prepare_update(def, &mut new, &old, Part::Status)?;
            self.record_managed(
                def,
                Part::Status,
                Some(&old),
                &mut new,
                &WriteOptions::server(),
            );
            let key = def.key(Some(namespace), &name);
            match self
                .state
                .store
                .update(key.as_bytes(), super::stored(def, &new), revision)
                .await
            {
                Ok(_) => {}
                Err(rudder_store::Error::Conflict { .. } | rudder_store::Error::NotFound) => {
                    return Ok(false);
                }
                Err(e) => return Err(crate::response::store_error(e, def, &name)),
            }
        }
        Ok(true)
    }
}

/// Upstream's `CheckRequest`: the quotas `object` falls under, each with
/// the usage it would have once `object` is written; a 403 if the object
/// misses what a quota requires, a quota has not been counted yet, or the
/// object would exceed one.
fn check_request(
    target: &Target<'_>,
    def: &ResourceDef,
    quotas: &[Value],
    object: &Value,
    old: Option<&Value>,
    now: std::time::SystemTime,
) -> Result<Vec<(Value, ResourceList)>, Status> {
    let mut interesting = Vec::new();
    for q in quotas {
        if !target.matches(q, object) {
            continue;
        }
        let name = q
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let hard = quota::list(q.pointer("/status/hard"));
        let used = quota::list(q.pointer("/status/used"));
        let restricted = target.matching_resources(hard.keys());
        target
            .constraints(&restricted, object)
            .map_err(|why| forbidden(def, object, &format!("failed quota: {name}: {why}")))?;
        if restricted.iter().any(|r| !used.contains_key(r)) {
            let names: BTreeSet<&String> = restricted.iter().collect();
            let names: Vec<&str> = names.into_iter().map(String::as_str).collect();
            return Err(forbidden(
                def,
                object,
                &format!(
                    "status unknown for quota: {name}, resources: {}",
                    names.join(",")
                ),
            ));
        }
        interesting.push((q, hard, used));
    }
    if interesting.is_empty() {
        return Ok(Vec::new());
    }
    let mut delta = target.usage(object, now);
    if let Some(negative) = delta.iter().find(|(_, q)| q.is_negative()) {
        return Err(forbidden(
            def,
            object,
            &format!("quota usage is negative for resource(s): {}", negative.0),
        ));
    }
    if let Some(old) = old {
        delta = quota::subtract_non_negative(&delta, &target.usage(old, now));
    }
    delta.retain(|_, q| !q.is_zero());
    if delta.is_empty() {
        return Ok(Vec::new());
    }
    let mut charged = Vec::new();
    for (q, hard, used) in interesting {
        let requested = quota::mask(&delta, hard.keys());
        let new_used = quota::add(&used, &requested);
        let exceeded = quota::exceeded(&quota::mask(&new_used, requested.keys()), &hard);
        if !exceeded.is_empty() {
            let name = q
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(forbidden(
                def,
                object,
                &format!(
                    "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                    quota::pretty(&quota::mask(&requested, &exceeded)),
                    quota::pretty(&quota::mask(&used, &exceeded)),
                    quota::pretty(&quota::mask(&hard, &exceeded)),
                ),
            ));
        }
        if requested.is_empty() {
            continue;
        }
        charged.push((q.clone(), new_used));
    }
    Ok(charged)
}

/// What mutating admission read from the store for a create (the
/// namespace's LimitRanges, the pod's ServiceAccount and PriorityClass, the
/// default StorageClass), for [`admission::CHAIN`].
#[derive(Debug, Default)]
pub(super) struct Mutations {
    /// Whether the write is admitted at all (the server's own are not).
    admit: bool,
    pub ranges: Vec<Value>,
    inputs: admission::Inputs,
}

impl Mutations {
    /// Runs upstream's mutating admission steps on a new object, after its
    /// defaults and before it is validated.
    pub fn apply(&self, def: &ResourceDef, object: &mut Value) {
        if self.admit {
            admission::admit(&self.inputs, def, object);
        }
    }
}

/// Whether a new claim asks for the default class: it names none, not
/// even "" (upstream's DefaultStorageClass admission).
fn wants_default_class(def: &ResourceDef, object: &Value) -> bool {
    def.group.is_empty()
        && def.plural == "persistentvolumeclaims"
        && object
            .pointer("/spec/storageClassName")
            .is_none_or(Value::is_null)
        && object
            .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
            .is_none()
}

/// The PriorityClass marked `globalDefault` (the lowest value if several
/// are, as upstream).
fn global_default(classes: &[Value]) -> Option<Value> {
    classes
        .iter()
        .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
        .cloned()
}

/// The default StorageClass: annotated as the default, the newest when
/// several are (upstream's `GetDefaultClass`).
fn default_class(classes: &[Value]) -> Option<String> {
    let is_default = |c: &Value| {
        [
            "storageclass.kubernetes.io~1is-default-class",
            "storageclass.beta.kubernetes.io~1is-default-class",
        ]
        .iter()
        .any(|a| {
            c.pointer(&format!("/metadata/annotations/{a}"))
                .and_then(Value::as_str)
                == Some("true")
        })
    };
    let field = |c: &Value, f: &str| {
        c.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    classes
        .iter()
        .filter(|c| is_default(c))
        .max_by(|a, b| {
            (field(a, "creationTimestamp"), field(b, "name"))
                .cmp(&(field(b, "creationTimestamp"), field(a, "name")))
        })
        .map(|c| field(c, "name"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pods() -> Arc<ResourceDef> {
        rudder_api::Registry::builtin()
            .get("", "v1", "pods")
            .cloned()
            .expect("pods")
    }

    fn quota(hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": "q"}, "spec": {"hard": hard}, "status": {"hard": hard, "used": used}})
    }

    fn pod(cpu: &str) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}
        ]}})
    }

    #[test]
    fn the_default_class_is_the_newest_annotated_one() {
        let class = |name: &str, at: &str, default: bool| {
            json!({"metadata": {"name": name, "creationTimestamp": at, "annotations":
                if default { json!({"storageclass.kubernetes.io/is-default-class": "true"}) } else { json!({}) }}})
        };
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("new", "2026-02-01T00:00:00Z", true),
            class("newest-not-default", "2026-03-01T00:00:00Z", false),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("new"));
        assert_eq!(default_class(&classes[2..]), None);
    }

    #[test]
    fn a_create_that_fits_is_charged_and_one_that_does_not_is_refused() {
        let def = pods();
        let target = Target::new("", "pods");
        let now = std::time::SystemTime::now();
        let quotas = [quota(
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "500m"}),
        )];
        let charged = check_request(&target, &def, &quotas, &pod("300m"), None, now).expect("fits");
        assert_eq!(
            quota::to_json(&charged[0].1),
            json!({"pods": "2", "requests.cpu": "800m"})
        );
        let refused =
            check_request(&target, &def, &quotas, &pod("600m"), None, now).expect_err("exceeds");
        assert_eq!(refused.code, 403);
        assert_eq!(
            refused.message,
            "pods \"p\" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1"
        );
    }

    #[test]
    fn an_uncounted_quota_or_a_missing_request_is_refused() {
        let def = pods();
        let target = Target::new("", "pods");
        let now = std::time::SystemTime::now();
        let uncounted = [quota(json!({"pods": "2"}), json!({}))];
        let refused =
            check_request(&target, &def, &uncounted, &pod("1"), None, now).expect_err("unknown");
        assert_eq!(
            refused.message,
            "pods \"p\" is forbidden: status unknown for quota: q, resources: pods"
        );
        let compute = [quota(
            json!({"limits.memory": "1Gi"}),
            json!({"limits.memory": "0"}),
        )];
        let refused =
            check_request(&target, &def, &compute, &pod("1"), None, now).expect_err("must specify");
        assert_eq!(
            refused.message,
            "pods \"p\" is forbidden: failed quota: q: must specify limits.memory for: c"
        );
    }
}

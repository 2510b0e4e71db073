//! create, update, patch, delete and deletecollection. Every update goes
//! through one compare-and-swap loop on the store's `mod_revision`.

use axum::http::StatusCode;
use bytes::Bytes;
use rudder_api::object::{self, FieldValidation, Part, Stamp};
use rudder_api::patch::{self, PatchType};
use rudder_api::structure::{Shape, Types};
use rudder_api::{ResourceDef, Status};
use serde_json::{Value, json};

use super::objects::{
    decode, name_suffix, now, now_seconds, resource_version, served, set_resource_version, stored,
    uid,
};
use super::read::{Selectors, list_objects};
use super::{Context, apply};
use crate::negotiate::content_type;
use crate::response::{ApiResult, json_response, store_error, with_warnings};
use crate::services;

/// How many times an update retries a conflict it may resolve itself.
const MAX_RETRIES: usize = 8;

fn is_service(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.kind == "Service"
}

pub fn parse_json(body: &Bytes) -> Result<Value, Status> {
    serde_json::from_slice(body)
        .map_err(|e| Status::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// The object a request body carries: JSON, YAML, or Kubernetes protobuf
/// as kubectl 1.32+ sends it.
pub fn object_body(ctx: &Context, body: &Bytes) -> Result<Value, Status> {
    object_body_checked(ctx, body).map(|(value, _)| value)
}

/// The same, with the paths of keys a JSON body repeats.
pub fn object_body_checked(ctx: &Context, body: &Bytes) -> Result<(Value, Vec<String>), Status> {
    match content_type(&ctx.headers).as_str() {
        "application/json" | "*/*" => {
            let parsed = rudder_api::json::parse(body).map_err(|e| {
                Status::bad_request(format!("the request body is not valid JSON: {e}"))
            })?;
            Ok((parsed.value, parsed.duplicates))
        }
        "application/yaml" => {
            let value: Value = serde_yaml_ng::from_slice(body).map_err(|e| {
                Status::bad_request(format!("the request body is not valid YAML: {e}"))
            })?;
            Ok((value, Vec::new()))
        }
        "application/vnd.kubernetes.protobuf" => {
            rudder_api::protobuf::decode(&ctx.state.registry(), body)
                .map(|value| (value, Vec::new()))
                .map_err(|e| {
                    Status::bad_request(format!(
                        "the request body is not a valid Kubernetes protobuf object: {e}"
                    ))
                })
        }
        other => Err(Status::unsupported_media_type(other)),
    }
}

/// Unknown fields, as `fieldValidation` wants them treated: an error when
/// Strict, warnings when Warn.
pub fn check_fields(ctx: &Context, object: &Value) -> Result<Vec<String>, Status> {
    check_fields_with(ctx, object, &[])
}

/// Unknown and duplicate fields, as `fieldValidation` wants them treated.
pub fn check_fields_with(
    ctx: &Context,
    object: &Value,
    duplicates: &[String],
) -> Result<Vec<String>, Status> {
    let mode = FieldValidation::parse(ctx.params.get("fieldValidation"))?;
    let unknown = object::unknown_fields(ctx.def(), object)?;
    if (unknown.is_empty() && duplicates.is_empty()) || mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let mut problems: Vec<String> = duplicates
        .iter()
        .map(|f| format!("duplicate field {f:?}"))
        .collect();
    problems.extend(unknown.iter().map(|f| format!("unknown field {f:?}")));
    if mode == FieldValidation::Strict {
        return Err(object::strict_error(ctx.def(), &problems));
    }
    Ok(problems)
}

fn name_of(object: &Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

pub async fn create(ctx: &Context, body: Bytes) -> ApiResult {
    let (mut object, duplicates) = object_body_checked(ctx, &body)?;
    object::check_type(ctx.def(), &mut object)?;
    let warnings = check_fields_with(ctx, &object, &duplicates)?;
    create_object(ctx, object, warnings).await
}

/// Creates `object` (a request's, or what an apply made of nothing),
/// answering 201 with `warnings`.
pub async fn create_object(ctx: &Context, mut object: Value, warnings: Vec<String>) -> ApiResult {
    ctx.check_namespace(true).await?;
    let (now, uid, suffix) = (now(), uid(), name_suffix());
    object::prepare_create(
        ctx.def(),
        &mut object,
        ctx.namespace(),
        &Stamp {
            now: &now,
            uid: &uid,
            suffix: &suffix,
        },
    )?;
    if !apply::is_apply(ctx) {
        apply::record_update(ctx, Part::Main, None, &mut object)?;
    }
    let name = name_of(&object);
    if !ctx.params.dry_run()? {
        let allocation = if is_service(ctx.def()) {
            Some(services::allocate(&ctx.state, ctx.def(), &mut object).await?)
        } else {
            None
        };
        let key = ctx.def().key(ctx.namespace(), &name);
        match ctx
            .state
            .store
            .create(key.as_bytes(), stored(ctx.def(), &object))
            .await
        {
            Ok(kv) => set_resource_version(&mut object, kv.mod_revision),
            Err(e) => {
                if let Some(allocation) = &allocation {
                    services::release(&ctx.state, allocation).await;
                }
                return Err(store_error(e, ctx.def(), &name).into());
            }
        }
    }
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &object),
        &warnings,
    ))
}

/// The outcome of one update attempt.
enum Attempt {
    /// The object as written (or as it was, when nothing changed).
    Done(Value),
    Retry,
}

/// Reads the object, computes its new form with `change`, and writes it if
/// it changed — retrying on a concurrent write unless the request pinned a
/// `resourceVersion`. `part` says what the request may write. Returns the
/// object as stored.
pub async fn update_object<F>(ctx: &Context, part: Part, change: F) -> Result<Value, Status>
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    for _ in 0..MAX_RETRIES {
        match update_once(ctx, part, &change).await? {
            Attempt::Done(object) => return Ok(object),
            Attempt::Retry => continue,
        }
    }
    Err(Status::modified(ctx.def().target(), ctx.name()))
}

/// [`update_object`], answered with the object and `warnings`.
pub async fn update_with<F>(
    ctx: &Context,
    part: Part,
    warnings: Vec<String>,
    change: F,
) -> ApiResult
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    let object = update_object(ctx, part, change).await?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &object),
        &warnings,
    ))
}

async fn update_once<F>(ctx: &Context, part: Part, change: &F) -> Result<Attempt, Status>
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    let def = ctx.def();
    let (old, revision) = ctx.current().await?;
    let mut new = change(&old)?;
    let pinned = resource_version(&new)?;
    if let Some(pinned) = pinned
        && pinned != revision
    {
        return Err(Status::modified(def.target(), ctx.name()));
    }
    if is_service(def) {
        services::keep_on_update(def, &mut new, &old)?;
    }
    object::prepare_update(def, &mut new, &old, part)?;
    // A binding leaves the Pod's managed fields as they are, as upstream's
    // binding storage writes the Pod directly.
    if !apply::is_apply(ctx) && part != Part::Binding {
        apply::record_update(ctx, part, Some(&old), &mut new)?;
    }
    set_resource_version(&mut new, revision);
    if new == old {
        return Ok(Attempt::Done(old));
    }
    if ctx.params.dry_run()? {
        return Ok(Attempt::Done(new));
    }
    let store = &ctx.state.store;
    let key = ctx.key();
    let finalized = is_terminating(&new) && finalizers(&new).is_empty();
    let added = if is_service(def) && !finalized {
        services::allocate_on_update(&ctx.state, def, &mut new, &old).await?
    } else {
        services::Allocation::default()
    };
    let result = if finalized {
        store
            .delete(key.as_bytes(), Some(revision))
            .await
            .map(|d| d.revision)
    } else {
        store
            .update(key.as_bytes(), stored(def, &new), revision)
            .await
            .map(|kv| kv.mod_revision)
    };
    if result.is_err() {
        services::release(&ctx.state, &added).await;
    } else if is_service(def) {
        // Free what the old object held and the new one does not.
        let before = services::held_by(&old);
        let after = if finalized {
            services::Allocation::default()
        } else {
            services::held_by(&new)
        };
        let freed = services::Allocation {
            ip: before.ip.filter(|ip| after.ip != Some(*ip)),
            node_ports: before
                .node_ports
                .into_iter()
                .filter(|p| !after.node_ports.contains(p))
                .collect(),
        };
        services::release(&ctx.state, &freed).await;
    }
    match result {
        Ok(written) => {
            set_resource_version(&mut new, written);
            Ok(Attempt::Done(new))
        }
        Err(rudder_store::Error::Conflict { .. }) if pinned.is_none() => Ok(Attempt::Retry),
        Err(e) => Err(store_error(e, def, ctx.name())),
    }
}

pub async fn update(ctx: &Context, body: Bytes) -> ApiResult {
    let (mut object, duplicates) = object_body_checked(ctx, &body)?;
    object::check_type(ctx.def(), &mut object)?;
    let warnings = check_fields_with(ctx, &object, &duplicates)?;
    if let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str)
        && name != ctx.name()
    {
        return Err(Status::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            ctx.name()
        ))
        .into());
    }
    update_with(ctx, Part::Main, warnings, |_| Ok(object.clone())).await
}

/// The object a patch of `old` produces; `schema` names the OpenAPI
/// definition of `old` (the kind's, or `Scale`'s), whose merge metadata a
/// strategic merge patch follows.
pub fn apply_patch(
    ctx: &Context,
    schema: &str,
    old: &Value,
    patch_body: &Value,
) -> Result<Value, Status> {
    let media = content_type(&ctx.headers);
    let mut base = old.clone();
    if let Some(meta) = base.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    match PatchType::from_content_type(&media) {
        Some(PatchType::Json) => patch::json_patch(&base, patch_body),
        Some(PatchType::Merge) => patch::merge_patch(&base, patch_body),
        Some(PatchType::StrategicMerge) => {
            let types = Types::builtin();
            let root = types.root(schema);
            if matches!(root, Shape::Untyped) {
                // As upstream: custom resources carry no merge metadata.
                return Err(Status::unsupported_media_type(&format!(
                    "{media}: strategic merge patch is not supported for {}; use --type=merge or --type=json",
                    ctx.def().kind
                )));
            }
            patch::strategic::apply(types, &root, &base, patch_body)
        }
        Some(PatchType::Apply) => Err(Status::bad_request(
            "an apply patch is served by server-side apply, not merged as a patch",
        )),
        None => Err(Status::unsupported_media_type(&media)),
    }
}

pub async fn patch_part(ctx: &Context, body: Bytes, part: Part) -> ApiResult {
    if apply::is_apply(ctx) {
        return apply::serve(ctx, body, part).await;
    }
    apply::check_patch_options(ctx)?;
    let patch_body = parse_json(&body)?;
    update_checked(ctx, part, |old| {
        apply_patch(ctx, &ctx.def().schema_name, old, &patch_body)
    })
    .await
}

/// [`update_object`] for a change that is not a whole object (a patch, an
/// apply): the unknown fields it brings are judged on the object it
/// produces, as `fieldValidation` says.
pub async fn update_checked<F>(ctx: &Context, part: Part, change: F) -> ApiResult
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    let warnings = std::sync::Mutex::new(Vec::new());
    let object = update_object(ctx, part, |old| {
        let changed = change(old)?;
        let found = check_fields(ctx, &changed)?;
        *warnings.lock().unwrap_or_else(|e| e.into_inner()) = found;
        Ok(changed)
    })
    .await?;
    let warnings = warnings.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(with_warnings(
        json_response(StatusCode::OK, &object),
        &warnings,
    ))
}

pub async fn patch(ctx: &Context, body: Bytes) -> ApiResult {
    patch_part(ctx, body, Part::Main).await
}

fn is_terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn finalizers(object: &Value) -> Vec<Value> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// `DeleteOptions` from the body and the query.
#[derive(Debug, Default)]
struct DeleteOptions {
    grace_period: Option<i64>,
    uid: Option<String>,
    resource_version: Option<u64>,
}

fn delete_options(ctx: &Context, body: &Bytes) -> Result<DeleteOptions, Status> {
    let value = if body.is_empty() {
        None
    } else {
        Some(object_body(ctx, body)?)
    };
    parsed_delete_options(ctx, value.as_ref())
}

/// `DeleteOptions` from an already parsed body and the query.
fn parsed_delete_options(ctx: &Context, value: Option<&Value>) -> Result<DeleteOptions, Status> {
    let mut options = DeleteOptions::default();
    if let Some(value) = value {
        options.grace_period = value.get("gracePeriodSeconds").and_then(Value::as_i64);
        options.uid = value
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        options.resource_version = match value
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(rv) => Some(rv.parse().map_err(|_| {
                Status::bad_request(format!("invalid resourceVersion precondition {rv:?}"))
            })?),
            None => None,
        };
        if let Some(policy) = value.get("propagationPolicy").and_then(Value::as_str)
            && !matches!(policy, "Background" | "Foreground" | "Orphan")
        {
            return Err(Status::bad_request(format!(
                "propagationPolicy: Unsupported value: {policy:?}"
            )));
        }
    }
    if let Some(grace) = ctx.params.number("gracePeriodSeconds")? {
        options.grace_period = Some(grace);
    }
    Ok(options)
}

/// Deletes one object: at once, or — for a pod on a node given a grace
/// period, or an object with finalizers — by marking it deleted and leaving
/// the rest to whoever owns that step.
async fn delete_one(
    ctx: &Context,
    def: &ResourceDef,
    key: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<(StatusCode, Value), Status> {
    let store = &ctx.state.store;
    let dry_run = ctx.params.dry_run()?;
    for _ in 0..MAX_RETRIES {
        let kv = store
            .get(key.as_bytes(), None)
            .await
            .map_err(|e| store_error(e, def, name))?;
        let mut object = served(def, decode(&kv)?);
        let object_uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(uid) = &options.uid
            && *uid != object_uid
        {
            return Err(Status::conflict(
                def.target(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {object_uid}"
                ),
            ));
        }
        if let Some(rv) = options.resource_version
            && rv != kv.mod_revision
        {
            return Err(Status::conflict(
                def.target(),
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    kv.mod_revision
                ),
            ));
        }
        let on_node = def.group.is_empty()
            && def.kind == "Pod"
            && object
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
        let default_grace = object
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30);
        let grace = if on_node {
            options.grace_period.unwrap_or(default_grace).max(0)
        } else {
            0
        };
        let pending = !finalizers(&object).is_empty();
        if grace > 0 || pending {
            if is_terminating(&object) {
                let current = object
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if grace >= current || !on_node {
                    return Ok((StatusCode::OK, object));
                }
            }
            let deadline = rudder_api::time::format_rfc3339(now_seconds() + grace);
            object["metadata"]["deletionTimestamp"] = json!(deadline);
            object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            if dry_run {
                return Ok((StatusCode::OK, object));
            }
            match store
                .update(key.as_bytes(), stored(def, &object), kv.mod_revision)
                .await
            {
                Ok(written) => {
                    set_resource_version(&mut object, written.mod_revision);
                    let code = if pending && grace == 0 {
                        StatusCode::ACCEPTED
                    } else {
                        StatusCode::OK
                    };
                    return Ok((code, object));
                }
                Err(rudder_store::Error::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(e, def, name)),
            }
        }
        if dry_run {
            return Ok((StatusCode::OK, object));
        }
        match store.delete(key.as_bytes(), Some(kv.mod_revision)).await {
            Ok(deleted) => {
                if is_service(def) {
                    services::release(&ctx.state, &services::held_by(&object)).await;
                }
                set_resource_version(&mut object, deleted.revision);
                if def.group.is_empty() && def.kind == "Pod" {
                    return Ok((StatusCode::OK, object));
                }
                return Ok((
                    StatusCode::OK,
                    rudder_api::status::success_status(def.target(), name, &object_uid),
                ));
            }
            Err(rudder_store::Error::Conflict { .. }) => continue,
            Err(e) => return Err(store_error(e, def, name)),
        }
    }
    Err(Status::modified(def.target(), name))
}

pub async fn delete(ctx: &Context, body: Bytes) -> ApiResult {
    let value = if body.is_empty() {
        None
    } else {
        Some(object_body(ctx, &body)?)
    };
    delete_with(ctx, value.as_ref()).await
}

/// Deletes the named object with already parsed `DeleteOptions`.
pub async fn delete_with(ctx: &Context, options: Option<&Value>) -> ApiResult {
    let options = parsed_delete_options(ctx, options)?;
    let (code, object) = delete_one(ctx, ctx.def(), &ctx.key(), ctx.name(), &options).await?;
    Ok(json_response(code, &object))
}

pub async fn delete_collection(ctx: &Context, body: Bytes) -> ApiResult {
    let options = delete_options(ctx, &body)?;
    let selectors = Selectors::parse(ctx)?;
    let listed = list_objects(ctx, &selectors).await?;
    let mut deleted = Vec::new();
    for object in listed.items {
        let name = name_of(&object);
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let key = ctx.def().key(namespace, &name);
        match delete_one(ctx, ctx.def(), &key, &name, &options).await {
            Ok(_) => deleted.push(object),
            Err(status) if status.code == 404 => {}
            Err(status) => return Err(status.into()),
        }
    }
    let def = ctx.def();
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": {}, "items": deleted}),
    ))
}

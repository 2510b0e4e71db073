//! create, update, patch, delete and deletecollection: each request
//! decoded (body, media type, `fieldValidation`, `DeleteOptions`) into a
//! call of the storage layer, and its answer encoded as upstream's.

use axum::http::StatusCode;
use bytes::Bytes;
use rudder_api::Status;
use rudder_api::object::{self, FieldValidation, Part};
use rudder_api::patch::{self, PatchType};
use rudder_api::strategy::Propagation;
use rudder_api::structure::{Shape, Types};
use serde_json::{Value, json};

use super::{Context, apply};
use crate::negotiate::content_type;
use crate::response::{ApiResult, json_response, object_response, with_warnings};
use crate::storage::{DeleteOptions, Deleted};

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
        _ => Err(Status::unsupported_media_type(OBJECT_MEDIA_TYPES)),
    }
}

/// The media types of an object body (create, update), as upstream's
/// serializers list them.
const OBJECT_MEDIA_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

/// The patch types a resource takes, in upstream's order: custom resources
/// have no strategic merge patch.
fn patch_types(def: &rudder_api::ResourceDef) -> &'static [&'static str] {
    if def.custom.is_some() {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
    } else {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    }
}

/// Refuses a body in a media type the verb does not take, from the
/// headers alone, before the body is read (415, as upstream's handlers
/// answer). Bodies of other verbs (a delete's options) are judged when
/// read.
pub fn check_media_type(
    def: &rudder_api::ResourceDef,
    verb: super::Verb,
    headers: &axum::http::HeaderMap,
) -> Result<(), Status> {
    let media = content_type(headers);
    match verb {
        super::Verb::Patch => {
            let accepted = patch_types(def);
            if accepted.contains(&media.as_str()) {
                Ok(())
            } else {
                Err(Status::unsupported_media_type(accepted))
            }
        }
        super::Verb::Create | super::Verb::Update => {
            if media == "*/*" || OBJECT_MEDIA_TYPES.contains(&media.as_str()) {
                Ok(())
            } else {
                Err(Status::unsupported_media_type(OBJECT_MEDIA_TYPES))
            }
        }
        _ => Ok(()),
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

pub async fn create(ctx: &Context, body: Bytes) -> ApiResult {
    let (mut object, duplicates) = object_body_checked(ctx, &body)?;
    object::check_type(ctx.def(), &mut object)?;
    let warnings = check_fields_with(ctx, &object, &duplicates)?;
    create_object(ctx, object, warnings).await
}

/// Creates `object` (a request's, or what an apply made of nothing),
/// answering 201 with `warnings`.
pub async fn create_object(ctx: &Context, mut object: Value, warnings: Vec<String>) -> ApiResult {
    if let Some(record) = ctx.def().strategy.requester {
        record(&mut object, &ctx.user.name, &ctx.user.groups);
    }
    let options = ctx.write_options(!apply::is_apply(ctx))?;
    let created = ctx
        .state
        .storage()
        .create(ctx.def(), ctx.namespace(), object, &options)
        .await?;
    Ok(with_warnings(
        object_response(StatusCode::CREATED, ctx.def(), &created),
        &warnings,
    ))
}

/// Updates the addressed object with `change` through the storage layer;
/// `part` says what the request may write. Managed fields are recorded for
/// the request's manager unless it is an apply (which records its own) or
/// a binding (which leaves them, as upstream's binding storage).
pub async fn update_object<F>(ctx: &Context, part: Part, change: F) -> Result<Value, Status>
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    let record = !apply::is_apply(ctx) && part != Part::Binding;
    let options = ctx.write_options(record)?;
    let def = ctx.def();
    let subresource_update = def
        .strategy
        .subresource_update
        .zip(ctx.resource.subresource.as_deref());
    let now = ctx.state.clock.now_rfc3339();
    // What the kind's strategy keeps and refuses when a subresource
    // writes it, judged against the stored object the change is made of.
    let change = |old: &Value| {
        let mut new = change(old)?;
        if let Some((prepare, subresource)) = subresource_update {
            let causes = prepare(subresource, &mut new, old, &now);
            if !causes.is_empty() {
                return Err(Status::invalid(def.target(), ctx.name(), causes));
            }
        }
        Ok(new)
    };
    ctx.state
        .storage()
        .update(def, ctx.namespace(), ctx.name(), part, &options, change)
        .await
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
        object_response(StatusCode::OK, ctx.def(), &object),
        &warnings,
    ))
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
///
/// The patch applies to the object as stored, `resourceVersion` included
/// (a JSON patch may `test` it, as kopf's do). As upstream: a
/// `resourceVersion` the patch leaves as it was makes the update
/// unconditional, one the patch changes is a precondition (409 if stale).
pub fn apply_patch(
    ctx: &Context,
    schema: &str,
    old: &Value,
    patch_body: &Value,
) -> Result<Value, Status> {
    let mut patched = patch_object(ctx, schema, old, patch_body)?;
    let version = "/metadata/resourceVersion";
    if patched.pointer(version) == old.pointer(version)
        && let Some(meta) = patched.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("resourceVersion");
    }
    Ok(patched)
}

fn patch_object(
    ctx: &Context,
    schema: &str,
    base: &Value,
    patch_body: &Value,
) -> Result<Value, Status> {
    let media = content_type(&ctx.headers);
    match PatchType::from_content_type(&media) {
        Some(PatchType::Json) => patch::json_patch(base, patch_body),
        Some(PatchType::Merge) => patch::merge_patch(base, patch_body),
        Some(PatchType::StrategicMerge) => {
            let types = Types::builtin();
            let root = types.root(schema);
            if matches!(root, Shape::Untyped) {
                // As upstream: custom resources carry no merge metadata.
                return Err(Status::unsupported_media_type(patch_types(ctx.def())));
            }
            patch::strategic::apply(types, &root, base, patch_body)
        }
        Some(PatchType::Apply) => Err(Status::bad_request(
            "an apply patch is served by server-side apply, not merged as a patch",
        )),
        None => Err(Status::unsupported_media_type(patch_types(ctx.def()))),
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
        object_response(StatusCode::OK, ctx.def(), &object),
        &warnings,
    ))
}

pub async fn patch(ctx: &Context, body: Bytes) -> ApiResult {
    patch_part(ctx, body, Part::Main).await
}

/// `DeleteOptions` from the body (if any) and the query.
fn delete_options(ctx: &Context, body: Option<&Value>) -> Result<DeleteOptions, Status> {
    DeleteOptions::parse(
        body,
        ctx.params.number("gracePeriodSeconds")?,
        ctx.params.get("propagationPolicy"),
    )
}

fn parse_delete_body(ctx: &Context, body: &Bytes) -> Result<Option<Value>, Status> {
    if body.is_empty() {
        Ok(None)
    } else {
        object_body(ctx, body).map(Some)
    }
}

pub async fn delete(ctx: &Context, body: Bytes) -> ApiResult {
    let value = parse_delete_body(ctx, &body)?;
    delete_with(ctx, value.as_ref()).await
}

/// The warning a Job deleted without a propagation policy gets, as
/// upstream's job storage words it.
const JOB_ORPHANS_WARNING: &str = "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning";

/// Deletes the named object with already parsed `DeleteOptions` (the
/// body of a DELETE, or of an eviction). Answers as upstream's delete
/// handler: 200 (202 only for `orphanDependents: false` left pending) with
/// the object when it stays (a grace period, finalizers) or when its kind
/// returns deleted objects, else a `Status`.
pub async fn delete_with(ctx: &Context, body: Option<&Value>) -> ApiResult {
    let options = delete_options(ctx, body)?;
    let write = ctx.write_options(false)?;
    let def = ctx.def();
    let deleted = ctx
        .state
        .storage()
        .delete(def, ctx.namespace(), ctx.name(), &options, &write)
        .await?;
    let code = match (&deleted, options.orphan_dependents) {
        (Deleted::Pending(_), Some(false)) => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    let response = match &deleted {
        Deleted::Pending(object) => object_response(code, def, object),
        Deleted::Gone(object) if def.strategy.returns_deleted => object_response(code, def, object),
        Deleted::Gone(object) => json_response(
            code,
            &rudder_api::status::success_status(
                def.target(),
                ctx.name(),
                object
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
        ),
    };
    let orphans_by_default = def.strategy.default_propagation == Some(Propagation::Orphan)
        && def.group == "batch"
        && options.propagation.is_none()
        && options.orphan_dependents.is_none();
    let warnings = if orphans_by_default {
        vec![JOB_ORPHANS_WARNING.to_string()]
    } else {
        Vec::new()
    };
    Ok(with_warnings(response, &warnings))
}

pub async fn delete_collection(ctx: &Context, body: Bytes) -> ApiResult {
    let value = parse_delete_body(ctx, &body)?;
    let options = delete_options(ctx, value.as_ref())?;
    let write = ctx.write_options(false)?;
    let selectors = ctx.selectors()?;
    let def = ctx.def();
    let deleted = ctx
        .state
        .storage()
        .delete_collection(def, ctx.namespace(), &selectors, &options, &write)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": {}, "items": deleted}),
    ))
}

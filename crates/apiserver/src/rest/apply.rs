//! Managed fields on every write, and server-side apply
//! (`PATCH` with `application/apply-patch+yaml`). The semantics live in
//! `rudder_api::managed`; this is where requests meet them: who the field
//! manager is, which part of the object the endpoint writes, and apply's
//! create-or-update with upstream's client-side-apply hand-over.

use bytes::Bytes;
use rudder_api::Status;
use rudder_api::managed::{self, LAST_APPLIED, Scope};
use rudder_api::object::Part;
use rudder_api::status::Cause;
use serde_json::{Value, json};

use super::Context;
use super::write::{check_fields, create_object, update_checked};
use crate::response::{ApiError, ApiResult};

/// The longest field manager name upstream accepts.
const MAX_MANAGER: usize = 128;

fn invalid_options(kind: &str, cause: Cause) -> Status {
    let message = format!("{kind} \"\" is invalid: {}: {}", cause.field, cause.message);
    let mut status = Status::new(422, "Invalid", message);
    status.causes = vec![cause];
    status
}

/// The request's field manager: `fieldManager`, else the User-Agent's
/// first segment (`kubectl/v1.33.0 (…)` → `kubectl`), as upstream.
pub fn field_manager(ctx: &Context, options_kind: &str) -> Result<String, Status> {
    if let Some(manager) = ctx.params.get("fieldManager") {
        if manager.chars().count() > MAX_MANAGER {
            return Err(invalid_options(
                options_kind,
                Cause::new(
                    "FieldValueTooLong",
                    "fieldManager",
                    format!("Too long: may not be more than {MAX_MANAGER} bytes"),
                ),
            ));
        }
        if manager.chars().any(|c| c.is_control()) {
            return Err(invalid_options(
                options_kind,
                Cause::new(
                    "FieldValueInvalid",
                    "fieldManager",
                    "Invalid value: must only contain printable characters",
                ),
            ));
        }
        return Ok(manager.to_string());
    }
    let agent = ctx
        .headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    Ok(agent
        .split('/')
        .next()
        .unwrap_or_default()
        .chars()
        .take(MAX_MANAGER)
        .collect())
}

/// What managed fields need for a write of `part` of the resource.
pub fn scope<'a>(ctx: &'a Context, part: Part, api_version: &'a str, now: &'a str) -> Scope<'a> {
    crate::storage::scope(ctx.def(), part, api_version, now)
}

/// Whether this request is a server-side apply.
pub fn is_apply(ctx: &Context) -> bool {
    crate::negotiate::content_type(&ctx.headers) == "application/apply-patch+yaml"
}

/// Reads an apply body: YAML (JSON being YAML), one object.
fn parse_config(body: &Bytes) -> Result<Value, Status> {
    let value: Value = serde_yaml_ng::from_slice(body)
        .map_err(|e| Status::bad_request(format!("error decoding YAML: {e}")))?;
    if !value.is_object() {
        return Err(Status::bad_request(
            "error decoding YAML: an apply configuration must be an object",
        ));
    }
    Ok(value)
}

/// Checks what apply requires of a configuration: its kind and version are
/// the endpoint's, its name the URL's, and it carries no managed fields.
fn check_config(ctx: &Context, config: &Value) -> Result<(), Status> {
    let def = ctx.def();
    let want = def.api_version();
    let api = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if api != want || kind != def.kind {
        return Err(Status::bad_request(format!(
            "the apply configuration is {kind:?} in {api:?}, but the endpoint serves {} in {want:?}: apiVersion and kind must be set and match",
            def.kind
        )));
    }
    match config.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) if name != ctx.name() => {
            return Err(Status::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                ctx.name()
            )));
        }
        _ => {}
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(invalid_options(
            "PatchOptions",
            Cause::new(
                "FieldValueForbidden",
                "metadata.managedFields",
                "Forbidden: cannot be set on an apply configuration",
            ),
        ));
    }
    Ok(())
}

/// `force` is for apply only; apply needs a field manager.
pub fn check_patch_options(ctx: &Context) -> Result<(), Status> {
    let force = ctx.params.get("force");
    if is_apply(ctx) {
        if ctx.params.get("fieldManager").is_none_or(str::is_empty) {
            return Err(invalid_options(
                "PatchOptions",
                Cause::new(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                ),
            ));
        }
        if let Some(f) = force
            && f != "true"
            && f != "false"
        {
            return Err(Status::bad_request(format!(
                "invalid value for force: {f:?}"
            )));
        }
    } else if force.is_some() {
        return Err(invalid_options(
            "PatchOptions",
            Cause::new(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch",
            ),
        ));
    }
    Ok(())
}

/// Applies `config` to `live` as `manager`; for `kubectl`, conflicts with
/// what its client-side apply set are taken over, and the client-side
/// apply annotation, where the object has one, follows the configuration
/// (upstream's last-applied manager and updater).
pub(super) fn apply_to(
    scope: &Scope<'_>,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, Status> {
    let mut result = match managed::apply(scope, live, config, manager, force) {
        Ok(object) => object,
        Err(conflicts) => {
            let allowed = (manager == "kubectl")
                .then(|| live.and_then(|l| managed::last_applied_fields(scope, l)))
                .flatten();
            let all_allowed = allowed.is_some_and(|allowed| {
                conflicts.iter().all(|c| {
                    allowed
                        .node(&c.path)
                        .is_some_and(rudder_api::managed::FieldSet::is_member)
                })
            });
            if !all_allowed {
                return Err(managed::conflict_status(&conflicts));
            }
            managed::apply(scope, live, config, manager, true)
                .map_err(|c| managed::conflict_status(&c))?
        }
    };
    let has_last_applied = live
        .and_then(|l| l.pointer("/metadata/annotations"))
        .and_then(|a| a.get(LAST_APPLIED))
        .is_some();
    if manager == "kubectl" && has_last_applied {
        let mut last = config.clone();
        if let Some(annotations) = last
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(LAST_APPLIED);
        }
        if let Some(meta) = result.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(annotations) = annotations.as_object_mut() {
                annotations.insert(LAST_APPLIED.into(), json!(format!("{last}\n")));
            }
        }
    }
    Ok(result)
}

/// What an apply request brings: its field manager, whether it forces,
/// and the configuration (checked options, parsed body).
pub(super) struct ApplyRequest {
    pub manager: String,
    pub force: bool,
    pub config: Value,
}

impl ApplyRequest {
    pub(super) fn read(ctx: &Context, body: &Bytes) -> Result<ApplyRequest, Status> {
        check_patch_options(ctx)?;
        Ok(ApplyRequest {
            manager: field_manager(ctx, "PatchOptions")?,
            force: ctx.params.get("force") == Some("true"),
            config: parse_config(body)?,
        })
    }
}

/// `PATCH` with an apply configuration: merges the configuration into the
/// object, or creates it when it is absent.
pub async fn serve(ctx: &Context, body: Bytes, part: Part) -> ApiResult {
    let ApplyRequest {
        manager,
        force,
        config,
    } = ApplyRequest::read(ctx, &body)?;
    check_config(ctx, &config)?;
    let (api_version, now) = (ctx.def().api_version(), ctx.state.clock.now_rfc3339());
    let scope = scope(ctx, part, &api_version, &now);

    let updated = update_checked(ctx, part, |old| {
        apply_to(&scope, Some(old), &config, &manager, force)
    })
    .await;
    match updated {
        Err(ApiError(status)) if status.code == 404 && part == Part::Main => {
            let mut object = apply_to(&scope, None, &config, &manager, force)?;
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("name".into(), json!(ctx.name()));
            }
            let warnings = check_fields(ctx, &object)?;
            create_object(ctx, object, warnings).await
        }
        other => other,
    }
}

//! OpenAPI documents generated from the registry and the kinds' schemas (the
//! k8s-openapi crate's schemars schemas, which carry the field descriptions
//! `kubectl explain` prints): `/openapi/v3` per group-version and
//! `/openapi/v2`. Nothing is vendored from upstream's generated specs.
//!
//! What clients rely on (kubectl-wire.md §1.2): every kind's definition
//! tagged with `x-kubernetes-group-version-kind`, and PATCH operations with a
//! `fieldValidation` query parameter and that same tag, which tells kubectl
//! 1.29+ that the server validates fields itself.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceDef};

/// The version reported in `info`.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// Which document format a set of paths and schemas is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    V2,
    V3,
}

impl Flavor {
    fn definitions_path(self) -> &'static str {
        match self {
            Flavor::V2 => "/definitions",
            Flavor::V3 => "/components/schemas",
        }
    }
    fn reference(self, name: &str) -> Value {
        json!({"$ref": format!("#{}/{name}", self.definitions_path())})
    }
}

/// `/openapi/v3` path key of a group-version: `api/v1`, `apis/apps/v1`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn gvk(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "kind": def.kind})
}

fn param(name: &str, location: &str, description: &str, flavor: Flavor) -> Value {
    let mut p = json!({"name": name, "in": location, "description": description});
    if location == "path" {
        p["required"] = json!(true);
    }
    match flavor {
        Flavor::V2 => p["type"] = json!("string"),
        Flavor::V3 => p["schema"] = json!({"type": "string", "uniqueItems": true}),
    }
    p
}

fn query_params(names: &[(&str, &str)], flavor: Flavor) -> Vec<Value> {
    names
        .iter()
        .map(|(n, d)| param(n, "query", d, flavor))
        .collect()
}

const WRITE_PARAMS: &[(&str, &str)] = &[
    (
        "dryRun",
        "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
    ),
    (
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    ),
    (
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn (default) - Strict",
    ),
];

const LIST_PARAMS: &[(&str, &str)] = &[
    (
        "allowWatchBookmarks",
        "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
    ),
    (
        "continue",
        "The continue option should be set when retrieving more results from the server.",
    ),
    (
        "fieldSelector",
        "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    ),
    (
        "labelSelector",
        "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    ),
    (
        "limit",
        "limit is a maximum number of responses to return for a list call.",
    ),
    (
        "resourceVersion",
        "resourceVersion sets a constraint on what resource versions a request may be served from.",
    ),
    (
        "resourceVersionMatch",
        "resourceVersionMatch determines how resourceVersion is applied to list calls.",
    ),
    ("timeoutSeconds", "Timeout for the list/watch call."),
    (
        "watch",
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
    ),
];

fn body(schema: Value, flavor: Flavor, content_types: &[&str]) -> (Option<Value>, Option<Value>) {
    match flavor {
        Flavor::V2 => (
            None,
            Some(json!({"name": "body", "in": "body", "required": true, "schema": schema})),
        ),
        Flavor::V3 => {
            let content: Map<String, Value> = content_types
                .iter()
                .map(|t| ((*t).to_string(), json!({"schema": schema})))
                .collect();
            (Some(json!({"content": content, "required": true})), None)
        }
    }
}

fn response(schema: Value, flavor: Flavor) -> Value {
    match flavor {
        Flavor::V2 => {
            json!({"200": {"description": "OK", "schema": schema}, "401": {"description": "Unauthorized"}})
        }
        Flavor::V3 => {
            json!({"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}, "401": {"description": "Unauthorized"}})
        }
    }
}

fn operation(
    def: &ResourceDef,
    id: &str,
    action: &str,
    description: &str,
    schema: Value,
    flavor: Flavor,
) -> Value {
    json!({
        "description": description,
        "operationId": id,
        "tags": [def.api_version().replace(['/', '.'], "_")],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(def),
        "responses": response(schema, flavor),
    })
}

fn with_body(
    mut op: Value,
    schema: Value,
    flavor: Flavor,
    content_types: &[&str],
    params: &[(&str, &str)],
) -> Value {
    let (request_body, body_param) = body(schema, flavor, content_types);
    let mut parameters = query_params(params, flavor);
    if let Some(p) = body_param {
        parameters.insert(0, p);
    }
    op["parameters"] = json!(parameters);
    if let Some(rb) = request_body {
        op["requestBody"] = rb;
    }
    op
}

fn id_suffix(def: &ResourceDef) -> String {
    let gv: String = def
        .api_version()
        .split(['/', '.', '-'])
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    format!(
        "{gv}{}{}",
        if def.namespaced { "Namespaced" } else { "" },
        def.kind
    )
}

/// The paths of one resource.
fn resource_paths(def: &ResourceDef, flavor: Flavor, paths: &mut Map<String, Value>) {
    let prefix = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    let scope = if def.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{prefix}{scope}/{}", def.plural);
    let item = format!("{collection}/{{name}}");
    let object = flavor.reference(&def.schema_name);
    let list = flavor.reference(&def.schema_name.replace(&def.kind, &def.list_kind));
    let patch_types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    let suffix = id_suffix(def);
    let mut path_params = vec![];
    if def.namespaced {
        path_params.push(param(
            "namespace",
            "path",
            "object name and auth scope, such as for teams and projects",
            flavor,
        ));
    }

    let mut coll = Map::new();
    if def.has_verb("list") {
        let mut op = operation(
            def,
            &format!("list{suffix}"),
            "list",
            &format!("list or watch objects of kind {}", def.kind),
            list.clone(),
            flavor,
        );
        op["parameters"] = json!(query_params(LIST_PARAMS, flavor));
        coll.insert("get".into(), op);
    }
    if def.has_verb("create") {
        let op = operation(
            def,
            &format!("create{suffix}"),
            "post",
            &format!("create a {}", def.kind),
            object.clone(),
            flavor,
        );
        coll.insert(
            "post".into(),
            with_body(op, object.clone(), flavor, &["*/*"], WRITE_PARAMS),
        );
    }
    if def.has_verb("deletecollection") {
        let op = operation(
            def,
            &format!("deletecollection{suffix}"),
            "deletecollection",
            &format!("delete collection of {}", def.kind),
            json!({}),
            flavor,
        );
        coll.insert("delete".into(), op);
    }
    if !coll.is_empty() {
        coll.insert("parameters".into(), json!(path_params));
        paths.insert(collection, Value::Object(coll));
    }
    // A namespaced resource's list across namespaces (`/api/v1/pods`,
    // upstream's `list…ForAllNamespaces`): kubectl 1.27's explain finds a
    // resource's kind by this path alone.
    if def.namespaced && def.has_verb("list") {
        let id = suffix.replacen("Namespaced", "", 1);
        let mut op = operation(
            def,
            &format!("list{id}ForAllNamespaces"),
            "list",
            &format!("list or watch objects of kind {}", def.kind),
            list.clone(),
            flavor,
        );
        op["parameters"] = json!(query_params(LIST_PARAMS, flavor));
        paths.insert(format!("{prefix}/{}", def.plural), json!({"get": op}));
    }

    let mut item_params = path_params.clone();
    item_params.insert(
        0,
        param("name", "path", &format!("name of the {}", def.kind), flavor),
    );
    let mut one = Map::new();
    if def.has_verb("get") {
        one.insert(
            "get".into(),
            operation(
                def,
                &format!("read{suffix}"),
                "get",
                &format!("read the specified {}", def.kind),
                object.clone(),
                flavor,
            ),
        );
    }
    if def.has_verb("update") {
        let op = operation(
            def,
            &format!("replace{suffix}"),
            "put",
            &format!("replace the specified {}", def.kind),
            object.clone(),
            flavor,
        );
        one.insert(
            "put".into(),
            with_body(op, object.clone(), flavor, &["*/*"], WRITE_PARAMS),
        );
    }
    if def.has_verb("patch") {
        let op = operation(
            def,
            &format!("patch{suffix}"),
            "patch",
            &format!("partially update the specified {}", def.kind),
            object.clone(),
            flavor,
        );
        let mut params = WRITE_PARAMS.to_vec();
        params.push(("force", "Force is going to \"force\" Apply requests."));
        one.insert(
            "patch".into(),
            with_body(op, json!({"type": "object"}), flavor, &patch_types, &params),
        );
    }
    if def.has_verb("delete") {
        one.insert(
            "delete".into(),
            operation(
                def,
                &format!("delete{suffix}"),
                "delete",
                &format!("delete a {}", def.kind),
                object.clone(),
                flavor,
            ),
        );
    }
    if !one.is_empty() {
        one.insert("parameters".into(), json!(item_params.clone()));
        paths.insert(item.clone(), Value::Object(one));
    }

    for sub in &def.subresources {
        if sub.name != "status" && sub.name != "scale" {
            continue;
        }
        let schema = if sub.name == "scale" {
            flavor.reference("io.k8s.api.autoscaling.v1.Scale")
        } else {
            object.clone()
        };
        let title = if sub.name == "scale" {
            "Scale"
        } else {
            "Status"
        };
        let mut ops = Map::new();
        ops.insert(
            "get".into(),
            operation(
                def,
                &format!("read{suffix}{title}"),
                "get",
                &format!("read {} of the specified {}", sub.name, def.kind),
                schema.clone(),
                flavor,
            ),
        );
        let put = operation(
            def,
            &format!("replace{suffix}{title}"),
            "put",
            &format!("replace {} of the specified {}", sub.name, def.kind),
            schema.clone(),
            flavor,
        );
        ops.insert(
            "put".into(),
            with_body(put, schema.clone(), flavor, &["*/*"], WRITE_PARAMS),
        );
        let patch = operation(
            def,
            &format!("patch{suffix}{title}"),
            "patch",
            &format!(
                "partially update {} of the specified {}",
                sub.name, def.kind
            ),
            schema.clone(),
            flavor,
        );
        ops.insert(
            "patch".into(),
            with_body(
                patch,
                json!({"type": "object"}),
                flavor,
                &patch_types,
                WRITE_PARAMS,
            ),
        );
        ops.insert("parameters".into(), json!(item_params.clone()));
        paths.insert(format!("{item}/{}", sub.name), Value::Object(ops));
    }
}

/// Schemas of the resources given, plus everything they reference, with
/// each kind tagged with its group-version-kind.
fn schemas<'a>(
    resources: impl Iterator<Item = &'a std::sync::Arc<ResourceDef>> + Clone,
    flavor: Flavor,
) -> Map<String, Value> {
    let settings =
        SchemaSettings::openapi3().with(|s| s.definitions_path = flavor.definitions_path().into());
    let mut generator = settings.into_generator();
    for def in resources.clone() {
        if let Some(schema) = def.schema {
            schema(&mut generator);
        }
    }
    generator.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    let mut definitions = generator.take_definitions(true);
    crate::structure::annotate(&mut definitions);
    for def in resources.clone() {
        if let Some(custom) = &def.custom {
            definitions.insert(
                def.schema_name.clone(),
                custom_schema(&custom.schema, flavor),
            );
        }
    }
    for def in resources {
        if let Some(schema) = definitions
            .get_mut(&def.schema_name)
            .and_then(Value::as_object_mut)
        {
            schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk(def)]));
        }
        let list_name = def.schema_name.replace(&def.kind, &def.list_kind);
        definitions.entry(list_name).or_insert_with(|| {
            json!({
                "description": format!("{} is a list of {}.", def.list_kind, def.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "items": {"type": "array", "items": flavor.reference(&def.schema_name)},
                    "metadata": flavor.reference("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"),
                },
                "x-kubernetes-group-version-kind": [{"group": def.group, "version": def.version, "kind": def.list_kind}],
            })
        });
    }
    if !definitions.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta") {
        definitions.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta".into(),
            json!({"type": "object", "properties": {"continue": {"type": "string"}, "remainingItemCount": {"type": "integer", "format": "int64"}, "resourceVersion": {"type": "string"}, "selfLink": {"type": "string"}}}),
        );
    }
    definitions
}

/// A custom resource's schema as published: the version's
/// `openAPIV3Schema` with the fields every object has.
pub(crate) fn custom_schema(schema: &Value, flavor: Flavor) -> Value {
    let mut out = schema.clone();
    if !out.is_object() {
        out = json!({"type": "object"});
    }
    let properties = out
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(properties)) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
        );
        properties.insert(
            "metadata".into(),
            match flavor {
                Flavor::V2 => flavor.reference("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                Flavor::V3 => json!({"allOf": [flavor.reference("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")], "description": "Standard object's metadata."}),
            },
        );
    }
    out
}

/// The `/openapi/v3/<path>` document of one group-version.
pub fn v3_group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<_> = registry.resources_in(group, version).cloned().collect();
    if resources.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for def in &resources {
        resource_paths(def, Flavor::V3, &mut paths);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas(resources.iter(), Flavor::V3)},
    }))
}

/// The schemas of every built-in type (the `/openapi/v2` definitions of
/// the built-in registry), computed once: the source of the protobuf and
/// merge tables.
pub fn builtin_definitions() -> &'static Map<String, Value> {
    static DEFINITIONS: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    DEFINITIONS.get_or_init(|| schemas(Registry::builtin().all().iter(), Flavor::V2))
}

/// The `/openapi/v2` document: every served resource.
pub fn v2(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for def in registry.all() {
        resource_paths(def, Flavor::V2, &mut paths);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "definitions": schemas(registry.all().iter(), Flavor::V2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_documents_tell_kubectl_the_server_validates_fields() {
        let registry = Registry::builtin();
        let doc = v3_group_version(&registry, "apps", "v1").expect("apps/v1");
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .expect("params")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        let schema = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        assert!(schema["properties"]["spec"].is_object());
        let spec = &doc["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"];
        assert!(
            spec["properties"]["replicas"]["description"]
                .as_str()
                .expect("described")
                .contains("desired pods")
        );
        assert!(
            doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
                .is_object()
        );
        assert!(v3_group_version(&registry, "nope", "v1").is_none());
    }

    #[test]
    fn v2_references_resolve() {
        let doc = v2(&Registry::builtin());
        let text = doc.to_string();
        let definitions = doc["definitions"].as_object().expect("definitions");
        for part in text.split("\"$ref\":\"#/definitions/").skip(1) {
            let name = &part[..part.find('"').expect("end")];
            assert!(definitions.contains_key(name), "dangling $ref {name}");
        }
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"].is_object());
    }
}

//! A CustomResourceDefinition driven with every installed kubectl, end to
//! end: create and wait for Established, apply custom resources, printer
//! columns, schema errors, pruning, `explain`, the scale and status
//! subresources, server-side apply, and deleting the definition.

mod common;

use common::each_version;

fn definition(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - {{rule: "!has(self.replicas) || self.replicas <= 8", message: "at most 8 replicas"}}
            - {{rule: "self.color == oldSelf.color", message: "color is immutable"}}
            properties:
              size: {{type: integer, minimum: 1, maximum: 10, description: "How big the widget is."}}
              color: {{type: string, enum: [red, blue], default: red}}
              replicas: {{type: integer}}
          status:
            type: object
            properties:
              replicas: {{type: integer}}
    subresources:
      status: {{}}
      scale: {{specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    - {{name: Color, type: string, jsonPath: .spec.color}}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#
    )
}

fn widget(group: &str, name: &str, spec: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

#[test]
fn a_custom_resource_definition_with_kubectl() {
    each_version(
        |_| "default".to_string(),
        |k, tag, f| {
            let group = format!("v{tag}.example.com");
            let crd = format!("widgets.{group}");
            k.expect(
                f,
                "create the definition",
                &["apply", "-f", "-"],
                Some(&definition(&group)),
                "created",
            );
            k.expect(
                f,
                "wait for Established",
                &[
                    "wait",
                    "--for",
                    "condition=established",
                    &format!("crd/{crd}"),
                    "--timeout=20s",
                ],
                None,
                "condition met",
            );
            let resource = format!("widgets.{group}");
            k.expect(
                f,
                "apply a widget",
                &["apply", "-f", "-"],
                Some(&widget(&group, "w1", "{size: 3, replicas: 1}")),
                "created",
            );
            k.expect(
                f,
                "printer columns",
                &["get", &resource],
                None,
                "NAME   SIZE   COLOR",
            );
            k.expect(
                f,
                "the same object through the other served version",
                &[
                    "get",
                    &format!("widgets.v1beta1.{group}"),
                    "w1",
                    "-o",
                    "jsonpath={.apiVersion} {.spec.size}",
                ],
                None,
                &format!("{group}/v1beta1 3"),
            );
            k.expect(
                f,
                "the default is filled in",
                &["get", &resource, "w1", "-o", "jsonpath={.spec.color}"],
                None,
                "red",
            );
            let (ok, out) = k.run(
                &["apply", "-f", "-"],
                Some(&widget(&group, "w2", "{size: 30, color: green}")),
            );
            if ok
                || !out.contains("should be less than or equal to 10")
                || !out.contains("Unsupported value: \"green\"")
            {
                f.push(format!("schema errors: ({ok}) {out}"));
            }
            let (ok, out) = k.run(
                &["apply", "-f", "-"],
                Some(&widget(&group, "w3", "{size: 2, bogus: 1}")),
            );
            if ok || !out.contains("unknown field") {
                f.push(format!(
                    "strict validation names the unknown field: ({ok}) {out}"
                ));
            }
            k.expect(
                f,
                "without strict validation the unknown field is pruned",
                &["apply", "--validate=false", "-f", "-"],
                Some(&widget(&group, "w3", "{size: 2, bogus: 1}")),
                "created",
            );
            k.expect(
                f,
                "pruned",
                &["get", &resource, "w3", "-o", "jsonpath={.spec}"],
                None,
                "{\"color\":\"red\",\"size\":2}",
            );
            k.expect(
                f,
                "explain",
                &[
                    "explain",
                    "widgets.spec.size",
                    &format!("--api-version={group}/v1"),
                ],
                None,
                "How big the widget is",
            );
            k.expect(
                f,
                "scale",
                &["scale", &resource, "w1", "--replicas=4"],
                None,
                "scaled",
            );
            k.expect(
                f,
                "scaled",
                &["get", &resource, "w1", "-o", "jsonpath={.spec.replicas}"],
                None,
                "4",
            );
            k.refuse(
                f,
                "a CEL rule",
                &["scale", &resource, "w1", "--replicas=9"],
                "at most 8 replicas",
            );
            k.refuse(
                f,
                "a CEL transition rule",
                &[
                    "patch",
                    &resource,
                    "w1",
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"color":"blue"}}"#,
                ],
                "color is immutable",
            );
            let broken = definition(&format!("broken.{group}"))
                .replace("self.replicas <= 8", "self.replicas <=");
            let (ok, out) = k.run(&["apply", "-f", "-"], Some(&broken));
            if ok || !out.contains("compilation failed") {
                f.push(format!("a rule that does not compile: ({ok}) {out}"));
            }
            k.expect(
                f,
                "status subresource",
                &[
                    "patch",
                    &resource,
                    "w1",
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    r#"{"status":{"replicas":4}}"#,
                ],
                None,
                "patched",
            );
            k.expect(
                f,
                "server-side apply",
                &["apply", "--server-side", "-f", "-"],
                Some(&widget(&group, "w4", "{size: 5}")),
                "serverside-applied",
            );
            // A cluster-scoped definition.
            let cluster = definition(&group)
                .replace("widgets", "gizmos")
                .replace("widget", "gizmo")
                .replace("Widget", "Gizmo")
                .replace("shortNames: [wd]", "shortNames: [gz]")
                .replace("scope: Namespaced", "scope: Cluster");
            k.expect(
                f,
                "a cluster-scoped definition",
                &["apply", "-f", "-"],
                Some(&cluster),
                "created",
            );
            k.expect(
                f,
                "established",
                &[
                    "wait",
                    "--for",
                    "condition=established",
                    &format!("crd/gizmos.{group}"),
                    "--timeout=20s",
                ],
                None,
                "condition met",
            );
            let gizmo = widget(&group, "g1", "{size: 1}").replace("Widget", "Gizmo");
            k.expect(
                f,
                "a cluster-scoped object",
                &["apply", "-f", "-"],
                Some(&gizmo),
                "created",
            );
            k.expect(
                f,
                "listed without a namespace",
                &[
                    "get",
                    &format!("gizmos.{group}"),
                    "-o",
                    "jsonpath={.items[*].metadata.name}/{.items[*].metadata.namespace}",
                ],
                None,
                "g1/",
            );
            k.expect(
                f,
                "delete it",
                &["delete", "crd", &format!("gizmos.{group}")],
                None,
                "deleted",
            );
            k.expect(
                f,
                "delete the definition",
                &["delete", "crd", &crd],
                None,
                "deleted",
            );
            k.refuse(
                f,
                "the resource is gone",
                &["get", &resource],
                "the server doesn't have a resource type \"widgets\"",
            );
        },
    );
}

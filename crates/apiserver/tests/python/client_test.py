"""The Python `kubernetes` client, unmodified, against a rudder API server.

    KUBECONFIG=<admin kubeconfig> python client_test.py
Prints "N passed, N failed" and exits non-zero on any failure.
"""
import os
import sys
import threading
import traceback

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=os.environ["KUBECONFIG"])
v1 = client.CoreV1Api()
apps = client.AppsV1Api()
NS = "python-client"
results = []


def case(fn):
    try:
        fn()
        results.append((fn.__name__, None))
        print("ok   ", fn.__name__)
    except Exception:  # noqa: BLE001 - report every failure
        results.append((fn.__name__, traceback.format_exc()))
        print("FAIL ", fn.__name__)
        traceback.print_exc()
    return fn


def cm(name, labels=None, data=None):
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        data=data or {"k": name},
    )


@case
def create_namespace_and_objects():
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    created = v1.create_namespaced_config_map(NS, cm("one", {"app": "web"}))
    assert created.metadata.uid and created.metadata.resource_version
    for i in range(6):
        v1.create_namespaced_config_map(NS, cm(f"page-{i}", {"tier": "even" if i % 2 == 0 else "odd"}))


@case
def create_twice_is_already_exists():
    try:
        v1.create_namespaced_config_map(NS, cm("one"))
    except ApiException as e:
        assert e.status == 409 and "AlreadyExists" in e.body, e.body
    else:
        raise AssertionError("created twice")


@case
def get_and_not_found():
    assert v1.read_namespaced_config_map("one", NS).data == {"k": "one"}
    try:
        v1.read_namespaced_config_map("missing", NS)
    except ApiException as e:
        assert e.status == 404 and "NotFound" in e.body
    else:
        raise AssertionError("found a missing object")


@case
def list_with_selectors_and_pages():
    even = v1.list_namespaced_config_map(NS, label_selector="tier=even")
    assert sorted(i.metadata.name for i in even.items) == ["page-0", "page-2", "page-4"]
    first = v1.list_namespaced_config_map(NS, label_selector="tier", limit=4)
    assert len(first.items) == 4 and first.metadata._continue
    rest = v1.list_namespaced_config_map(NS, label_selector="tier", limit=4, _continue=first.metadata._continue)
    assert len(rest.items) == 2 and not rest.metadata._continue
    names = v1.list_namespaced_config_map(NS, field_selector="metadata.name=one")
    assert [i.metadata.name for i in names.items] == ["one"]


@case
def watch_from_a_resource_version():
    rv = v1.list_namespaced_config_map(NS).metadata.resource_version
    seen = []

    def follow():
        for event in watch.Watch().stream(v1.list_namespaced_config_map, NS, resource_version=rv,
                                          label_selector="app=web", timeout_seconds=10):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                return

    thread = threading.Thread(target=follow)
    thread.start()
    v1.create_namespaced_config_map(NS, cm("two", {"app": "web"}))
    v1.patch_namespaced_config_map("one", NS, {"data": {"k": "patched"}}, _content_type="application/merge-patch+json")
    v1.delete_namespaced_config_map("two", NS)
    thread.join(15)
    assert seen == [("ADDED", "two"), ("MODIFIED", "one"), ("DELETED", "two")], seen


@case
def json_patch_and_merge_patch():
    out = v1.patch_namespaced_config_map("one", NS, [{"op": "add", "path": "/metadata/labels/extra", "value": "x"}])
    assert out.metadata.labels["extra"] == "x"
    out = v1.patch_namespaced_config_map("one", NS, {"metadata": {"labels": {"extra": None}}},
                                         _content_type="application/merge-patch+json")
    assert "extra" not in (out.metadata.labels or {})


@case
def deployments_scale_and_validation():
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.local/web:1"}]}}},
    }
    created = apps.create_namespaced_deployment(NS, body)
    assert created.spec.replicas == 1
    scale = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 4}},
                                                   _content_type="application/merge-patch+json")
    assert scale.spec.replicas == 4
    assert apps.read_namespaced_deployment("web", NS).metadata.generation == 2
    try:
        apps.create_namespaced_deployment(NS, {**body, "metadata": {"name": "Bad_Name"}})
    except ApiException as e:
        assert e.status == 422 and "Invalid" in e.body, e.body
    else:
        raise AssertionError("an invalid name was accepted")


@case
def strategic_merge_patch_merges_containers_by_name():
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "image": "registry.local/side:1"},
        {"name": "main", "env": [{"name": "MODE", "value": "x"}]}]}}}}
    out = apps.patch_namespaced_deployment("web", NS, patch,
                                           _content_type="application/strategic-merge-patch+json")
    containers = {c.name: c for c in out.spec.template.spec.containers}
    assert set(containers) == {"main", "side"}, containers
    assert containers["main"].image == "registry.local/web:1"
    assert containers["main"].env[0].name == "MODE"


@case
def create_from_yaml_with_apply():
    import tempfile
    from kubernetes import utils
    manifest = f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: applied, namespace: {NS}}}
data: {{a: "1", b: "2"}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: applied, namespace: {NS}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: applied}}}}
  template:
    metadata: {{labels: {{app: applied}}}}
    spec: {{containers: [{{name: main, image: registry.local/applied:1}}]}}
"""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(manifest)
    api = client.ApiClient()
    utils.create_from_yaml(api, f.name, namespace=NS, apply=True)
    # Applying again, with one key dropped, is an update that removes it.
    with open(f.name, "w") as out:
        out.write(manifest.replace(', b: "2"', ""))
    utils.create_from_yaml(api, f.name, namespace=NS, apply=True)
    cm = v1.read_namespaced_config_map("applied", NS)
    assert cm.data == {"a": "1"}, cm.data
    managers = [(m.manager, m.operation) for m in cm.metadata.managed_fields]
    assert ("python-client", "Apply") in managers, managers
    assert apps.read_namespaced_deployment("applied", NS).spec.replicas == 2


@case
def dynamic_client_server_side_apply_with_conflicts():
    from kubernetes.dynamic import DynamicClient
    dyn = DynamicClient(client.ApiClient())
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": NS},
            "data": {"owner": "first"}}
    cms.server_side_apply(body=body, field_manager="first")
    try:
        cms.server_side_apply(body={**body, "data": {"owner": "second"}}, field_manager="second")
    except ApiException as e:
        assert e.status == 409 and "conflict" in e.body and "first" in e.body, e.body
    else:
        raise AssertionError("a conflicting apply was accepted")
    out = cms.server_side_apply(body={**body, "data": {"owner": "second"}}, field_manager="second",
                                force_conflicts=True)
    assert out.data.owner == "second"
    managers = {m.manager for m in v1.read_namespaced_config_map("ssa", NS).metadata.managed_fields}
    assert managers == {"second"}, managers


@case
def delete():
    v1.delete_namespaced_config_map("one", NS)
    try:
        v1.read_namespaced_config_map("one", NS)
    except ApiException as e:
        assert e.status == 404
    else:
        raise AssertionError("still there")


failed = [name for name, error in results if error]
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)

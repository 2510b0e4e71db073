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


# Issue 13, "API fidelity": what real clients catch.

def raw(method, path, body=None, content_type="application/json"):
    """A request through the client's own REST layer: (status, bytes)."""
    api = v1.api_client
    url = api.configuration.host + path
    headers = {"Content-Type": content_type, "Accept": "application/json"}
    r = api.rest_client.request(method, url, headers=headers, body=body)
    return r.status, r.read()


@case
def deletes_answer_as_upstreams_registry():
    svc = v1.create_namespaced_service(NS, client.V1Service(
        metadata=client.V1ObjectMeta(name="gone"),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)])))
    deleted = v1.delete_namespaced_service("gone", NS)  # decodes as a V1Service
    assert deleted.metadata.uid == svc.metadata.uid, deleted
    v1.create_namespaced_config_map(NS, cm("status-on-delete"))
    status = v1.delete_namespaced_config_map("status-on-delete", NS)
    if isinstance(status, dict):  # the client decodes a Status as a plain object
        status = client.V1Status(status=status["status"], details=client.V1StatusDetails(**status["details"]))
    assert status.status == "Success" and status.details.name == "status-on-delete", status
    v1.create_namespaced_config_map(NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held", finalizers=["example.com/hold"])))
    held = v1.delete_namespaced_config_map("held", NS)
    # Blocked by a finalizer: the object, with its deletionTimestamp.
    assert held["kind"] == "ConfigMap" and held["metadata"]["deletionTimestamp"], held
    v1.patch_namespaced_config_map("held", NS, [{"op": "remove", "path": "/metadata/finalizers"}])


@case
def objects_carry_the_fields_go_always_writes():
    svc = v1.create_namespaced_service(NS, client.V1Service(
        metadata=client.V1ObjectMeta(name="shaped"),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)])))
    assert svc.status is not None and svc.status.load_balancer is not None, svc.status
    assert v1.read_namespaced_service("shaped", NS).status.load_balancer is not None
    listed = v1.list_namespaced_service(NS, field_selector="metadata.name=shaped").items
    assert listed[0].status.load_balancer is not None
    rs = apps.create_namespaced_replica_set(NS, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="shaped"),
        spec=client.V1ReplicaSetSpec(
            replicas=0, selector=client.V1LabelSelector(match_labels={"a": "b"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"a": "b"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")])))))
    assert rs.status.replicas == 0, rs.status


@case
def status_bodies_are_written_as_upstreams():
    status, body = raw("GET", f"/api/v1/namespaces/{NS}/configmaps/missing")
    expected = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                '"message":"configmaps \\"missing\\" not found","reason":"NotFound",'
                '"details":{"name":"missing","kind":"configmaps"},"code":404}\n')
    assert status == 404 and body.decode() == expected, body


@case
def an_unsupported_patch_type_is_415():
    status, body = raw("PATCH", f"/api/v1/namespaces/{NS}/configmaps/one", "x", "text/plain")
    assert status == 415 and b"UnsupportedMediaType" in body, (status, body)
    assert b"application/strategic-merge-patch+json" in body, body


@case
def a_namespace_terminates_with_its_finalizer():
    name = NS + "-doomed"
    created = v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert created.spec.finalizers == ["kubernetes"], created.spec
    v1.create_namespaced_config_map(name, cm("inside"))
    v1.delete_namespace(name)
    ns = v1.read_namespace(name)
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp, ns.status
    try:
        v1.create_namespaced_config_map(name, cm("late"))
    except ApiException as e:
        assert e.status == 403 and "being terminated" in e.body, e.body
    else:
        raise AssertionError("created in a terminating namespace")


@case
def discovery_paths_with_a_trailing_slash():
    for path in ["/version/", "/api/", "/api/v1/", "/apis/", "/apis/apps/", "/apis/apps/v1/"]:
        status, body = raw("GET", path)
        assert status == 200, (path, status, body)
    assert raw("GET", "/apis/apps/v1/nothing/")[0] == 404


@case
def json_patch_may_test_the_resource_version():
    # kopf adds its finalizer this way.
    current = v1.read_namespaced_config_map("page-0", NS)
    rv = current.metadata.resource_version
    patched = v1.patch_namespaced_config_map("page-0", NS, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/annotations", "value": {"kopf": "yes"}}])
    assert patched.metadata.annotations == {"kopf": "yes"}
    try:  # stale now: the test fails
        v1.patch_namespaced_config_map("page-0", NS, [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "remove", "path": "/metadata/annotations"}])
    except ApiException as e:
        assert e.status == 422, e.body
    else:
        raise AssertionError("a stale test passed")
    try:  # a resourceVersion set by the patch is a precondition
        v1.patch_namespaced_config_map("page-0", NS, [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": rv}])
    except ApiException as e:
        assert e.status == 409, e.body
    else:
        raise AssertionError("a stale precondition passed")


@case
def base64_with_line_breaks_is_stored_unwrapped():
    status, body = raw("POST", f"/api/v1/namespaces/{NS}/secrets", {
        "metadata": {"name": "wrapped"},
        "data": {"tls.crt": "aGVsbG8gd29y\nbGQ=", "b": "aGVs\r\nbG8="}})
    assert status == 201, body
    secret = v1.read_namespaced_secret("wrapped", NS)
    assert secret.data == {"tls.crt": "aGVsbG8gd29ybGQ=", "b": "aGVsbG8="}, secret.data
    status, body = raw("POST", f"/api/v1/namespaces/{NS}/secrets", {
        "metadata": {"name": "garbage"}, "data": {"a": "!!!\n"}})
    assert status == 400, body


@case
def new_pods_get_upstreams_default_admission():
    pod = v1.create_namespaced_pod(NS, client.V1Pod(
        metadata=client.V1ObjectMeta(name="admitted"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")])))
    spec = pod.spec
    keys = {(t.key, t.toleration_seconds) for t in spec.tolerations}
    assert keys == {("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)}, keys
    assert spec.service_account_name == "default" and spec.service_account == "default"
    volume = spec.volumes[0]
    assert volume.name.startswith("kube-api-access-") and volume.projected.sources[0].service_account_token
    mount = spec.containers[0].volume_mounts[0]
    assert mount.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount" and mount.read_only
    assert spec.priority == 0 and spec.preemption_policy == "PreemptLowerPriority"
    assert spec.enable_service_links is True
    assert pod.status.qos_class == "BestEffort", pod.status


failed = [name for name, error in results if error]
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)

use serde_json::{Value, json};

use crate::Registry;
use crate::update::Via;

/// `field: message` of each cause `service` has once defaulted, as
/// upstream's `Invalid` error lists them.
fn refusals(mut service: Value) -> Vec<String> {
    let registry = Registry::builtin();
    let def = registry.get("", "v1", "services").expect("def");
    crate::defaults::apply(def, &mut service);
    let mut causes = Vec::new();
    (def.strategy.validate)(&service, &mut causes);
    lines(causes)
}

fn lines(causes: Vec<crate::Cause>) -> Vec<String> {
    causes
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn with_spec(spec: Value) -> Value {
    json!({"metadata": {"name": "s", "namespace": "default"}, "spec": spec})
}

/// A ClusterIP Service with `extra` merged into its spec.
fn cluster_ip(extra: Value) -> Value {
    let mut spec = json!({"ports": [{"port": 80}], "selector": {"app": "web"}});
    merge(&mut spec, extra);
    with_spec(spec)
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

const LABEL_FORMAT: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const BAD_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const BAD_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
const LB_ONLY: &str = "Forbidden: may only be used when `type` is 'LoadBalancer'";

#[test]
fn every_shape_kubectl_makes_is_valid() {
    let good = [
        // kubectl create service clusterip c1 --tcp=81:8080 (a name of digits)
        json!({"metadata": {"name": "c1", "labels": {"app": "c1"}}, "spec": {"ports": [{"name": "81-8080", "port": 81, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": "c1"}, "type": "ClusterIP"}}),
        // ... --clusterip=None, no ports: headless
        json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "selector": {"app": "h"}, "type": "ClusterIP"}}),
        json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"name": "5678-8080", "port": 5678, "targetPort": 8080}], "type": "ClusterIP"}}),
        // kubectl create service nodeport n1 --tcp=82:8080 [--node-port=30080]
        json!({"metadata": {"name": "n1"}, "spec": {"ports": [{"name": "82-8080", "port": 82, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": "n1"}, "type": "NodePort"}}),
        json!({"metadata": {"name": "n1"}, "spec": {"ports": [{"name": "82-8080", "nodePort": 30080, "port": 82, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": "n1"}, "type": "NodePort"}}),
        // kubectl create service loadbalancer lb1 --tcp=83:8080
        json!({"metadata": {"name": "lb1"}, "spec": {"ports": [{"name": "83-8080", "port": 83, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": "lb1"}, "type": "LoadBalancer"}}),
        // kubectl create service externalname ext --external-name=db.example.org
        json!({"metadata": {"name": "ext"}, "spec": {"externalName": "db.example.org", "selector": {"app": "ext"}, "type": "ExternalName"}}),
        json!({"metadata": {"name": "ext"}, "spec": {"externalName": "db.example.org.", "type": "ExternalName", "ports": [{"port": 5432}]}}),
        // kubectl expose deployment web --port=80 --target-port=8080 (and a named target)
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": "web"}}}),
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "web"}, "sessionAffinity": "ClientIP"}}),
        // The same number over TCP and UDP; protocol, type, affinity and
        // target port left empty for their defaults.
        cluster_ip(json!({"ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
            {"name": "metrics", "port": 9153, "protocol": "", "targetPort": 0},
            {"name": "x", "port": 9154, "targetPort": ""}
        ], "type": "", "sessionAffinity": ""})),
        // As stored, after allocation: the `kubernetes` Service.
        cluster_ip(
            json!({"clusterIP": "10.43.0.1", "clusterIPs": ["10.43.0.1"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "sessionAffinity": "None"}),
        ),
        // Everything a LoadBalancer may carry.
        with_spec(
            json!({"type": "LoadBalancer", "ports": [{"name": "web", "port": 80, "nodePort": 30080}, {"name": "tls", "port": 443, "nodePort": 30443}],
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000, "allocateLoadBalancerNodePorts": false,
            "loadBalancerClass": "example.com/lb", "loadBalancerSourceRanges": [" 10.0.0.0/8", "2001:db8::/32"],
            "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86400}},
            "internalTrafficPolicy": "Local", "trafficDistribution": "PreferClose", "externalIPs": ["203.0.113.10"]}),
        ),
        // External IPs make a ClusterIP reachable from outside: a policy may be set.
        cluster_ip(
            json!({"externalIPs": ["198.51.100.7", "2001:db8::7"], "externalTrafficPolicy": "Local"}),
        ),
        // The older source-range annotation, on a LoadBalancer.
        json!({"metadata": {"name": "lb", "annotations": {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8, 192.168.0.0/16"}}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
    ];
    for service in good {
        assert_eq!(refusals(service.clone()), Vec::<String>::new(), "{service}");
    }
    // A LoadBalancer's status: an address (its ipMode defaulted upstream)
    // or a name.
    let mut lb = with_spec(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2", "ipMode": "Proxy"}, {"hostname": "lb.example.com"}]}});
    assert_eq!(refusals(lb), Vec::<String>::new());
}

#[test]
fn ports_are_refused_with_upstreams_words() {
    let table: Vec<(Value, Vec<String>)> = vec![
        (
            json!({"ports": [{"name": "Http", "port": 80}, {"name": "a.b", "port": 81}]}),
            vec![
                format!("spec.ports[0].name: Invalid value: \"Http\": {LABEL_FORMAT}"),
                "spec.ports[1].name: Invalid value: \"a.b\": must not contain dots".into(),
            ],
        ),
        (
            json!({"ports": [{"name": "a", "port": 80}, {"port": 81}, {"name": "a", "port": 82}]}),
            vec![
                "spec.ports[1].name: Required value".into(),
                "spec.ports[2].name: Duplicate value: \"a\"".into(),
            ],
        ),
        (
            json!({"ports": [{"port": 70000}, {"name": "b"}]}),
            vec![
                "spec.ports[0].name: Required value".into(),
                "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
                    .into(),
                "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                "spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive"
                    .into(),
                "spec.ports[1].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive".into(),
            ],
        ),
        (
            json!({"ports": [{"port": 80, "protocol": "HTTP", "targetPort": "HTTP", "appProtocol": "bad proto"}]}),
            vec![
                "spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"".into(),
                "spec.ports[0].targetPort: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
                "spec.ports[0].targetPort: Invalid value: \"HTTP\": must contain at least one letter (a-z)".into(),
                format!("spec.ports[0].appProtocol: Invalid value: \"bad proto\": {NAME_PART}"),
            ],
        ),
        (
            json!({"ports": [{"port": 80, "targetPort": "a-very-long-name"}, {"name": "x", "port": 81, "targetPort": 65536}]}),
            vec![
                "spec.ports[0].name: Required value".into(),
                "spec.ports[0].targetPort: Invalid value: \"a-very-long-name\": must be no more than 15 characters".into(),
                "spec.ports[1].targetPort: Invalid value: 65536: must be between 1 and 65535, inclusive".into(),
            ],
        ),
        (
            json!({"ports": [{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 80}]}),
            vec![
                "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'".into(),
                "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}".into(),
            ],
        ),
        (
            json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81, "nodePort": 30080}, {"name": "c", "port": 82, "nodePort": 30080, "protocol": "UDP"}]}),
            vec!["spec.ports[1].nodePort: Duplicate value: 30080".into()],
        ),
        (json!({"ports": []}), vec!["spec.ports: Required value".into()]),
    ];
    for (spec, expected) in table {
        let mut spec_with_selector = json!({"selector": {"app": "web"}});
        merge(&mut spec_with_selector, spec.clone());
        assert_eq!(refusals(with_spec(spec_with_selector)), expected, "{spec}");
    }
}

#[test]
fn spec_fields_are_refused_with_upstreams_words() {
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let table: Vec<(Value, Vec<String>)> = vec![
        (
            cluster_ip(json!({"type": "Foo"})),
            vec!["spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"".into()],
        ),
        (
            with_spec(json!({"type": "ExternalName"})),
            vec!["spec.externalName: Required value".into()],
        ),
        (
            with_spec(json!({"type": "ExternalName", "externalName": "Bad_Name.", "clusterIP": "None", "ipFamilyPolicy": "SingleStack"})),
            vec![
                "spec.clusterIPs: Forbidden: may not be set for ExternalName services".into(),
                "spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services".into(),
                format!("spec.externalName: Invalid value: \"Bad_Name\": {subdomain}"),
            ],
        ),
        (
            with_spec(json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]})),
            vec!["spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services".into()],
        ),
        (
            cluster_ip(json!({"selector": {"bad key": "v", "k": "bad value"}})),
            vec![
                format!("spec.selector: Invalid value: \"bad key\": {NAME_PART}"),
                "spec.selector: Invalid value: \"bad value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
            ],
        ),
        (
            cluster_ip(json!({"sessionAffinity": "Sticky"})),
            vec!["spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"".into()],
        ),
        (
            cluster_ip(json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}}})),
            vec!["spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400".into()],
        ),
        (
            cluster_ip(json!({"externalIPs": ["not-an-ip", "127.0.0.1", "0.0.0.0", "169.254.169.254"]})),
            vec![
                format!("spec.externalIPs[0]: Invalid value: \"not-an-ip\": {BAD_IP}"),
                "spec.externalIPs[1]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)".into(),
                "spec.externalIPs[2]: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)".into(),
                "spec.externalIPs[3]: Invalid value: \"169.254.169.254\": may not be in the link-local range (169.254.0.0/16, fe80::/10)".into(),
            ],
        ),
        (
            cluster_ip(json!({"loadBalancerSourceRanges": ["10.0.0.0/8", "10.0.0.0/33"], "allocateLoadBalancerNodePorts": true, "loadBalancerClass": "x"})),
            vec![
                format!("spec.LoadBalancerSourceRanges: {LB_ONLY}"),
                format!("spec.LoadBalancerSourceRanges[1]: Invalid value: \"10.0.0.0/33\": {BAD_CIDR}"),
                format!("spec.allocateLoadBalancerNodePorts: {LB_ONLY}"),
                format!("spec.loadBalancerClass: {LB_ONLY}"),
            ],
        ),
        (
            json!({"metadata": {"name": "s", "annotations": {"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8,nope"}}, "spec": {"ports": [{"port": 80}]}}),
            vec![
                format!("metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]: {LB_ONLY}"),
                format!("metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]: Invalid value: \"nope\": {BAD_CIDR}"),
            ],
        ),
        (
            with_spec(json!({"type": "LoadBalancer", "ports": [{"port": 80}], "loadBalancerClass": "bad class!"})),
            vec![format!("spec.loadBalancerClass: Invalid value: \"bad class!\": {NAME_PART}")],
        ),
        (
            cluster_ip(json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 30100})),
            vec![
                "spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services".into(),
                "spec.healthCheckNodePort: Invalid value: 30100: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'".into(),
            ],
        ),
        (
            with_spec(json!({"type": "NodePort", "ports": [{"port": 80}], "externalTrafficPolicy": "Global"})),
            vec!["spec.externalTrafficPolicy: Unsupported value: \"Global\": supported values: \"Cluster\", \"Local\"".into()],
        ),
        (
            with_spec(json!({"type": "LoadBalancer", "ports": [{"port": 80}], "externalTrafficPolicy": "Local", "healthCheckNodePort": 70000})),
            vec!["spec.healthCheckNodePort: Invalid value: 70000: must be between 1 and 65535, inclusive".into()],
        ),
        (
            cluster_ip(json!({"internalTrafficPolicy": "Node", "trafficDistribution": "Nearest"})),
            vec![
                "spec.internalTrafficPolicy: Unsupported value: \"Node\": supported values: \"Cluster\", \"Local\"".into(),
                "spec.trafficDistribution: Unsupported value: \"Nearest\": supported values: \"PreferClose\", \"PreferSameZone\", \"PreferSameNode\"".into(),
            ],
        ),
        (
            json!({"metadata": {"name": "s", "annotations": {"service.kubernetes.io/topology-mode": "Auto", "service.kubernetes.io/topology-aware-hints": "Disabled"}}, "spec": {"ports": [{"port": 80}]}}),
            vec!["metadata.annotations[service.kubernetes.io/topology-mode]: Invalid value: \"Auto\": must match annotations[service.kubernetes.io/topology-aware-hints] when both are specified".into()],
        ),
    ];
    for (service, expected) in table {
        assert_eq!(refusals(service.clone()), expected, "{service}");
    }
}

#[test]
fn cluster_ips_and_families_are_refused_with_upstreams_words() {
    let table: Vec<(Value, Vec<String>)> = vec![
        (
            json!({"clusterIP": "10.0.0.300"}),
            vec![format!("spec.clusterIPs[0]: Invalid value: \"10.0.0.300\": {BAD_IP}")],
        ),
        (
            json!({"clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.11"]}),
            vec!["spec.clusterIPs: Invalid value: []string{\"10.43.0.11\"}: first value must match `clusterIP`".into()],
        ),
        (
            json!({"clusterIPs": ["10.43.0.11"]}),
            vec!["spec.clusterIPs: Invalid value: []string{\"10.43.0.11\"}: must be empty when `clusterIP` is not specified".into()],
        ),
        (
            json!({"clusterIP": "None", "clusterIPs": ["None", "10.43.0.1"]}),
            vec!["spec.clusterIPs: Invalid value: []string{\"None\", \"10.43.0.1\"}: 'None' must be the first and only value".into()],
        ),
        (
            json!({"clusterIP": "10.43.0.1", "clusterIPs": ["10.43.0.1", "10.43.0.2", "10.43.0.3"]}),
            vec![
                "spec.clusterIPs: Invalid value: []string{\"10.43.0.1\", \"10.43.0.2\", \"10.43.0.3\"}: may only hold up to 2 values".into(),
                "spec.clusterIPs: Invalid value: []string{\"10.43.0.1\", \"10.43.0.2\", \"10.43.0.3\"}: may specify no more than one IP for each IP family".into(),
            ],
        ),
        (
            json!({"clusterIP": "2001:db8::1", "ipFamilies": ["IPv4", "IPv4", "IPv5"], "ipFamilyPolicy": "Dual"}),
            vec![
                "spec.ipFamilies[1]: Duplicate value: \"IPv4\"".into(),
                "spec.ipFamilies[2]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"".into(),
                "spec.ipFamilyPolicy: Unsupported value: \"Dual\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"".into(),
                "spec.clusterIPs[0]: Invalid value: \"2001:db8::1\": expected an IPv4 value as indicated by `ipFamilies[0]`".into(),
            ],
        ),
    ];
    for (extra, expected) in table {
        assert_eq!(refusals(cluster_ip(extra.clone())), expected, "{extra}");
    }
}

#[test]
fn a_load_balancers_status_is_refused_with_upstreams_words() {
    let mut not_lb = cluster_ip(json!({}));
    not_lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
    assert_eq!(
        refusals(not_lb),
        [
            "status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'"
        ]
    );
    let mut lb = with_spec(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    lb["status"] = json!({"loadBalancer": {"ingress": [
        {"ip": "1.2.3"}, {"ipMode": "VIP", "hostname": "lb.example.com"},
        {"ip": "1.2.3.4", "ipMode": "Magic"}, {"hostname": "1.2.3.4"}
    ]}});
    assert_eq!(
        refusals(lb),
        [
            format!("status.loadBalancer.ingress[0].ip: Invalid value: \"1.2.3\": {BAD_IP}"),
            "status.loadBalancer.ingress[1].ipMode: Forbidden: may not be specified when `ip` is not set".into(),
            "status.loadBalancer.ingress[2].ipMode: Unsupported value: \"Magic\": supported values: \"Proxy\", \"VIP\"".into(),
            "status.loadBalancer.ingress[3].hostname: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address".into(),
        ]
    );
}

/// The update of the stored `old` to `new` as the API server makes it
/// (defaults, the update rules, validation): the causes refusing it, and
/// `new` as it would be stored.
fn update(old: &Value, mut new: Value) -> (Vec<String>, Value) {
    let registry = Registry::builtin();
    let def = registry.get("", "v1", "services").expect("def");
    crate::defaults::apply(def, &mut new);
    let mut causes = crate::update::validate(def, &mut new, old, Via::Main);
    (def.strategy.validate)(&new, &mut causes);
    (lines(causes), new)
}

/// A Service as the storage keeps it once allocated.
fn stored(kind: &str, extra: Value) -> Value {
    let mut spec = json!({"type": kind, "selector": {"app": "web"}, "sessionAffinity": "None",
        "clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"], "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
        "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 80}]});
    merge(&mut spec, extra);
    let mut service = with_spec(spec);
    service["status"] = json!({"loadBalancer": {}});
    service
}

#[test]
fn a_new_type_drops_what_it_does_not_use() {
    let node_port = stored(
        "NodePort",
        json!({"externalTrafficPolicy": "Cluster", "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}]}),
    );
    // kubectl apply of `type: ClusterIP`: what the server filled in stays.
    let mut new = node_port.clone();
    new["spec"]["type"] = json!("ClusterIP");
    let (causes, new) = update(&node_port, new);
    assert_eq!(causes, Vec::<String>::new());
    assert_eq!(new["spec"]["ports"][0].get("nodePort"), None);
    assert_eq!(new["spec"].get("externalTrafficPolicy"), None);
    assert_eq!(new["spec"]["clusterIP"], "10.43.0.10", "still needs it");

    // A node port the update changed is not dropped, but refused.
    let mut new = node_port.clone();
    new["spec"]["type"] = json!("ClusterIP");
    new["spec"]["ports"][0]["nodePort"] = json!(30099);
    let (causes, _) = update(&node_port, new);
    assert_eq!(
        causes,
        ["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
    );

    let lb = stored(
        "LoadBalancer",
        json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 31000, "allocateLoadBalancerNodePorts": true, "loadBalancerClass": "example.com/lb",
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}]}),
    );
    let mut lb = lb;
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}});
    let mut new = lb.clone();
    new["spec"]["type"] = json!("NodePort");
    let (causes, new) = update(&lb, new);
    assert_eq!(causes, Vec::<String>::new());
    for gone in [
        "healthCheckNodePort",
        "allocateLoadBalancerNodePorts",
        "loadBalancerClass",
    ] {
        assert_eq!(new["spec"].get(gone), None, "{gone}");
    }
    assert_eq!(
        new["spec"]["ports"][0]["nodePort"], 30080,
        "NodePort uses it"
    );
    assert_eq!(new["status"]["loadBalancer"], json!({}));

    // To ExternalName: the cluster IP and its families go.
    let clusterip = stored("ClusterIP", json!({}));
    let mut new = clusterip.clone();
    new["spec"]["type"] = json!("ExternalName");
    new["spec"]["externalName"] = json!("db.example.org");
    let (causes, new) = update(&clusterip, new);
    assert_eq!(causes, Vec::<String>::new());
    for gone in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert_eq!(new["spec"].get(gone), None, "{gone}");
    }
}

#[test]
fn updates_keep_what_upstream_keeps() {
    let lb = stored(
        "LoadBalancer",
        json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 31000, "allocateLoadBalancerNodePorts": true, "loadBalancerClass": "a.example/lb",
            "ports": [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}]}),
    );
    let changed = |field: &str, value: Value| {
        let mut new = lb.clone();
        new["spec"][field] = value;
        update(&lb, new).0
    };
    assert_eq!(
        changed("loadBalancerClass", json!("b.example/lb")),
        ["spec.loadBalancerClass: Invalid value: \"b.example/lb\": may not change once set"]
    );
    assert_eq!(
        changed("loadBalancerClass", Value::Null),
        ["spec.loadBalancerClass: Invalid value: null: may not change once set"]
    );
    assert_eq!(
        changed("healthCheckNodePort", json!(31001)),
        ["spec.healthCheckNodePort: Forbidden: field is immutable"]
    );
    assert_eq!(
        changed("clusterIPs", json!(["10.43.0.11"])),
        [
            "spec.clusterIPs[0]: Invalid value: []string{\"10.43.0.11\"}: may not change once set",
            "spec.clusterIPs: Invalid value: []string{\"10.43.0.11\"}: first value must match `clusterIP`",
        ]
    );
    assert_eq!(
        changed("ipFamilies", json!(["IPv6"])),
        [
            "spec.ipFamilies[0]: Invalid value: []core.IPFamily{\"IPv6\"}: may not change once set",
            "spec.clusterIPs[0]: Invalid value: \"10.43.0.10\": expected an IPv6 value as indicated by `ipFamilies[0]`",
        ]
    );
    // An older client sends `clusterIP` alone: the stored `clusterIPs` stay.
    let clusterip = stored("ClusterIP", json!({}));
    let mut new = clusterip.clone();
    new["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("clusterIPs");
    new["metadata"]["labels"] = json!({"tier": "web"});
    let (causes, new) = update(&clusterip, new);
    assert_eq!(causes, Vec::<String>::new());
    assert_eq!(new["spec"]["clusterIPs"], json!(["10.43.0.10"]));
}

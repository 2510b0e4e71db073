//! The cluster DNS Service, `kube-system/kube-dns`, as upstream's and
//! k3s's clusters have it (name, labels, ports, the `--cluster-dns`
//! address), so that `kubectl -n kube-system get svc,endpointslices` shows
//! it and tools that look for it find it. Its endpoints are the node
//! agents' DNS servers (the controller manager's `dns-endpoints-
//! controller`); it has no selector. Made at the server's start when
//! missing — never overwritten: what a user changed in it stays.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The Service as rudder makes it.
pub fn service(cluster_dns: std::net::Ipv4Addr) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "KubeDNS",
            },
            "annotations": {
                "prometheus.io/port": "9153",
                "prometheus.io/scrape": "true",
            },
        },
        "spec": {
            "clusterIP": cluster_dns.to_string(),
            "clusterIPs": [cluster_dns.to_string()],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
            // Every node answers its own pods' queries.
            "internalTrafficPolicy": "Local",
        },
    })
}

/// Creates the Service unless it exists.
pub async fn ensure_service(
    client: kube::Client,
    cluster_dns: std::net::Ipv4Addr,
) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(client, "kube-system");
    if api.get_opt("kube-dns").await?.is_some() {
        return Ok(());
    }
    let service: Service = serde_json::from_value(service(cluster_dns))?;
    match api.create(&PostParams::default(), &service).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

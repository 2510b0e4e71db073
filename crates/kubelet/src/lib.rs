//! rudder's node agent (upstream's kubelet): runs the pods bound to its
//! node on a CRI v1 runtime and reports them.

pub mod agent;
pub mod bootstrap;
pub mod containerd;
pub mod cri;
pub mod health;
pub mod images;
pub mod network;
pub mod node;
pub mod pods;
pub mod server;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// A time as the API's `Time`.
pub(crate) fn api_time(
    time: std::time::SystemTime,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(timestamp(time))
}

pub(crate) fn timestamp(time: std::time::SystemTime) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::try_from(time).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

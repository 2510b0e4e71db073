//! The conformance suite against a real etcd (Debian `etcd-server`), started
//! on loopback for each case.

rudder_store::conformance_tests!(rudder_store::testing::etcd);

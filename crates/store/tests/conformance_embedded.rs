//! The conformance suite against the embedded backend.

rudder_store::conformance_tests!(rudder_store::testing::embedded);

//! The Kubernetes API machinery, pure (no I/O, no async runtime): the
//! resource registry, the object model, defaulting and validation, label and
//! field selectors, patches, `Status` errors and Table rows.

mod builtin;
pub mod registry;
pub mod status;

pub use registry::{Registry, ResourceDef};
pub use status::{Cause, Status};
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod json;
pub mod managed;
pub mod network;
pub mod object;
pub mod openapi;
pub mod openapi_pb;
pub mod patch;
pub mod protobuf;
pub mod quantity;
pub mod selector;
pub mod strategy;
pub mod structure;
pub mod table;
pub mod time;
pub mod update;
pub mod validation;

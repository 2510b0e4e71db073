//! The Kubernetes API machinery, pure (no I/O, no async runtime).
//!
//! **What every API client needs** — controllers, the scheduler and the
//! node agent use these, as well as the API server:
//!
//! - [`meta`]: owner references and status conditions;
//! - [`selector`]: label and field selectors, parsed and matched as upstream;
//! - [`quantity`]: resource quantities, parsed and in canonical form;
//! - [`time`]: timestamps and durations, and the [`time::Clock`] seam;
//! - [`status`]: `Status` errors ([`Status`], [`Cause`]);
//! - [`network`]: the cluster's address ranges;
//! - [`podlogs`]: pod log options and which container's log a request reads.
//!
//! **The API server's machinery** — what serving the API takes, which a
//! client never calls: the resource [`registry`] and each kind's
//! [`strategy`]; preparing objects for the store ([`object`], [`defaults`],
//! [`validation`], [`update`], [`conversion`], [`certificates`]); custom
//! resources ([`crd`]); managed fields and server-side apply ([`managed`],
//! [`structure`]); patches ([`patch`]); OpenAPI ([`openapi`],
//! [`openapi_pb`]); protobuf bodies ([`protobuf`]); Table rows ([`table`]);
//! JSON with duplicate keys ([`json`]).

// For every API client.
pub mod meta;
pub mod network;
pub mod podlogs;
pub mod quantity;
pub mod quota;
pub mod selector;
pub mod status;
pub mod time;

pub use status::{Cause, Status};

// The API server's machinery.
pub mod admission;
mod builtin;
pub mod certificates;
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod json;
pub mod limitrange;
pub mod managed;
pub mod object;
pub mod openapi;
pub mod openapi_pb;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod strategy;
pub mod structure;
pub mod table;
pub mod update;
pub mod validation;

pub use registry::{Registry, ResourceDef};

//! The node's host, behind one seam: every external command a node
//! component runs (`nft`, `ip`, `mount`, `conntrack`, …) and every file it
//! writes outside its own data directory (sysctls under `/proc/sys`) goes
//! through a [`Host`]. The agent, the service proxy and cluster DNS are
//! handed one `Arc<dyn Host>`: [`System`] on a real node, the recording
//! [`testing::FakeHost`] in unit tests, which then assert what would have
//! been asked of the machine without root.
//!
//! What is built on the seam lives here too, once: the node's routes
//! ([`routes`]), its sysctls ([`sysctl`]), nftables transactions
//! ([`nft`]) and every nftables table the node programs ([`tables`]: the
//! agent's and the service proxy's).

pub mod command;
pub mod netns;
pub mod nft;
pub mod routes;
pub mod sysctl;
pub mod tables;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use command::{Command, Error, Host, System, system_command};
pub use netns::InNamespace;
pub use rudder_api::network::Cidr;

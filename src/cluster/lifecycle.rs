//! A member's life in its cluster: joining an existing cluster (also after this node's
//! member was removed), and leaving it. Library code; `run` and the CLI call it.
//!
//! **How `run` calls joining** (before it starts etcd, after installing it):
//! ```text
//! let node = lifecycle::Node::from_settings(&settings);
//! match lifecycle::join::decide(&node, JOIN_WAIT, &mut progress)? {   // Failure: join-blocked,
//!     Decision::StartAsConfigured { .. } => start etcd as today,      //   cluster-mismatch via Refuse
//!     Decision::Refuse { code, why } => fail with Failure::new(code, why), etcd stays off,
//!     Decision::Wait { .. } => unreachable (decide waits itself),
//!     d @ Decision::Join { .. } => {
//!         let plan = lifecycle::join::prepare(&node, &d, &mut progress)?;
//!         write etcd's unit with --initial-cluster=plan.initial_cluster
//!             and --initial-cluster-state=existing; start etcd; await its client port;
//!         lifecycle::join::promote(&node, &plan, PROMOTE_TIMEOUT, &mut progress)?;
//!     }
//! }
//! ```
//! `progress` gets [`join::Progress`] values for status ("joining the existing cluster as
//! a learner", "promoted to voting member") and the timeline. When etcd exits with "the
//! member has been removed from the cluster" ([`crate::cluster::etcd::says_member_removed`] on its
//! journal), stop it and run the same decision: it returns a join with `move_aside`.
//!
//! **How the `leave` command calls leaving**:
//! ```text
//! let plan = lifecycle::leave::plan(&node, force)?;     // leave-refused / leave-failed
//! let outcome = lifecycle::leave::execute(&node, &plan)?;
//! then stop and disable etcd, lifecycle::aside::move_aside(&settings.data_dir, "left", now),
//! record `left` in the state.
//! ```

pub mod aside;
pub mod decide;
pub mod join;
pub mod leave;
pub mod node;
pub mod start;
pub mod survey;

pub use decide::Decision;
pub use node::Node;

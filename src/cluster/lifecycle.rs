//! A member's life in its cluster: joining an existing cluster (also after this node's
//! member was removed), and leaving it. Library code; `run` and the CLI call it.
//!
//! **How `run` calls joining** (before it starts etcd, after installing it; also when the
//! data dir is empty on a later boot, and after etcd exited as a removed member):
//! ```text
//! let node = lifecycle::Node::from_settings(&settings);   // defined in member/this.rs
//! let plan = lifecycle::start::before_start(&node, join_wait, &mut progress)?;
//!     // join::decide (waits itself; Refuse -> its Failure: join-blocked, cluster-mismatch),
//!     // then None: start as configured, or Some(join::prepare(..)): the learner added
//! render etcd.env from `plan` (member/unit.rs; the unit is the package's; Some:
//!     --initial-cluster=plan.initial_cluster, --initial-cluster-state=existing);
//!     start etcd and follow the job (member/service.rs);
//! if let Some(plan) = &plan {
//!     lifecycle::join::promote(&node, plan, settings.start_timeout, &mut progress)?;
//! }
//! then /health on the metrics port.
//! ```
//! `progress` gets [`join::Progress`] values for status ("joining the existing cluster as
//! a learner", "promoted to voting member") and the timeline. When etcd exits with "the
//! member has been removed from the cluster" ([`crate::cluster::etcd::says_member_removed`] on its
//! journal), `run` stops it and calls `before_start` once more: the decision then is a
//! join with `move_aside`.
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
pub use node::{Data, Node};

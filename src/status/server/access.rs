//! Who may ask: root and one group, decided from the peer's credentials at accept.

use super::ErrorBody;
use nix::unistd::{Gid, Group, Uid, User};

/// Who may ask: root and the members of one group.
pub struct Access {
    pub(super) group: String,
    pub(super) gid: Option<Gid>,
    pub(super) members: Vec<String>,
}

impl Access {
    /// Resolves `group` in the group database; an unknown group admits only root.
    pub fn new(group: &str) -> Access {
        let found = Group::from_name(group).ok().flatten();
        Access {
            group: group.to_string(),
            gid: found.as_ref().map(|g| g.gid),
            members: found.map(|g| g.mem).unwrap_or_default(),
        }
    }

    /// Whether a peer with `uid` and (effective) `gid` may ask: root; a peer whose gid,
    /// or whose user's primary group, is the group; a user listed in the group.
    pub fn allows(&self, uid: Uid, gid: Gid) -> bool {
        if uid.is_root() {
            return true;
        }
        let Some(group_gid) = self.gid else {
            return false;
        };
        if gid == group_gid {
            return true;
        }
        match User::from_uid(uid) {
            Ok(Some(user)) => user.gid == group_gid || self.members.contains(&user.name),
            _ => false,
        }
    }

    /// The refusal.
    pub fn refusal(&self, uid: Uid) -> ErrorBody {
        ErrorBody::new(
            "forbidden",
            format!(
                "uid {uid} may not query etcd-setup status: only root and members of group {} may query etcd-setup status",
                self.group
            ),
        )
    }
}

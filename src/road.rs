//! Day 1, the road of `etcd-setup run`: find the Kubernetes ISO ([`discover`], read by
//! [`iso9660`]) → take the archive's bytes ([`source`]) → one streaming pass over them
//! ([`archive`], binaries checked by [`elf`]) → install ([`install`]) → start and confirm
//! ([`run`], the order of the steps); with `backup.restore_when_empty`, a brand-new
//! cluster restored from its bucket first ([`from_bucket`]). [`check`] walks the same
//! road offline on files.

pub mod archive;
pub mod check;
pub mod discover;
pub mod elf;
pub mod from_bucket;
pub mod install;
pub mod iso9660;
pub mod run;
pub mod source;

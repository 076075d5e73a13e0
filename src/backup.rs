//! Backups off the node (SPEC, "Off the node"): their content side. [`seal`] encrypts a
//! snapshot to the operators' age recipients and opens what `age` encrypted; [`trial`]
//! proves a plaintext snapshot restores before anyone relies on it.

pub mod seal;
pub mod trial;

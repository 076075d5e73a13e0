//! Shared test support: the VM bed and the test inputs.
pub mod etcd;
pub mod inputs;
pub mod net;
pub mod upkeep;
pub mod vm;

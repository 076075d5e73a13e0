//! Shared test support: the VM bed, the test inputs, etcd on loopback, scratch folders.
pub mod age;
pub mod etcd;
pub mod inputs;
pub mod net;
pub mod pki;
pub mod scratch;
pub mod store;
pub mod upkeep;
pub mod vm;

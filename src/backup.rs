//! Backups off the node (SPEC, "Off the node"): snapshots encrypted, uploaded to an S3
//! bucket, read back and verified.
//!
//! Content side: [`seal`] encrypts a snapshot to the operators' age recipients and opens
//! what `age` encrypted; [`trial`] proves a plaintext snapshot restores before anyone
//! relies on it. Bucket side: `sigv4.rs` signs requests (AWS Signature V4, by hand),
//! `s3.rs` is the client (HTTP/1.1 over rustls, streaming multipart upload), `bucket.rs`
//! the objects' names, metadata, retention and the upload of one snapshot. Read side:
//! `fetch.rs` lists a cluster's backups with their metadata and fetches one, decrypted
//! into a root-only scratch file and proven, for `backups verify` and `restore
//! --from-backup`. `evidence.rs`: the markers by which members with empty data dirs say
//! so to each other, before `restore_when_empty` restores anything.

pub mod bucket;
pub mod evidence;
pub mod fetch;
pub mod s3;
pub mod seal;
pub mod sigv4;
pub mod trial;

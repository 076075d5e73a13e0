//! Off-node backups: snapshots uploaded to an S3 bucket, read back and verified.
//!
//! `sigv4.rs` signs requests (AWS Signature V4, by hand), `s3.rs` is the client (HTTP/1.1
//! over rustls, streaming multipart upload), `bucket.rs` the objects' names, metadata,
//! retention and the upload of one snapshot.

pub mod bucket;
pub mod s3;
pub mod sigv4;

//! AWS Signature Version 4 for S3, by hand on `sha2` and `hmac`: the canonical request,
//! the string to sign, the signing key and the `Authorization` header. Checked against
//! the example values AWS publishes for S3 ("Signature Calculations for the Authorization
//! Header", examplebucket, 2013-05-24).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// SHA-256 of no bytes, the payload hash of a request without a body.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length; new_from_slice cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// URI-encodes `s` as SigV4 wants it: every byte but `A-Za-z0-9-_.~` as `%XX`, and `/` too
/// unless `keep_slash` (an object key in the path).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// What the signature covers.
pub struct Canonical<'a> {
    /// `GET`, `PUT`, …
    pub method: &'a str,
    /// The path, already URI-encoded (`/bucket/key`).
    pub path: &'a str,
    /// The query parameters, not encoded (`("uploadId", id)`, `("uploads", "")`).
    pub query: &'a [(String, String)],
    /// The headers signed, names in lower case; `host` and `x-amz-date` among them.
    pub headers: &'a [(String, String)],
    /// Hex SHA-256 of the body (or `UNSIGNED-PAYLOAD`).
    pub payload_sha256: &'a str,
}

/// The canonical query string: each name and value encoded, sorted, joined by `&`.
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut q: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    q.sort();
    q.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

impl Canonical<'_> {
    /// The signed headers' names, sorted, joined by `;`, and the canonical request.
    fn request(&self) -> (String, String) {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_ascii_lowercase(),
                    v.split_whitespace().collect::<Vec<_>>().join(" "),
                )
            })
            .collect();
        headers.sort();
        let signed = headers
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(";");
        let mut text = format!(
            "{}\n{}\n{}\n",
            self.method,
            self.path,
            canonical_query(self.query)
        );
        for (k, v) in &headers {
            let _ = writeln!(text, "{k}:{v}");
        }
        let _ = write!(text, "\n{signed}\n{}", self.payload_sha256);
        (signed, text)
    }
}

/// The `Authorization` header value for `req` signed at `amz_date` (`20130524T000000Z`,
/// the same as its `x-amz-date` header) in `region` for service `s3`.
pub fn authorization(
    access_key: &str,
    secret_key: &str,
    region: &str,
    amz_date: &str,
    req: &Canonical<'_>,
) -> String {
    let date = amz_date.get(..8).unwrap_or(amz_date);
    let scope = format!("{date}/{region}/s3/aws4_request");
    let (signed, canonical) = req.request();
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let key = signing_key(secret_key, date, region, "s3");
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    format!("AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}")
}

/// The derived signing key of `secret` for `date` (`YYYYMMDD`), `region` and `service`.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

#[cfg(test)]
mod tests {
    use super::*;

    // AWS's published example credentials (S3 SigV4 "Examples of Signature Calculations").
    const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20130524T000000Z";

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn signature(auth: &str) -> &str {
        auth.rsplit_once("Signature=").map(|(_, s)| s).unwrap_or("")
    }

    #[test]
    fn get_object_matches_awss_published_signature() {
        let headers = h(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", DATE),
        ]);
        let auth = authorization(
            AK,
            SK,
            "us-east-1",
            DATE,
            &Canonical {
                method: "GET",
                path: "/test.txt",
                query: &[],
                headers: &headers,
                payload_sha256: EMPTY_SHA256,
            },
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn put_object_with_an_encoded_key_matches_awss_published_signature() {
        let body = "Welcome to Amazon S3.";
        let payload = sha256_hex(body.as_bytes());
        assert_eq!(
            payload,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let headers = h(&[
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", &payload),
            ("x-amz-date", DATE),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ]);
        let path = format!("/{}", uri_encode("test$file.text", true));
        assert_eq!(path, "/test%24file.text");
        let auth = authorization(
            AK,
            SK,
            "us-east-1",
            DATE,
            &Canonical {
                method: "PUT",
                path: &path,
                query: &[],
                headers: &headers,
                payload_sha256: &payload,
            },
        );
        assert_eq!(
            signature(&auth),
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        );
    }

    #[test]
    fn get_bucket_lifecycle_and_list_objects_match_awss_published_signatures() {
        let headers = h(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", DATE),
        ]);
        let sign = |query: &[(String, String)]| {
            authorization(
                AK,
                SK,
                "us-east-1",
                DATE,
                &Canonical {
                    method: "GET",
                    path: "/",
                    query,
                    headers: &headers,
                    payload_sha256: EMPTY_SHA256,
                },
            )
        };
        let lifecycle = sign(&h(&[("lifecycle", "")]));
        assert_eq!(
            signature(&lifecycle),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        );
        // Given out of order: the canonical query sorts them.
        let list = sign(&h(&[("prefix", "J"), ("max-keys", "2")]));
        assert_eq!(
            signature(&list),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        );
    }

    #[test]
    fn signing_key_matches_awss_general_example() {
        // From "Examples of how to derive a signing key for Signature Version 4".
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20150830",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&key),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }

    #[test]
    fn query_values_and_keys_are_encoded_once() {
        assert_eq!(
            canonical_query(&h(&[("prefix", "etcd-setup/a b"), ("list-type", "2")])),
            "list-type=2&prefix=etcd-setup%2Fa%20b"
        );
        assert_eq!(uri_encode("a/b c+~", true), "a/b%20c%2B~");
    }
}

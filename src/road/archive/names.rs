//! Entry names: which ones are safe to create, and what the top folder's name says.
//!
//! A name is accepted only as plain relative UTF-8 components separated by single `/`: no
//! leading `/`, no `.` or `..` component, no empty component, no NUL, backslash or control
//! character. A leading `./` is refused too: upstream tarballs never have one, and accepting
//! it would make `./` itself a second top entry; the message tells how to repack.

/// Longest name accepted, in bytes: ten times etcd's longest, and short enough that the
/// staging folder's path plus the name stays within Linux's `PATH_MAX` (4096).
const MAX_NAME: usize = 1024;
/// Longest component accepted, in bytes (Linux `NAME_MAX`).
const MAX_COMPONENT: usize = 255;

/// Splits a raw entry name into its components, or says why it is unsafe. A directory's name
/// may end in one `/`.
pub(super) fn components(raw: &[u8], is_dir: bool) -> Result<Vec<&str>, &'static str> {
    if raw.is_empty() {
        return Err("has an empty name");
    }
    if raw.contains(&0) {
        return Err("has a NUL byte in its name");
    }
    let name = std::str::from_utf8(raw).map_err(|_| "has a name that is not UTF-8")?;
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err("has a control character or backslash in its name");
    }
    if name.len() > MAX_NAME {
        return Err("has a name longer than 1024 bytes");
    }
    if name.starts_with('/') {
        return Err("is an absolute path");
    }
    let body = match name.strip_suffix('/') {
        Some(body) if is_dir => body,
        Some(_) => return Err("is a file whose name ends in /"),
        None => name,
    };
    let parts: Vec<&str> = body.split('/').collect();
    for part in &parts {
        match *part {
            "" => return Err("has an empty path component (// or a lone /)"),
            "." => {
                return Err("has a \".\" component; pack the folder by its name \
                            (tar -czf etcd.tar.gz etcd-vX.Y.Z-linux-ARCH), not as ./")
            }
            ".." => return Err("leaves the top folder through \"..\""),
            p if p.len() > MAX_COMPONENT => return Err("has a component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(parts)
}

/// The version and architecture a top folder `etcd-v<version>-linux-<arch>` names, e.g.
/// `("3.5.1", "amd64")`. The version is `X.Y.Z` with an optional pre-release suffix
/// (`3.6.0-rc.0`); the architecture is lowercase letters and digits.
pub(super) fn release(top: &str) -> Option<(&str, &str)> {
    let rest = top.strip_prefix("etcd-v")?;
    let (version, arch) = rest.rsplit_once("-linux-")?;
    let (core, pre) = match version.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (version, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    let numeric = |s: &&str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let pre_ok = pre
        .is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
    let arch_ok = !arch.is_empty()
        && arch
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (numbers.len() == 3 && numbers.iter().all(numeric) && pre_ok && arch_ok)
        .then_some((version, arch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_plain_relative_names() {
        assert_eq!(
            components(b"etcd-v3.5.1-linux-amd64/Documentation/", true),
            Ok(vec!["etcd-v3.5.1-linux-amd64", "Documentation"])
        );
        assert_eq!(components(b"a/etcd", false), Ok(vec!["a", "etcd"]));
    }

    #[test]
    fn refuses_every_unsafe_shape() {
        let cases: &[(&[u8], bool, &str)] = &[
            (b"", false, "empty name"),
            (b"/etc/passwd", false, "absolute"),
            (b"a/../../x", false, "leaves the top folder"),
            (b"./a/etcd", false, "\".\" component"),
            (b"a/./etcd", false, "\".\" component"),
            (b"a//etcd", false, "empty path component"),
            (b"/", true, "absolute"),
            (b"a/etcd/", false, "ends in /"),
            (b"a/et\0cd", false, "NUL"),
            (b"a/et\ncd", false, "control character"),
            (b"a\\..\\x", false, "backslash"),
            (b"a/\xff", false, "not UTF-8"),
        ];
        for (raw, dir, want) in cases {
            let err = components(raw, *dir).unwrap_err();
            assert!(err.contains(want), "{raw:?}: {err}");
        }
        assert!(components(&[b'a'; 256], false).is_err());
        assert!(components("a/".repeat(513).as_bytes(), true).is_err());
    }

    #[test]
    fn reads_version_and_arch_from_the_top_folder() {
        assert_eq!(release("etcd-v3.5.1-linux-amd64"), Some(("3.5.1", "amd64")));
        assert_eq!(
            release("etcd-v3.4.23-linux-ppc64le"),
            Some(("3.4.23", "ppc64le"))
        );
        assert_eq!(
            release("etcd-v3.6.0-rc.0-linux-arm64"),
            Some(("3.6.0-rc.0", "arm64"))
        );
        for bad in [
            "etcd",
            "etcd-3.5.1-linux-amd64",
            "etcd-v3.5-linux-amd64",
            "etcd-v3.5.1-darwin-amd64",
            "etcd-v3.5.1-linux-",
            "etcd-v3.5.x-linux-amd64",
            "etcd-v3.5.1--linux-amd64",
            "etcd-v3.5.1-linux-AMD64",
        ] {
            assert_eq!(release(bad), None, "{bad}");
        }
    }
}

//! `cargo xtask postgres install`: the PostgreSQL 16 + pgvector server binaries the tests start
//! themselves (docs/postgres.md).
//!
//! Debian's PostgreSQL has no pgvector, so the binaries come from the `pgserver` wheel on PyPI,
//! which ships PostgreSQL 16.2 with pgvector 0.6.2 under `pgserver/pginstall/`. A wheel is a zip:
//! pip downloads the pinned file, its SHA-256 is checked, and the installation is extracted into
//! `target/postgres/pgserver-<version>/{bin,lib,share}`, where `mnemon_tests::postgres` looks for
//! it. The task is idempotent: an existing installation is left alone.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::cargo::workspace_root;

/// The pinned `pgserver` release: PostgreSQL 16.2 and pgvector 0.6.2.
const PGSERVER_VERSION: &str = "0.1.4";
/// The one wheel file accepted. Its `pginstall/` is the same for every CPython tag, so pip is
/// asked for this exact tag whatever Python runs it (the download does not depend on it).
const WHEEL_FILE: &str =
    "pgserver-0.1.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl";
/// SHA-256 of [`WHEEL_FILE`] as published on PyPI.
const WHEEL_SHA256: &str = "d595789b47624a3d963aa9aa6359da9be31beb7e61f1a45541953242068b8813";
/// The oldest glibc the wheel's binaries run on (its `manylinux_2_17` tag).
const MIN_GLIBC: (u32, u32) = (2, 17);
/// What `bin/postgres --version` must print.
const POSTGRES_VERSION_PREFIX: &str = "postgres (PostgreSQL) 16.";

const USAGE: &str = "usage: cargo xtask postgres install

Downloads the pinned pgserver wheel from PyPI (python3 -m pip) and extracts PostgreSQL 16 with
pgvector into target/postgres/, where the PostgreSQL test suites find it (docs/postgres.md).";

/// Dispatches `cargo xtask postgres <command>`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("install") if args.len() == 1 => {
            let bin = install(&workspace_root())?;
            println!("{}", bin.display());
            Ok(())
        }
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// Installs the binaries under `root/target/postgres/` unless they are there, and returns their
/// `bin/` directory.
pub(crate) fn install(root: &Path) -> Result<PathBuf> {
    let base = root.join("target/postgres");
    let dest = base.join(format!("pgserver-{PGSERVER_VERSION}"));
    let bin = dest.join("bin");
    if installed(&dest) {
        eprintln!(
            "PostgreSQL (pgserver {PGSERVER_VERSION}) is already installed in {}",
            dest.display()
        );
        return Ok(bin);
    }
    check_platform()?;
    fs::create_dir_all(&base).with_context(|| format!("could not create {}", base.display()))?;

    // Everything happens in a scratch directory renamed into place at the end, so an interrupted
    // install never looks complete.
    let scratch = base.join(format!(".install-{}", std::process::id()));
    if scratch.exists() {
        fs::remove_dir_all(&scratch)
            .with_context(|| format!("could not remove {}", scratch.display()))?;
    }
    fs::create_dir_all(&scratch)
        .with_context(|| format!("could not create {}", scratch.display()))?;
    let result = download_and_extract(&scratch).and_then(|prefix| {
        check_installation(&prefix)?;
        if installed(&dest) {
            // Another install finished meanwhile, and tests may be using it: keep it.
            return Ok(());
        }
        if dest.exists() {
            fs::remove_dir_all(&dest)
                .with_context(|| format!("could not remove the partial {}", dest.display()))?;
        }
        fs::rename(&prefix, &dest)
            .with_context(|| format!("could not move {} to {}", prefix.display(), dest.display()))
    });
    let cleanup = fs::remove_dir_all(&scratch);
    result?;
    cleanup.with_context(|| format!("could not remove {}", scratch.display()))?;
    eprintln!(
        "installed PostgreSQL 16 with pgvector (pgserver {PGSERVER_VERSION}) in {}",
        dest.display()
    );
    Ok(bin)
}

/// Whether `dest` holds a complete installation (it only ever appears complete: see
/// [`install`]).
fn installed(dest: &Path) -> bool {
    let bin = dest.join("bin");
    bin.join("postgres").is_file() && bin.join("initdb").is_file()
}

/// The wheel's binaries are built for Linux x86_64 with glibc ≥ 2.17: anything else gets told
/// how to bring its own server.
fn check_platform() -> Result<()> {
    const OWN: &str = "install PostgreSQL 16 with pgvector yourself and set MNEMON_PG_BIN to the \
                       directory holding its initdb and postgres (docs/postgres.md)";
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        bail!(
            "the pgserver wheel ships PostgreSQL for Linux x86_64 only, and this is {} {}: {OWN}",
            std::env::consts::OS,
            std::env::consts::ARCH
        );
    }
    let output = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .context("could not run `getconf GNU_LIBC_VERSION` to check the C library")?;
    let text = String::from_utf8_lossy(&output.stdout);
    match parse_glibc_version(&text) {
        Some(found) if found >= MIN_GLIBC => Ok(()),
        Some((major, minor)) => bail!(
            "the pgserver wheel needs glibc ≥ {}.{}, this machine has {major}.{minor}: {OWN}",
            MIN_GLIBC.0,
            MIN_GLIBC.1
        ),
        None => bail!(
            "this machine's C library is not glibc (`getconf GNU_LIBC_VERSION` printed {:?}), \
             and the pgserver wheel needs glibc ≥ {}.{}: {OWN}",
            text.trim(),
            MIN_GLIBC.0,
            MIN_GLIBC.1
        ),
    }
}

/// `(major, minor)` from `getconf GNU_LIBC_VERSION`'s output (`glibc 2.36`); `None` for any
/// other C library.
fn parse_glibc_version(text: &str) -> Option<(u32, u32)> {
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
        _ => None,
    }
}

/// Downloads and checks the wheel into `scratch`, extracts it, and returns the assembled
/// installation prefix (`bin/`, `lib/`, `share/`).
fn download_and_extract(scratch: &Path) -> Result<PathBuf> {
    let download = scratch.join("download");
    fs::create_dir_all(&download)?;
    pip_download(&download)?;
    let wheel = download.join(WHEEL_FILE);
    if !wheel.is_file() {
        let found: Vec<String> = fs::read_dir(&download)?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        bail!("pip did not download {WHEEL_FILE} (it wrote {found:?}); check the pip output above");
    }
    let digest = sha256_file(&wheel)?;
    if digest != WHEEL_SHA256 {
        bail!(
            "{WHEEL_FILE} has SHA-256 {digest}, not the pinned {WHEEL_SHA256}: the download is \
             corrupt or the file on PyPI changed; remove {} and retry, and if it persists \
             re-check the pin in xtask/src/postgres.rs",
            download.display()
        );
    }

    let unpacked = scratch.join("wheel");
    unzip(&wheel, &unpacked)?;

    // `pgserver/pginstall/` is the installation prefix. Its `initdb` and `psql` link a renamed
    // libpq from the wheel's `pgserver.libs/` through an RPATH relative to the wheel's layout;
    // copied into `lib/`, the test harness finds it with LD_LIBRARY_PATH (docs/postgres.md).
    let prefix = unpacked.join("pgserver/pginstall");
    let libs = unpacked.join("pgserver.libs");
    if !prefix.join("bin/postgres").is_file() {
        bail!(
            "{WHEEL_FILE} has no pgserver/pginstall/bin/postgres: the pin does not match the wheel's layout"
        );
    }
    if libs.is_dir() {
        for entry in fs::read_dir(&libs)? {
            let entry = entry?;
            let target = prefix.join("lib").join(entry.file_name());
            fs::copy(entry.path(), &target).with_context(|| {
                format!(
                    "could not copy {} to {}",
                    entry.path().display(),
                    target.display()
                )
            })?;
        }
    }
    // Headers are for building extensions, which the tests never do.
    let include = prefix.join("include");
    if include.is_dir() {
        fs::remove_dir_all(&include)?;
    }
    let assembled = scratch.join("pgserver");
    fs::rename(&prefix, &assembled)?;
    Ok(assembled)
}

/// `python3 -m pip download` of exactly [`WHEEL_FILE`] into `dir`.
fn pip_download(dir: &Path) -> Result<()> {
    match Command::new("python3")
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Err(_) => bail!(
            "python3 is required to download the PostgreSQL binaries (pip fetches the pgserver \
             wheel from PyPI): install it (Debian: apt-get install python3 python3-pip)"
        ),
        Ok(status) if !status.success() => bail!(
            "`python3 -m pip` is not available: install pip (Debian: apt-get install python3-pip)"
        ),
        Ok(_) => {}
    }
    let requirement = format!("pgserver=={PGSERVER_VERSION}");
    let args = [
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        "manylinux2014_x86_64",
        "--implementation",
        "cp",
        "--python-version",
        "3.11",
        "--abi",
        "cp311",
        "--dest",
    ];
    eprintln!(
        "$ python3 {} {} {requirement}",
        args.join(" "),
        dir.display()
    );
    let status = Command::new("python3")
        .args(args)
        .arg(dir)
        .arg(&requirement)
        .status()
        .context("could not start python3")?;
    if !status.success() {
        bail!(
            "pip could not download {requirement} ({status}): PyPI must be reachable (or a pip \
             index configured with PIP_INDEX_URL); see pip's message above"
        );
    }
    Ok(())
}

/// Lower-case hex SHA-256 of a file.
fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        fs::File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}

/// Extracts a zip into `dest` with Python's `zipfile` (pip already needs Python, and `unzip` is
/// not on every machine), restoring the Unix permission bits `zipfile` drops: the binaries must
/// stay executable. Refuses entries that would land outside `dest`.
fn unzip(zip: &Path, dest: &Path) -> Result<()> {
    const SCRIPT: &str = r#"
import os, sys, zipfile
archive, dest = sys.argv[1], os.path.realpath(sys.argv[2])
with zipfile.ZipFile(archive) as z:
    for info in z.infolist():
        target = os.path.realpath(os.path.join(dest, info.filename))
        if not target.startswith(dest + os.sep):
            sys.exit("refusing entry outside the destination: " + info.filename)
        z.extract(info, dest)
        mode = (info.external_attr >> 16) & 0o777
        if mode and not info.is_dir():
            os.chmod(target, mode)
"#;
    let status = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(zip)
        .arg(dest)
        .status()
        .context("could not start python3 to extract the wheel")?;
    if !status.success() {
        bail!("could not extract {} ({status})", zip.display());
    }
    Ok(())
}

/// The extracted server runs here: `postgres` reports version 16, `initdb` finds its libpq
/// (with the library path the harness uses), and the `vector` extension is present.
fn check_installation(prefix: &Path) -> Result<()> {
    let bin = prefix.join("bin");
    let version = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()
        .with_context(|| format!("could not run {}", bin.join("postgres").display()))?;
    let text = String::from_utf8_lossy(&version.stdout);
    if !version.status.success() || !text.starts_with(POSTGRES_VERSION_PREFIX) {
        bail!(
            "{} --version printed {:?} (stderr {:?}), not PostgreSQL 16: the binaries do not run \
             on this machine",
            bin.join("postgres").display(),
            text.trim(),
            String::from_utf8_lossy(&version.stderr).trim()
        );
    }
    let initdb = Command::new(bin.join("initdb"))
        .arg("--version")
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .with_context(|| format!("could not run {}", bin.join("initdb").display()))?;
    if !initdb.status.success() {
        bail!(
            "{} --version failed: {}",
            bin.join("initdb").display(),
            String::from_utf8_lossy(&initdb.stderr).trim()
        );
    }
    for file in [
        "share/postgresql/extension/vector.control",
        "lib/postgresql/vector.so",
    ] {
        if !prefix.join(file).is_file() {
            bail!(
                "{} is missing: the wheel has no pgvector",
                prefix.join(file).display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn glibc_versions_parse_and_compare() {
        assert_eq!(parse_glibc_version("glibc 2.36\n"), Some((2, 36)));
        assert_eq!(parse_glibc_version("glibc 2.17"), Some((2, 17)));
        assert_eq!(parse_glibc_version("glibc 2.5.1"), Some((2, 5)));
        assert!(parse_glibc_version("glibc 2.5").is_some_and(|v| v < MIN_GLIBC));
        assert!(parse_glibc_version("glibc 2.36").is_some_and(|v| v >= MIN_GLIBC));
        // 2.100 is newer than 2.17, which a string comparison would get wrong.
        assert!(parse_glibc_version("glibc 2.100").is_some_and(|v| v >= MIN_GLIBC));
        assert_eq!(parse_glibc_version(""), None);
        assert_eq!(parse_glibc_version("musl 1.2"), None);
        assert_eq!(parse_glibc_version("glibc two"), None);
    }

    #[test]
    fn sha256_file_is_the_standard_digest() {
        let dir = std::env::temp_dir().join(format!("xtask-sha-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
        let file = dir.join("abc");
        fs::write(&file, b"abc").unwrap_or_else(|error| panic!("{error}"));
        let digest = sha256_file(&file).unwrap_or_else(|error| panic!("{error}"));
        let _ = fs::remove_dir_all(&dir);
        // FIPS 180-2's test vector for "abc".
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    proptest! {
        #[test]
        fn glibc_parsing_never_panics_and_reads_what_it_prints(
            major in 0u32..1000, minor in 0u32..1000, junk in ".*",
        ) {
            prop_assert_eq!(
                parse_glibc_version(&format!("glibc {major}.{minor}")),
                Some((major, minor))
            );
            let _ = parse_glibc_version(&junk);
        }
    }
}

//! `cargo xtask release <VERSION> [--dry-run]`.
//!
//! Every publishable crate shares one version (`[workspace.package] version`), and the internal
//! dependency entries in `[workspace.dependencies]` carry the same version, so a release bumps
//! them all together. The release then requires a CHANGELOG section for the version and runs
//! `cargo package` for every publishable crate, in dependency order.
//!
//! `--dry-run` does all of this in a temporary copy of the workspace, so the working tree is never
//! touched; build artifacts still go to the workspace's `target/` to reuse the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use toml_edit::DocumentMut;

use crate::cargo::{command, run_in, workspace_root};

/// A workspace crate that will be published.
#[derive(Debug)]
struct Crate {
    name: String,
    /// Names of the other publishable crates it depends on (normal and build dependencies).
    internal_deps: BTreeSet<String>,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut version = None;
    let mut dry_run = false;
    for arg in args {
        match arg.as_str() {
            "--dry-run" => dry_run = true,
            flag if flag.starts_with('-') => bail!("unknown flag {flag:?}"),
            v if version.is_none() => version = Some(v.to_owned()),
            extra => bail!("unexpected argument {extra:?}"),
        }
    }
    let Some(version) = version else {
        bail!("usage: cargo xtask release <VERSION> [--dry-run]");
    };
    let version = semver::Version::parse(version.trim_start_matches('v'))
        .with_context(|| format!("{version:?} is not a semantic version such as 0.2.0"))?;

    let root = workspace_root();
    let changelog = root.join("docs/CHANGELOG.md");
    match require_changelog_section(&changelog, &version) {
        Ok(()) => {}
        // A dry run rehearses the release before the changelog is cut: pending notes under
        // `## Unreleased` stand in for the version's section, and the run says what is left.
        Err(missing) if dry_run && has_unreleased_notes(&changelog)? => eprintln!(
            "note: {missing:#}\n      (dry run: the `## Unreleased` notes stand in for it; rename \
             that heading to `## {version} - YYYY-MM-DD` before the real release)"
        ),
        Err(missing) => return Err(missing),
    }

    let crates = publishable_crates(&root)?;
    let order = dependency_order(&crates)?;
    println!("release {version}: packaging in dependency order:");
    for (i, name) in order.iter().enumerate() {
        println!("  {}. {name}", i + 1);
    }

    if dry_run {
        let scratch = std::env::temp_dir().join(format!("mnemon-release-{}", std::process::id()));
        if scratch.exists() {
            fs::remove_dir_all(&scratch)?;
        }
        copy_workspace(&root, &scratch)?;
        let outcome = bump_and_package(&scratch, &root, &version, &order, true);
        // Leave nothing behind, whatever happened.
        let _ = fs::remove_dir_all(&scratch);
        outcome?;
        println!("dry run ok: {version} would package {} crates", order.len());
    } else {
        bump_and_package(&root, &root, &version, &order, false)?;
        println!(
            "bumped to {version} and packaged {} crates; review, commit, tag v{version}, then \
             `cargo publish --workspace`",
            order.len()
        );
    }
    Ok(())
}

fn bump_and_package(
    dir: &Path,
    target_root: &Path,
    version: &semver::Version,
    order: &[String],
    allow_dirty: bool,
) -> Result<()> {
    bump_manifest(&dir.join("Cargo.toml"), version, order)?;
    let target_dir = target_root.join("target");
    forget_earlier_packagings(&target_dir, version, order)?;
    let mut args: Vec<String> = vec!["package".into()];
    if allow_dirty {
        args.push("--allow-dirty".into());
    }
    args.push("--target-dir".into());
    args.push(target_dir.display().to_string());
    for name in order {
        args.push("-p".into());
        args.push(name.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_in(dir, &args)
}

/// Makes `cargo package` verify against the sources it has just packaged.
///
/// `cargo package` verifies the crates against a temporary registry of the freshly packaged
/// ones. Cargo treats registry crates as immutable, so a second packaging of the same version
/// (every dry run of 0.2.0, say) would reuse both the copy unpacked the first time
/// (`$CARGO_HOME/registry/src/-<hash>/<name>-<version>/`, the hash depending only on the
/// temporary registry's path) and the artifacts compiled from it, and verify stale code. This
/// removes exactly those: our crates at `version` from local registries' unpacked sources, and
/// the build outputs whose dependency files point into such a registry. crates.io's cache and
/// the workspace's own builds are never touched.
fn forget_earlier_packagings(
    target_dir: &Path,
    version: &semver::Version,
    order: &[String],
) -> Result<()> {
    let cargo_home = match std::env::var_os("CARGO_HOME") {
        Some(home) => Some(std::path::PathBuf::from(home)),
        None => std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")),
    };
    let sources = cargo_home.and_then(|home| fs::read_dir(home.join("registry/src")).ok());
    for registry in sources.into_iter().flatten().flatten() {
        // Local (path) registries have no name, so their folders start with '-'.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for name in order {
            let unpacked = registry.path().join(format!("{name}-{version}"));
            if unpacked.is_dir() {
                fs::remove_dir_all(&unpacked)
                    .with_context(|| format!("cannot remove {}", unpacked.display()))?;
            }
        }
    }

    let profile = target_dir.join("debug");
    let Ok(deps) = fs::read_dir(profile.join("deps")) else {
        return Ok(());
    };
    let crate_names: BTreeSet<String> = order.iter().map(|n| n.replace('-', "_")).collect();
    for entry in deps.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = file_name.strip_suffix(".d") else {
            continue;
        };
        let Some((crate_name, hash)) = stem.rsplit_once('-') else {
            continue;
        };
        if !crate_names.contains(crate_name) {
            continue;
        }
        let built_from_a_local_registry =
            fs::read_to_string(entry.path()).is_ok_and(|deps| deps.contains("/registry/src/-"));
        if !built_from_a_local_registry {
            continue;
        }
        for output in [
            format!("{stem}.d"),
            format!("lib{stem}.rlib"),
            format!("lib{stem}.rmeta"),
        ] {
            let _ = fs::remove_file(profile.join("deps").join(output));
        }
        let fingerprint = profile
            .join(".fingerprint")
            .join(format!("{}-{hash}", crate_name.replace('_', "-")));
        if fingerprint.is_dir() {
            fs::remove_dir_all(&fingerprint)
                .with_context(|| format!("cannot remove {}", fingerprint.display()))?;
        }
    }
    Ok(())
}

/// Fails unless the changelog has a `## VERSION` (or `## [VERSION]`) heading.
fn require_changelog_section(path: &Path, version: &semver::Version) -> Result<()> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let wanted = version.to_string();
    let found = text.lines().any(|line| {
        let Some(heading) = line.strip_prefix("## ") else {
            return false;
        };
        let heading = heading.trim_start_matches('[');
        heading
            .strip_prefix(wanted.as_str())
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '.'))
    });
    if !found {
        bail!(
            "{} has no section for {wanted}; add a `## {wanted}` heading describing the release",
            path.display()
        );
    }
    Ok(())
}

/// Whether the changelog has an `## Unreleased` section with at least one line of notes.
fn has_unreleased_notes(path: &Path) -> Result<bool> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines().skip_while(|line| {
        !line
            .strip_prefix("## ")
            .is_some_and(|h| h.trim_start_matches('[').starts_with("Unreleased"))
    });
    if lines.next().is_none() {
        return Ok(false);
    }
    Ok(lines
        .take_while(|line| !line.starts_with("## "))
        .any(|line| !line.trim().is_empty() && !line.starts_with('#')))
}

/// The workspace's publishable crates, from `cargo metadata`.
fn publishable_crates(root: &Path) -> Result<Vec<Crate>> {
    let output = command(root)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("could not run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata printed no packages")?;
    // `publish = false` appears as an empty list; `null` means any registry.
    let publishable: BTreeSet<String> = packages
        .iter()
        .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let mut crates = Vec::new();
    for package in packages {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        if !publishable.contains(name) {
            continue;
        }
        let internal_deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| publishable.contains(*d))
            .map(str::to_owned)
            .collect();
        crates.push(Crate {
            name: name.to_owned(),
            internal_deps,
        });
    }
    Ok(crates)
}

/// A topological order: every crate after the crates it depends on; ties by name.
fn dependency_order(crates: &[Crate]) -> Result<Vec<String>> {
    let mut remaining: BTreeMap<&str, &BTreeSet<String>> = crates
        .iter()
        .map(|c| (c.name.as_str(), &c.internal_deps))
        .collect();
    let mut order: Vec<String> = Vec::new();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| order.contains(d)))
            .map(|(name, _)| *name)
            .collect();
        if ready.is_empty() {
            bail!(
                "dependency cycle among {:?}",
                remaining.keys().collect::<Vec<_>>()
            );
        }
        for name in ready {
            remaining.remove(name);
            order.push(name.to_owned());
        }
    }
    Ok(order)
}

/// Sets `[workspace.package] version` and the version of every internal workspace dependency.
fn bump_manifest(path: &Path, version: &semver::Version, internal: &[String]) -> Result<()> {
    let text = fs::read_to_string(path)?;
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    let v = version.to_string();
    let workspace = doc["workspace"]
        .as_table_like_mut()
        .context("no [workspace] table")?;
    let package = workspace
        .get_mut("package")
        .and_then(|p| p.as_table_like_mut())
        .context("no [workspace.package] table")?;
    set_keeping_decor(package, &v);
    let deps = workspace
        .get_mut("dependencies")
        .and_then(|d| d.as_table_like_mut())
        .context("no [workspace.dependencies] table")?;
    for name in internal {
        let entry = deps
            .get_mut(name)
            .and_then(|e| e.as_table_like_mut())
            .with_context(|| {
                format!("[workspace.dependencies] has no {name} = {{ path, version }} entry")
            })?;
        set_keeping_decor(entry, &v);
    }
    fs::write(path, doc.to_string())?;
    Ok(())
}

/// Sets `version` in a table, keeping the comments and spacing around the old value.
fn set_keeping_decor(table: &mut dyn toml_edit::TableLike, version: &str) {
    let decor = table
        .get("version")
        .and_then(|item| item.as_value())
        .map(|value| value.decor().clone());
    let mut value = toml_edit::Value::from(version);
    if let Some(decor) = decor {
        *value.decor_mut() = decor;
    }
    table.insert("version", toml_edit::Item::Value(value));
}

/// Copies the workspace's sources (not `target/` or `.git/`) to `to`.
fn copy_workspace(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "target" || name == ".git" || name == "mnemon-data" {
            continue;
        }
        let kind = entry.file_type()?;
        let dest = to.join(&name);
        if kind.is_dir() {
            copy_workspace(&entry.path(), &dest)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_puts_dependencies_first() {
        let c = |name: &str, deps: &[&str]| Crate {
            name: name.into(),
            internal_deps: deps.iter().map(|d| d.to_string()).collect(),
        };
        let crates = vec![
            c("mnemon", &["mnemon-store", "mnemon-types"]),
            c("mnemon-store", &["mnemon-types"]),
            c("mnemon-types", &[]),
        ];
        assert_eq!(
            dependency_order(&crates).unwrap(),
            ["mnemon-types", "mnemon-store", "mnemon"]
        );
        let cyclic = vec![c("a", &["b"]), c("b", &["a"])];
        assert!(dependency_order(&cyclic).is_err());
    }

    #[test]
    fn changelog_heading_must_match_exactly() {
        let dir = std::env::temp_dir().join(format!("xtask-cl-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("CHANGELOG.md");
        fs::write(
            &path,
            "# Changelog\n\n## [0.2.0] - 2026-11-22\n\n## 0.1.0\n",
        )
        .unwrap();
        let v = |s: &str| semver::Version::parse(s).unwrap();
        assert!(require_changelog_section(&path, &v("0.2.0")).is_ok());
        assert!(require_changelog_section(&path, &v("0.1.0")).is_ok());
        assert!(require_changelog_section(&path, &v("0.2.1")).is_err());
        assert!(require_changelog_section(&path, &v("0.2.0-rc.1")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unreleased_needs_notes() {
        let dir = std::env::temp_dir().join(format!("xtask-unrel-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("CHANGELOG.md");
        let check = |text: &str| {
            fs::write(&path, text).unwrap();
            has_unreleased_notes(&path).unwrap()
        };
        assert!(check(
            "# C\n\n## Unreleased\n\n### Added\n- a thing\n\n## 0.1.0\n"
        ));
        assert!(check("# C\n\n## [Unreleased]\n- a thing\n"));
        assert!(!check(
            "# C\n\n## Unreleased\n\n### Added\n\n## 0.1.0\n- old\n"
        ));
        assert!(!check("# C\n\n## 0.1.0\n- old\n"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bump_rewrites_package_and_internal_versions() {
        let dir = std::env::temp_dir().join(format!("xtask-bump-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("Cargo.toml");
        fs::write(
            &path,
            "[workspace.package]\nversion = \"0.1.0\" # shared\n\n[workspace.dependencies]\n\
             mnemon-types = { path = \"crates/mnemon-types\", version = \"0.1.0\" }\nserde = \"1\"\n",
        )
        .unwrap();
        bump_manifest(
            &path,
            &semver::Version::parse("0.2.0").unwrap(),
            &["mnemon-types".to_owned()],
        )
        .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("version = \"0.2.0\" # shared"), "{text}");
        assert!(text.contains("path = \"crates/mnemon-types\", version = \"0.2.0\""));
        assert!(text.contains("serde = \"1\""));
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! The README's quick start, as a new user follows it: the `[dependencies]` block and the
//! `src/main.rs` block are taken from README.md as they stand, put into a project made by
//! `cargo new`, built, and run against three freshly started `redis-server`s.
//!
//! Two substitutions, both checked: the dependency's `path = "../quorum-lock"` becomes this
//! checkout, and the three node URLs (ports 7001-7003 in the README) become the test's
//! nodes, which run on free ports so the test never collides with anything on 7001.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Cluster;

/// The body of the first fenced block opening with ` ```{tag}` after `heading`.
fn block_after(readme: &str, heading: &str, tag: &str) -> String {
    let from = readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let open = format!("```{tag}");
    let rest = &readme[from..];
    let start = rest
        .find(&open)
        .unwrap_or_else(|| panic!("no {open} after {heading}"));
    let body = &rest[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

/// `text` with `from` replaced by `to`, which must occur exactly once.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} in {text}");
    text.replace(from, to)
}

/// Runs cargo in the new project. Without debug info: what is checked is that the README's
/// code builds and runs, and a clean build of every dependency links much faster so.
fn cargo(dir: &Path, args: &[&str], target: &Path) -> std::process::Output {
    Command::new(env!("CARGO"))
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .output()
        .expect("run cargo")
}

/// A directory removed when dropped (also when the test panics).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new project from `cargo new`, with the README's dependencies and `src/main.rs`. It is
/// made outside this checkout: inside it, `cargo new` would join this workspace.
fn new_project(root: &Path, parent: &Path, deps: &str, main_rs: &str) -> PathBuf {
    let project = parent.join("lock-demo");
    std::fs::create_dir_all(parent).unwrap();
    let out = cargo(
        parent,
        &["new", "--vcs", "none", "--quiet", "lock-demo"],
        parent,
    );
    assert!(
        out.status.success(),
        "cargo new: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    let deps = replace_once(deps, "[dependencies]\n", "");
    let manifest = replace_once(
        &manifest,
        "[dependencies]\n",
        &format!("[dependencies]\n{deps}"),
    );
    std::fs::write(project.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(project.join("src/main.rs"), main_rs).unwrap();
    // The checkout's lock file: the same dependency versions, no registry look-up.
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    project
}

#[test]
fn readme_quick_start_builds_and_runs_in_a_new_project() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let deps = block_after(&readme, "## Quick start", "toml");
    let main_rs = block_after(&readme, "## Quick start", "rust,no_run");
    // As it stands: no rustdoc-only hidden lines that a copy would carry along.
    for line in main_rs.lines() {
        assert!(
            !line.trim_start().starts_with("# ") && line.trim() != "#",
            "{line:?}"
        );
    }
    assert!(main_rs.contains("fn main()"), "{main_rs}");

    let cluster = Cluster::start(3);
    let deps = replace_once(
        &deps,
        "path = \"../quorum-lock\"",
        &format!("path = {:?}", root),
    );
    let mut main_rs = main_rs;
    for (readme_port, node) in [7001, 7002, 7003].iter().zip(&cluster.nodes) {
        let from = format!("redis://127.0.0.1:{readme_port}");
        main_rs = replace_once(
            &main_rs,
            &from,
            &format!("redis://127.0.0.1:{}", node.port()),
        );
    }
    let parent = TempDir(std::env::temp_dir().join(common::unique("quickstart")));
    let project = new_project(root, &parent.0, &deps, &main_rs);
    // Its own target dir, kept between runs: later runs only rebuild the small program.
    let target = root.join("target").join("quickstart").join("target");
    let built = cargo(&project, &["build", "--quiet"], &target);
    assert!(
        built.status.success(),
        "build: {}",
        String::from_utf8_lossy(&built.stderr)
    );

    // Right after starting the nodes: fresh nodes vote at once (DESIGN.md, section 7).
    let ran = cargo(&project, &["run", "--quiet"], &target);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "run: {stdout}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(
        stdout,
        "locked orders:42\n\
         locked orders:42 again, without waiting\n\
         the nightly report wrote 42 rows\n"
    );
    // Every lock was released: no key is left on any node but the node-wide bookkeeping
    // of restart quarantine (the ensemble record and the node's marker).
    let left: Vec<(usize, String)> = cluster
        .keys_everywhere("*")
        .into_iter()
        .filter(|(_, key)| key != "quorum-lock:node:max-ttl" && key != "quorum-lock:node:marker")
        .collect();
    assert_eq!(left, Vec::<(usize, String)>::new());
}

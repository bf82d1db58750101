//! The house rules, checked on the sources (ARCHITECTURE.md says why):
//!
//! - a route module (a file with an actix route attribute) imports no other route module,
//!   and nothing but `startup` and `openapi` imports a route module;
//! - SQL (`sqlx::query…`) is written only in `store.rs` files;
//! - no source file of the workspace is over 600 lines, its unit tests not counted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `server/src/pools/routes.rs` → `pools::routes`; `…/pools/mod.rs` → `pools`.
fn module_path(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

fn server_sources() -> BTreeMap<String, (PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("a readable source file");
            (module_path(&src, &f), (f, text))
        })
        .collect()
}

fn is_route_module(text: &str) -> bool {
    ["#[get(", "#[post(", "#[put(", "#[patch(", "#[delete("].iter().any(|a| text.contains(a))
}

/// The code of a file without its `#[cfg(test)]` part (unit tests come last, by house style).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// Whether `text` names module `module` (`crate::pools::routes`, `super::routes`, …).
fn names(text: &str, from: &str, module: &str) -> bool {
    let absolute = format!("crate::{module}");
    let mentions_absolute = text.match_indices(&absolute).any(|(i, _)| {
        let next = text[i + absolute.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    });
    // `super::x` from a sibling in the same folder.
    let parent = |m: &str| m.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_owned());
    let sibling = parent(from) == parent(module) && !parent(module).is_empty();
    let leaf = module.rsplit("::").next().unwrap_or(module);
    let mentions_super =
        sibling && (text.contains(&format!("super::{leaf}::")) || text.contains(&format!("super::{leaf};")));
    mentions_absolute || mentions_super
}

#[test]
fn no_route_module_is_imported_but_by_startup_and_openapi() {
    let sources = server_sources();
    let routes: Vec<&String> =
        sources.iter().filter(|(m, (_, t))| *m != "architecture" && is_route_module(t)).map(|(m, _)| m).collect();
    assert!(routes.len() >= 10, "found only these route modules: {routes:?}");
    let mut offences = Vec::new();
    for (module, (_, text)) in &sources {
        if ["startup", "openapi", "architecture", ""].contains(&module.as_str()) {
            continue;
        }
        let code = without_tests(text);
        for route in &routes {
            if *route != module && *route != "openapi" && names(code, module, route) {
                offences.push(format!("{module} imports the route module {route}"));
            }
        }
    }
    assert!(offences.is_empty(), "route modules are imported only by startup and openapi:\n{}", offences.join("\n"));
}

#[test]
fn sql_is_written_only_in_store_modules() {
    let offences: Vec<String> = server_sources()
        .into_iter()
        .filter(|(m, (f, t))| {
            m != "architecture"
                && f.file_name().is_some_and(|n| n != "store.rs")
                && without_tests(t).contains("sqlx::query")
        })
        .map(|(_, (f, _))| f.display().to_string())
        .collect();
    assert!(offences.is_empty(), "SQL outside a store.rs:\n{}", offences.join("\n"));
}

#[test]
fn no_source_file_is_over_600_lines() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut files = Vec::new();
    for krate in ["api", "engine", "client", "server", "app", "tests"] {
        let src = workspace.join(krate).join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let offences: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("a readable source file");
            let lines = without_tests(&text).lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(offences.is_empty(), "over {MAX_LINES} lines (unit tests not counted):\n{}", offences.join("\n"));
}

#[test]
fn the_checks_see_what_they_check() {
    // The helpers themselves: a mention is found, a longer name is not a mention.
    assert!(names("use crate::pools::routes::x;", "health", "pools::routes"));
    assert!(!names("use crate::pools::routes_v2;", "health", "pools::routes"));
    assert!(names("use super::routes::x;", "pools::store", "pools::routes"));
    assert!(!names("use super::routes::x;", "health::store", "pools::routes"));
    assert_eq!(without_tests("a\n#[cfg(test)]\nmod tests {}"), "a\n");
    assert!(is_route_module("#[get(\"/x\")]"));
}

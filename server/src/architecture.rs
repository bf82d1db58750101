//! The house rules, checked on the sources (ARCHITECTURE.md says why):
//!
//! - the server's modules are in layers ([`LAYERS`]): a file imports (`crate::…`,
//!   `super::…`, in `use` or in a path anywhere in the file, its tests included) only from
//!   its own layer or below, and the modules of one layer import each other without a
//!   cycle; a route module is in the top layer wherever it lives;
//! - a route module (a file with an actix route attribute) imports no other route module,
//!   and nothing but `startup` and `openapi` imports a route module;
//! - SQL (`sqlx::query…`) is written only in `store.rs` files;
//! - no source file of the workspace is over 600 lines, its unit tests not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

/// The server's layers, lowest first, and the top-level modules in each. A module imports
/// only from its own layer or below; a new top-level module must be placed here.
const LAYERS: [(&str, &[&str]); 6] = [
    (
        "foundations",
        &[
            "error",
            "batch",
            "inputs",
            "schema",
            "configuration",
            "telemetry",
            "store",
            "metrics",
            "security_headers",
            "throttle",
            "state",
        ],
    ),
    ("change", &["change", "audit", "gate"]),
    ("resources", &["access", "channels", "pools", "plans", "tenants", "routing"]),
    ("services", &["publish", "health", "tiers", "usage", "samples", "draws", "quota", "probes"]),
    ("workflows", &["approvals", "ramps", "adopt"]),
    ("delivery", &["http", "jobs", "backend", "startup", "openapi", "reference", "cli", "seed", "simulate", "bench"]),
];

/// The layer of the top, where every route module is.
const DELIVERY: usize = LAYERS.len() - 1;

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

/// Every source file of the server by module path, with its path from the workspace's root.
fn server_sources() -> BTreeMap<String, (PathBuf, String)> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().expect("the workspace");
    let src = manifest.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("a readable source file");
            let shown = f.strip_prefix(workspace).unwrap_or(&f).to_path_buf();
            (module_path(&src, &f), (shown, text))
        })
        .collect()
}

/// The module paths a source names, each resolved to the longest module of `modules` it
/// starts with: `use crate::{a::b, c::{d, e}}`, `crate::a::f(…)`, `super::g` (from a file's
/// unit tests, `super` is the file itself), `"crate::inputs::integer"` in an attribute.
fn imports(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String = text.lines().map(without_comment).collect::<Vec<_>>().join("\n");
    let tests_from = tests_start(&code);
    let mut found = BTreeSet::new();
    for keyword in ["crate::", "super::"] {
        for (at, _) in code.match_indices(keyword) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut base: Vec<&str> = if keyword == "crate::" {
                Vec::new()
            } else {
                let mut parts: Vec<&str> = module.split("::").collect();
                if at < tests_from {
                    parts.pop();
                }
                parts
            };
            let mut rest: String =
                code[at + keyword.len()..].chars().take(4000).filter(|c| !c.is_whitespace()).collect();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r.to_owned();
            }
            let prefix = base.join("::");
            for path in use_paths(&rest) {
                let full = if prefix.is_empty() { path } else { format!("{prefix}::{path}") };
                let parts: Vec<&str> = full.split("::").collect();
                let resolved = (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains(m));
                if let Some(m) = resolved.filter(|m| m != module) {
                    found.insert(m);
                }
            }
        }
    }
    found
}

/// The paths of a use tree without whitespace (`a::{b, c::{d}}::…` → `a::b`, `a::c::d`):
/// what follows the tree is ignored.
fn use_paths(text: &str) -> Vec<String> {
    fn tree(s: &[u8], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
        let start = *i;
        while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_' || s[*i] == b':' || s[*i] == b'*') {
            *i += 1;
        }
        let segment = String::from_utf8_lossy(&s[start..*i]).trim_end_matches("::").to_owned();
        let path = match (prefix.is_empty(), segment.is_empty()) {
            (true, _) => segment,
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}::{segment}"),
        };
        if *i < s.len() && s[*i] == b'{' {
            *i += 1;
            while *i < s.len() && s[*i] != b'}' {
                if s[*i] == b',' {
                    *i += 1;
                    continue;
                }
                let before = *i;
                tree(s, i, &path, out);
                if *i == before {
                    *i += 1;
                }
            }
            *i += 1;
        } else if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    tree(text.as_bytes(), &mut 0, "", &mut out);
    out
}

/// The layer of a module: a route module's is the top one; any other's, its top-level
/// module's (`None`: not placed in [`LAYERS`]).
fn layer_of(module: &str, text: &str) -> Option<usize> {
    if is_route_module(text) {
        return Some(DELIVERY);
    }
    let top = module.split("::").next().unwrap_or(module);
    LAYERS.iter().position(|(_, modules)| modules.contains(&top))
}

/// Every breach of the layers in `sources` (module → (file, text)), naming both files.
fn layer_offences(sources: &BTreeMap<String, (PathBuf, String)>) -> Vec<String> {
    let checked: BTreeMap<&String, &(PathBuf, String)> =
        sources.iter().filter(|(m, _)| !["", "main", "architecture"].contains(&m.as_str())).collect();
    let modules: BTreeSet<String> = checked.keys().map(|m| (*m).clone()).collect();
    let file = |m: &str| checked[&m.to_owned()].0.display().to_string();
    let mut offences = Vec::new();
    let mut layer = BTreeMap::new();
    for (module, (path, text)) in &checked {
        match layer_of(module, text) {
            Some(l) => {
                layer.insert(module.as_str(), l);
            }
            None => offences.push(format!("{}: module {module} is in no layer of LAYERS", path.display())),
        }
    }
    // The unit of a cycle: a top-level module within one layer (route modules apart).
    let unit = |m: &str| (m.split("::").next().unwrap_or(m).to_owned(), layer[m]);
    let mut edges: BTreeMap<(String, usize), BTreeSet<(String, usize)>> = BTreeMap::new();
    let mut witness = BTreeMap::new();
    for (module, (path, text)) in &checked {
        let Some(&from) = layer.get(module.as_str()) else { continue };
        for target in imports(module, text, &modules) {
            let Some(&to) = layer.get(target.as_str()) else { continue };
            if to > from {
                offences.push(format!(
                    "{} ({}) imports {} ({}): an import points up",
                    path.display(),
                    LAYERS[from].0,
                    file(&target),
                    LAYERS[to].0
                ));
            } else if to == from && unit(module) != unit(&target) {
                edges.entry(unit(module)).or_default().insert(unit(&target));
                witness
                    .entry((unit(module), unit(&target)))
                    .or_insert_with(|| (path.display().to_string(), file(&target)));
            }
        }
    }
    // A cycle: a unit that reaches itself again. Each edge on one is named once.
    let reaches = |from: &(String, usize), to: &(String, usize)| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(u) = stack.pop() {
            if &u == to {
                return true;
            }
            if seen.insert(u.clone()) {
                stack.extend(edges.get(&u).into_iter().flatten().cloned());
            }
        }
        false
    };
    for ((a, b), (from_file, to_file)) in &witness {
        if reaches(b, a) {
            offences.push(format!(
                "{from_file} imports {to_file}, and {} imports {} back (a cycle in the layer {})",
                b.0, a.0, LAYERS[a.1].0
            ));
        }
    }
    offences
}

#[test]
fn every_import_points_down_the_layers_and_none_closes_a_cycle() {
    let offences = layer_offences(&server_sources());
    assert!(offences.is_empty(), "the layers (ARCHITECTURE.md, Inside `server`) are broken:\n{}", offences.join("\n"));
}

#[test]
fn a_planted_upward_import_and_a_planted_cycle_are_named_with_both_files() {
    let mut sources = server_sources();
    let error = sources.get_mut("error").expect("error.rs");
    error.1.push_str("\nfn planted() { crate::pools::store::list_pools(); }\n");
    let offences = layer_offences(&sources);
    assert!(
        offences
            .iter()
            .any(|o| o.contains("error.rs (foundations) imports") && o.contains("pools/store.rs (resources)")),
        "{offences:?}"
    );
    let mut sources = server_sources();
    let channels = sources.get_mut("channels::store").expect("channels/store.rs");
    channels.1.push_str("\nuse crate::pools::{self, store::modify_pool};\n");
    let offences = layer_offences(&sources);
    assert!(offences.iter().any(|o| o.contains("channels/store.rs imports") && o.contains("a cycle")), "{offences:?}");
    let mut sources = server_sources();
    sources.insert("newcomer".into(), (PathBuf::from("server/src/newcomer.rs"), String::new()));
    assert!(layer_offences(&sources).iter().any(|o| o.contains("module newcomer is in no layer")));
}

fn is_route_module(text: &str) -> bool {
    let attributes = ["#[get(", "#[post(", "#[put(", "#[patch(", "#[delete("];
    without_tests(text).lines().any(|l| attributes.iter().any(|a| l.trim_start().starts_with(a)))
}

/// Where a file's unit tests begin: its `#[cfg(test)] mod …` (last, by house style; a
/// `#[cfg(test)]` on a single item does not end the code).
fn tests_start(text: &str) -> usize {
    text.find("#[cfg(test)]\nmod ").unwrap_or(text.len())
}

/// The code of a file without its unit tests.
fn without_tests(text: &str) -> &str {
    &text[..tests_start(text)]
}

/// A line without its `//` comment (a `//` inside a string, as in `"redis://…"`, is not one).
fn without_comment(line: &str) -> &str {
    let mut quoted = false;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '"' if previous != '\\' && previous != '\'' => quoted = !quoted,
            '/' if !quoted && previous == '/' => return &line[..i - 1],
            _ => {}
        }
        previous = c;
    }
    line
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
    assert_eq!(without_tests("a\n#[cfg(test)]\nfn b() {}\n"), "a\n#[cfg(test)]\nfn b() {}\n");
    assert_eq!(without_comment("let u = \"redis://x\"; // crate::y"), "let u = \"redis://x\"; ");
    assert!(!is_route_module("/// `#[get(\"/x\")]` in a comment"));
    assert!(is_route_module("#[get(\"/x\")]"));
    assert_eq!(use_paths("{a::b,c::{d,e::*}};"), ["a::b", "c::d", "c::e::*"]);
    assert_eq!(use_paths("a::b::f(x);"), ["a::b::f"]);
    let modules: BTreeSet<String> = ["a", "a::b", "a::c", "d"].map(String::from).into();
    let text = "use super::c;\nuse crate::{d, a::b::{x}};\n// crate::e\n#[cfg(test)]\nmod tests { use super::*; }";
    let strings = "let s = \"a://b\"; crate::d::f();";
    assert_eq!(imports("a::b", strings, &modules), ["d"].map(String::from).into());
    assert_eq!(imports("a::b", text, &modules), ["a::c", "d"].map(String::from).into());
}

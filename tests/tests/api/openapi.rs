//! The OpenAPI document at `/api/v1/openapi.json`: valid OpenAPI 3, with every reference
//! resolved, and in step with the routes. The routes are read from the source: every actix
//! route attribute in `server/src/` (the handlers live in each resource's `routes.rs`) and every
//! `/api/v1` registration (`.route("…")`, `web::resource("…")`, as in `startup.rs`) must be
//! documented, and every documented operation must be one of them.

use std::collections::BTreeSet;
use std::path::Path;

use integration::{spawn_app, workspace_root};
use serde_json::Value;

/// The HTTP methods an OpenAPI path item may hold, lowercase as in the document.
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];

/// One route as found in the source: the method (lowercase), the path in OpenAPI form
/// (`{name}`, no regex), and where it was found.
#[derive(Debug, Clone)]
struct Route {
    method: String,
    path: String,
    at: String,
}

impl Route {
    fn key(&self) -> (String, String) {
        (self.method.clone(), self.path.clone())
    }
}

/// What the scan found, and what it could not read (each an error: a guard that skips what
/// it cannot read would pass by accident).
#[derive(Debug, Default)]
struct Scan {
    routes: Vec<Route>,
    unreadable: Vec<String>,
}

impl Scan {
    fn keys(&self) -> BTreeSet<(String, String)> {
        self.routes.iter().map(Route::key).collect()
    }
}

/// Turns an actix path into OpenAPI form: `{tail:.*}` → `{tail}` (regex parts may nest braces).
fn openapi_path(actix: &str) -> String {
    let mut out = String::new();
    let mut chars = actix.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '{' {
            continue;
        }
        let mut depth = 1;
        let mut in_regex = false;
        for c in chars.by_ref() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ':' if depth == 1 => in_regex = true,
                _ => {}
            }
            if depth == 0 {
                out.push('}');
                break;
            }
            if !in_regex {
                out.push(c);
            }
        }
    }
    out
}

/// The first string literal in `text` (plain or raw `r"…"`/`r#"…"#`), and where it ends.
fn first_literal(text: &str) -> Option<(String, usize)> {
    let start = text.find('"')?;
    let before = &text[..start];
    let hashes = before.len() - before.trim_end_matches('#').len();
    let body = &text[start + 1..];
    if before.trim_end_matches('#').ends_with('r') {
        let closing = format!("\"{}", "#".repeat(hashes));
        let end = body.find(&closing)?;
        return Some((body[..end].to_owned(), start + 1 + end + closing.len()));
    }
    let mut value = String::new();
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => {
                value.push(c);
                escaped = false;
            }
            '\\' => escaped = true,
            '"' => return Some((value, start + 1 + i + 1)),
            _ => value.push(c),
        }
    }
    None
}

/// The text from just after an opening parenthesis up to its matching `)`.
fn balanced(text: &str) -> &str {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '(' | '[' | '{' if !in_string => depth += 1,
            ')' | ']' | '}' if !in_string => {
                if depth == 0 {
                    return &text[..i];
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    text
}

fn line_of(source: &str, offset: usize) -> usize {
    source[..offset].matches('\n').count() + 1
}

/// Every HTTP method named in `text`: `web::get()`, `Method::GET`, `.get(handler)`.
fn methods_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for method in METHODS {
        let upper = method.to_uppercase();
        if text.contains(&format!("web::{method}()"))
            || text.contains(&format!("Method::{upper}"))
            || text.contains(&format!(".{method}("))
        {
            found.insert(method.to_owned());
        }
    }
    found
}

/// Scans one file: actix route attributes (`#[get("…")]`, `#[actix_web::post("…")]`,
/// `#[route("…", method = "GET")]`, …) at the start of a line, and `.route("/api/v1…", …)`
/// / `web::resource("/api/v1…")` registrations.
fn scan_source(source: &str, file: &str, scan: &mut Scan) {
    for (offset, _) in source.match_indices("#[") {
        let line_start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
        if !source[line_start..offset].trim().is_empty() {
            continue; // not an attribute at the start of a line (a comment, a string)
        }
        let rest = &source[offset + 2..];
        let Some(open) = rest.find('(') else { continue };
        let name = rest[..open].trim().trim_start_matches("actix_web::");
        let at = format!("{file}:{}", line_of(source, offset));
        let args = balanced(&rest[open + 1..]);
        let methods: Vec<String> = match name {
            "get" | "post" | "put" | "delete" | "patch" | "head" | "options" | "trace" => vec![name.to_owned()],
            "route" => {
                args.split("method").skip(1).filter_map(|m| first_literal(m).map(|(m, _)| m.to_lowercase())).collect()
            }
            _ => continue,
        };
        match first_literal(args) {
            Some((path, _)) if path.starts_with('/') && !methods.is_empty() => {
                for method in methods {
                    scan.routes.push(Route { method, path: openapi_path(&path), at: at.clone() });
                }
            }
            _ => scan.unreadable.push(format!(
                "{at}: cannot read the method and literal path of #[{}]",
                &rest[..rest.find(']').unwrap_or(rest.len())]
            )),
        }
    }
    for call in [".route(", "web::resource("] {
        for (offset, _) in source.match_indices(call) {
            let after = &source[offset + call.len()..];
            // Only a literal first argument names a path (`&format!(…)` is not an /api/v1 route by this rule).
            let Some((path, end)) = first_literal(after).filter(|_| after.trim_start().starts_with('"')) else {
                continue;
            };
            if !path.starts_with("/api/v1") {
                continue;
            }
            let at = format!("{file}:{}", line_of(source, offset));
            // `.route(path, web::get().to(h))`: the method is inside the call; `web::resource(path)
            // .route(…).post(…)`: in the chain that follows, up to the end of the enclosing call.
            let scope = if call == ".route(" {
                balanced(after)
            } else {
                let closed = end + after[end..].find(')').map_or(0, |i| i + 1);
                balanced(&after[closed..])
            };
            let methods = methods_in(scope);
            if methods.is_empty() {
                scan.unreadable.push(format!("{at}: {path} is registered without a method this scan can read"));
            }
            for method in methods {
                scan.routes.push(Route { method, path: openapi_path(&path), at: at.clone() });
            }
        }
    }
    if let Some(offset) = source.find("web::scope(") {
        scan.unreadable.push(format!(
            "{file}:{}: web::scope prefixes paths, which this scan does not follow; extend tests/tests/api/openapi.rs",
            line_of(source, offset)
        ));
    }
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every route the server's source declares: `server/src/**/*.rs` (the handlers in `routes/`,
/// registrations in `startup.rs`, and any route a module elsewhere adds).
fn scan_server() -> Scan {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("server/src"), &mut files);
    files.sort();
    let mut scan = Scan::default();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
        scan_source(&source, &name, &mut scan);
    }
    scan
}

/// Every (method, path) operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths is an object");
    paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS.into_iter().filter(|m| item.get(*m).is_some()).map(move |m| (m.to_owned(), path.clone()))
        })
        .collect()
}

async fn fetch_document() -> Value {
    let app = spawn_app().await;
    let response = app.get("/api/v1/openapi.json").await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/json"), "content-type {content_type}");
    response.json().await.expect("the document is JSON")
}

/// Every `$ref` in `value`, with the JSON path where it occurs.
fn references(value: &Value, at: String, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key == "$ref" {
                    if let Some(target) = child.as_str() {
                        out.push((at.clone(), target.to_owned()));
                    }
                }
                references(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                references(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_openapi_3_with_every_reference_resolved() {
    let doc = fetch_document().await;

    let version = doc["openapi"].as_str().expect("an openapi version");
    assert!(version.starts_with("3."), "openapi {version}");
    assert_eq!(doc["info"]["title"], "Tessera");
    assert!(!doc["info"]["version"].as_str().unwrap_or("").is_empty(), "info.version is set");
    let operations = documented(&doc);
    assert!(operations.len() >= 13, "only {} operations: {operations:?}", operations.len());
    for (method, path) in &operations {
        assert!(path.starts_with('/'), "{path}");
        let responses = doc["paths"][path][method]["responses"].as_object();
        assert!(responses.is_some_and(|r| !r.is_empty()), "{method} {path} documents no response");
    }
    let mut ids = BTreeSet::new();
    for (method, path) in &operations {
        let id = doc["paths"][path][method]["operationId"].as_str().unwrap_or("");
        assert!(
            !id.is_empty() && ids.insert(id.to_owned()),
            "{method} {path}: operationId {id:?} is empty or repeated"
        );
    }
    let mut refs = Vec::new();
    references(&doc, String::new(), &mut refs);
    assert!(!refs.is_empty(), "bodies are described by component schemas");
    let dangling: Vec<_> = refs
        .iter()
        .filter(|(_, target)| {
            let Some(name) = target.strip_prefix("#/components/schemas/") else { return true };
            doc["components"]["schemas"].get(name).is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
    assert_eq!(doc["components"]["securitySchemes"]["admin_token"]["scheme"], "bearer");
}

#[tokio::test]
async fn every_route_is_documented() {
    let doc = fetch_document().await;
    let scan = scan_server();
    assert!(scan.unreadable.is_empty(), "routes the scan cannot read:\n{}", scan.unreadable.join("\n"));

    let documented = documented(&doc);
    let missing: Vec<String> = scan
        .routes
        .iter()
        .filter(|r| !documented.contains(&r.key()))
        .map(|r| format!("  {} {}  ({})", r.method.to_uppercase(), r.path, r.at))
        .collect();
    assert!(
        missing.is_empty(),
        "{} route(s) missing from /api/v1/openapi.json; annotate each handler with #[utoipa::path(...)] \
         above its route attribute and list it in ApiDoc's paths(...) in server/src/openapi.rs:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let doc = fetch_document().await;
    let scan = scan_server();
    let served = scan.keys();

    let stale: Vec<String> = documented(&doc)
        .into_iter()
        .filter(|op| !served.contains(op))
        .map(|(method, path)| format!("  {} {path}", method.to_uppercase()))
        .collect();
    assert!(stale.is_empty(), "documented but served by no route in server/src:\n{}", stale.join("\n"));
}

#[tokio::test]
async fn the_data_plane_documents_its_bodies_and_errors() {
    let doc = fetch_document().await;
    let op = |method: &str, path: &str| doc["paths"][path][method].clone();
    let body_ref = |op: &Value, status: &str| {
        op["responses"][status]["content"]["application/json"]["schema"]["$ref"].as_str().unwrap_or("").to_owned()
    };

    let reserve = op("post", "/api/v1/tenants/{tenant}/quota/reserve");
    assert_eq!(
        reserve["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ReserveRequest"
    );
    assert_eq!(body_ref(&reserve, "200"), "#/components/schemas/ReserveReply");
    // A quota refusal, or the tokenizer's turn not coming (throttled).
    assert_eq!(body_ref(&reserve, "429"), "#/components/schemas/RefusedOrThrottledBody");
    for status in ["400", "404", "500", "503"] {
        assert_eq!(body_ref(&reserve, status), "#/components/schemas/ErrorBody", "reserve {status}");
    }
    let tenant = &reserve["parameters"][0];
    assert_eq!((tenant["name"].as_str(), tenant["in"].as_str()), (Some("tenant"), Some("path")));
    // Tokens, or a prompt with max_tokens and model: one of the shapes, each with its request id.
    let shapes = doc["components"]["schemas"]["ReserveRequest"]["oneOf"].as_array().expect("oneOf").clone();
    assert_eq!(shapes.len(), 3, "{shapes:?}");
    for shape in shapes {
        let name = shape["$ref"].as_str().unwrap_or("").rsplit('/').next().unwrap_or("").to_owned();
        let required = doc["components"]["schemas"][name.as_str()]["required"].clone();
        assert!(required.as_array().is_some_and(|r| r.contains(&serde_json::json!("request_id"))), "{name}");
    }
    assert_eq!(doc["components"]["schemas"]["RequestId"]["pattern"], "^[A-Za-z0-9_.:-]{1,128}$");

    for action in ["settle", "release"] {
        let operation = op("post", &format!("/api/v1/tenants/{{tenant}}/quota/{action}"));
        assert!(operation["responses"]["202"].is_object(), "{action} documents the queued 202");
        assert_eq!(body_ref(&operation, "404"), "#/components/schemas/ErrorBody", "{action}");
    }

    let draw = op("post", "/api/v1/pools/{pool}/draw");
    assert_eq!(body_ref(&draw, "200"), "#/components/schemas/Draw");
    assert_ne!(draw["requestBody"]["required"], true, "a draw needs no body");
    assert_eq!(body_ref(&draw, "503"), "#/components/schemas/ErrorBody");

    let audit = op("get", "/api/v1/audit");
    let params: BTreeSet<&str> =
        audit["parameters"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    let expected: BTreeSet<&str> = ["entity", "actor", "action", "from", "to", "before_id", "limit"].into();
    assert_eq!(params, expected);
    assert!(op("get", "/api/v1/audit.csv")["responses"]["200"]["content"]["text/csv"].is_object());
}

#[test]
fn the_route_scan_reads_attributes_and_registrations() {
    let source = r##"
        #[utoipa::path(tag = "x")]
        #[get("/api/v1/things/{id}")]
        async fn get_thing() {}
        #[actix_web::post(
            "/api/v1/things"
        )]
        async fn post_thing() {}
        #[route("/api/v1/both/{tail:.*}", method = "PUT", method = "PATCH")]
        async fn both() {}
        // #[delete("/api/v1/commented-out")]
        #[derive(Debug)]
        struct NotARoute;
        fn configure(app: App) -> App {
            app.route("/api/v1/plain", web::delete().to(h))
                .service(web::resource("/api/v1/res/{n:\\d{3}}").route(web::get().to(h)).post(h))
                .route(&format!("{}/{{tail:.*}}", PREFIX), any())
                .route("/elsewhere", web::get().to(h))
        }
    "##;
    let mut scan = Scan::default();
    scan_source(source, "example.rs", &mut scan);

    assert!(scan.unreadable.is_empty(), "{:?}", scan.unreadable);
    let expected: BTreeSet<(String, String)> = [
        ("get", "/api/v1/things/{id}"),
        ("post", "/api/v1/things"),
        ("put", "/api/v1/both/{tail}"),
        ("patch", "/api/v1/both/{tail}"),
        ("delete", "/api/v1/plain"),
        ("get", "/api/v1/res/{n}"),
        ("post", "/api/v1/res/{n}"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(scan.keys(), expected);
    assert_eq!(scan.routes[0].at, "example.rs:3");
}

#[test]
fn the_route_scan_refuses_what_it_cannot_read() {
    let mut scan = Scan::default();
    scan_source("#[get(PATH)]\nasync fn a() {}\nfn b(app: App) { app.route(\"/api/v1/x\", h) }\n", "f.rs", &mut scan);
    assert!(scan.routes.is_empty());
    assert_eq!(scan.unreadable.len(), 2, "{:?}", scan.unreadable);
}

#[test]
fn the_server_source_declares_the_data_plane_routes() {
    let scan = scan_server();
    let keys = scan.keys();
    for (method, path) in [
        ("post", "/api/v1/tenants/{tenant}/quota/reserve"),
        ("get", "/api/v1/tenants/{tenant}/quota"),
        ("post", "/api/v1/pools/{pool}/draw"),
        ("get", "/api/v1/audit.csv"),
        ("get", "/healthz"),
        ("get", "/api/v1/openapi.json"),
    ] {
        assert!(keys.contains(&(method.to_owned(), path.to_owned())), "{method} {path} not found by the scan");
    }
}

#[tokio::test]
async fn each_kind_of_change_operation_takes_only_its_own_fields() {
    let doc = fetch_document().await;
    let kinds = doc["components"]["schemas"]["Operation"]["oneOf"].as_array().expect("Operation is a oneOf");
    assert_eq!(kinds.len(), 16, "{kinds:?}");
    for kind in kinds {
        assert_eq!(kind["additionalProperties"], false, "{kind}");
        assert!(kind["required"].as_array().unwrap().contains(&serde_json::json!("kind")), "{kind}");
    }
}

#[tokio::test]
async fn the_reference_page_shows_every_operation_and_an_example_of_every_request_body() {
    // Arrange: access control on; the page, like the document, needs no credentials
    let app = integration::spawn_app_with(|s| s.auth.open = false).await;
    let doc: Value = app.get("/api/v1/openapi.json").await.json().await.expect("the document is JSON");

    // Act
    let response = app.get("/api/v1/reference").await;

    // Assert
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"), "{headers:?}");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("style-src 'self'"), "{policy}");
    assert!(!policy.contains("script-src"), "the page runs no script: {policy}");
    let page = response.text().await.unwrap();
    assert!(!page.contains("<script"), "the page runs no script");
    let mut with_body = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS.into_iter().filter(|m| item.get(*m).is_some()) {
            let operation = &item[method];
            let id = operation["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path}: no operationId"));
            let start = page
                .find(&format!("<article id=\"op-{id}\">"))
                .unwrap_or_else(|| panic!("{method} {path} ({id}) is not on the page"));
            let article = &page[start..start + page[start..].find("</article>").expect("a closed article")];
            assert!(article.contains(&format!("{}</span>", method.to_uppercase())), "{method} {path}: {article}");
            if operation.get("requestBody").is_some() {
                with_body += 1;
                let example = article
                    .split("<pre class=\"example\"><code>")
                    .nth(1)
                    .unwrap_or_else(|| panic!("{method} {path}: no example of its body"));
                let example = &example[..example.find("</code>").unwrap()];
                let unescaped =
                    example.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
                let value: Value = serde_json::from_str(&unescaped)
                    .unwrap_or_else(|e| panic!("{method} {path}: the example is not JSON ({e}): {unescaped}"));
                assert!(!value.is_null(), "{method} {path}: an empty example");
            }
        }
    }
    assert!(with_body >= 20, "only {with_body} operations with a body: is the document read right?");
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        let id: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' }).collect();
        assert!(page.contains(&format!("<h3 id=\"schema-{id}\">")), "schema {name} is not on the page");
    }
}

/// The `/api/v1…` URLs the UI's source writes (string literals, `format!` ones included),
/// each as path segments: `None` where a `{…}` fills in a segment.
fn ui_urls() -> Vec<(String, Vec<Option<String>>)> {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("app/src"), &mut files);
    let mut urls = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for (at, _) in source.match_indices("\"/api/v1") {
            let literal = &source[at + 1..];
            let literal = &literal[..literal.find('"').unwrap_or(literal.len())];
            let segments = literal
                .trim_start_matches('/')
                .split('/')
                .map(|s| match s.find('{') {
                    Some(0) => None,
                    // A query glued to the last segment (`audit.csv{query}`).
                    Some(i) => Some(s[..i].to_owned()),
                    None => Some(s.to_owned()),
                })
                .collect();
            let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
            urls.push((format!("{name}: {literal}"), segments));
        }
    }
    urls
}

#[tokio::test]
async fn every_api_url_the_ui_writes_is_a_documented_path() {
    let doc = fetch_document().await;
    let paths: Vec<Vec<Option<String>>> = documented(&doc)
        .into_iter()
        .map(|(_, p)| {
            p.trim_start_matches('/').split('/').map(|s| (!s.starts_with('{')).then(|| s.to_owned())).collect()
        })
        .collect();
    let urls = ui_urls();
    assert!(urls.len() >= 15, "only {} URLs found in app/src: is the pattern right?", urls.len());
    let unknown: Vec<&String> = urls
        .iter()
        .filter(|(_, url)| {
            !paths
                .iter()
                .any(|p| p.len() == url.len() && p.iter().zip(url).all(|(a, b)| a.is_none() || b.is_none() || a == b))
        })
        .map(|(at, _)| at)
        .collect();
    assert!(unknown.is_empty(), "the UI sends to paths the API does not document:\n{unknown:?}");
}

//! The API reference page (`GET /api/v1/reference`): the OpenAPI document rendered as one
//! HTML page, by the server, with nothing fetched from elsewhere (no script; the site's
//! stylesheet). Per operation: method, path, what it does, who may call it, its parameters,
//! its request body's fields with an example, and its answers; then every schema. An
//! example is the schema's own where it has one, else one made from the schema (the first
//! value of an enum, the minimum of a number, one item of a list), so every request body
//! shows one.

use serde_json::{Map, Value};
use std::fmt::Write;

/// How deep an example or a type name follows nested schemas (the document's schemas are
/// not recursive today; this keeps a recursive one finite).
const MAX_DEPTH: usize = 8;

/// The page for `document` (an OpenAPI 3.1 document as JSON).
pub fn render(document: &Value) -> String {
    let schemas = document.pointer("/components/schemas").and_then(Value::as_object).cloned().unwrap_or_default();
    let operations = operations(document);
    let mut html = String::with_capacity(256 * 1024);
    html.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Tessera API reference</title><link rel=\"stylesheet\" href=\"/pkg/tessera.css\"></head>\n\
         <body class=\"reference\"><main>\n<h1>Tessera API reference</h1>\n",
    );
    if let Some(description) = document.pointer("/info/description").and_then(Value::as_str) {
        let _ = writeln!(html, "<p>{}</p>", prose(description));
    }
    html.push_str(
        "<p>Every operation below, generated from the document this server serves at \
         <a href=\"/api/v1/openapi.json\"><code>/api/v1/openapi.json</code></a>. Bodies are JSON \
         (<code>Content-Type: application/json</code>). A program sends an API token as \
         <code>Authorization: Bearer …</code>; a person's session (<code>POST /api/v1/auth/login</code>) \
         writes with <code>X-CSRF-Token</code> and <code>Origin</code>.</p>\n<nav aria-label=\"Operations\"><ul>\n",
    );
    for (tag, ops) in &operations {
        let _ = write!(html, "<li><a href=\"#tag-{}\">{}</a> <ul>", attr(tag), text(tag));
        for op in ops {
            let _ = write!(
                html,
                "<li><a href=\"#{}\"><code>{} {}</code></a></li>",
                attr(&op.id),
                op.method.to_uppercase(),
                text(op.path)
            );
        }
        html.push_str("</ul></li>\n");
    }
    html.push_str("<li><a href=\"#schemas\">Schemas</a></li></ul></nav>\n");
    for (tag, ops) in &operations {
        let _ = writeln!(html, "<section><h2 id=\"tag-{}\">{}</h2>", attr(tag), text(tag));
        for op in ops {
            operation_html(&mut html, op, &schemas);
        }
        html.push_str("</section>\n");
    }
    html.push_str("<section><h2 id=\"schemas\">Schemas</h2>\n");
    for (name, schema) in &schemas {
        let _ = writeln!(html, "<h3 id=\"schema-{}\">{}</h3>", attr(name), text(name));
        if let Some(description) = schema.get("description").and_then(Value::as_str) {
            let _ = writeln!(html, "<p>{}</p>", prose(description));
        }
        fields_html(&mut html, schema, &schemas);
    }
    html.push_str("</section>\n</main></body></html>\n");
    html
}

/// One operation of the document.
struct Operation<'a> {
    method: &'a str,
    path: &'a str,
    id: String,
    body: &'a Value,
}

/// The operations grouped by their first tag, in the document's order of paths.
fn operations(document: &Value) -> Vec<(String, Vec<Operation<'_>>)> {
    let mut groups: Vec<(String, Vec<Operation>)> = Vec::new();
    let Some(paths) = document.get("paths").and_then(Value::as_object) else { return groups };
    for (path, item) in paths {
        for method in ["get", "put", "post", "patch", "delete"] {
            let Some(body) = item.get(method) else { continue };
            let tag = body.pointer("/tags/0").and_then(Value::as_str).unwrap_or("other").to_owned();
            let id = format!("op-{}", body.get("operationId").and_then(Value::as_str).unwrap_or(path));
            let op = Operation { method, path, id, body };
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, ops)) => ops.push(op),
                None => groups.push((tag, vec![op])),
            }
        }
    }
    groups
}

fn operation_html(html: &mut String, op: &Operation, schemas: &Map<String, Value>) {
    let _ = writeln!(
        html,
        "<article id=\"{}\"><h3><span class=\"method\">{}</span> <code>{}</code></h3>",
        attr(&op.id),
        op.method.to_uppercase(),
        text(op.path)
    );
    for key in ["summary", "description"] {
        if let Some(words) = op.body.get(key).and_then(Value::as_str) {
            let _ = writeln!(html, "<p>{}</p>", prose(words));
        }
    }
    if let Some(parameters) = op.body.get("parameters").and_then(Value::as_array).filter(|p| !p.is_empty()) {
        html.push_str(
            "<h4>Parameters</h4><table><thead><tr><th>name</th><th>in</th><th>type</th><th>description</th></tr></thead><tbody>",
        );
        for parameter in parameters {
            let required = parameter.get("required").and_then(Value::as_bool).unwrap_or(false);
            let _ = write!(
                html,
                "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(parameter.get("name").and_then(Value::as_str).unwrap_or("")),
                if required { " (required)" } else { "" },
                text(parameter.get("in").and_then(Value::as_str).unwrap_or("")),
                type_html(parameter.get("schema").unwrap_or(&Value::Null), schemas, 0),
                prose(parameter.get("description").and_then(Value::as_str).unwrap_or("")),
            );
        }
        html.push_str("</tbody></table>\n");
    }
    if let Some(content) = op.body.pointer("/requestBody/content").and_then(Value::as_object) {
        let required = op.body.pointer("/requestBody/required").and_then(Value::as_bool).unwrap_or(false);
        for (media, body) in content {
            let schema = body.get("schema").unwrap_or(&Value::Null);
            let _ = writeln!(
                html,
                "<h4>Request body ({}{})</h4><p>{}</p>",
                text(media),
                if required { "" } else { ", optional" },
                type_html(schema, schemas, 0)
            );
            fields_html(html, resolve(schema, schemas), schemas);
            let example = body.get("example").cloned().unwrap_or_else(|| example(schema, schemas, 0));
            let pretty = serde_json::to_string_pretty(&example).unwrap_or_default();
            let _ = writeln!(html, "<p>Example:</p><pre class=\"example\"><code>{}</code></pre>", text(&pretty));
        }
    }
    if let Some(responses) = op.body.get("responses").and_then(Value::as_object) {
        html.push_str(
            "<h4>Answers</h4><table><thead><tr><th>status</th><th>meaning</th><th>body</th></tr></thead><tbody>",
        );
        for (status, response) in responses {
            let body = response
                .pointer("/content/application~1json/schema")
                .map(|schema| type_html(schema, schemas, 0))
                .unwrap_or_default();
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(status),
                prose(response.get("description").and_then(Value::as_str).unwrap_or("")),
                body
            );
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</article>\n");
}

/// A table of an object schema's fields (nothing for other schemas).
fn fields_html(html: &mut String, schema: &Value, schemas: &Map<String, Value>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        if let Some(variants) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array) {
            let _ = writeln!(html, "<p>One of: {}</p>", types_joined(variants, schemas, 0, " | "));
        }
        return;
    };
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    html.push_str("<table><thead><tr><th>field</th><th>type</th><th>description</th></tr></thead><tbody>");
    for (name, field) in properties {
        let _ = write!(
            html,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
            text(name),
            if required.contains(&name.as_str()) { " (required)" } else { "" },
            type_html(field, schemas, 0),
            prose(field.get("description").and_then(Value::as_str).unwrap_or("")),
        );
    }
    html.push_str("</tbody></table>\n");
}

/// The schema `$ref` names, or the schema itself.
fn resolve<'a>(schema: &'a Value, schemas: &'a Map<String, Value>) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => schemas.get(name).unwrap_or(schema),
        None => schema,
    }
}

fn types_joined(variants: &[Value], schemas: &Map<String, Value>, depth: usize, separator: &str) -> String {
    variants.iter().map(|v| type_html(v, schemas, depth + 1)).collect::<Vec<_>>().join(separator)
}

/// A short name for a schema's type, linking to named schemas.
fn type_html(schema: &Value, schemas: &Map<String, Value>, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "…".into();
    }
    if let Some(name) = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        return format!("<a href=\"#schema-{}\">{}</a>", attr(name), text(name));
    }
    for (key, separator) in [("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")] {
        if let Some(variants) = schema.get(key).and_then(Value::as_array) {
            return types_joined(variants, schemas, depth, separator);
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(|v| format!("<code>{}</code>", text(&v.to_string()))).collect::<Vec<_>>().join(" | ");
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let named: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "array" => {
                format!("list of {}", type_html(schema.get("items").unwrap_or(&Value::Null), schemas, depth + 1))
            }
            "object" if schema.get("properties").is_some() => "object".into(),
            other => match schema.get("format").and_then(Value::as_str) {
                Some(format) => format!("{} ({})", text(other), text(format)),
                None => text(other),
            },
        })
        .collect();
    if named.is_empty() {
        "any JSON".into()
    } else {
        named.join(" or ")
    }
}

/// An example value of `schema`: its own example where it has one, else one made from it.
pub fn example(schema: &Value, schemas: &Map<String, Value>, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    if let Some(own) = schema.get("example").or_else(|| schema.pointer("/examples/0")) {
        return own.clone();
    }
    if let Some(default) = schema.get("default") {
        return default.clone();
    }
    if schema.get("$ref").is_some() {
        let named = resolve(schema, schemas);
        return if std::ptr::eq(named, schema) { Value::Null } else { example(named, schemas, depth + 1) };
    }
    if let Some(variants) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array) {
        // The first variant with something to show (an optional body is `null | Body`).
        return variants
            .iter()
            .map(|variant| example(variant, schemas, depth + 1))
            .find(|made| !made.is_null())
            .unwrap_or(Value::Null);
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(fields) = example(part, schemas, depth + 1) {
                merged.extend(fields);
            }
        }
        return Value::Object(merged);
    }
    if let Some(first) = schema.pointer("/enum/0").or_else(|| schema.get("const")) {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // ["string", "null"]: the first that is not null.
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "",
    };
    match kind {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(name, field)| (name.clone(), example(field, schemas, depth + 1)))
                .collect(),
        ),
        "array" => Value::Array(vec![example(schema.get("items").unwrap_or(&Value::Null), schemas, depth + 1)]),
        "integer" => schema.get("minimum").cloned().unwrap_or(Value::from(1)),
        "number" => schema.get("minimum").cloned().unwrap_or(Value::from(0.5)),
        "boolean" => Value::Bool(false),
        "string" => Value::String(match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => "2026-12-07T10:00:00Z".into(),
            Some("date") => "2026-12-07".into(),
            Some("uuid") => "4f1c9e7a-2b3d-4e5f-8a9b-0c1d2e3f4a5b".into(),
            _ => "text".into(),
        }),
        _ => Value::Null,
    }
}

/// Text for HTML: `&`, `<`, `>` and `"` escaped.
fn text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// An id or `href` fragment: letters, digits, `-` and `_` kept, anything else as `-`.
fn attr(raw: &str) -> String {
    raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' }).collect()
}

/// A description: escaped, with `backticks` as code and blank lines as paragraph breaks.
fn prose(raw: &str) -> String {
    let escaped = text(raw);
    let mut out = String::with_capacity(escaped.len());
    for (i, piece) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{piece}</code>");
        } else {
            out.push_str(&piece.replace("\n\n", "</p><p>"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_example_is_made_from_the_schema_where_it_has_none() {
        // Arrange
        let schemas: Map<String, Value> = serde_json::from_value(json!({
            "Weight": {"type": "object", "required": ["member"], "properties": {
                "member": {"type": "string", "example": "A"}, "weight": {"type": "integer", "minimum": 0}}}
        }))
        .unwrap();
        let body = json!({"type": "object", "properties": {
            "weights": {"type": "array", "items": {"$ref": "#/components/schemas/Weight"}},
            "mode": {"type": "string", "enum": ["drain", "immediate"]},
            "reason": {"type": ["string", "null"]},
            "at": {"type": "string", "format": "date-time"},
            "hot": {"type": "boolean"}}});

        // Act
        let made = example(&body, &schemas, 0);

        // Assert
        assert_eq!(
            made,
            json!({"weights": [{"member": "A", "weight": 0}], "mode": "drain", "reason": "text",
                   "at": "2026-12-07T10:00:00Z", "hot": false})
        );
    }

    #[test]
    fn a_recursive_schema_gives_a_finite_example_and_type() {
        let schemas: Map<String, Value> = serde_json::from_value(json!({
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}}
        }))
        .unwrap();
        let node = json!({"$ref": "#/components/schemas/Node"});
        assert!(example(&node, &schemas, 0).to_string().len() < 200);
        assert_eq!(type_html(&node, &schemas, 0), "<a href=\"#schema-Node\">Node</a>");
    }

    #[test]
    fn text_from_the_document_is_escaped_and_backticks_become_code() {
        assert_eq!(prose("a `<b>` & \"c\""), "a <code>&lt;b&gt;</code> &amp; &quot;c&quot;");
        assert_eq!(attr("op-/api/v1/x{y}"), "op--api-v1-x-y-");
    }
}

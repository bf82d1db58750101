//! The UI's lists of pools, users and change requests through their server functions:
//! searched, sorted and paged on the server (what the pages' URLs hold), and a malformed
//! query refused naming its field.

use integration::ui::api_session;
use integration::{spawn_app_with, TestApp};
use serde_json::Value;

/// A server function's answer to a signed-in GET: the status and the body as JSON (or as a
/// JSON string when it is not JSON).
async fn get(app: &TestApp, cookie: &str, path: &str) -> (u16, Value) {
    let response = app.request(reqwest::Method::GET, path).header("cookie", cookie).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The values of `key` in a page's rows.
fn column<'a>(rows: &'a Value, key: &str) -> Vec<&'a str> {
    rows.as_array().unwrap().iter().map(|r| r[key].as_str().unwrap()).collect()
}

#[tokio::test]
async fn pools_users_and_change_requests_are_searched_sorted_and_paged_on_the_server() {
    // Arrange: the demo, 60 users more and 60 change requests on four pools, in two states,
    // by two authors.
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let seeded = server::seed::demo_seed(&app.state.db).await.unwrap();
    let (_, _, password) = seeded.users.iter().find(|(name, _, _)| name == "demo-admin").unwrap();
    let (cookie, _) = api_session(&app, "demo-admin", password).await;
    let db = &app.state.db;
    sqlx::query(
        "insert into app_user (name, role)
         select format('load-%s', lpad(i::text, 2, '0')), 'viewer' from generate_series(1, 60) i",
    )
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "insert into change_request (entity, operation, base_version, content_hash, diff, author, reason, state,
             required_approvals, approver_roles, expires_at)
         select format('pool:load%s', i % 4), '{}'::jsonb, 1, repeat('a', 64), '{}'::jsonb,
             case when i % 2 = 0 then 'demo-pm' else 'demo-admin' end, 'listed', case when i % 3 = 0 then 'applied' else 'in_review' end,
             1, array['pm'], now() + interval '1 day'
         from generate_series(1, 60) i",
    )
    .execute(db)
    .await
    .unwrap();
    let all: i64 = sqlx::query_scalar("select count(*) from change_request").fetch_one(db).await.unwrap();

    // Users: a search, two pages of 50, a sort.
    let (status, first) = get(&app, &cookie, "/sfn/access?q=LOAD-").await;
    assert_eq!(status, 200, "{first}");
    let users = &first["users"];
    assert_eq!((users["total"].as_u64(), users["pages"].as_u64()), (Some(60), Some(2)), "{users}");
    let names = column(&users["rows"], "name");
    assert_eq!((names.len(), names[0], names[49]), (50, "load-01", "load-50"));
    let (_, second) = get(&app, &cookie, "/sfn/access?q=load-&page=2").await;
    assert_eq!(column(&second["users"]["rows"], "name"), (51..=60).map(|i| format!("load-{i}")).collect::<Vec<_>>());
    let (_, by_role) = get(&app, &cookie, "/sfn/access?sort=role").await;
    let rows = &by_role["users"]["rows"];
    let (roles, names) = (column(rows, "role"), column(rows, "name"));
    assert!(roles.windows(2).all(|w| w[0] <= w[1]), "{roles:?}");
    assert_eq!(names[0], "demo-admin", "by role, not by name: {names:?}");
    let pm = names.iter().position(|n| *n == "demo-pm").unwrap();
    assert!(names[pm + 1..].contains(&"load-01"), "the pm before the viewers: {names:?}");
    assert!(!second["tokens"].is_null(), "the tokens come with every page");

    // Change requests: filtered by state, author and entity, newest or oldest first, paged.
    let (status, applied) = get(&app, &cookie, "/sfn/change_list?state=applied").await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["list"]["total"].as_u64(), Some(20));
    assert!(column(&applied["list"]["rows"], "state").iter().all(|s| *s == "applied"));
    let (_, mine) = get(&app, &cookie, "/sfn/change_list?author=demo-pm&sort=oldest&q=load2").await;
    let rows = mine["list"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 15, "i = 2, 6, …, 58: {mine}");
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
    assert!(rows.iter().all(|r| r["author"] == "demo-pm" && r["entity"].as_str().unwrap().contains("load2")));
    let (_, page_one) = get(&app, &cookie, "/sfn/change_list").await;
    let (_, page_two) = get(&app, &cookie, "/sfn/change_list?page=2").await;
    assert_eq!(page_one["list"]["total"].as_i64(), Some(all));
    let (one, two) = (page_one["list"]["rows"].as_array().unwrap(), page_two["list"]["rows"].as_array().unwrap());
    assert_eq!((one.len(), two.len()), (25, 25));
    assert!(one.last().unwrap()["id"].as_i64() > two[0]["id"].as_i64(), "newest first, page after page");

    // `%` and `_` are matched as themselves.
    let (_, literal) = get(&app, &cookie, "/sfn/change_list?q=load_").await;
    assert_eq!(literal["list"]["total"].as_u64(), Some(0), "{literal}");
    let (_, past) = get(&app, &cookie, "/sfn/change_list?state=applied&page=9").await;
    assert_eq!((past["list"]["page"].as_u64(), past["list"]["rows"].as_array().unwrap().len()), (Some(1), 20));

    // Pools: a search and sorts.
    let (status, pools) = get(&app, &cookie, "/sfn/pools?q=CN").await;
    assert_eq!(status, 200, "{pools}");
    assert_eq!(column(&pools["rows"], "name"), ["cn-pay"]);
    let (_, by_name) = get(&app, &cookie, "/sfn/pools").await;
    let (_, by_members) = get(&app, &cookie, "/sfn/pools?sort=members").await;
    let mut expected: Vec<(i64, String)> = by_name["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (-r["members"].as_i64().unwrap(), r["name"].as_str().unwrap().to_owned()))
        .collect();
    assert!(expected.len() >= 2 && column(&by_name["rows"], "name").windows(2).all(|w| w[0] < w[1]));
    expected.sort();
    let expected: Vec<&str> = expected.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(column(&by_members["rows"], "name"), expected, "most members first, then by name");

    // A malformed query is refused, naming its field.
    for (path, field) in [
        ("/sfn/change_list?state=merged", "state"),
        ("/sfn/change_list?page=0", "page"),
        ("/sfn/change_list?author=no%20one", "author"),
        ("/sfn/pools?sort=size", "sort"),
        ("/sfn/access?q=%07", "q"),
    ] {
        let (status, body) = get(&app, &cookie, path).await;
        assert_ne!(status, 200, "{path}: {body}");
        assert!(body.to_string().contains(&format!("{field}:")), "{path}: {body}");
    }
}

//! A tenant's page: its plan and limits, its fallback policy, its grants (revoked ones
//! marked), its use now per bucket (see `tenant_usage`), its open reservations and this
//! month's use per day; pms and admins add and revoke grants here. The list of tenants is
//! `tenant_list`.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::tenant_usage::{MonthChart, Usage};
use crate::api::rest::Refusal;
use crate::api::{get_tenant, GrantView, TenantView};
use crate::components::charts::grouped;
use crate::components::form::Field;
use crate::components::layout::CurrentSession;
use crate::components::time::When;

/// The tenant of a tenant's page, read again after each change.
type TenantResource = Resource<Result<Option<TenantView>, ServerFnError>>;

/// The largest amount of tokens a grant can hold (2^53 − 1: exact in JSON everywhere).
const MAX_TOKENS: u64 = api::MAX_INTEGER;

/// What the forms of an editor share (read by the browser's writes only).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Editor {
    csrf: StoredValue<String>,
    tenant: TenantResource,
    /// What was done last (outside the card, so that it survives its refetch).
    done: RwSignal<Option<String>>,
}

/// A tenant's page.
#[component]
pub fn TenantPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.with(|p| p.get("name").unwrap_or_default());
    let tenant: TenantResource = Resource::new(name, get_tenant);
    let session = expect_context::<CurrentSession>().0;
    let done = RwSignal::new(None::<String>);
    view! {
        <p><a href="/tenants">"All tenants"</a></p>
        <p id="tenants-message" class="notice" role="status" aria-live="polite">{move || done.get()}</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                let editor = session.as_ref().filter(|s| s.may_edit).map(|s| Editor { csrf: StoredValue::new(s.csrf_token.clone()), tenant, done });
                let restricted = match (&session, editor) {
                    (Some(s), None) => Some(view! {
                        <p class="notice" id="grants-restricted">
                            "Grants are added and revoked by the pm and admin roles; you are signed in as " {s.role.clone()} ", so this page is read-only."
                        </p>
                    }),
                    _ => None,
                };
                match tenant.await {
                    Ok(Some(t)) => view! { {restricted} <TenantCard tenant=t editor/> }.into_any(),
                    Ok(None) => view! { <h1>"No such tenant"</h1><p>"No tenant is called " <code>{name()}</code> "."</p> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the tenant: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

#[component]
fn TenantCard(tenant: TenantView, editor: Option<Editor>) -> impl IntoView {
    let heading = format!("tenant-{}-heading", tenant.name);
    let labelled_by = heading.clone();
    let usage = match tenant.usage {
        Ok(usage) => view! { <Usage tenant=tenant.name.clone() usage/> }.into_any(),
        Err(why) => view! { <p class="notice">{why}</p> }.into_any(),
    };
    let form = editor.map(|editor| view! { <GrantForm tenant=tenant.name.clone() editor/> });
    let open = match tenant.open {
        Ok(list) if list.is_empty() => view! { <p id=format!("open-{}", tenant.name)>"None open."</p> }.into_any(),
        Ok(list) => view! {
            <div class="table-wrap">
                <table class="grid" id=format!("open-{}", tenant.name)>
                    <caption>{format!("The {} soonest to expire", list.len())}</caption>
                    <thead>
                        <tr>
                            <th scope="col">"Request"</th>
                            <th scope="col" class="number">"Tokens"</th>
                            <th scope="col">"Held by"</th>
                            <th scope="col">"Model"</th>
                            <th scope="col">"Returned by the sweeper after"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {list.into_iter().map(|r| view! {
                            <tr data-request=r.request.clone()>
                                <td><code>{r.request.clone()}</code></td>
                                <td class="number">{grouped(r.tokens)}</td>
                                <td>{r.parts}</td>
                                <td>{if r.model.is_empty() { "–".to_owned() } else { r.model }}</td>
                                <td class="nowrap">{r.deadline}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        }
        .into_any(),
        Err(why) => view! { <p class="notice">{why}</p> }.into_any(),
    };
    let month = match tenant.month {
        Ok(days) => view! { <MonthChart tenant=tenant.name.clone() days/> }.into_any(),
        Err(why) => view! { <p class="notice">{why}</p> }.into_any(),
    };
    view! {
        <section class="card" data-tenant=tenant.name.clone() aria-labelledby=labelled_by>
            <h1 id=heading>"Tenant " <code>{tenant.name.clone()}</code></h1>
            <dl class="facts">
                <dt>"Plan"</dt><dd>{tenant.plan}</dd>
                <dt>"Tokens a month"</dt><dd>{grouped(tenant.monthly_tokens.max(0) as u64)}</dd>
                <dt>"Requests a day"</dt><dd>{grouped(tenant.daily_requests.max(0) as u64)}</dd>
                <dt>"Concurrent reservations"</dt><dd>{grouped(tenant.concurrency.max(0) as u64)}</dd>
                <dt>"Configuration version"</dt><dd>{tenant.version}</dd>
                <dt>"While Redis is unreachable"</dt><dd id=format!("fallback-{}", tenant.name)>{tenant.fallback.clone()}</dd>
            </dl>
            <h2>"Grants"</h2>
            <Grants tenant=tenant.name.clone() grants=tenant.grants editor/>
            {form}
            <h2>"Usage now"</h2>
            {usage}
            <h2>"Open reservations"</h2>
            {open}
            <h2>"This month, per day"</h2>
            {month}
        </section>
    }
    .into_any()
}

#[component]
fn Grants(tenant: String, grants: Vec<GrantView>, editor: Option<Editor>) -> impl IntoView {
    if grants.is_empty() {
        return view! { <p id=format!("grants-none-{tenant}")>"No grants."</p> }.into_any();
    }
    view! {
        <table class="grid" id=format!("grants-{tenant}")>
            <thead>
                <tr>
                    <th scope="col">"Grant"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Tokens"</th>
                    <th scope="col">"Starts"</th>
                    <th scope="col">"Expires"</th>
                    <th scope="col">"State"</th>
                    {editor.is_some().then(|| view! { <th scope="col">"Revoke"</th> })}
                </tr>
            </thead>
            <tbody>
                {grants.into_iter().map(|g| {
                    let state = match &g.revoked_at {
                        Some(at) => view! { <span class="badge bad">"revoked"</span> " " <When at=at.clone()/> }.into_any(),
                        None => view! { <span class="badge ok">"active"</span> }.into_any(),
                    };
                    let revoke = editor.map(|editor| {
                        let cell = g.revoked_at.is_none().then(|| view! { <RevokeGrant tenant=tenant.clone() grant=g.id.clone() editor/> });
                        view! { <td>{cell}</td> }
                    });
                    let kind = match g.priority {
                        Some(p) => format!("{} (priority {p})", g.kind),
                        None => g.kind.clone(),
                    };
                    let key = g.id.clone();
                    view! {
                        <tr data-grant=key>
                            <td><code>{g.id}</code></td>
                            <td>{kind}</td>
                            <td class="number">{grouped(g.amount.max(0) as u64)}</td>
                            <td>{match g.starts_at { Some(at) => view! { <When at/> }.into_any(), None => "at creation".into_any() }}</td>
                            <td>{match g.expires_at { Some(at) => view! { <When at/> }.into_any(), None => "never".into_any() }}</td>
                            <td>{state}</td>
                            {revoke}
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// A required reason and a button: the grant stops paying once the tenant's quota is
/// republished (at once, or by the outbox).
#[component]
fn RevokeGrant(tenant: String, grant: String, editor: Editor) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let key = format!("{tenant}-{grant}");
    let (reason_id, button_id, message_id) =
        (format!("revoke-reason-{key}"), format!("revoke-{key}"), format!("revoke-message-{key}"));
    let target = StoredValue::new((tenant, grant.clone()));
    let revoke = move |_| {
        let why = reason.get_untracked().trim().to_owned();
        if why.is_empty() {
            error.set(Some(Refusal::field("reason", "A reason is required: it goes into the audit trail.")));
            return;
        }
        let (tenant, grant) = target.get_value();
        busy.set(true);
        error.set(None);
        let path = format!("/api/v1/tenants/{tenant}/grants/{grant}/revoke");
        let said = format!("Grant {grant} of {tenant} revoked.");
        save(editor, path, serde_json::json!({ "reason": why }), said, busy, move |refusal| error.set(Some(refusal)));
    };
    view! {
        <div class="row-actions">
            <label class="visually-hidden" for=reason_id.clone()>"Reason to revoke " {grant.clone()} " (required, audited)"</label>
            <input id=reason_id type="text" maxlength="500" placeholder="e.g. granted by mistake" aria-describedby=message_id.clone()
                disabled=move || !hydrated.get() || busy.get()
                prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
            <button type="button" class="danger" id=button_id aria-label=format!("Revoke grant {grant}")
                disabled=move || !hydrated.get() || busy.get() on:click=revoke>"Revoke"</button>
            <span class="field-error" id=message_id role="alert">{move || error.get().map(|r| r.text)}</span>
        </div>
    }
    .into_any()
}

/// The fields of the grant form, as the REST API names them.
const GRANT_FIELDS: [&str; 7] = ["id", "kind", "amount", "priority", "starts_at", "expires_at", "reason"];

/// A new grant for one tenant, checked as you submit (and by the server again).
#[component]
fn GrantForm(tenant: String, editor: Editor) -> impl IntoView {
    let id = RwSignal::new(String::new());
    let kind = RwSignal::new("temporary".to_owned());
    let amount = RwSignal::new(String::new());
    let priority = RwSignal::new(String::new());
    let starts = RwSignal::new(String::new());
    let expires = RwSignal::new(String::new());
    let reason = RwSignal::new(String::new());
    let errors = RwSignal::new(Vec::<Refusal>::new());
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let name = StoredValue::new(tenant.clone());
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = TypedGrant {
            id: id.get_untracked(),
            kind: kind.get_untracked(),
            amount: amount.get_untracked(),
            priority: priority.get_untracked(),
            starts: starts.get_untracked(),
            expires: expires.get_untracked(),
            reason: reason.get_untracked(),
        };
        let body = match typed.check() {
            Ok(body) => body,
            Err(found) => {
                errors.set(found);
                return;
            }
        };
        let tenant = name.get_value();
        let said = format!("Grant {} added to {tenant}.", typed.id.trim());
        busy.set(true);
        errors.set(Vec::new());
        // A server refusal lands in the same list as the checks made here.
        save(editor, format!("/api/v1/tenants/{tenant}/grants"), body, said, busy, move |refusal| {
            errors.set(vec![refusal])
        });
    };
    let field = |key: &'static str| format!("grant-{key}-{tenant}");
    let error_of = move |key: &'static str| {
        move || {
            errors.with(|es| es.iter().find(|e| e.field.as_deref().map(field_key) == Some(key)).map(|e| e.text.clone()))
        }
    };
    let general = move || {
        errors.with(|es| {
            es.iter()
                .find(|e| !e.field.as_deref().map(field_key).is_some_and(|f| GRANT_FIELDS.contains(&f)))
                .map(|e| e.text.clone())
        })
    };
    let input = move |key: &'static str,
                      label: &'static str,
                      input_type: &'static str,
                      value: RwSignal<String>,
                      hint: &'static str| {
        let (input_id, error_id) = (field(key), format!("{}-error", field(key)));
        view! {
            <Field id=input_id.clone() label=label error=Signal::derive(error_of(key)) wide=key == "reason">
                <input id=input_id type=input_type placeholder=hint aria-describedby=error_id
                    aria-invalid=move || error_of(key)().is_some().to_string()
                    prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
            </Field>
        }
        .into_any()
    };
    let (kind_id, kind_error) = (field("kind"), format!("{}-error", field("kind")));
    let (priority_id, priority_error) = (field("priority"), format!("{}-error", field("priority")));
    view! {
        <form class="grant-form form-grid" id=format!("grant-form-{tenant}") on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Add a grant to " {tenant.clone()}</legend>
                {input("id", "Grant id (never reused)", "text", id, "e.g. spring-bonus")}
                <Field id=field("kind") label="Kind" error=Signal::derive(error_of("kind"))>
                    <select id=kind_id aria-describedby=kind_error
                        prop:value=move || kind.get() on:change=move |ev| kind.set(event_target_value(&ev))>
                        <option value="temporary" selected=true>"temporary: pays after bonuses"</option>
                        <option value="bonus">"bonus: pays first"</option>
                    </select>
                </Field>
                {input("amount", "Tokens", "text", amount, "e.g. 500000")}
                <Field id=field("priority") label="Priority (bonus only; lower pays first)" error=Signal::derive(error_of("priority"))>
                    <input id=priority_id type="text" inputmode="numeric" placeholder="e.g. 1"
                        disabled=move || kind.get() != "bonus" aria-describedby=priority_error
                        prop:value=move || priority.get() on:input=move |ev| priority.set(event_target_value(&ev))/>
                </Field>
                {input("starts_at", "Starts (UTC; empty: now)", "text", starts, "e.g. 2026-12-01T09:00")}
                {input("expires_at", "Expires (UTC; empty: never)", "text", expires, "e.g. 2027-01-01T00:00")}
                {input("reason", "Reason (required, for the audit trail)", "text", reason, "e.g. launch campaign bonus")}
                <button type="submit" id=field("submit")>"Add grant"</button>
            </fieldset>
            <p class="field-error" id=field("message") role="alert">{general}</p>
        </form>
    }
    .into_any()
}

/// A server field name as the form names it (a malformed id is `grant.id` there).
fn field_key(server: &str) -> &str {
    match server {
        "grant.id" => "id",
        other => other,
    }
}

/// The grant form as typed.
#[derive(Debug, Clone, Default)]
struct TypedGrant {
    id: String,
    kind: String,
    amount: String,
    priority: String,
    starts: String,
    expires: String,
    reason: String,
}

impl TypedGrant {
    /// The JSON body `POST /api/v1/tenants/{tenant}/grants` takes, or every field that
    /// breaks a rule.
    fn check(&self) -> Result<serde_json::Value, Vec<Refusal>> {
        let mut errors = Vec::new();
        let id = self.id.trim();
        if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            errors.push(Refusal::field("id", "must be 1 to 64 of ASCII letters, digits, '_', '-'"));
        } else if id == "plan" {
            errors.push(Refusal::field("id", "must not be \"plan\", the plan bucket's name"));
        }
        let bonus = match self.kind.as_str() {
            "bonus" => true,
            "temporary" => false,
            other => {
                errors.push(Refusal::field("kind", format!("must be temporary or bonus, not {other:?}")));
                false
            }
        };
        let amount = match self.amount.trim().parse::<u64>() {
            Ok(n) if (1..=MAX_TOKENS).contains(&n) => Some(n),
            _ => {
                errors
                    .push(Refusal::field("amount", format!("must be a whole number of tokens from 1 to {MAX_TOKENS}")));
                None
            }
        };
        let priority = match self.priority.trim() {
            _ if !bonus => None,
            "" => None,
            raw => match raw.parse::<u32>() {
                Ok(p) if p <= i32::MAX as u32 => Some(p),
                _ => {
                    errors.push(Refusal::field("priority", format!("must be a whole number from 0 to {}", i32::MAX)));
                    None
                }
            },
        };
        let mut time = |field: &str, raw: &str| match parse_instant(raw) {
            Ok(t) => t,
            Err(e) => {
                errors.push(Refusal::field(field, e));
                None
            }
        };
        let starts = time("starts_at", &self.starts);
        let expires = time("expires_at", &self.expires);
        if let (Some((from, _)), Some((to, _))) = (&starts, &expires) {
            if to <= from {
                errors.push(Refusal::field("expires_at", "must be after the start"));
            }
        }
        let reason = self.reason.trim();
        if reason.is_empty() {
            errors.push(Refusal::field("reason", "is required: it goes into the audit trail"));
        } else if reason.chars().count() > 500 {
            errors.push(Refusal::field("reason", "must be at most 500 characters"));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let mut body = serde_json::json!({
            "id": id,
            "kind": if bonus { "bonus" } else { "temporary" },
            "amount": amount,
            "reason": reason,
        });
        if let Some(p) = priority {
            body["priority"] = p.into();
        }
        if let Some((_, at)) = starts {
            body["starts_at"] = at.into();
        }
        if let Some((_, at)) = expires {
            body["expires_at"] = at.into();
        }
        Ok(body)
    }
}

/// A time typed as a `datetime-local` value (`2026-12-01T09:00`, read as UTC) or as RFC
/// 3339: `None` when empty, otherwise seconds since 1970 (to compare) and RFC 3339 (to
/// send).
fn parse_instant(raw: &str) -> Result<Option<(i64, String)>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let bad =
        || format!("{raw:?} is not a time: write 2026-12-01T09:00 (UTC) or RFC 3339, e.g. 2026-12-01T09:00:00+01:00");
    let digits = |s: &str, n: usize| -> Option<i64> {
        (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let (date, rest) = raw.split_at_checked(10).ok_or_else(bad)?;
    let rest = rest.strip_prefix(['T', 't', ' ']).ok_or_else(bad)?;
    let (y, m, d) = match date.split('-').collect::<Vec<_>>()[..] {
        [y, m, d] => (digits(y, 4).ok_or_else(bad)?, digits(m, 2).ok_or_else(bad)?, digits(d, 2).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    // The zone: none or Z (UTC), or ±HH:MM.
    let (clock, offset, zone) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0, "Z".to_owned())
    } else if rest.len() > 6 && matches!(rest.as_bytes()[rest.len() - 6], b'+' | b'-') {
        let (clock, zone) = rest.split_at(rest.len() - 6);
        let (zh, zm) = zone[1..].split_once(':').ok_or_else(bad)?;
        let (zh, zm) = (digits(zh, 2).ok_or_else(bad)?, digits(zm, 2).ok_or_else(bad)?);
        if zh > 23 || zm > 59 {
            return Err(bad());
        }
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        (clock, sign * (zh * 3600 + zm * 60), zone.to_owned())
    } else {
        (rest, 0, "Z".to_owned())
    };
    // HH:MM, HH:MM:SS or HH:MM:SS.fraction (the fraction is dropped).
    let clock = match clock.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) => whole,
        Some(_) => return Err(bad()),
        None => clock,
    };
    let (h, min, s) = match clock.split(':').collect::<Vec<_>>()[..] {
        [h, min] => (digits(h, 2).ok_or_else(bad)?, digits(min, 2).ok_or_else(bad)?, 0),
        [h, min, s] => (digits(h, 2).ok_or_else(bad)?, digits(min, 2).ok_or_else(bad)?, digits(s, 2).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] || h > 23 || min > 59 || s > 59 {
        return Err(bad());
    }
    let seconds = days_from_civil(y, m, d) * 86_400 + h * 3600 + min * 60 + s - offset;
    Ok(Some((seconds, format!("{date}T{h:02}:{min:02}:{s:02}{zone}"))))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Posts one change; once done, says `said` and reads the tenants again; otherwise hands
/// the refusal to `refused`.
fn save(
    editor: Editor,
    path: String,
    body: serde_json::Value,
    said: String,
    busy: RwSignal<bool>,
    refused: impl FnOnce(Refusal) + 'static,
) {
    crate::api::rest::write(
        "POST",
        path,
        editor.csrf.get_value(),
        body,
        busy,
        move |reply| {
            let published = if reply["published"].as_bool() == Some(true) {
                " Redis has it now."
            } else {
                " It reaches Redis with the next outbox delivery."
            };
            editor.done.set(Some(format!("{said}{published}")));
            editor.tenant.refetch();
        },
        refused,
    );
}

#[cfg(test)]
mod tests {
    use super::{parse_instant, TypedGrant};

    #[test]
    fn times_are_read_as_utc_unless_they_carry_an_offset() {
        let at = |raw| parse_instant(raw).unwrap().unwrap();
        assert_eq!(at("1970-01-01T00:00"), (0, "1970-01-01T00:00:00Z".to_owned()));
        assert_eq!(at("2026-12-01T09:00").1, "2026-12-01T09:00:00Z");
        assert_eq!(at("2026-12-01T09:00:00+01:00").0, at("2026-12-01T08:00Z").0);
        assert_eq!(at("2024-02-29 23:59:59.5").1, "2024-02-29T23:59:59Z");
        assert_eq!(parse_instant(" ").unwrap(), None);
        for wrong in ["tomorrow", "2026-02-30T00:00", "2026-12-01", "2026-12-01T25:00", "2026-12-01T09:00+1"] {
            assert!(parse_instant(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn a_grant_is_checked_field_by_field_before_it_is_sent() {
        let typed = TypedGrant {
            id: "spring".into(),
            kind: "bonus".into(),
            amount: "5000".into(),
            priority: "2".into(),
            reason: "promo".into(),
            ..Default::default()
        };
        let body = typed.check().unwrap();
        assert_eq!(
            body,
            serde_json::json!({"id": "spring", "kind": "bonus", "amount": 5000, "priority": 2, "reason": "promo"})
        );

        let wrong = TypedGrant {
            id: "plan".into(),
            kind: "temporary".into(),
            amount: "9007199254740992".into(),
            starts: "2026-12-02T00:00".into(),
            expires: "2026-12-01T00:00".into(),
            ..Default::default()
        };
        let fields: Vec<_> = wrong.check().unwrap_err().into_iter().filter_map(|e| e.field).collect();
        assert_eq!(fields, ["id", "amount", "expires_at", "reason"]);
        let fraction = TypedGrant { amount: "1.5".into(), ..typed };
        assert_eq!(fraction.check().unwrap_err()[0].field.as_deref(), Some("amount"));
    }
}

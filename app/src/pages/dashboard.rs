//! The dashboard: what the deployment is connected to and what it has published.

use leptos::prelude::*;

use crate::api::{get_system_status, DependencyStatus, SystemStatus};

/// Live system status, fetched through a server function: rendered on the server, and
/// fetched again from the browser when "Check again" is pressed.
#[component]
pub fn Dashboard() -> impl IntoView {
    let checks = RwSignal::new(0u32);
    let status = Resource::new(move || checks.get(), |_| get_system_status());
    view! {
        <h1>"Dashboard"</h1>
        <section class="card" aria-labelledby="system-heading">
            <div class="card-head">
                <h2 id="system-heading">"System"</h2>
                <button type="button" id="check-again" on:click=move |_| checks.update(|n| *n += 1)>
                    "Check again"
                </button>
            </div>
            <Transition fallback=|| view! { <p>"Checking…"</p> }>
                {move || Suspend::new(async move {
                    match status.await {
                        Ok(status) => view! { <StatusTable status checks=checks.get_untracked()/> }.into_any(),
                        Err(e) => view! {
                            <p class="error" role="alert">"Could not load the status: " {e.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn StatusTable(status: SystemStatus, checks: u32) -> impl IntoView {
    let version = status
        .snapshot_version
        .map(|v| v.to_string())
        .unwrap_or_else(|| "none yet".to_owned());
    view! {
        <table class="kv" id="system-status" data-checks=checks>
            <tbody>
                <DependencyRow name="Postgres" id="postgres" dep=status.postgres/>
                <DependencyRow name="Redis" id="redis" dep=status.redis/>
                <tr>
                    <th scope="row">"Snapshot version"</th>
                    <td id="snapshot-version">{version}</td>
                </tr>
                <tr>
                    <th scope="row">"Snapshots stored"</th>
                    <td id="snapshot-count">{status.snapshot_count}</td>
                </tr>
                <tr>
                    <th scope="row">"Redis key prefix"</th>
                    <td><code id="redis-prefix">{status.redis_prefix}</code></td>
                </tr>
                <tr>
                    <th scope="row">"Checked at"</th>
                    <td id="checked-at">{status.checked_at}</td>
                </tr>
            </tbody>
        </table>
    }
}

#[component]
fn DependencyRow(name: &'static str, id: &'static str, dep: DependencyStatus) -> impl IntoView {
    let (label, class) = if dep.up { ("up", "badge ok") } else { ("down", "badge bad") };
    let detail = if dep.up {
        dep.version.unwrap_or_default()
    } else {
        dep.error.unwrap_or_default()
    };
    view! {
        <tr>
            <th scope="row">{name}</th>
            <td id=format!("{id}-status")>
                <span class=class>{label}</span>
                " "
                <span class="detail" id=format!("{id}-detail")>{detail}</span>
            </td>
        </tr>
    }
}

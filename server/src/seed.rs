//! `tessera demo-seed`: demo data so a fresh deployment has something to show: channels,
//! the pools `cn-pay` (channels) and `sea-pay` (tiers, with an evening peak), plans, and
//! tenants with a bonus grant, and an approval policy on `cn-pay` (one approval by another
//! pm or an admin). Every row is written through the audited change path.

use chrono::{Duration, Utc};
use client::pool::PoolName;
use client::quota::TenantId;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::audit::store::Source;
use crate::change::Ctx;
use crate::channels::ChannelCode;
use crate::channels::ChannelSpec;
use crate::error::ChangeError;
use crate::plans::PlanName;
use crate::plans::PlanSpec;
use crate::tenants::NewGrant;
use crate::tenants::TenantSpec;

/// What the seed did.
#[derive(Debug, Default)]
pub struct SeedReport {
    /// Entities written now (`channel:…`, `plan:…`, `pool:…`, `tenant:…`, `grant:…`).
    pub created: Vec<String>,
    /// Entities that existed already and were left alone.
    pub kept: Vec<String>,
    /// Demo users created now, one per role: (name, role, password shown once).
    pub users: Vec<(String, String, String)>,
}

impl SeedReport {
    fn record(&mut self, entity: String, outcome: Result<(), ChangeError>) -> anyhow::Result<()> {
        match outcome {
            Ok(()) => self.created.push(entity),
            Err(ChangeError::Conflict { .. } | ChangeError::Duplicate { .. }) => self.kept.push(entity),
            // An approval policy on its scope: left to a change request, and said so.
            Err(ChangeError::Blocked { rule, .. }) => self.kept.push(format!("{entity} (not written: {rule})")),
            Err(e) => return Err(anyhow::Error::from(e).context(format!("seeding {entity}"))),
        }
        Ok(())
    }
}

const CTX: Ctx<'static> =
    Ctx { actor: "demo-seed", source: Source::System, reason: Some("demo data"), request_id: None };

/// The demo channels: (code, name, tier, base weight).
const CHANNELS: [(&str, &str, Option<&str>, u64); 8] = [
    ("ALIPAY_A", "Alipay acquirer A", None, 45),
    ("WECHAT_B", "WeChat Pay acquirer B", None, 30),
    ("UNION_C", "UnionPay acquirer C", None, 25),
    ("GRAB_G1", "GrabPay", Some("G"), 50),
    ("DBS_G2", "DBS PayLah!", Some("G"), 50),
    ("OCBC_N1", "OCBC", Some("N"), 70),
    ("UOB_N2", "UOB", Some("N"), 30),
    ("SHOPEE_U1", "ShopeePay", Some("U"), 100),
];

fn pools() -> [(&'static str, Value); 2] {
    [
        (
            "cn-pay",
            json!({
                "kind": "channels",
                "ordering": "smooth",
                "batch_size": 1024,
                "low_water": 128,
                "timezone": "Asia/Shanghai",
                "weights": [
                    {"member": "ALIPAY_A", "weight": 45},
                    {"member": "WECHAT_B", "weight": 30},
                    {"member": "UNION_C", "weight": 25}
                ],
                "eject_rebuild_percent": 50
            }),
        ),
        (
            "sea-pay",
            json!({
                "kind": "tiers",
                "ordering": "smooth",
                "batch_size": 1024,
                "low_water": 128,
                "timezone": "Asia/Singapore",
                "weights": [
                    {"member": "G", "weight": 60},
                    {"member": "N", "weight": 30},
                    {"member": "U", "weight": 10}
                ],
                "tiers": {
                    "G": [{"member": "GRAB_G1", "weight": 50}, {"member": "DBS_G2", "weight": 50}],
                    "N": [{"member": "OCBC_N1", "weight": 70}, {"member": "UOB_N2", "weight": 30}],
                    "U": [{"member": "SHOPEE_U1", "weight": 100}]
                },
                "peak_windows": [{"start": "19:00", "end": "23:00", "multiplier": 3}],
                "eject_rebuild_percent": 50
            }),
        ),
    ]
}

/// Writes whatever part of the demo data is missing; running it twice changes nothing the
/// second time.
#[tracing::instrument(skip_all, err)]
pub async fn demo_seed(db: &PgPool) -> anyhow::Result<SeedReport> {
    let mut report = SeedReport::default();
    // One seed at a time, so two concurrent seeds do not both find a thing missing.
    let mut lock = db.acquire().await?;
    crate::store::advisory_lock(&mut lock, "tessera.demo_seed").await?;
    let outcome = seed(db, &mut report).await;
    crate::store::advisory_unlock(&mut lock, "tessera.demo_seed").await?;
    outcome.map(|()| report)
}

async fn seed(db: &PgPool, report: &mut SeedReport) -> anyhow::Result<()> {
    for (code, name, tier, weight) in CHANNELS {
        let code = ChannelCode::parse(code)?;
        let spec: ChannelSpec = serde_json::from_value(json!({"name": name, "tier": tier, "base_weight": weight}))?;
        let outcome = crate::channels::store::create_channel(db, &CTX, &code, &spec, true).await.map(|_| ());
        report.record(format!("channel:{code}"), outcome)?;
    }
    for (name, body) in pools() {
        let pool = PoolName::parse(name)?;
        let outcome = crate::pools::store::put_pool(db, &CTX, &pool, &body, 0).await.map(|_| ());
        report.record(crate::change::Entity::pool_key(pool), outcome)?;
    }
    // Weight changes on cn-pay need one approval by another pm or an admin.
    let demo_policy = crate::gate::policy::store::PolicySpec {
        required_approvals: 1,
        approver_roles: vec!["pm".into(), "admin".into()],
        expires_after_hours: 72,
        moved_percent_over: None,
        member_share_over: None,
    };
    match crate::gate::policy::store::put_policy(db, &CTX, "pool:cn-pay", &demo_policy, 0).await {
        Ok(_) => report.created.push("policy:pool:cn-pay".into()),
        Err(crate::error::ApiError::Conflict { .. }) => report.kept.push("policy:pool:cn-pay".into()),
        Err(e) => return Err(anyhow::anyhow!("seeding policy:pool:cn-pay: {e}")),
    }
    let plans = [
        ("starter", 5_000_000_u64, 10_000_u64, 8_u32),
        ("pro", 50_000_000, 100_000, 64),
        ("enterprise", 500_000_000, 1_000_000, 256),
    ];
    for (name, tokens, requests, concurrency) in plans {
        let plan = PlanName::parse(name)?;
        let spec: PlanSpec = serde_json::from_value(json!({
            "monthly_tokens": tokens, "daily_requests": requests, "concurrency": concurrency,
        }))?;
        let outcome = crate::plans::store::create_plan(db, &CTX, &plan, &spec).await.map(|_| ());
        report.record(format!("plan:{plan}"), outcome)?;
    }
    let tenants = [
        ("acme", json!({"plan": "pro", "fallback": {"policy": "fail_open_limited", "allowance": 100_000}})),
        ("globex", json!({"plan": "starter"})),
    ];
    for (name, spec) in tenants {
        let tenant = TenantId::parse(name)?;
        let spec: TenantSpec = serde_json::from_value(spec)?;
        let outcome = crate::tenants::store::put_tenant(db, &CTX, &tenant, &spec, 0).await.map(|_| ());
        report.record(crate::change::Entity::tenant_key(tenant), outcome)?;
    }
    let now = Utc::now();
    let grant: NewGrant = serde_json::from_value(json!({
        "id": "launch-bonus", "kind": "bonus", "priority": 1, "amount": 2_000_000,
        "expires_at": now + Duration::days(120),
    }))?;
    let acme = TenantId::parse("acme")?;
    let outcome = crate::tenants::store::add_grant(db, &CTX, &acme, &grant, None, now).await.map(|_| ());
    report.record("grant:acme/launch-bonus".to_owned(), outcome)?;
    // One user per role, with a generated password printed once.
    for role in crate::access::Role::ALL {
        let name = format!("demo-{role}");
        let password = crate::access::random_secret(18);
        match crate::access::create_user_audited(db, &name, role, &password, "demo-seed").await {
            Ok(()) => {
                report.created.push(format!("user:{name}"));
                report.users.push((name, role.to_string(), password));
            }
            Err(crate::error::ApiError::Duplicate { .. }) => report.kept.push(format!("user:{name}")),
            Err(e) => return Err(anyhow::anyhow!("seeding user {name}: {e}")),
        }
    }
    Ok(())
}

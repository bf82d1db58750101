//! Adaptive tiers (issue 20): each tiers pool's tier policy (`engine::adaptive`) judges its
//! channels' success rates one window at a time, from the outcome buckets in Redis, and
//! keeps what the windows said in Postgres (`tier_streak`). A move it finds is a
//! `tier_move` row: in `automatic` mode applied at once, as an audited change with source
//! `health` and the measured rates in the reason; in `suggest` mode offered on the pool's
//! page until a person accepts (the same change, made by them) or dismisses it.
//!
//! A channel serves one tier: when it has a tier of its own (its registration), a move
//! changes that and its tier in every tiers pool holding it, in one transaction, so the
//! pools never disagree about it; a channel without one moves in the policy's pool only.
//! A move the pools cannot take (a tier with weight would be left without channels, or a
//! tier the pool has no weight for) is not applied: it stays open, with the rule it broke.

pub mod routes;
pub mod store;

use std::collections::BTreeMap;

use anyhow::Context;
use api::tiers::{AdaptiveTiers, TierMove as MoveView};
use chrono::{DateTime, Utc};
use client::pool::{PoolKind, PoolName, PoolSnapshot};
use engine::adaptive::{judge, TierMode, TierMove, TierPolicy};
use engine::health::Window;
use engine::{Tier, Weights};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::{Acquire, PgConnection, PgPool};

use crate::audit::store::Source;
use crate::change::{Ctx, Written};
use crate::error::ChangeError;
use crate::state::AppState;

/// Windows judged at most per channel and run (a job that was away catches up this far).
pub const CATCH_UP_WINDOWS: i64 = 12;

/// How far back outcome buckets are read, in minutes: health keeps at least this much.
const READABLE_MINUTES: i64 = 60;

/// A pool's tier policy: its stored overrides on the defaults.
pub fn policy_of(raw: &Value) -> Result<TierPolicy, ChangeError> {
    crate::health::parse_policy(raw, "tier_policy", TierPolicy::validate)
}

/// What one run did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Tiers pools with a policy that is not off.
    pub pools: usize,
    /// Channel windows judged.
    pub judged: usize,
    /// `pool/channel: G → N` for each move applied.
    pub applied: Vec<String>,
    /// Moves offered for a person to accept (suggest mode).
    pub offered: Vec<String>,
    /// Automatic moves the pools could not take, with the rule.
    pub refused: Vec<String>,
    /// Open moves withdrawn: a window since pointed the channel back at its tier, or the
    /// other way.
    pub withdrawn: Vec<String>,
}

fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// The reason a move carries: the tiers, the measured rates, and the policy's boundaries.
pub fn describe(m: &TierMove, policy: &TierPolicy) -> String {
    let rates: Vec<String> = m.rates.iter().map(|r| percent(*r)).collect();
    format!(
        "tier {} → {}: success {} in {} consecutive windows of {} min (G at ≥ {}, N at ≥ {}, margin {})",
        m.from,
        m.to,
        rates.join(", "),
        m.rates.len(),
        policy.window_minutes,
        percent(policy.good_at_least),
        percent(policy.normal_at_least),
        percent(policy.margin)
    )
}

/// Moves `channel` into tier `to` in `snapshot` (a tiers pool), keeping its weight.
fn move_channel(snapshot: &mut PoolSnapshot, channel: &str, to: Tier) -> Result<(), ChangeError> {
    let invalid = |rule: String| ChangeError::Invalid { field: "tiers".into(), rule };
    if snapshot.kind != PoolKind::Tiers {
        return Err(invalid("only a tiers pool places channels in tiers".into()));
    }
    let (from, weight) = snapshot
        .tiers
        .iter()
        .find_map(|(t, w)| w.index_of(channel).map(|i| (*t, w.weight(i))))
        .ok_or_else(|| invalid(format!("channel {channel:?} is not in the pool")))?;
    if from == to {
        return Ok(());
    }
    let rest: Vec<(String, u64)> =
        snapshot.tiers[&from].iter().filter(|(m, _)| *m != channel).map(|(m, w)| (m.to_owned(), w)).collect();
    if rest.is_empty() {
        snapshot.tiers.remove(&from);
    } else {
        let left =
            Weights::from_integers(rest).map_err(|e| invalid(format!("tier {from} without {channel:?}: {e}")))?;
        snapshot.tiers.insert(from, left);
    }
    let mut joined: Vec<(String, u64)> =
        snapshot.tiers.get(&to).map(|w| w.iter().map(|(m, w)| (m.to_owned(), w)).collect()).unwrap_or_default();
    joined.push((channel.to_owned(), weight));
    let joined = Weights::from_integers(joined).map_err(|e| invalid(format!("tier {to} with {channel:?}: {e}")))?;
    snapshot.tiers.insert(to, joined);
    Ok(())
}

/// Moves `channel` from `from` to `to` for `pool`'s policy, in the caller's transaction:
/// its registration (when it has a tier of its own) and every tiers pool holding it, each
/// an audited change, `pool` first; every pool touched starts the channel's streak and
/// cool-down again and supersedes its open moves. Refused under an approval policy of the
/// channels (when the registration changes) or of another pool touched; of `pool` itself
/// only when `direct` (a person's change: an automatic move was allowed by the policy's
/// mode, which a person under the pool's approval policy cannot turn on).
pub(crate) async fn rerate(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    channel: &str,
    (from, to): (Tier, Tier),
    direct: bool,
    now: DateTime<Utc>,
) -> Result<Vec<Written>, ChangeError> {
    crate::change::store::lock(&mut *tx, &crate::change::Entity::pool_key(pool)).await?;
    let Some(Some(current)) = store::member_tier(&mut *tx, pool.as_str(), channel).await? else {
        return Err(ChangeError::Blocked {
            field: "channel".into(),
            rule: format!("{channel:?} is no longer in a tier of pool {:?}", pool.as_str()),
        });
    };
    if current != from.as_str() {
        return Err(ChangeError::Blocked {
            field: "from".into(),
            rule: format!("{channel:?} is in tier {current} now, not {from}: the move no longer applies"),
        });
    }
    let registered = crate::channels::store::channel_in(&mut *tx, channel)
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown channel {channel:?}")))?;
    let mut pools = vec![pool.as_str().to_owned()];
    let mut written = Vec::new();
    let mut registration = None;
    if registered.tier.is_some() {
        pools.extend(store::other_tiers_pools(&mut *tx, channel, pool.as_str()).await?);
        crate::gate::policy::store::refuse_scope(&mut *tx, "channels").await?;
        let before = crate::channels::store::channel_json(&registered);
        store::set_channel_tier(&mut *tx, channel, to).await?;
        let after = crate::channels::store::channel_in(&mut *tx, channel).await?.expect("the channel exists");
        let entity = format!("channel:{channel}");
        let audit_id = crate::change::store::audit(
            &mut *tx,
            ctx,
            &entity,
            "channel.tier",
            Some(&before),
            Some(&crate::channels::store::channel_json(&after)),
        )
        .await?;
        registration =
            Some(Written { entity, action: "channel.tier".into(), version: after.version, audit_id, outbox_id: None });
    }
    for name in &pools {
        let name =
            PoolName::parse(name).map_err(|e| ChangeError::Invalid { field: "pool".into(), rule: e.to_string() })?;
        if direct || name != *pool {
            crate::gate::refuse_direct_write(&mut *tx, &name).await?;
        }
        let w = crate::pools::store::modify_pool_tx(&mut *tx, ctx, &name, "pool.tier", None, |s| {
            move_channel(s, channel, to)
        })
        .await?;
        written.push(w.written);
        store::moved(&mut *tx, name.as_str(), (channel, to), now).await?;
    }
    if let Some(r) = registration {
        written.insert(1, r);
    }
    Ok(written)
}

/// A channel's outcomes per window, for the windows `from..=to` of `minutes` each.
async fn measure(
    state: &AppState,
    channel: &str,
    minutes: u32,
    (from, to): (i64, i64),
) -> anyhow::Result<Vec<(i64, Window)>> {
    let code = client::health::ChannelCode::parse(channel).map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.rule))?;
    let m = i64::from(minutes);
    let counts = state
        .outcomes
        .window(&code, from * m, (to + 1) * m - 1)
        .await
        .with_context(|| format!("reading outcomes of {channel}"))?;
    let mut windows: BTreeMap<i64, Window> = (from..=to).map(|w| (w, Window::default())).collect();
    for c in counts {
        if let Some(w) = windows.get_mut(&c.minute.div_euclid(m)) {
            w.ok += c.ok;
            w.fail += c.fail;
        }
    }
    Ok(windows.into_iter().collect())
}

/// Judges every tiers pool whose policy is on, at `now` (the job passes the current time;
/// tests inject one): each channel's complete windows not judged yet (at most
/// [`CATCH_UP_WINDOWS`], none before its first judged one but the newest).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Report> {
    let now_minute = now.timestamp_millis().div_euclid(60_000);
    let mut report = Report::default();
    let mut publish = false;
    for (pool, raw) in store::policies(&state.db).await? {
        let policy = match policy_of(&raw) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(pool, error = %e, "tier policy invalid; pool skipped");
                continue;
            }
        };
        if policy.mode == TierMode::Off {
            continue;
        }
        report.pools += 1;
        let name = PoolName::parse(&pool).map_err(|e| anyhow::anyhow!("{e}"))?;
        let minutes = i64::from(policy.window_minutes);
        let newest = now_minute.div_euclid(minutes) - 1;
        // The first window starting at or after the oldest minute still readable.
        let readable = (now_minute - READABLE_MINUTES + minutes - 1).div_euclid(minutes);
        let oldest = (newest - CATCH_UP_WINDOWS + 1).max(readable);
        // Measure before taking the configuration lock: Redis reads stay out of the transaction.
        let mut measured = BTreeMap::new();
        for r in store::rated(&state.db, &pool).await? {
            let from = r.judged_with(policy.window_minutes).map_or(newest, |j| (j + 1).max(oldest));
            if from <= newest {
                measured.insert(
                    r.channel.clone(),
                    measure(state, &r.channel, policy.window_minutes, (from, newest)).await?,
                );
            }
        }
        if measured.is_empty() {
            continue;
        }
        let done = judge_pool(&state.db, &name, (&policy, &raw), &measured, now)
            .await
            .with_context(|| format!("judging pool {pool}"))?;
        publish |= !done.applied.is_empty();
        report.judged += done.judged;
        report.applied.extend(done.applied);
        report.offered.extend(done.offered);
        report.refused.extend(done.refused);
        report.withdrawn.extend(done.withdrawn);
    }
    if publish {
        crate::publish::publish_now(state).await;
    }
    Ok(report)
}

async fn judge_pool(
    db: &PgPool,
    pool: &PoolName,
    (policy, raw): (&TierPolicy, &Value),
    measured: &BTreeMap<String, Vec<(i64, Window)>>,
    now: DateTime<Utc>,
) -> anyhow::Result<Report> {
    let now_ms = now.timestamp_millis();
    let mut report = Report::default();
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(pool)).await?;
    // A person changed the policy since it was read: the next run judges under the new one.
    if store::policy_of_pool(&mut *tx, pool.as_str()).await?.is_none_or(|(_, now_raw)| &now_raw != raw) {
        return Ok(report);
    }
    // The tier each open move is for: a window that no longer points that way withdraws it.
    let mut open = store::open_moves(&mut tx, pool.as_str()).await?;
    // Read again under the lock: another run may have judged some windows meanwhile.
    for rated in store::rated(&mut *tx, pool.as_str()).await? {
        let Some(windows) = measured.get(&rated.channel) else { continue };
        let judged = rated.judged_with(policy.window_minutes);
        let mut tier = rated.tier;
        let mut streak = rated.streak.clone();
        let mut last = None;
        if let Some((from, _)) = open.get(&rated.channel).copied().filter(|(from, _)| *from != tier) {
            // Another change (a person's edit of the pool or the channel) moved it meanwhile.
            let why = format!("withdrawn: the channel is in tier {tier} now, not {from} (moved by another change)");
            if store::supersede(&mut tx, pool.as_str(), Some(&rated.channel), &why, now).await? > 0 {
                report.withdrawn.push(format!("{pool}/{}: {why}", rated.channel));
            }
            open.remove(&rated.channel);
        }
        for (index, window) in windows.iter().filter(|(i, _)| judged.is_none_or(|j| *i > j)) {
            report.judged += 1;
            last = Some(*index);
            let (next, found) = judge(policy, tier, &streak, *window, now_ms);
            streak = next;
            if let Some((_, toward)) = open.get(&rated.channel).copied() {
                if let Some((rate, pointed)) = policy.not_toward(tier, toward, *window) {
                    // What the open move was offered for no longer holds.
                    let way = if pointed == tier { "back at its tier" } else { "the other way, at tier" };
                    let why = format!(
                        "withdrawn: a window of {} min at {} pointed it {way} {pointed}",
                        policy.window_minutes,
                        percent(rate)
                    );
                    if store::supersede(&mut tx, pool.as_str(), Some(&rated.channel), &why, now).await? > 0 {
                        report.withdrawn.push(format!("{pool}/{}: {why}", rated.channel));
                    }
                    open.remove(&rated.channel);
                }
            }
            let Some(found) = found else { continue };
            let reason = describe(&found, policy);
            let label = format!("{pool}/{}: {reason}", rated.channel);
            let mut new = store::NewMove {
                pool: pool.as_str(),
                channel: &rated.channel,
                from: found.from,
                to: found.to,
                rates: &found.rates,
                window_minutes: policy.window_minutes,
                state: "open",
                note: None,
                at: now,
                audit_id: None,
            };
            if policy.mode == TierMode::Automatic {
                let ctx = Ctx { actor: "health", source: Source::Health, reason: Some(&reason), request_id: None };
                let mut attempt = (&mut tx).begin().await?;
                match rerate(&mut attempt, &ctx, pool, &rated.channel, (found.from, found.to), false, now).await {
                    Ok(written) => {
                        attempt.commit().await?;
                        tier = found.to;
                        new.state = "applied";
                        new.audit_id = written.first().map(|w| w.audit_id);
                        store::insert_move(&mut tx, &new).await?;
                        open.remove(&rated.channel);
                        report.applied.push(label);
                        continue;
                    }
                    Err(ChangeError::Db(e)) => return Err(e.into()),
                    Err(refused) => {
                        attempt.rollback().await?;
                        let note = format!("not applied: {refused}");
                        tracing::warn!(pool = pool.as_str(), channel = rated.channel, %refused, "tier move not applied");
                        new.note = Some(&note);
                        store::insert_move(&mut tx, &new).await?;
                        open.insert(rated.channel.clone(), (found.from, found.to));
                        report.refused.push(format!("{label}: {note}"));
                        continue;
                    }
                }
            }
            store::insert_move(&mut tx, &new).await?;
            open.insert(rated.channel.clone(), (found.from, found.to));
            report.offered.push(label);
        }
        if let Some(last) = last {
            // An applied move started the streak again in `rerate`; what came after it stays.
            let channel = (rated.channel.as_str(), tier);
            store::save_streak(&mut tx, pool.as_str(), channel, &streak, policy.window_minutes, last).await?;
        }
    }
    tx.commit().await?;
    Ok(report)
}

/// `GET …/tier_policy`: the policy, each channel's streak and the newest moves; `None` for
/// an unknown pool.
pub async fn read(db: &PgPool, pool: &PoolName) -> Result<Option<AdaptiveTiers>, ChangeError> {
    let Some((_, raw)) = store::policy_of_pool(db, pool.as_str()).await? else { return Ok(None) };
    let policy = policy_of(&raw).unwrap_or_default();
    let rated = store::rated(db, pool.as_str()).await?;
    Ok(Some(AdaptiveTiers {
        pool: pool.as_str().to_owned(),
        policy,
        channels: store::ratings(&rated, policy.window_minutes),
        moves: store::moves(db, pool.as_str(), 50).await?,
    }))
}

/// Replaces a pool's tier policy (audited; the channels' streaks start again under it).
/// A policy that is not off is for a tiers pool only (422 naming `tier_policy.mode`).
pub async fn set_policy(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    raw: &Value,
) -> Result<(TierPolicy, i64), ChangeError> {
    let policy = crate::health::parse_policy(raw, "tier_policy", TierPolicy::validate_new)?;
    let entity = crate::change::Entity::pool_key(pool);
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &entity).await?;
    let Some((kind, before)) = store::policy_of_pool(&mut *tx, pool.as_str()).await? else {
        return Err(ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    };
    if kind != "tiers" && policy.mode != TierMode::Off {
        return Err(ChangeError::Invalid {
            field: "tier_policy.mode".into(),
            rule: format!("only a tiers pool re-rates its channels; pool {:?} is of kind {kind:?}", pool.as_str()),
        });
    }
    // Moves change the pool's configuration: under an approval policy only a person's
    // accepted change request may, so a policy that finds moves is refused (off is not).
    if policy.mode != TierMode::Off {
        crate::gate::refuse_direct_write(&mut *tx, pool).await?;
    }
    let stored = serde_json::to_value(policy)
        .map_err(|e| ChangeError::Invalid { field: "tier_policy".into(), rule: e.to_string() })?;
    store::store_policy(&mut tx, pool.as_str(), &stored).await?;
    store::reset_streaks(&mut tx, pool.as_str()).await?;
    store::supersede(&mut tx, pool.as_str(), None, "the pool's tier policy changed", Utc::now()).await?;
    let audit_id = crate::change::store::audit(
        &mut tx,
        ctx,
        &entity,
        "pool.tier_policy",
        Some(&json!({"tier_policy": before})),
        Some(&json!({"tier_policy": stored})),
    )
    .await?;
    tx.commit().await?;
    Ok((policy, audit_id))
}

/// Takes the configuration lock and answers `pool`'s move `id`, locked for a decision:
/// 404 when the pool has no such move, 409 naming `state` when it is not open.
async fn open_move(tx: &mut PgConnection, pool: &PoolName, id: i64) -> Result<MoveView, ChangeError> {
    crate::change::store::lock(&mut *tx, &crate::change::Entity::pool_key(pool)).await?;
    let m = store::move_for_update(&mut *tx, pool.as_str(), id)
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("pool {:?} has no tier move {id}", pool.as_str())))?;
    if m.state != "open" {
        return Err(ChangeError::Blocked {
            field: "state".into(),
            rule: format!("move {} is {}, not open", m.id, m.state),
        });
    }
    Ok(m)
}

/// A person accepts an open move: the change it calls for, made by them (refused under
/// an approval policy); a move the channel's tier has overtaken is superseded instead
/// (409). Answers the move as decided and what was written.
pub async fn accept(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    id: i64,
) -> Result<(MoveView, Vec<Written>), ChangeError> {
    let mut tx = db.begin().await?;
    let m = open_move(&mut tx, pool, id).await?;
    let parse =
        |t: &str| t.parse::<Tier>().map_err(|e| ChangeError::Invalid { field: "move".into(), rule: e.to_string() });
    let tiers = (parse(&m.from)?, parse(&m.to)?);
    let rates: Vec<String> = m.rates.iter().map(|r| percent(*r)).collect();
    let reason = format!(
        "{} (accepting tier move {id}: {} → {}, success {} in windows of {} min)",
        ctx.reason.unwrap_or("accepted"),
        m.from,
        m.to,
        rates.join(", "),
        m.window_minutes
    );
    let reason: String = reason.chars().take(2000).collect();
    let ctx = Ctx { reason: Some(&reason), ..*ctx };
    let mut attempt = (&mut tx).begin().await?;
    match rerate(&mut attempt, &ctx, pool, &m.channel, tiers, true, Utc::now()).await {
        Ok(written) => {
            attempt.commit().await?;
            store::decide(&mut tx, id, "accepted", ctx.actor, None, written.first().map(|w| w.audit_id)).await?;
            let decided = store::move_for_update(&mut tx, pool.as_str(), id).await?.expect("the move exists");
            tx.commit().await?;
            Ok((decided, written))
        }
        Err(ChangeError::Blocked { field, rule }) if field == "from" || field == "channel" => {
            attempt.rollback().await?;
            store::decide(&mut tx, id, "superseded", ctx.actor, Some(&rule), None).await?;
            tx.commit().await?;
            Err(ChangeError::Blocked { field: "move".into(), rule })
        }
        Err(e) => Err(e),
    }
}

/// A person dismisses an open move, saying why (nothing changes but the move, audited as
/// `pool.tier_move_dismiss`; the cool-down the move started stays).
pub async fn dismiss(db: &PgPool, ctx: &Ctx<'_>, pool: &PoolName, id: i64) -> Result<MoveView, ChangeError> {
    let mut tx = db.begin().await?;
    let m = open_move(&mut tx, pool, id).await?;
    let entity = crate::change::Entity::pool_key(pool);
    store::decide(&mut tx, id, "dismissed", ctx.actor, ctx.reason, None).await?;
    let decided = store::move_for_update(&mut tx, pool.as_str(), id).await?.expect("the move exists");
    let json = |m: &MoveView| serde_json::to_value(m).unwrap_or(Value::Null);
    crate::change::store::audit(
        &mut tx,
        ctx,
        &entity,
        "pool.tier_move_dismiss",
        Some(&json(&m)),
        Some(&json(&decided)),
    )
    .await?;
    tx.commit().await?;
    Ok(decided)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolSnapshot {
        serde_json::from_value(json!({
            "version": 1, "kind": "tiers", "batch_size": 10, "low_water": 2, "ordering": "smooth",
            "timezone": "UTC", "eject_rebuild_percent": 90,
            "weights": [{"member": "G", "weight": 6}, {"member": "N", "weight": 4}],
            "tiers": {"G": [{"member": "a", "weight": 3}, {"member": "b", "weight": 1}], "N": [{"member": "c", "weight": 2}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_move_keeps_the_channels_weight_and_leaves_the_others() {
        let mut s = pool();
        move_channel(&mut s, "a", Tier::N).unwrap();
        s.validate().unwrap();
        let members = |t: Tier| s.tiers[&t].iter().map(|(m, w)| (m.to_owned(), w)).collect::<Vec<_>>();
        assert_eq!(members(Tier::G), [("b".to_owned(), 1)]);
        assert_eq!(members(Tier::N), [("c".to_owned(), 2), ("a".to_owned(), 3)]);
    }

    #[test]
    fn a_move_that_empties_a_tier_with_weight_or_reaches_one_without_is_refused_by_the_pool() {
        let mut s = pool();
        move_channel(&mut s, "c", Tier::G).unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("tier N has weight but no channels"));
        let mut s = pool();
        move_channel(&mut s, "b", Tier::U).unwrap();
        assert!(s.validate().unwrap_err().to_string().contains("tier U is not in weights"));
        assert!(move_channel(&mut pool(), "z", Tier::N).is_err(), "a stranger");
    }
}

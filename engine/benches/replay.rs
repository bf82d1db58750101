//! Traffic replay: a recorded day of demand (1,000 draws a minute) run through a pool, per
//! draw, beside its baseline measured in the same run: building the same tickets as
//! batches alone (apportion + order), which a replay cannot do without. The ratio says what
//! the replay's own bookkeeping (caps, lanes, the per-minute schedule) costs on top; the
//! absolute figure is what bounds a replay over HTTP (`api::replay::MAX_HTTP_DRAWS`).

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use chrono::{TimeZone, Utc};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::order::build_batch;
use engine::peak::PeakSchedule;
use engine::replay::{replay, Demand, ReplayConfig};
use engine::{Apportioner, BatchSize, Ordering, Weights};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const MINUTES: i64 = 100;
const PER_MINUTE: u64 = 1_000;

fn weights(members: usize) -> Weights {
    if members == 3 {
        return Weights::parse_spec("A=45,B=30,C=25").unwrap();
    }
    Weights::from_integers((0..members).map(|i| (format!("m{i}"), 1 + (i as u64 * 7) % 13))).unwrap()
}

fn config(members: usize, capped: bool) -> ReplayConfig {
    let w = weights(members);
    let daily_caps: BTreeMap<String, u64> =
        if capped { [(w.members()[0].clone(), 20_000)].into_iter().collect() } else { BTreeMap::new() };
    ReplayConfig {
        weights: w,
        tiers: BTreeMap::new(),
        batch_size: BatchSize::DEFAULT,
        low_water: 128,
        ordering: Ordering::Smooth,
        schedule: PeakSchedule::new(chrono_tz::UTC, Vec::new()).unwrap(),
        daily_caps,
        window_caps: None,
        ejected: BTreeSet::new(),
    }
}

fn demand() -> Vec<Demand> {
    let start = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
    (0..MINUTES).map(|m| Demand { minute: start + chrono::Duration::minutes(m), draws: PER_MINUTE }).collect()
}

fn bench(c: &mut Criterion) {
    let demand = demand();
    let draws = (MINUTES as u64) * PER_MINUTE;
    let mut group = c.benchmark_group("replay_100k_draws");
    group.throughput(Throughput::Elements(draws));
    group.sample_size(20);
    for members in [3usize, 30] {
        let w = weights(members);
        group.bench_with_input(BenchmarkId::new("baseline_batches_only", members), &w, |b, w| {
            b.iter(|| {
                let mut rng = ChaCha8Rng::seed_from_u64(1);
                let mut a = Apportioner::new(w.clone());
                let mut built = 0u64;
                while built < draws {
                    let counts = a.next_counts(BatchSize::DEFAULT);
                    built += black_box(build_batch(Ordering::Smooth, &counts, None, &mut rng)).len() as u64;
                }
                built
            })
        });
        for (name, capped) in [("replay", false), ("replay_with_a_daily_cap", true)] {
            let cfg = config(members, capped);
            group.bench_with_input(BenchmarkId::new(name, members), &cfg, |b, cfg| {
                b.iter(|| {
                    let mut rng = ChaCha8Rng::seed_from_u64(1);
                    black_box(replay(cfg, &demand, &mut rng)).sequence.len()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

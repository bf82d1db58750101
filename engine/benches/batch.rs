//! Building one 1024-ticket batch: apportionment, then `shuffle` or `smooth` ordering.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use engine::order::{shuffle, smooth};
use engine::{Apportioner, BatchSize, Weights};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn weights(members: usize) -> Weights {
    if members == 3 {
        return Weights::parse_spec("A=5,B=3,C=2").unwrap();
    }
    Weights::from_integers((0..members).map(|i| (format!("m{i}"), 1 + (i as u64 * 7) % 13))).unwrap()
}

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_1024");
    for members in [3usize, 30, 300] {
        let w = weights(members);
        let counts = Apportioner::new(w.clone()).next_counts(BatchSize::DEFAULT);
        group.bench_with_input(BenchmarkId::new("apportion", members), &w, |b, w| {
            let mut a = Apportioner::new(w.clone());
            b.iter(|| black_box(a.next_counts(BatchSize::DEFAULT)))
        });
        group.bench_with_input(BenchmarkId::new("shuffle", members), &counts, |b, counts| {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            b.iter(|| black_box(shuffle(counts, &mut rng)))
        });
        group.bench_with_input(BenchmarkId::new("smooth", members), &counts, |b, counts| {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            b.iter(|| black_box(smooth(counts, None, &mut rng)))
        });
    }
    group.finish();
}

criterion_group!(benches, batch);
criterion_main!(benches);

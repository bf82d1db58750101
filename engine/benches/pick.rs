//! One pick: SWRR and alias (O(1)) beside the O(log n) cumulative baseline, and ring lookups.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use engine::hashing::HashRing;
use engine::selector::{AliasTable, CumulativePicker, Swrr};
use engine::Weights;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn weights(members: usize) -> Weights {
    Weights::from_integers((0..members).map(|i| (format!("m{i}"), 1 + (i as u64 * 7) % 13))).unwrap()
}

fn picks(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    for members in [3usize, 30, 1000] {
        let w = weights(members);
        group.bench_with_input(BenchmarkId::new("cumulative_baseline", members), &w, |b, w| {
            let picker = CumulativePicker::new(w);
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            b.iter(|| black_box(picker.pick(&mut rng)))
        });
        group.bench_with_input(BenchmarkId::new("alias", members), &w, |b, w| {
            let table = AliasTable::new(w);
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            b.iter(|| black_box(table.pick(&mut rng)))
        });
        group.bench_with_input(BenchmarkId::new("swrr", members), &w, |b, w| {
            let mut swrr = Swrr::new(Arc::new(w.clone()));
            b.iter(|| black_box(swrr.pick()))
        });
        group.bench_with_input(BenchmarkId::new("ring_lookup", members), &w, |b, w| {
            let ring = HashRing::new(w, 160);
            let keys: Vec<Vec<u8>> = (0..1024).map(|i| format!("user-{i}").into_bytes()).collect();
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(ring.lookup(&keys[i]))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, picks);
criterion_main!(benches);

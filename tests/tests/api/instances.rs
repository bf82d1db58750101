//! Two instances of one deployment (one database, one Redis prefix), each running the
//! scheduler: every job runs on one of them only, and when that one stops the other takes
//! its jobs over within one job interval. Leadership is a Postgres advisory lock, scoped to
//! the database, so test apps on other databases never contend with these.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration::{spawn_app, spawn_app_sharing, TestApp};
use server::jobs::leader::{lock_key, Leadership};
use server::jobs::Scheduler;

/// The jobs that tick at least every two seconds, with their interval: these are the ones
/// the test waits for (the minute and ten-second jobs are checked too when they happened to
/// run).
const FAST_JOBS: [(&str, Duration); 3] = [
    ("outbox", Duration::from_secs(1)),
    ("reconcile", Duration::from_secs(2)),
    ("pool_refill", server::jobs::pool_refill::SWEEP_EVERY),
];

/// The documented margin on "within one job interval": the stopping instance's shutdown
/// (its refiller finishing a sweep, the cron loop stopping, its lock connections closing),
/// then the other instance's tick opening a leadership connection and taking the lock, on a
/// two-core machine running other tests beside this one.
const TAKEOVER_MARGIN: Duration = Duration::from_secs(2);

/// A guard against hanging when something never happens: not a performance claim.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// `job -> outcome -> runs` from the app's `tessera_job_runs_total`.
fn job_runs(app: &TestApp) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut runs: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for line in app.state.metrics.render().lines() {
        let Some(rest) = line.strip_prefix("tessera_job_runs_total{") else { continue };
        let (labels, value) = rest.split_once("} ").expect("a sample line");
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .expect("labelled sample")
        };
        *runs.entry(label("job")).or_default().entry(label("outcome")).or_default() +=
            value.parse::<u64>().expect("a count");
    }
    runs
}

fn count(app: &TestApp, job: &str, outcome: &str) -> u64 {
    app.state.metrics.job_runs.with_label_values(&[job, outcome]).get()
}

/// Polls `done` every 20 ms until it holds; panics naming `what` after [`HANG_GUARD`].
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG_GUARD, "{what}: not within {HANG_GUARD:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_runs_on_one_instance_only_and_the_other_takes_over_within_an_interval_when_it_stops() {
    // Arrange: two instances of one deployment, with something for the jobs to publish.
    let first = spawn_app().await;
    let second = spawn_app_sharing(&first).await;
    assert_eq!((second.db_name.as_str(), second.prefix.as_str()), (first.db_name.as_str(), first.prefix.as_str()));
    server::seed::demo_seed(&first.state.db).await.unwrap();
    let first_scheduler = Scheduler::start(first.state.clone()).await.unwrap();
    // The first instance takes every fast job before the second one starts ticking.
    wait_for("the first instance leads every fast job", || {
        FAST_JOBS.iter().all(|(job, _)| count(&first, job, "ok") >= 1)
    })
    .await;
    let second_scheduler = Scheduler::start(second.state.clone()).await.unwrap();

    // Act: both tick side by side.
    wait_for("the second instance ticks every fast job twice", || {
        FAST_JOBS.iter().all(|(job, _)| count(&second, job, "skipped") >= 2)
    })
    .await;

    // Assert: no job ran on both instances (a job whose first tick came after both started
    // went to whichever asked first); the other skipped it.
    let (on_first, on_second) = (job_runs(&first), job_runs(&second));
    let ran = |runs: &BTreeMap<String, BTreeMap<String, u64>>, job: &str| {
        runs.get(job).is_some_and(|outcomes| outcomes.keys().any(|o| o != "skipped"))
    };
    for job in on_first.keys().chain(on_second.keys()) {
        let job = job.as_str();
        // Never on both. (A slow job may still be running on the leader while the other
        // instance has already skipped it: then it shows on neither yet.)
        assert!(
            !(ran(&on_first, job) && ran(&on_second, job)),
            "{job} ran on both instances: {on_first:?} / {on_second:?}"
        );
        for runs in [&on_first, &on_second] {
            assert!(
                !runs.get(job).is_some_and(|o| o.contains_key("ok_unled")),
                "{job}: leadership undecided: {runs:?}"
            );
        }
    }
    for (job, _) in FAST_JOBS {
        assert!(count(&first, job, "ok") >= 1 && !ran(&on_second, job), "{job}: {on_first:?} / {on_second:?}");
    }
    // The first instance's publisher delivered the seed; the second had nothing to do.
    let pending: i64 = sqlx::query_scalar("select count(*) from outbox where delivered_at is null")
        .fetch_one(&first.state.db)
        .await
        .unwrap();
    assert_eq!(pending, 0);

    // Act: the leader stops (scheduler, then HTTP server), as `tessera serve` does.
    let stopping = Instant::now();
    first_scheduler.shutdown().await;
    first.stop_server().await;

    // Assert: the second instance runs each fast job within its interval plus the margin.
    let mut taken_over: BTreeMap<&str, Duration> = BTreeMap::new();
    wait_for("the second instance runs every fast job", || {
        for (job, _) in FAST_JOBS {
            if count(&second, job, "ok") >= 1 {
                taken_over.entry(job).or_insert_with(|| stopping.elapsed());
            }
        }
        taken_over.len() == FAST_JOBS.len()
    })
    .await;
    for (job, interval) in FAST_JOBS {
        let took = taken_over[job];
        assert!(
            took <= interval + TAKEOVER_MARGIN,
            "{job} taken over after {took:?} (interval {interval:?} + margin {TAKEOVER_MARGIN:?})"
        );
    }
    let ran_before: u64 = FAST_JOBS.iter().map(|(job, _)| count(&first, job, "ok")).sum();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ran_after: u64 = FAST_JOBS.iter().map(|(job, _)| count(&first, job, "ok")).sum();
    assert_eq!(ran_after, ran_before, "a stopped scheduler runs nothing more");
    second_scheduler.shutdown().await;
}

#[tokio::test]
async fn a_job_lock_in_one_database_does_not_contend_with_the_same_job_in_another() {
    // Two deployments (two test apps): one database each.
    let one = spawn_app().await;
    let other = spawn_app().await;
    // A job no scheduler runs: the apps' own schedulers contend for theirs (the outbox's
    // took its lock between a resign and the rival's try, once in a cluster pass).
    const JOB: &str = "lock-test";
    let in_one = Leadership::new(one.state.db.clone(), JOB);
    let in_other = Leadership::new(other.state.db.clone(), JOB);
    let rival_in_one = Leadership::new(one.state.db.clone(), JOB);

    assert!(in_one.ensure().await.unwrap());
    assert!(in_other.ensure().await.unwrap(), "the same key in another database is another lock");
    assert!(!rival_in_one.ensure().await.unwrap(), "within one database the key is contended");

    // Postgres records each lock with its database.
    let key = lock_key(JOB);
    let databases: Vec<String> = sqlx::query_scalar(
        "select d.datname::text from pg_locks l join pg_database d on d.oid = l.database
         where l.locktype = 'advisory' and l.granted and l.objsubid = 1
           and l.classid = ($1::int8)::oid and l.objid = ($2::int8)::oid
           and d.datname in ($3, $4)
         order by 1",
    )
    .bind((key >> 32) & 0xffff_ffff)
    .bind(key & 0xffff_ffff)
    .bind(&one.db_name)
    .bind(&other.db_name)
    .fetch_all(&one.state.db)
    .await
    .unwrap();
    let mut expected = vec![one.db_name.clone(), other.db_name.clone()];
    expected.sort();
    assert_eq!(databases, expected);

    in_one.resign().await;
    assert!(rival_in_one.ensure().await.unwrap());
    assert!(in_other.ensure().await.unwrap(), "the other database's leader never noticed");
}

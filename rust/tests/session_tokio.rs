//! Sessions (protocol version 4) on the tokio client, against the real
//! server.
#![cfg(feature = "tokio")]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use monolock::tokio::Client;
use monolock::{Claim, Error};

const LEASE: Duration = Duration::from_secs(2);

fn client(addr: &str, lease: Duration) -> Client {
    tokio_builder(addr, lease).build().unwrap()
}

#[tokio::test]
async fn fifty_pipelined_acquires_are_all_granted_with_distinct_tokens() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = Arc::new(c.session().await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let session = Arc::clone(&session);
        tasks.spawn(async move {
            session
                .acquire(&format!("tpipe/{i}"), Claim::exclusive())
                .await
        });
    }
    let mut guards = Vec::new();
    while let Some(res) = tasks.join_next().await {
        guards.push(res.unwrap().unwrap());
    }
    let tokens: HashSet<u64> = guards.iter().map(|g| g.token()).collect();
    assert_eq!(tokens.len(), 50);
    assert_eq!(session.open_claims(), 50);
    tokio::time::sleep(LEASE / 2).await;
    for g in &guards {
        g.check().unwrap();
    }
    for g in guards {
        g.release().await;
    }
    assert_eq!(session.open_claims(), 0);
    Arc::into_inner(session).unwrap().close().await;
}

#[tokio::test]
async fn the_same_name_twice_waits_for_the_first() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = Arc::new(c.session().await.unwrap());
    let first = session.acquire("ttwice", Claim::exclusive()).await.unwrap();
    let s2 = Arc::clone(&session);
    let mut second = tokio::spawn(async move { s2.acquire("ttwice", Claim::exclusive()).await });
    assert!(
        tokio::time::timeout(LEASE / 2, &mut second).await.is_err(),
        "granted while held"
    );
    let first_token = first.token();
    first.release().await;
    let second = tokio::time::timeout(LEASE * 2, second)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    assert!(second.token() > first_token);
    second.check().unwrap();
}

#[tokio::test]
async fn after_release_completes_another_client_finds_the_lock_free() {
    let server = Server::start();
    let c = client(&server.addr, Duration::from_secs(10));
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().await.unwrap();
    for round in 0..30 {
        let held = session
            .acquire("thandover", Claim::exclusive())
            .await
            .unwrap();
        held.release().await;
        let theirs = other
            .try_acquire("thandover")
            .await
            .unwrap_or_else(|e| panic!("round {round}: right after release: {e}"));
        theirs.release().await;
    }
}

#[tokio::test]
async fn a_cancelled_waiting_acquire_leaves_the_queue() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let held = other.acquire("tcancel").await.unwrap();
    let session = c.session().await.unwrap();
    let res = tokio::time::timeout(
        Duration::from_millis(300),
        session.acquire("tcancel", Claim::exclusive()),
    )
    .await;
    assert!(res.is_err(), "the acquire should still wait");
    held.release().await;
    // The dropped acquire sent RELEASE: nobody holds the lock now.
    let third = client(&server.addr, LEASE);
    let deadline = Instant::now() + LEASE;
    let g = loop {
        match third.try_acquire("tcancel").await {
            Ok(g) => break g,
            // The RELEASE and the hand-over may cross: never past a lease.
            Err(e) if e.is_busy() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("the cancelled claim kept its place: {e}"),
        }
    };
    g.release().await;
    assert_eq!(session.open_claims(), 0);
    // And acquire_timeout does the same.
    let held = other.acquire("tcancel").await.unwrap();
    let err = session
        .acquire_timeout("tcancel", Claim::exclusive(), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    held.release().await;
    third.try_acquire("tcancel").await.unwrap().release().await;
}

#[tokio::test]
async fn try_acquire_busy_semaphores_values_and_close_releases_everything() {
    let server = Server::start();
    let c = client(&server.addr, Duration::from_secs(10));
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().await.unwrap();
    let held = other.acquire("tbusy").await.unwrap();
    let err = session
        .try_acquire("tbusy", Claim::exclusive())
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    held.release().await;
    let p1 = session.acquire("tsem", Claim::semaphore(2)).await.unwrap();
    let _p2 = session.acquire("tsem", Claim::semaphore(2)).await.unwrap();
    let err = session
        .try_acquire("tsem", Claim::semaphore(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Busy { limit: Some(2), .. }), "{err:?}");
    let leader = session
        .acquire("tleader", Claim::exclusive().with_value("a:1"))
        .await
        .unwrap();
    leader.proclaim("b:2").await.unwrap();
    let watch = other.watch("tleader").await.unwrap();
    assert_eq!(watch.state().holders[0].value, b"b:2");
    let mut loss = p1.watch();
    session.close().await;
    // Released, not lost; the locks are free at once.
    assert!(loss.wait().await.is_none());
    assert!(leader.loss_reason().is_none() && leader.check().is_err());
    for name in ["tbusy", "tsem", "tleader"] {
        other.try_acquire(name).await.unwrap().release().await;
    }
}

#[tokio::test]
async fn a_silent_link_loses_every_claim_before_the_server_could_regrant() {
    let lease = Duration::from_secs(1);
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let c = client(&proxy.addr, lease);
    let waiter = client(&server.addr, Duration::from_secs(10));
    let session = c.session().await.unwrap();
    let a = session
        .acquire("tsilent/a", Claim::exclusive())
        .await
        .unwrap();
    let b = session
        .acquire("tsilent/b", Claim::exclusive())
        .await
        .unwrap();
    let granted = tokio::spawn(async move {
        let g = waiter.acquire("tsilent/a").await.unwrap();
        let at = Instant::now();
        g.release().await;
        at
    });
    tokio::time::sleep(lease / 2).await;
    let cut = Instant::now();
    proxy.cut();
    let loss = a.lost().await;
    let told = Instant::now();
    assert!(
        matches!(loss, Error::Lost(ref c) if matches!(**c, Error::ClientTimeout { .. })),
        "{loss:?}"
    );
    assert!(b.is_lost());
    let bound = lease.mul_f64(0.8) + lease / 4 + Duration::from_millis(200);
    assert!(told - cut <= bound, "told {:?} after the cut", told - cut);
    let granted = tokio::time::timeout(lease * 10, granted)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    assert!(told < granted, "the loss was told after the regrant");
    assert!(!session.is_open());
}

#[tokio::test]
async fn a_kick_ends_one_claim_only() {
    let server = Server::start_with_admin();
    let c = client(&server.addr, LEASE);
    let session = c.session().await.unwrap();
    let kicked = session
        .acquire("tkick/a", Claim::exclusive())
        .await
        .unwrap();
    let kept = session
        .acquire("tkick/b", Claim::exclusive())
        .await
        .unwrap();
    let admin = server.admin.clone().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(server_bin())
            .args(["kick", "--admin", &admin, "--lock", "tkick/a"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loss = tokio::time::timeout(LEASE * 2, kicked.lost())
        .await
        .expect("told of the kick");
    assert!(
        matches!(loss, Error::Lost(ref c) if c.code() == Some(0x02)),
        "{loss:?}"
    );
    tokio::time::sleep(LEASE).await;
    kept.check().unwrap();
    assert!(session.is_open());
}

#[tokio::test]
async fn a_pool_spreads_claims_over_its_sessions() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let pool = c.session_pool(2);
    let mut guards = Vec::new();
    for i in 0..6 {
        let g = pool
            .acquire(&format!("tpool/{i}"), Claim::exclusive())
            .await
            .unwrap();
        guards.push(g);
    }
    assert_eq!(pool.sessions().await, 2);
    let tokens: HashSet<u64> = guards.iter().map(|g| g.token()).collect();
    assert_eq!(tokens.len(), 6);
    for g in guards {
        g.release().await;
    }
    let other = client(&server.addr, LEASE);
    other.try_acquire("tpool/3").await.unwrap().release().await;
}

#[tokio::test]
async fn a_watch_in_a_session_follows_changes_and_ends_with_the_session() {
    let lease = Duration::from_secs(1);
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let c = client(&proxy.addr, lease);
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().await.unwrap();
    let mut watch = session.watch("tswatch").await.unwrap();
    assert!(watch.state().known && watch.state().holders.is_empty());
    let held = other.acquire("tswatch").await.unwrap();
    let deadline = Instant::now() + lease * 2;
    while watch.state().holders.first().map(|h| h.token) != Some(held.token()) {
        assert!(Instant::now() < deadline, "never saw the holder");
        let _ = tokio::time::timeout(Duration::from_millis(100), watch.changed()).await;
    }
    // Vouched for by the session's ALIVEs, leases after the WATCHING.
    tokio::time::sleep(lease * 2).await;
    assert!(watch.state().known, "{:?}", watch.state());
    let cut = Instant::now();
    proxy.cut();
    while watch.state().known {
        assert!(cut.elapsed() < lease * 3, "still known after the cut");
        let _ = tokio::time::timeout(Duration::from_millis(100), watch.changed()).await;
    }
    assert!(cut.elapsed() <= lease.mul_f64(0.8) + lease / 4 + Duration::from_millis(300));
    assert!(watch.is_ended());
    assert!(
        matches!(watch.error(), Some(Error::ClientTimeout { .. })),
        "{:?}",
        watch.error()
    );
    held.release().await;
}

#[tokio::test]
async fn observe_in_a_session_tells_the_leader() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let session = c.session().await.unwrap();
    let mut observer = session.observe("tsobs").await.unwrap();
    let first = observer.next().await.unwrap();
    assert_eq!(first.state, monolock::LeaderState::NoLeader);
    let term = other.campaign("tsobs", "10.1.1.1:80").await.unwrap();
    let leading = loop {
        let o = observer.next().await.unwrap();
        if o.state == monolock::LeaderState::Leading {
            break o;
        }
    };
    assert_eq!(leading.token, term.token());
    drop(observer);
    assert!(session.is_open());
    let t2 = session.campaign("tsobs2", "x:1").await.unwrap();
    t2.resign().await;
}

//! Watches and leader election against the real server, with the blocking
//! and the tokio client: what a follower sees of the terms, the one-shot
//! leader, and a follower cut off from its server saying unknown.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::{Error, LeaderState, Observation};

const LEASE: Duration = Duration::from_millis(2000);
/// Bounds every wait for a change the server makes at once: generous,
/// the lease's few round trips are milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);

fn client(addr: &str) -> monolock::Client {
    builder(addr, LEASE).build().unwrap()
}

/// The observations of `name`, from a thread, as a channel.
fn observe(c: &monolock::Client, name: &str) -> mpsc::Receiver<(Instant, Observation)> {
    let observer = c.observe(name).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for o in observer {
            if tx.send((Instant::now(), o)).is_err() {
                return;
            }
        }
    });
    rx
}

/// Skips observations until one satisfies `want`.
fn until(
    rx: &mpsc::Receiver<(Instant, Observation)>,
    what: &str,
    want: impl Fn(&Observation) -> bool,
) -> (Instant, Observation) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((at, o)) if want(&o) => return (at, o),
            Ok(_) => {}
            Err(e) => panic!("no observation of {what}: {e}"),
        }
    }
}

fn leading(o: &Observation, token: u64, value: &str) -> bool {
    o.state == LeaderState::Leading && o.token == token && o.value == value.as_bytes()
}

#[test]
fn a_follower_sees_every_term() {
    let server = Server::start();
    let (follower, leader, next) = (
        client(&server.addr),
        client(&server.addr),
        client(&server.addr),
    );
    let name = "election/terms";
    let rx = observe(&follower, name);
    let (_, first) = until(&rx, "no leader", |_| true);
    assert_eq!(first.state, LeaderState::NoLeader, "{first:?}");
    assert_eq!(follower.leader(name).unwrap().state, LeaderState::NoLeader);

    let term = leader.campaign(name, "10.0.0.7:80").unwrap();
    let token = term.token();
    until(&rx, "the first term", |o| leading(o, token, "10.0.0.7:80"));
    let once = follower.leader(name).unwrap();
    assert!(leading(&once, token, "10.0.0.7:80"), "{once:?}");
    assert_eq!(once.candidates, 0);

    term.proclaim("10.0.0.7:81").unwrap();
    until(&rx, "the new value", |o| leading(o, token, "10.0.0.7:81"));

    let candidate = std::thread::spawn(move || next.campaign(name, "10.0.0.8:80").unwrap());
    until(&rx, "one candidate", |o| {
        leading(o, token, "10.0.0.7:81") && o.candidates == 1
    });

    term.resign();
    let (_, o) = until(&rx, "the next term", |o| {
        o.state == LeaderState::Leading && o.token != token
    });
    let second = candidate.join().unwrap();
    assert!(leading(&o, second.token(), "10.0.0.8:80"), "{o:?}");
    assert!(second.token() > token);
    assert_eq!(o.candidates, 0);
}

#[test]
fn a_watch_shows_holders_and_waiters() {
    let server = Server::start();
    let c = client(&server.addr);
    let name = "election/state";
    let watch = c.watch(name).unwrap();
    let st = watch.state();
    assert!(
        st.known && st.holders.is_empty() && st.waiters.is_empty(),
        "{st:?}"
    );
    assert!(st.valid_until.unwrap() > Instant::now());
    let term = c.campaign(name, "me").unwrap();
    let deadline = Instant::now() + PATIENCE;
    while watch.state().holders.is_empty() {
        assert!(
            watch.wait_change_timeout(deadline - Instant::now()),
            "no change"
        );
    }
    let st = watch.state();
    assert_eq!(st.holders[0].token, term.token());
    assert_eq!(st.holders[0].value, b"me");
    assert!(st.seq > 0);
    assert_eq!(watch.name(), name);
    watch.close();
}

#[test]
fn a_follower_cut_off_says_unknown_within_the_client_timeout() {
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let leader = client(&server.addr);
    let follower = client(&proxy.addr);
    let name = "election/cut";
    let term = leader.campaign(name, "10.0.0.7:80").unwrap();
    let rx = observe(&follower, name);
    until(&rx, "the leader", |o| {
        leading(o, term.token(), "10.0.0.7:80")
    });
    // Some heartbeats pass: the cut falls on a running watch.
    std::thread::sleep(LEASE / 2);
    let cut = Instant::now();
    proxy.cut();
    let (at, _) = until(&rx, "unknown", |o| o.state == LeaderState::Unknown);
    let after = at - cut;
    // The last acknowledged send was within a heartbeat interval of the
    // cut; the picture is vouched for 0.8 x lease from it, never longer.
    let bound = LEASE.mul_f64(0.8) + LEASE / 4;
    assert!(
        after <= bound,
        "unknown {after:?} after the cut, bound {bound:?}"
    );
    assert!(
        after >= LEASE / 4,
        "unknown {after:?} after the cut: too early"
    );
    drop(term);
}

#[test]
fn a_campaign_needs_a_value() {
    let c = client("127.0.0.1:1"); // nothing is sent
    let err = c.campaign("election/empty", "").unwrap_err();
    assert!(
        matches!(err, Error::EmptyValue { ref name } if name == "election/empty"),
        "{err:?}"
    );
    assert!(!err.is_temporary());
    assert_eq!(
        err.to_string(),
        "monolock: campaign for \"election/empty\": a leader's value must not be empty (followers reach the leader by it)"
    );
    let err = c.watch("").unwrap_err();
    assert_eq!(err.code(), Some(0x14));
}

#[test]
fn a_watch_refused_for_good_ends() {
    let server = Server::start();
    let c = client(&server.addr);
    let long = "x".repeat(300);
    assert_eq!(c.watch(&long).unwrap_err().code(), Some(0x15));
    // A name nobody holds: no leader, at once.
    let o = c.leader_timeout("election/none", PATIENCE).unwrap();
    assert_eq!(o.state, LeaderState::NoLeader);
}

#[cfg(feature = "tokio")]
mod tokio_client {
    use super::*;
    use monolock::tokio::Client;

    fn client(addr: &str) -> Client {
        tokio_builder(addr, LEASE).build().unwrap()
    }

    async fn until(
        obs: &mut monolock::tokio::Observer,
        what: &str,
        want: impl Fn(&Observation) -> bool,
    ) -> (Instant, Observation) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let next = tokio::time::timeout_at(deadline.into(), obs.next()).await;
            match next {
                Ok(Some(o)) if want(&o) => return (Instant::now(), o),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the watch ended before {what}: {:?}", obs.error()),
                Err(_) => panic!("no observation of {what}"),
            }
        }
    }

    #[tokio::test]
    async fn a_follower_sees_every_term() {
        let server = Server::start();
        let (follower, leader, next) = (
            client(&server.addr),
            client(&server.addr),
            client(&server.addr),
        );
        let name = "election/terms";
        let mut obs = follower.observe(name).await.unwrap();
        let (_, first) = until(&mut obs, "no leader", |_| true).await;
        assert_eq!(first.state, LeaderState::NoLeader, "{first:?}");

        let term = leader.campaign(name, "10.0.0.7:80").await.unwrap();
        let token = term.token();
        until(&mut obs, "the first term", |o| {
            leading(o, token, "10.0.0.7:80")
        })
        .await;
        let once = follower.leader(name).await.unwrap();
        assert!(leading(&once, token, "10.0.0.7:80"), "{once:?}");

        term.proclaim("10.0.0.7:81").await.unwrap();
        until(&mut obs, "the new value", |o| {
            leading(o, token, "10.0.0.7:81")
        })
        .await;

        let candidate =
            tokio::spawn(async move { next.campaign(name, "10.0.0.8:80").await.unwrap() });
        until(&mut obs, "one candidate", |o| {
            leading(o, token, "10.0.0.7:81") && o.candidates == 1
        })
        .await;

        term.resign().await;
        let (_, o) = until(&mut obs, "the next term", |o| {
            o.state == LeaderState::Leading && o.token != token
        })
        .await;
        let second = candidate.await.unwrap();
        assert!(leading(&o, second.token(), "10.0.0.8:80"), "{o:?}");
        assert!(second.token() > token);
    }

    #[tokio::test]
    async fn a_follower_cut_off_says_unknown_within_the_client_timeout() {
        let server = Server::start();
        let proxy = Proxy::start(&server.addr);
        let leader = client(&server.addr);
        let follower = client(&proxy.addr);
        let name = "election/cut";
        let term = leader.campaign(name, "10.0.0.7:80").await.unwrap();
        let mut obs = follower.observe(name).await.unwrap();
        until(&mut obs, "the leader", |o| {
            leading(o, term.token(), "10.0.0.7:80")
        })
        .await;
        tokio::time::sleep(LEASE / 2).await;
        let cut = Instant::now();
        proxy.cut();
        let (at, _) = until(&mut obs, "unknown", |o| o.state == LeaderState::Unknown).await;
        let after = at - cut;
        let bound = LEASE.mul_f64(0.8) + LEASE / 4;
        assert!(
            after <= bound,
            "unknown {after:?} after the cut, bound {bound:?}"
        );
        assert!(
            after >= LEASE / 4,
            "unknown {after:?} after the cut: too early"
        );
    }

    #[tokio::test]
    async fn a_campaign_needs_a_value_and_a_watch_shows_the_state() {
        let c = client("127.0.0.1:1");
        let err = c.campaign("election/empty", Vec::new()).await.unwrap_err();
        assert!(matches!(err, Error::EmptyValue { .. }), "{err:?}");
        let server = Server::start();
        let c = client(&server.addr);
        let mut watch = c.watch("election/state").await.unwrap();
        assert!(watch.state().known);
        let term = c.campaign("election/state", "me").await.unwrap();
        while watch.state().holders.is_empty() {
            let changed = tokio::time::timeout(PATIENCE, watch.changed()).await;
            assert!(changed.unwrap(), "the watch ended");
        }
        assert_eq!(watch.state().holders[0].token, term.token());
        assert_eq!(watch.leader().value, b"me");
        watch.close().await;
    }
}

//! What a watch shows, shared by the blocking and the tokio client: the
//! picture of a name ([`WatchState`]) and its reading as an election
//! ([`Observation`]).
//!
//! Leader election is a lock with a value, and a watch of it. A term is a
//! grant: its token fences the leader's writes, its loss is told before
//! the server could elect anyone else, and a resign hands the name to the
//! next candidate at once. Followers watch the name, and see
//! [`LeaderState::Unknown`] rather than an old leader once their watch can
//! no longer vouch for what it shows.

use std::fmt;
use std::time::{Duration, Instant};

/// A holder of a watched name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its fencing token.
    pub token: u64,
    /// A shared claim (or a semaphore's permit).
    pub shared: bool,
    /// A semaphore's number of permits (0 for none).
    pub limit: u16,
    /// Its certificate identity, or its address when anonymous.
    pub identity: String,
    /// Its value (empty for none).
    pub value: Vec<u8>,
    /// Set while its connection is gone but the server keeps its place (a
    /// reset, a lock delay): it may still act until then.
    pub held_back_until: Option<Instant>,
}

/// A claim queued for a watched name: a candidate, in an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Names the claim in the queue (as the admin listing does).
    pub arrival: u64,
    /// A shared claim (or a semaphore's permit).
    pub shared: bool,
    /// A semaphore's number of permits (0 for none).
    pub limit: u16,
    /// Its certificate identity, or its address when anonymous.
    pub identity: String,
    /// Its value (empty for none).
    pub value: Vec<u8>,
}

/// A watch's picture of its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchState {
    /// The picture is vouched for now. When false, the rest is the last
    /// picture that was, and must not be acted on.
    pub known: bool,
    /// When the picture stops being vouched for (`None`: it is not).
    pub valid_until: Option<Instant>,
    /// In grant order.
    pub holders: Vec<Holder>,
    /// In queue order.
    pub waiters: Vec<Waiter>,
    /// Nobody is granted the name before it: the server waits out holders
    /// it does not know (after a restart or a failover).
    pub blocked_until: Option<Instant>,
    /// The name's history the picture follows.
    pub epoch: u64,
    /// The last event of that history the picture includes.
    pub seq: u64,
}

/// What a follower knows of a name's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaderState {
    /// The watch cannot vouch for anything now (its server went silent,
    /// or it is between connections). Act on no leader.
    Unknown,
    /// Nobody leads, and nobody is held back.
    NoLeader,
    /// [`Observation::token`] leads, reached by its value.
    Leading,
    /// No leader can be elected before [`Observation::until`]: a leader
    /// whose connection went (token set; it may still act), or a restarted
    /// or failed-over server waiting for leaders it does not know (token 0).
    HeldBack,
}

impl fmt::Display for LeaderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaderState::Unknown => "unknown",
            LeaderState::NoLeader => "no leader",
            LeaderState::Leading => "leader",
            LeaderState::HeldBack => "held back",
        })
    }
}

/// What a follower sees of a name's leadership at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Whether anyone leads.
    pub state: LeaderState,
    /// The leader's fencing token (0 for none).
    pub token: u64,
    /// The leader's value: how to reach it.
    pub value: Vec<u8>,
    /// The leader's certificate identity, or its address.
    pub identity: String,
    /// [`LeaderState::HeldBack`]: until when.
    pub until: Option<Instant>,
    /// How many claims wait to lead after this one.
    pub candidates: usize,
}

impl Observation {
    /// The observation of a watch that vouches for nothing.
    pub(crate) fn unknown() -> Observation {
        Observation {
            state: LeaderState::Unknown,
            token: 0,
            value: Vec::new(),
            identity: String::new(),
            until: None,
            candidates: 0,
        }
    }
}

/// Reads a picture as an election: the first holder is the leader.
pub(crate) fn leader_of(st: &WatchState, now: Instant) -> Observation {
    if !st.known {
        return Observation::unknown();
    }
    let mut o = Observation {
        state: LeaderState::NoLeader,
        candidates: st.waiters.len(),
        ..Observation::unknown()
    };
    if let Some(h) = st.holders.first() {
        (o.token, o.value, o.identity) = (h.token, h.value.clone(), h.identity.clone());
        o.state = LeaderState::Leading;
        if h.held_back_until.is_some() {
            (o.state, o.until) = (LeaderState::HeldBack, h.held_back_until);
        }
        return o;
    }
    if let Some(until) = st.blocked_until.filter(|&b| b > now) {
        (o.state, o.until) = (LeaderState::HeldBack, Some(until));
    }
    o
}

/// How long until the observation can change with no event: the picture's
/// validity ends, or a block ends.
pub(crate) fn next_transition(st: &WatchState, o: &Observation, now: Instant) -> Duration {
    let mut d = Duration::from_secs(3600);
    if let Some(until) = st.valid_until.filter(|_| st.known) {
        d = d.min(until.saturating_duration_since(now));
    }
    if let (LeaderState::HeldBack, 0, Some(until)) = (o.state, o.token, o.until) {
        d = d.min(until.saturating_duration_since(now));
    }
    d.max(Duration::from_millis(1))
}

/// An observation in the words of spec/vectors/watch.json.
#[cfg(test)]
pub(crate) fn describe_leader(o: &Observation, now: Instant) -> String {
    match o.state {
        LeaderState::Leading => {
            format!("leader {} {}", o.token, String::from_utf8_lossy(&o.value))
        }
        LeaderState::HeldBack => {
            let left = o.until.unwrap().saturating_duration_since(now);
            format!("held_back {} {}", o.token, left.as_millis())
        }
        LeaderState::NoLeader => "none".into(),
        LeaderState::Unknown => "unknown".into(),
    }
}

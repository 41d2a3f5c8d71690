//! Pins the public surface: every exported item and method, by signature.
//! A change here is a change of the crate's API.

use std::time::{Duration, Instant};

use monolock::{
    CancelHandle, Claim, Client, ClientBuilder, Error, Holder, LeaderState, LockGuard, LossWatch,
    Observation, Observer, Origin, Reason, Session, SessionPool, Term, Waiter, Watch, WatchState,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE, DEFAULT_PORT, DEFAULT_SERVER,
};

#[test]
fn blocking_surface() {
    // The builder is generic over the client it builds, with no default.
    type Builder = ClientBuilder<Client>;
    let _: fn() -> Builder = Client::builder;
    let _: fn() -> Builder = Builder::new;
    let _: fn() -> Builder = Builder::default;
    let _: fn(Builder, String) -> Builder = Builder::server;
    let _: fn(Builder, Vec<String>) -> Builder = Builder::servers;
    let _: fn(Builder, Duration) -> Builder = Builder::lease;
    let _: fn(Builder, Duration) -> Builder = Builder::connect_timeout;
    let _: fn(Builder) -> Result<Client, Error> = Builder::build;
    let _: Client = ClientBuilder::new().build().unwrap();
    let _: fn(&Client, &str) -> Result<LockGuard, Error> = Client::acquire;
    let _: fn(&Client, &str, Duration) -> Result<LockGuard, Error> = Client::acquire_timeout;
    let _: fn(&Client, &str) -> Result<LockGuard, Error> = Client::try_acquire;
    let _: fn(&Client, &str, Option<Duration>, &CancelHandle) -> Result<LockGuard, Error> =
        Client::acquire_cancellable;
    let _: fn(&Client, &str, Claim) -> Result<LockGuard, Error> = Client::acquire_with;
    let _: fn(&Client, &str, Duration, Claim) -> Result<LockGuard, Error> =
        Client::acquire_timeout_with;
    let _: fn(&Client, &str, Claim) -> Result<LockGuard, Error> = Client::try_acquire_with;
    type Cancellable =
        fn(&Client, &str, Option<Duration>, &CancelHandle, Claim) -> Result<LockGuard, Error>;
    let _: Cancellable = Client::acquire_cancellable_with;
    let _: fn(&LockGuard) -> u64 = LockGuard::token;
    let _: fn(&LockGuard) -> &str = LockGuard::name;
    let _: fn(&LockGuard) -> Instant = LockGuard::valid_until;
    let _: fn(&LockGuard) -> bool = LockGuard::is_lost;
    let _: fn(&LockGuard) -> Option<Error> = LockGuard::loss_reason;
    let _: fn(&LockGuard) -> Result<(), Error> = LockGuard::check;
    let _: fn(&LockGuard) -> Error = LockGuard::wait_lost;
    let _: fn(&LockGuard, Duration) -> Option<Error> = LockGuard::wait_lost_timeout;
    let _: fn(&LockGuard) -> LossWatch = LockGuard::watch;
    let _: fn(&LockGuard, &'static str) -> Result<(), Error> = LockGuard::proclaim;
    let _: fn(&LockGuard, Vec<u8>) -> Result<(), Error> = LockGuard::proclaim;
    let _: fn(LockGuard) = LockGuard::release;
    let _: fn(&LossWatch) -> Option<Error> = LossWatch::wait;
    let _: fn(&LossWatch) -> bool = LossWatch::is_lost;
    let _: fn() -> CancelHandle = CancelHandle::new;
    let _: fn(&CancelHandle) = CancelHandle::cancel;
    let _: fn(&CancelHandle) -> bool = CancelHandle::is_cancelled;
    assert_eq!(DEFAULT_SERVER, "127.0.0.1:7117");
    assert_eq!(DEFAULT_PORT, 7117);
    assert_eq!(DEFAULT_LEASE, Duration::from_secs(10));
    assert_eq!(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs(5));
}

#[test]
fn session_surface() {
    let _: fn(&Client) -> Result<Session, Error> = Client::session;
    let _: fn(&Session, &str, Claim) -> Result<LockGuard, Error> = Session::acquire;
    let _: fn(&Session, &str, Claim, Duration) -> Result<LockGuard, Error> =
        Session::acquire_timeout;
    let _: fn(&Session, &str, Claim) -> Result<LockGuard, Error> = Session::try_acquire;
    let _: fn(&Session) -> u32 = Session::max_streams;
    let _: fn(&Session) -> usize = Session::open_claims;
    let _: fn(&Session) -> u64 = Session::ids_left;
    let _: fn(&Session) -> bool = Session::is_open;
    let _: fn(Session) = Session::close;
    let _: fn(&Session, &str, &'static str) -> Result<Term, Error> = Session::campaign;
    let _: fn(&Session, &str) -> Result<Watch, Error> = Session::watch;
    let _: fn(&Session, &str) -> Result<Observer, Error> = Session::observe;
    let _: fn(&Client, usize) -> SessionPool = Client::session_pool;
    let _: fn(&SessionPool, &str, Claim) -> Result<LockGuard, Error> = SessionPool::acquire;
    let _: fn(&SessionPool, &str, Claim, Duration) -> Result<LockGuard, Error> =
        SessionPool::acquire_timeout;
    let _: fn(&SessionPool, &str, Claim) -> Result<LockGuard, Error> = SessionPool::try_acquire;
    let _: fn(&SessionPool) -> usize = SessionPool::sessions;
    assert_shared::<SessionPool>();
    fn assert_shared<T: Send + Sync + std::fmt::Debug>() {}
    assert_shared::<Session>();
}

#[test]
fn watch_surface() {
    let _: fn(&Client, &str) -> Result<Watch, Error> = Client::watch;
    let _: fn(&Client, &str, Duration) -> Result<Watch, Error> = Client::watch_timeout;
    let _: fn(&Client, &str, &'static str) -> Result<Term, Error> = Client::campaign;
    let _: fn(&Client, &str, Vec<u8>) -> Result<Term, Error> = Client::campaign;
    let _: fn(&Client, &str) -> Result<Observer, Error> = Client::observe;
    let _: fn(&Client, &str) -> Result<Observation, Error> = Client::leader;
    let _: fn(&Client, &str, Duration) -> Result<Observation, Error> = Client::leader_timeout;
    let _: fn(&Watch) -> &str = Watch::name;
    let _: fn(&Watch) -> WatchState = Watch::state;
    let _: fn(&Watch) -> Observation = Watch::leader;
    let _: fn(&Watch) -> bool = Watch::wait_change;
    let _: fn(&Watch, Duration) -> bool = Watch::wait_change_timeout;
    let _: fn(&Watch) -> bool = Watch::is_ended;
    let _: fn(&Watch) -> Option<Error> = Watch::error;
    let _: fn(Watch) = Watch::close;
    let _: fn(&Observer) -> &Watch = Observer::watch;
    let _: fn(&Observer) -> Option<Error> = Observer::error;
    fn assert_iter<I: Iterator<Item = Observation>>() {}
    assert_iter::<Observer>();
    let _: fn(Term) = Term::resign;
    let _: fn(Term) -> LockGuard = Term::into_guard;
    let _ = |t: &Term| -> u64 { t.token() }; // a term derefs to its guard
                                             // The picture and its reading as an election: plain data.
    let st = WatchState {
        known: true,
        valid_until: Some(Instant::now()),
        holders: vec![Holder {
            token: 7,
            shared: false,
            limit: 0,
            identity: "cn:a".into(),
            value: b"10.0.0.7:80".to_vec(),
            held_back_until: None,
        }],
        waiters: vec![Waiter {
            arrival: 12,
            shared: false,
            limit: 0,
            identity: "cn:b".into(),
            value: Vec::new(),
        }],
        blocked_until: None,
        epoch: 1,
        seq: 2,
    };
    let _ = st.clone() == st;
    let o = Observation {
        state: LeaderState::Leading,
        token: 7,
        value: b"10.0.0.7:80".to_vec(),
        identity: "cn:a".into(),
        until: None,
        candidates: 1,
    };
    assert_eq!(o.clone(), o);
    let states = [
        LeaderState::Unknown,
        LeaderState::NoLeader,
        LeaderState::Leading,
        LeaderState::HeldBack,
    ];
    let words: Vec<String> = states.iter().map(ToString::to_string).collect();
    assert_eq!(words, ["unknown", "no leader", "leader", "held back"]);
    let empty = Error::EmptyValue { name: "x".into() };
    assert_eq!(empty.code(), None);
    assert!(!empty.is_temporary());
    fn assert_send<T: Send + Sync>() {}
    assert_send::<Watch>();
    assert_send::<Observer>();
    assert_send::<Term>();
    assert_send::<Observation>();
}

#[test]
fn claim_surface() {
    let _: fn() -> Claim = Claim::exclusive;
    let _: fn() -> Claim = Claim::shared;
    let _: fn(u32) -> Claim = Claim::semaphore;
    let _: fn(&Claim) -> bool = Claim::is_shared;
    let _: fn(&Claim) -> Option<u32> = Claim::limit;
    assert_eq!(Claim::default(), Claim::exclusive());
    assert!(!Claim::exclusive().is_shared());
    assert!(Claim::shared().is_shared() && Claim::shared().limit().is_none());
    assert_eq!(Claim::semaphore(4).limit(), Some(4));
    assert!(Claim::semaphore(4).is_shared());
    // A value (protocol version 3), on any kind of claim; empty is none.
    let _: fn(Claim, Vec<u8>) -> Claim = Claim::with_value;
    let _: fn(&Claim) -> Option<&[u8]> = Claim::value;
    assert_eq!(Claim::exclusive().value(), None);
    let leader = Claim::exclusive().with_value("10.0.0.7:8080");
    assert_eq!(leader.value(), Some(&b"10.0.0.7:8080"[..]));
    assert!(!leader.is_shared());
    let permit = Claim::semaphore(2).with_value(b"gpu-3".to_vec());
    assert_eq!(
        (permit.limit(), permit.value()),
        (Some(2), Some(&b"gpu-3"[..]))
    );
    assert_eq!(Claim::shared().with_value(""), Claim::shared());
    // Clone, not Copy: a claim owns its value.
    fn assert_traits<T: Clone + Send + Sync + std::fmt::Debug + Eq + std::hash::Hash>() {}
    assert_traits::<Claim>();
}

#[test]
fn error_surface() {
    let _: fn(u8, String) -> Error = Error::from_code;
    let _: fn(&Error) -> Option<u8> = Error::code;
    let _: fn(&Error) -> bool = Error::is_temporary;
    let _: fn(&Error) -> Option<&Reason> = Error::reason;
    let _: fn(&Error) -> bool = Error::is_lost;
    let _: fn(&Error) -> bool = Error::is_busy;
    let _: fn(&Error) -> bool = Error::is_timeout;
    let _: fn(&Reason) -> &str = Reason::text;
    let _: fn(&Reason) -> Origin = Reason::origin;
    // The error classes of shared claims.
    assert!(matches!(
        Error::from_code(0x19, String::new()),
        Error::InvalidMode(_)
    ));
    assert!(matches!(
        Error::from_code(0x1a, String::new()),
        Error::LimitMismatch(_)
    ));
    let unsupported = Error::SharedUnsupported {
        addr: "h:7117".into(),
        cause: Box::new(Error::from_code(0x10, String::new())),
    };
    assert_eq!(unsupported.code(), Some(0x10));
    assert!(!unsupported.is_temporary());
    // The error classes of claims with a value.
    assert!(matches!(
        Error::from_code(0x1b, String::new()),
        Error::ValueTooLong(_)
    ));
    let unsupported = Error::ValueUnsupported {
        addr: "h:7117".into(),
        cause: Box::new(Error::from_code(0x10, String::new())),
    };
    assert_eq!(unsupported.code(), Some(0x10));
    assert!(!unsupported.is_temporary());
    let no_sessions = Error::SessionsUnsupported {
        addr: "h:7117".into(),
        cause: Box::new(Error::from_code(0x13, String::new())),
    };
    assert_eq!(no_sessions.code(), Some(0x13));
    assert!(!no_sessions.is_temporary());
    let no_value = Error::NoValue { name: "x".into() };
    assert_eq!(no_value.code(), None);
    assert!(!no_value.is_temporary());
    // Errors cross threads and live in boxes.
    fn assert_traits<T: std::error::Error + Send + Sync + Clone + 'static>() {}
    assert_traits::<Error>();
    fn assert_send<T: Send + Sync>() {}
    assert_send::<Client>();
    assert_send::<LockGuard>();
    assert_send::<LossWatch>();
    assert_send::<CancelHandle>();
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_surface() {
    use monolock::tokio::ClientBuilder as AsyncBuilder;
    use monolock::tokio::{
        Client as AsyncClient, LockGuard as AsyncGuard, LossWatch as AsyncWatch,
    };
    // The tokio builder builds the tokio client, with the same settings.
    let _: fn() -> AsyncBuilder = AsyncClient::builder;
    let _: fn(AsyncBuilder) -> Result<AsyncClient, Error> = AsyncBuilder::build;
    let _: fn(AsyncBuilder, String) -> AsyncBuilder = AsyncBuilder::server;
    let _: fn(AsyncBuilder, Duration) -> AsyncBuilder = AsyncBuilder::lease;
    let _: AsyncClient = AsyncClient::builder().build().unwrap();
    let _: fn(&AsyncGuard) -> u64 = AsyncGuard::token;
    let _: fn(&AsyncGuard) -> &str = AsyncGuard::name;
    let _: fn(&AsyncGuard) -> Instant = AsyncGuard::valid_until;
    let _: fn(&AsyncGuard) -> bool = AsyncGuard::is_lost;
    let _: fn(&AsyncGuard) -> Option<Error> = AsyncGuard::loss_reason;
    let _: fn(&AsyncGuard) -> Result<(), Error> = AsyncGuard::check;
    let _: fn(&AsyncGuard) -> AsyncWatch = AsyncGuard::watch;
    let _: fn(&AsyncWatch) -> bool = AsyncWatch::is_lost;
    fn assert_send<T: Send + Sync>() {}
    assert_send::<AsyncClient>();
    assert_send::<AsyncGuard>();
    // The acquire futures can be spawned on a multi-threaded runtime.
    fn assert_send_future<F: std::future::Future + Send>(_: F) {}
    let c = AsyncClient::builder().build().unwrap();
    assert_send_future(c.acquire("x"));
    assert_send_future(c.acquire_timeout("x", Duration::from_secs(1)));
    assert_send_future(c.try_acquire("x"));
    assert_send_future(c.acquire_with("x", Claim::shared()));
    assert_send_future(c.acquire_timeout_with("x", Duration::from_secs(1), Claim::semaphore(2)));
    assert_send_future(c.try_acquire_with("x", Claim::shared()));
    assert_send_future(c.acquire_with("x", Claim::exclusive().with_value("v")));
    // Sessions: the same guard type; the futures can be spawned.
    use monolock::tokio::Session as AsyncSession;
    let _: fn(&AsyncSession) -> u32 = AsyncSession::max_streams;
    let _: fn(&AsyncSession) -> usize = AsyncSession::open_claims;
    let _: fn(&AsyncSession) -> u64 = AsyncSession::ids_left;
    let _: fn(&AsyncSession) -> bool = AsyncSession::is_open;
    assert_send::<AsyncSession>();
    assert_send_future(c.session());
    async fn session_calls(s: AsyncSession) -> Result<AsyncGuard, Error> {
        let a: AsyncGuard = s.acquire("a", Claim::exclusive()).await?;
        let b = s.try_acquire("b", Claim::shared()).await?;
        let t = Duration::from_secs(1);
        let _: AsyncGuard = s.acquire_timeout("c", Claim::semaphore(2), t).await?;
        let _: AsyncTerm = s.campaign("d", "v").await?;
        let _: AsyncWatchOf = s.watch("e").await?;
        let _: AsyncObserver = s.observe("f").await?;
        drop(b);
        s.close().await;
        Ok(a)
    }
    let _ = session_calls;
    fn spawnable(s: &'static AsyncSession) {
        assert_send_future(s.acquire("x", Claim::exclusive()));
        assert_send_future(s.try_acquire("x", Claim::exclusive()));
        assert_send_future(s.watch("x"));
        assert_send_future(s.observe("x"));
        assert_send_future(s.campaign("x", "v"));
    }
    let _ = spawnable;
    use monolock::tokio::SessionPool as AsyncPool;
    let pool: AsyncPool = c.session_pool(2);
    assert_send::<AsyncPool>();
    assert_send_future(pool.acquire("x", Claim::exclusive()));
    assert_send_future(pool.try_acquire("x", Claim::exclusive()));
    assert_send_future(pool.acquire_timeout("x", Claim::exclusive(), Duration::from_secs(1)));
    assert_send_future(pool.sessions());
    // Watches and elections.
    use monolock::tokio::{Observer as AsyncObserver, Term as AsyncTerm, Watch as AsyncWatchOf};
    let _: fn(&AsyncWatchOf) -> &str = AsyncWatchOf::name;
    let _: fn(&AsyncWatchOf) -> WatchState = AsyncWatchOf::state;
    let _: fn(&AsyncWatchOf) -> Observation = AsyncWatchOf::leader;
    let _: fn(&AsyncWatchOf) -> bool = AsyncWatchOf::is_ended;
    let _: fn(&AsyncWatchOf) -> Option<Error> = AsyncWatchOf::error;
    let _: fn(&AsyncObserver) -> &AsyncWatchOf = AsyncObserver::watch;
    let _: fn(AsyncTerm) -> AsyncGuard = AsyncTerm::into_guard;
    assert_send::<AsyncWatchOf>();
    assert_send::<AsyncObserver>();
    assert_send::<AsyncTerm>();
    assert_send_future(c.watch("x"));
    assert_send_future(c.campaign("x", "v"));
    assert_send_future(c.observe("x"));
    assert_send_future(c.leader("x"));
    async fn changed(w: &mut AsyncWatchOf) -> bool {
        w.changed().await
    }
    async fn next(o: &mut AsyncObserver) -> Option<Observation> {
        o.next().await
    }
    async fn resign(t: AsyncTerm) {
        t.resign().await
    }
    let _ = |w: &'static mut AsyncWatchOf| assert_send_future(changed(w));
    let _ = |o: &'static mut AsyncObserver| assert_send_future(next(o));
    let _ = |t: AsyncTerm| assert_send_future(resign(t));
    let _ = |w: AsyncWatchOf| assert_send_future(w.close());
    // A guard's PROCLAIM too.
    async fn proclaim(g: &AsyncGuard) -> Result<(), Error> {
        g.proclaim("v").await
    }
    let _ = |g: &'static AsyncGuard| assert_send_future(proclaim(g));
}

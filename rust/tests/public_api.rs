//! Pins the public surface: every exported item and method, by signature.
//! A change here is a change of the crate's API.

use std::time::{Duration, Instant};

use monolock::{
    CancelHandle, Claim, Client, ClientBuilder, Error, LockGuard, LossWatch, Origin, Reason,
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
    // A guard's PROCLAIM too.
    async fn proclaim(g: &AsyncGuard) -> Result<(), Error> {
        g.proclaim("v").await
    }
    let _ = |g: &'static AsyncGuard| assert_send_future(proclaim(g));
}

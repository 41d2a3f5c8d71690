//! Test harness shared by the integration tests: the real Go server, and a
//! scripted fake server for exact-byte cases.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The monolock server binary: `$MONOLOCK_BIN`, or built once from ../go.
pub fn server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("MONOLOCK_BIN") {
            return PathBuf::from(bin);
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let bin = root.join("bin").join("monolock");
        let status = Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg("./cmd/monolock")
            .current_dir(root.join("go"))
            .status()
            .expect("run go build (set MONOLOCK_BIN to use a prebuilt server)");
        assert!(status.success(), "go build of the monolock server failed");
        bin
    })
    .clone()
}

/// The list of system tools, scripts/system-tools.tsv.
pub fn system_tools_list() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/system-tools.tsv")
}

/// The path of the program `name` of the list of system tools: a test runs
/// a program from outside the toolchains only through this. It fails
/// loudly when the program is missing (naming its Debian package and how to
/// install it) and when `name` is not on the list at all.
pub fn require_tool(name: &str) -> PathBuf {
    match find_tool(name, &system_tools_list()) {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// What [`require_tool`] decides, with the list as a parameter so that the
/// helper's own tests can feed it one.
pub fn find_tool(name: &str, list: &std::path::Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(list).map_err(|e| format!("{}: {e}", list.display()))?;
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') || line.starts_with("name\t") {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let [tool, package, path, group, _used_by] = cols[..] else {
            return Err(format!(
                "{}: a row without 5 tab-separated columns: {line}",
                list.display()
            ));
        };
        if tool != name {
            continue;
        }
        let found = if path == "-" {
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        } else {
            Some(PathBuf::from(path)).filter(|p| p.exists())
        };
        return found.ok_or_else(|| {
            let how = if group == "bench" { "bash bench/scripts/peers.sh install" } else { "go run mage.go deps" };
            format!("{name} is not installed (Debian package {package}): run {how} (apt-get install {package})")
        });
    }
    Err(format!(
        "{name} is not on {}: declare it there (name, Debian package, path, group) so that a new machine installs it",
        list.display()
    ))
}

/// A real server on a free loopback port, killed on drop.
pub struct Server {
    pub addr: String,
    /// The admin API's address, when started with [`Server::start_with_admin`].
    pub admin: Option<String>,
    child: Child,
    _data: TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Like [`Server::start`], with its HTTP admin API on a free port too.
    pub fn start_with_admin() -> Server {
        Server::launch(&["--admin".as_ref(), "127.0.0.1:0".as_ref()], true)
    }

    /// Like [`Server::start`], with further `serve` flags (e.g. TLS files).
    pub fn start_with(flags: &[&std::ffi::OsStr]) -> Server {
        Server::launch(flags, false)
    }

    fn launch(flags: &[&std::ffi::OsStr], with_admin: bool) -> Server {
        let dir = TempDir::new();
        let ready_path = dir.0.join("ready.json");
        // No admin API unless asked for (a later --admin wins): tests run
        // many servers at once, and the default admin port is one fixed
        // port.
        let mut child = Command::new(server_bin())
            .args([
                "serve",
                "--admin",
                "off",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.0.join("data"))
            .args(flags)
            .arg("--ready-file")
            .arg(&ready_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start monolock serve");
        // Keep draining stderr so that the server never blocks on a full
        // pipe; its tail is for the failure message.
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(std::sync::Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
                if log.len() > 32 << 10 {
                    let cut = log.len() - (16 << 10);
                    let cut = (cut..log.len()).find(|&i| log.is_char_boundary(i)).unwrap();
                    log.drain(..cut);
                }
            }
        });
        let ready =
            wait_ready(&ready_path, &mut child, Duration::from_secs(30)).unwrap_or_else(|why| {
                let _ = child.kill();
                let _ = child.wait();
                panic!("monolock serve {why}; its stderr:\n{}", log.lock().unwrap())
            });
        let field = |name: &str| ready[name].as_str().unwrap_or_default().to_owned();
        let admin = field("admin_addr");
        Server {
            addr: field("lock_addr"),
            admin: (with_admin && !admin.is_empty()).then_some(admin),
            child,
            _data: dir,
        }
    }

    /// Stops the server at once (SIGKILL): its sessions end without a word.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the server to shut down gracefully (SIGTERM).
    pub fn terminate(&mut self) {
        let _ = Command::new(require_tool("kill"))
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to `limit` for the ready file that `monolock serve
/// --ready-file` writes once it listens (docs/operating.md). The server
/// renames it into place whole, so once it exists it parses.
fn wait_ready(
    path: &std::path::Path,
    child: &mut Child,
    limit: Duration,
) -> Result<serde_json::Value, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return serde_json::from_str(&text)
                .map_err(|e| format!("wrote a bad ready file ({e}): {text}"));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status}) before it was ready"));
        }
        if Instant::now() > deadline {
            return Err(format!("was not ready within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "monolock-rust-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scripted fake server: `script` runs on its own thread with the
/// listener; the test joins it to surface its assertion failures.
pub struct Fake {
    pub addr: String,
    handle: Option<JoinHandle<()>>,
}

impl Fake {
    pub fn start(script: impl FnOnce(TcpListener) + Send + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || script(listener));
        Fake {
            addr,
            handle: Some(handle),
        }
    }

    /// Waits for the script to finish; panics if it panicked.
    pub fn join(mut self) {
        if let Some(h) = self.handle.take() {
            h.join().expect("fake server script failed");
        }
    }
}

/// Accepts one connection with a read timeout that keeps a broken test
/// from hanging.
pub fn accept(listener: &TcpListener) -> TcpStream {
    let (stream, _) = listener.accept().unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Reads one ACQUIRE frame; returns (lease_ms, name).
pub fn read_acquire(stream: &mut TcpStream) -> (u32, String) {
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0x01, "ACQUIRE type");
    assert_eq!(head[1], 0x01, "version");
    let lease = u32::from_be_bytes(head[2..6].try_into().unwrap());
    let len = u16::from_be_bytes(head[6..8].try_into().unwrap()) as usize;
    let mut name = vec![0u8; len];
    stream.read_exact(&mut name).unwrap();
    (lease, String::from_utf8(name).unwrap())
}

/// Reads one HEARTBEAT byte.
pub fn read_heartbeat(stream: &mut TcpStream) {
    let mut b = [0u8; 1];
    stream.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 0x02, "HEARTBEAT");
}

/// Waits until the client closes the connection (EOF), failing on data.
pub fn expect_close(stream: &mut TcpStream) {
    let mut b = [0u8; 1];
    loop {
        match stream.read(&mut b) {
            Ok(0) => return,
            Ok(_) if b[0] == 0x02 => continue, // a heartbeat may still come
            Ok(_) => panic!("unexpected byte 0x{:02x} before close", b[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("waiting for close: {e}"),
        }
    }
}

/// Waits until the client closes the connection and returns when it did;
/// any byte before the close fails (no heartbeat may follow a loss).
pub fn expect_silent_close(stream: &mut TcpStream) -> Instant {
    let mut b = [0u8; 1];
    match stream.read(&mut b) {
        Ok(0) => Instant::now(),
        Ok(_) => panic!("byte 0x{:02x} before the close", b[0]),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Instant::now(),
        Err(e) => panic!("waiting for close: {e}"),
    }
}

pub fn waiting() -> Vec<u8> {
    vec![0x11]
}

pub fn acquired(token: u64) -> Vec<u8> {
    let mut v = vec![0x12];
    v.extend_from_slice(&token.to_be_bytes());
    v
}

pub fn error(code: u8, reason: &str) -> Vec<u8> {
    let mut v = vec![0x13, code, reason.len() as u8];
    v.extend_from_slice(reason.as_bytes());
    v
}

pub fn send(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
}

/// A blocking client's builder for `addr` with this lease; the connect
/// timeout is the default five seconds, set here so that no test depends
/// on the default.
pub fn builder(addr: &str, lease: Duration) -> monolock::ClientBuilder<monolock::Client> {
    configure(monolock::Client::builder(), addr, lease)
}

/// Like [`builder`], for the tokio client.
#[cfg(feature = "tokio")]
pub fn tokio_builder(addr: &str, lease: Duration) -> monolock::tokio::ClientBuilder {
    configure(monolock::tokio::Client::builder(), addr, lease)
}

fn configure<C>(
    b: monolock::ClientBuilder<C>,
    addr: &str,
    lease: Duration,
) -> monolock::ClientBuilder<C> {
    b.server(addr)
        .lease(lease)
        .connect_timeout(Duration::from_secs(5))
}

/// Counts a client's `on_waiting` calls: pass [`WaitCount::hook`] to the
/// builder, read [`WaitCount::get`] afterwards.
#[derive(Clone, Default)]
pub struct WaitCount(Arc<AtomicUsize>);

impl WaitCount {
    pub fn hook(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let count = Arc::clone(&self.0);
        move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A loopback TCP proxy to `target` that can be cut: from the cut on it
/// blackholes both directions (reads and drops the bytes, keeps every
/// connection open), as a network partition does.
pub struct Proxy {
    pub addr: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (target, flag) = (target.to_owned(), Arc::clone(&cut));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = (!flag.load(Ordering::SeqCst))
                    .then(|| TcpStream::connect(&target).ok())
                    .flatten();
                match server {
                    Some(server) => {
                        pump(&client, &server, &flag);
                        pump(&server, &client, &flag);
                    }
                    None => pump(&client, &client, &flag),
                }
            }
        });
        Proxy { addr, cut }
    }

    /// From now on, nothing passes either way.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread until either closes; once `cut` is
/// set the bytes are read and dropped.
fn pump(from: &TcpStream, to: &TcpStream, cut: &Arc<std::sync::atomic::AtomicBool>) {
    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
    let cut = Arc::clone(cut);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if !cut.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
}

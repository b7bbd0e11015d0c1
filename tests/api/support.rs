//! The harness: starts the real `petstore` binary on an ephemeral port with a temp database
//! and the development files in `certs/`, and talks to it over real TLS with HTTP/1.1 or
//! HTTP/2 clients that trust only the development CA. Every wait here has a deadline.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderMap};
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The development key admitted by `certs/dev-keys.txt`.
pub const DEV_KEY: &str = "petstore-dev-key-not-for-production";

const START_DEADLINE: Duration = Duration::from_secs(20);
const EXIT_DEADLINE: Duration = Duration::from_secs(20);
const LOG_DEADLINE: Duration = Duration::from_secs(10);
const CLOSE_DEADLINE: Duration = Duration::from_secs(15);

pub fn cert(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("certs")
        .join(name)
}

/// A running server; SIGKILLed on drop if a test did not stop it.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    dir: Option<TempDir>,
    options: Options,
    logs: Arc<Logs>,
    reader: Option<thread::JoinHandle<()>>,
}

/// What a cleanly stopped server leaves: its directory (with the database) and its whole log.
pub struct Stopped {
    pub dir: TempDir,
    pub logs: String,
}

/// The server's stderr as it arrives, with a condition to wait on for a given line.
#[derive(Default)]
struct Logs {
    text: Mutex<String>,
    grown: Condvar,
}

/// Flags for a server start; `Default` is the development setup.
#[derive(Clone)]
pub struct Options {
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub api_keys: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// A command the server runs under, e.g. `prlimit --fsize=N --`.
    pub wrapper: Vec<String>,
    /// What `--db` gets (e.g. a `postgres://` URL); `None`: `pets.redb` in the server's dir.
    pub db: Option<String>,
    /// What `--listen` gets; `None`: a free loopback port, unless `args` gives `--listen`
    /// itself (a host name, say).
    pub listen: Option<SocketAddr>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            tls_cert: cert("dev-server.pem"),
            tls_key: cert("dev-server.key"),
            api_keys: cert("dev-keys.txt"),
            args: Vec::new(),
            env: Vec::new(),
            wrapper: Vec::new(),
            db: None,
            listen: None,
        }
    }
}

fn command(dir: &Path, options: &Options) -> Command {
    let binary = env!("CARGO_BIN_EXE_petstore");
    let mut command = match options.wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    if !options.args.iter().any(|arg| arg == "--listen") {
        command.arg("--listen").arg(
            options
                .listen
                .map_or("127.0.0.1:0".into(), |addr| addr.to_string()),
        );
    }
    command
        .arg("--db")
        .arg(match &options.db {
            Some(db) => db.into(),
            None => dir.join("pets.redb").into_os_string(),
        })
        // An ACME server has no certificate files: they are the other way to one.
        .args(if options.args.iter().any(|arg| arg == "--acme-domain") {
            Vec::new()
        } else {
            vec![
                "--tls-cert".into(),
                options.tls_cert.clone().into_os_string(),
                "--tls-key".into(),
                options.tls_key.clone().into_os_string(),
            ]
        })
        .arg("--api-keys")
        .arg(&options.api_keys)
        .args(&options.args)
        .env("RUST_LOG", "info")
        .env_remove("NOTIFY_SOCKET")
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// The address in a "listening on" line, text (`address=…`) or JSON (`"address":"…"`).
fn listening_address(line: &str) -> Option<&str> {
    if !line.contains("listening on") {
        return None;
    }
    match line.split_once("address=") {
        Some((_, rest)) => rest.split_whitespace().next(),
        None => line.split_once(r#""address":""#)?.1.split('"').next(),
    }
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_in(dir, options)
    }

    fn start_in(dir: TempDir, options: Options) -> Server {
        Server::try_start_in(dir, options)
            .unwrap_or_else(|logs| panic!("server did not start:\n{logs}"))
    }

    /// Starts a server in `dir`, which holds its database, or returns its whole stderr and its
    /// exit code when it exits before it listens.
    pub fn try_start_in(dir: TempDir, options: Options) -> Result<Server, String> {
        let mut child = command(dir.path(), &options)
            .spawn()
            .expect("the petstore binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let logs = Arc::new(Logs::default());
        let (found, address) = mpsc::channel();
        let sink = Arc::clone(&logs);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let address = listening_address(&line).map(str::to_owned);
                let mut text = sink.text.lock().expect("log lock");
                text.push_str(&line);
                text.push('\n');
                sink.grown.notify_all();
                drop(text);
                // Only once the line is in the log, so a test that starts reading finds it.
                if let Some(address) = address {
                    let _ = found.send(address);
                }
            }
        });
        let addr = match address.recv_timeout(START_DEADLINE) {
            Ok(addr) => addr,
            // The pipe closed: the process has exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = wait_exit(child, EXIT_DEADLINE);
                reader.join().expect("the log reader ends");
                let text = logs.text.lock().expect("log lock");
                return Err(format!("{text}(exit: {status})"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!(
                    "server did not start within {START_DEADLINE:?}:\n{}",
                    logs.text.lock().expect("log lock")
                );
            }
        };
        Ok(Server {
            child: Some(child),
            addr: addr
                .parse()
                .expect("the listening line holds a socket address"),
            dir: Some(dir),
            options,
            logs,
            reader: Some(reader),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the server has its dir").path()
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir().join("pets.redb")
    }

    pub fn logs(&self) -> String {
        self.logs.text.lock().expect("log lock").clone()
    }

    /// Waits until the log holds `needle` at least `count` times; fails past the deadline.
    pub fn wait_for_log(&self, needle: &str, count: usize) {
        let text = self.logs.text.lock().expect("log lock");
        let (text, timeout) = self
            .logs
            .grown
            .wait_timeout_while(text, LOG_DEADLINE, |text| {
                text.matches(needle).count() < count
            })
            .expect("log lock");
        assert!(
            !timeout.timed_out(),
            "no {count}x {needle:?} in the log:\n{text}"
        );
    }

    /// Sends a signal by name (TERM, HUP, ...) without waiting for its effect.
    pub fn signal(&self, name: &str) {
        signal(
            self.child.as_ref().expect("the server is running").id(),
            name,
        );
    }

    /// Waits for the process to exit by itself and asserts a clean exit (status 0). It blocks,
    /// so async tests use the multi-thread runtime: their clients must keep running meanwhile
    /// to answer the server's HTTP/2 GOAWAY and PING, or the drain waits out its timeout.
    pub fn wait_exit(mut self) -> Stopped {
        let child = self.child.take().expect("the server is running");
        let status = wait_exit(child, EXIT_DEADLINE);
        if let Some(reader) = self.reader.take() {
            // The pipe closed with the process, so the reader has reached its end.
            reader.join().expect("the log reader ends");
        }
        let logs = self.logs();
        assert!(status.success(), "server exited with {status}:\n{logs}");
        Stopped {
            dir: self.dir.take().expect("the server has its dir"),
            logs,
        }
    }

    /// SIGKILL: the process dies wherever it is, as in a crash or a power cut.
    pub fn kill(mut self) -> TempDir {
        let child = self.child.take().expect("the server is running");
        signal(child.id(), "KILL");
        wait_exit(child, EXIT_DEADLINE);
        self.dir.take().expect("the server has its dir")
    }

    /// Starts a server on the directory (and database) a killed one left.
    pub fn start_after_crash(dir: TempDir) -> Server {
        Server::start_in(dir, Options::default())
    }

    /// `start_after_crash`, with `options`.
    pub fn start_after_crash_with(dir: TempDir, options: Options) -> Server {
        Server::start_in(dir, options)
    }

    /// SIGTERM, then a clean exit within the deadline.
    pub fn stop(self) -> Stopped {
        self.signal("TERM");
        self.wait_exit()
    }

    /// Stops cleanly and starts again on the same database file with the same options.
    pub fn restart(self) -> Server {
        let options = self.options.clone();
        Server::start_in(self.stop().dir, options)
    }

    /// Starts a server on the directory (and database) a stopped one left.
    pub fn start_on(stopped: Stopped) -> Server {
        Server::start_in(stopped.dir, Options::default())
    }

    pub async fn h1(&self) -> Client {
        Client::connect(self.addr, Protocol::Http1).await
    }

    pub async fn h2(&self) -> Client {
        Client::connect(self.addr, Protocol::Http2).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Waits for a process to exit, killing it and failing the test past the deadline.
fn wait_exit(mut child: Child, deadline: Duration) -> ExitStatus {
    let pid = child.id();
    let (done, exited) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    match exited.recv_timeout(deadline) {
        Ok(Ok(status)) => status,
        _ => {
            signal(pid, "KILL");
            panic!("process {pid} did not exit within {deadline:?}");
        }
    }
}

/// Runs the binary with the given arguments, expecting it to exit by itself; returns the
/// exit code and stderr.
pub fn run(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_petstore"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the petstore binary starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = wait_exit(child, EXIT_DEADLINE);
    (
        status.code(),
        out.join().expect("stdout reader"),
        err.join().expect("stderr reader"),
    )
}

/// Runs `petstore SUBCOMMAND ARGS` on the file `file` (the keys file, the webhooks file), named
/// by the variable `env` as the server's unit names it, or by the flag `flag` when `by_flag`.
pub fn run_on_file(
    subcommand: &str,
    (flag, env): (&str, &str),
    file: &Path,
    by_flag: bool,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_petstore"));
    command.arg(subcommand).args(args);
    if by_flag {
        command.arg(flag).arg(file);
        command.env_remove(env);
    } else {
        command.env(env, file);
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .expect("the petstore binary runs");
    (
        output.status.code(),
        String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    )
}

/// `petstore keys ARGS` on the keys file `file`, expected to succeed; returns standard output.
pub fn keys_on(file: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = run_on_file(
        "keys",
        ("--api-keys", "PETSTORE_API_KEYS"),
        file,
        true,
        args,
    );
    assert_eq!(code, Some(0), "keys {args:?}: {stderr}");
    stdout
}

/// Starts a server on `db` with `options`, expecting start-up to fail; returns stderr.
pub fn start_failing(db: &Path, options: &Options) -> String {
    let args = [
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--tls-cert".as_ref(),
        options.tls_cert.as_os_str(),
        "--tls-key".as_ref(),
        options.tls_key.as_os_str(),
        "--api-keys".as_ref(),
        options.api_keys.as_os_str(),
    ];
    let (code, _, stderr) = run(&args);
    assert_eq!(code, Some(1), "expected exit 1, stderr:\n{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    stderr
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    /// The ALPN id a client offers for it.
    pub fn alpn(self) -> &'static [u8] {
        match self {
            Protocol::Http1 => b"http/1.1",
            Protocol::Http2 => b"h2",
        }
    }
}

/// xorshift64*: enough randomness for mutations and schedules, repeatable from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for an `n` of 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).expect("below a usize")
    }
}

/// A TLS client config trusting only the development CA, offering one ALPN protocol.
pub fn tls_config(
    alpn: &[u8],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    tls_config_with(rustls::crypto::ring::default_provider(), alpn, versions)
}

/// `tls_config` with the client's own crypto provider, e.g. its cipher suites in another order.
pub fn tls_config_with(
    provider: rustls::crypto::CryptoProvider,
    alpn: &[u8],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(cert("dev-ca.pem")).expect("dev CA") {
        roots
            .add(ca.expect("dev CA parses"))
            .expect("dev CA is a valid root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

pub async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").expect("a valid name");
    TlsConnector::from(config).connect(name, tcp).await
}

enum Sender {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

/// One TLS connection speaking one HTTP version.
pub struct Client {
    sender: Sender,
    addr: SocketAddr,
    pub protocol: Protocol,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("a text header"))
    }

    /// Asserts the whole spec Error body and its media type.
    pub fn assert_error(&self, status: u16, code: &str, message: &str) {
        assert_eq!(
            (self.status, self.json()),
            (
                status,
                serde_json::json!({"code": code, "message": message, "status": status})
            )
        );
        assert_eq!(self.header("content-type"), Some("application/json"));
    }

    /// The `ETag` header, which the answer must carry.
    pub fn etag(&self) -> &str {
        self.header("etag")
            .unwrap_or_else(|| panic!("no ETag on a {} answer", self.status))
    }

    /// The target of the `Link: <…>; rel="next"` header, `None` when there is no `Link`.
    pub fn next_link(&self) -> Option<String> {
        let mut links = self.headers.get_all("link").iter();
        let link = links.next()?.to_str().expect("a text header");
        assert!(links.next().is_none(), "one Link header at most");
        let target = link
            .strip_prefix('<')
            .and_then(|link| link.strip_suffix(r#">; rel="next""#))
            .unwrap_or_else(|| panic!("not a next link: {link:?}"));
        Some(target.to_owned())
    }

    /// The pets of a Pets array body.
    pub fn pets(&self) -> Vec<Value> {
        match self.json() {
            Value::Array(pets) => pets,
            body => panic!("not an array: {body}"),
        }
    }

    /// Asserts an Error body whose message starts with `prefix` (the rest names a detail,
    /// such as a parser's position, that the test does not pin).
    pub fn assert_error_prefix(&self, status: u16, code: &str, prefix: &str) {
        let error = self.json();
        assert_eq!(
            (self.status, &error["code"], &error["status"]),
            (status, &Value::from(code), &Value::from(status)),
            "{error}"
        );
        let message = error["message"].as_str().expect("a message");
        assert!(message.starts_with(prefix), "{error}");
        assert_eq!(error.as_object().map(|e| e.len()), Some(3), "{error}");
        assert_eq!(self.header("content-type"), Some("application/json"));
    }

    /// The ids of a Pets array body.
    pub fn ids(&self) -> Vec<i64> {
        let body = self.json();
        let pets = body
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {body}"));
        pets.iter()
            .map(|pet| pet["id"].as_i64().expect("an integer id"))
            .collect()
    }
}

impl Client {
    pub async fn connect(addr: SocketAddr, protocol: Protocol) -> Client {
        let tls = tls_connect(addr, tls_config(protocol.alpn(), rustls::DEFAULT_VERSIONS))
            .await
            .expect("TLS connects");
        assert_eq!(
            tls.get_ref().1.alpn_protocol(),
            Some(protocol.alpn()),
            "ALPN picked the protocol"
        );
        let io = TokioIo::new(tls);
        let sender = match protocol {
            Protocol::Http1 => {
                let (sender, connection) = http1::handshake(io).await.expect("HTTP/1.1 handshake");
                tokio::spawn(connection);
                Sender::Http1(sender)
            }
            Protocol::Http2 => {
                let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("HTTP/2 handshake");
                tokio::spawn(connection);
                Sender::Http2(sender)
            }
        };
        Client {
            sender,
            addr,
            protocol,
        }
    }

    /// A request builder for `path` on this server, without credentials.
    pub fn request(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        let authority = format!("localhost:{}", self.addr.port());
        match self.protocol {
            Protocol::Http1 => Request::builder()
                .method(method)
                .uri(path)
                .header(HOST, authority),
            Protocol::Http2 => Request::builder()
                .method(method)
                .uri(format!("https://{authority}{path}")),
        }
    }

    /// A request builder carrying the development key.
    pub fn authed(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        self.request(method, path)
            .header(AUTHORIZATION, format!("Bearer {DEV_KEY}"))
    }

    pub async fn send(
        &mut self,
        request: hyper::http::request::Builder,
        body: impl Into<Bytes>,
    ) -> Reply {
        let request = request
            .body(Full::new(body.into()))
            .expect("a valid request");
        self.try_send(request).await.expect("the server answers")
    }

    /// Sends a request; `None` when the connection fails before a whole answer arrives.
    pub async fn try_send(&mut self, request: Request<Full<Bytes>>) -> Option<Reply> {
        let response = match &mut self.sender {
            Sender::Http1(sender) => {
                sender.ready().await.ok()?;
                sender.send_request(request).await.ok()?
            }
            Sender::Http2(sender) => {
                sender.ready().await.ok()?;
                sender.send_request(request).await.ok()?
            }
        };
        let (parts, body) = response.into_parts();
        let body = body.collect().await.ok()?.to_bytes();
        Some(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    pub async fn get(&mut self, path: &str) -> Reply {
        let request = self.authed(Method::GET, path);
        self.send(request, Bytes::new()).await
    }

    pub async fn post_json(&mut self, path: &str, body: &str) -> Reply {
        let request = self
            .authed(Method::POST, path)
            .header(CONTENT_TYPE, "application/json");
        self.send(request, body.to_owned()).await
    }

    /// Sends `method` to `path` with the development key, the extra `headers` and `body`.
    pub async fn send_with(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut request = self.authed(method, path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request, body).await
    }

    /// `PATCH` with a JSON Merge Patch body.
    pub async fn patch_json(&mut self, path: &str, body: &str) -> Reply {
        let headers = [("content-type", "application/merge-patch+json")];
        self.send_with(Method::PATCH, path, &headers, body.to_owned())
            .await
    }

    pub async fn delete(&mut self, path: &str) -> Reply {
        self.send_with(Method::DELETE, path, &[], Bytes::new())
            .await
    }

    /// Lists from `path` and follows every next link to the end; returns all the pets in the
    /// order they came, asserting that each page is a 200.
    pub async fn list_all(&mut self, path: &str) -> Vec<Value> {
        let mut pets = Vec::new();
        let mut next = Some(path.to_owned());
        while let Some(path) = next {
            let reply = self.get(&path).await;
            assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
            pets.extend(reply.pets());
            next = reply.next_link();
        }
        pets
    }

    /// Another handle on this HTTP/2 connection, so that tasks can send on it at once.
    pub fn share(&self) -> Client {
        let Sender::Http2(sender) = &self.sender else {
            panic!("only an HTTP/2 connection carries requests at once")
        };
        Client {
            sender: Sender::Http2(sender.clone()),
            addr: self.addr,
            protocol: self.protocol,
        }
    }

    /// Asserts that each pet is stored exactly as it was acknowledged.
    pub async fn assert_stored(&mut self, pets: &[Value]) {
        for pet in pets {
            assert_eq!(
                &self.get(&format!("/v1/pets/{}", pet["id"])).await.json(),
                pet
            );
        }
    }

    /// Creates a pet and returns its JSON, asserting 201.
    pub async fn create(&mut self, body: &str) -> Value {
        let reply = self.post_json("/v1/pets", body).await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        reply.json()
    }
}

/// Creates `count` pets concurrently over one HTTP/2 connection; `status(i)` picks each one's
/// status. Returns their ids in ascending order.
pub async fn create_many(
    server: &Server,
    count: usize,
    status: impl Fn(usize) -> Option<&'static str>,
) -> Vec<i64> {
    let client = server.h2().await;
    let Sender::Http2(sender) = &client.sender else {
        unreachable!("h2() makes an HTTP/2 client")
    };
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let mut body = serde_json::json!({"name": format!("pet-{i}"), "categoryId": i});
        if let Some(status) = status(i) {
            body["status"] = status.into();
        }
        let request = client
            .authed(Method::POST, "/v1/pets")
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid request");
        let mut sender = sender.clone();
        tasks.spawn(async move {
            sender.ready().await.expect("connection ready");
            let response = sender
                .send_request(request)
                .await
                .expect("the server answers");
            assert_eq!(response.status(), 201);
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            serde_json::from_slice::<Value>(&body).expect("json")["id"]
                .as_i64()
                .expect("id")
        });
    }
    let mut ids = tasks.join_all().await;
    ids.sort_unstable();
    ids
}

/// An HTTP/2 connection whose request bodies are fed by the test, frame by frame, so that a
/// request can be kept in flight for as long as the test needs.
pub async fn h2_streaming(
    addr: SocketAddr,
) -> http2::SendRequest<http_body_util::channel::Channel<Bytes>> {
    let tls = tls_connect(addr, tls_config(b"h2", rustls::DEFAULT_VERSIONS))
        .await
        .expect("TLS connects");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

/// Reads every item of a PEM certificate file as DER, to compare with what a server presents.
pub fn certificate_der(name: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(name)
        .expect("PEM file")
        .map(|c| c.expect("a certificate"))
        .collect()
}

/// What came back on a raw connection before the server closed it.
#[derive(Debug)]
pub struct RawReply {
    /// Everything received, as text.
    pub text: String,
}

impl RawReply {
    /// The status of the first answer, if there was one.
    pub fn status(&self) -> Option<u16> {
        self.text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }

    /// The head of the first answer.
    pub fn head(&self) -> &str {
        self.text
            .split_once("\r\n\r\n")
            .map_or(&self.text, |(head, _)| head)
    }

    /// The status and the JSON body of the only answer.
    pub fn status_and_json(&self) -> (u16, Value) {
        let (_, body) = self
            .text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("a full answer: {:?}", self.text));
        let status = self
            .status()
            .unwrap_or_else(|| panic!("a status line: {:?}", self.text));
        (
            status,
            serde_json::from_str(body).unwrap_or_else(|e| panic!("JSON body ({e}): {body:?}")),
        )
    }
}

/// Reads until the peer closes (or breaks) the stream; fails the test past the deadline.
pub async fn read_until_closed(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let reading = async {
        // A reset or a missing close_notify also ends the exchange; what arrived is kept.
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(CLOSE_DEADLINE, reading)
        .await
        .expect("the server closed the connection in time");
    String::from_utf8_lossy(&received).into_owned()
}

/// Sends raw bytes over TLS (HTTP/1.1 by ALPN) and reads what comes back until the server
/// closes the connection. The server may answer and close before it has read all of them.
pub async fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> RawReply {
    use tokio::io::AsyncWriteExt;
    let mut tls = tls_connect(addr, tls_config(b"http/1.1", rustls::DEFAULT_VERSIONS))
        .await
        .expect("TLS");
    let _ = tls.write_all(bytes).await;
    let _ = tls.flush().await;
    RawReply {
        text: read_until_closed(&mut tls).await,
    }
}

/// The body's sender and the task that will hold the answer, of a request the test feeds.
pub type Streaming = (
    http_body_util::channel::Sender<Bytes>,
    tokio::task::JoinHandle<hyper::Result<hyper::Response<hyper::body::Incoming>>>,
);

/// Starts `POST /v1/pets` over HTTP/2 with a body the test feeds.
pub async fn start_streaming_create(server: &Server) -> Streaming {
    start_streaming_create_with(server, &[]).await
}

/// Starts `POST /v1/pets` over HTTP/2 with extra `headers` and a body the test feeds.
pub async fn start_streaming_create_with(server: &Server, headers: &[(&str, &str)]) -> Streaming {
    let mut sender = h2_streaming(server.addr).await;
    let (body, channel) = http_body_util::channel::Channel::<Bytes>::new(1);
    let mut request = Request::post(format!("https://localhost:{}/v1/pets", server.addr.port()))
        .header(AUTHORIZATION, format!("Bearer {DEV_KEY}"))
        .header(CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(channel).expect("a valid request");
    (body, tokio::spawn(sender.send_request(request)))
}

/// Reads the whole answer of a streamed request.
pub async fn streamed_reply(
    answer: tokio::task::JoinHandle<hyper::Result<hyper::Response<hyper::body::Incoming>>>,
) -> Reply {
    let response = answer
        .await
        .expect("the request task")
        .expect("the server answers");
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.expect("the whole body").to_bytes(),
    }
}

/// Creates pets from four clients (two HTTP/1.1, two HTTP/2) until their connections break,
/// recording every pet acknowledged with 201. Requests that fail were never acknowledged.
pub async fn create_until_broken(
    server: &Server,
    tag: &str,
    acknowledged: &Arc<Mutex<Vec<Value>>>,
) -> tokio::task::JoinSet<()> {
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..4 {
        let mut client = if writer % 2 == 0 {
            server.h1().await
        } else {
            server.h2().await
        };
        let acknowledged = Arc::clone(acknowledged);
        let tag = tag.to_owned();
        writers.spawn(async move {
            for i in 0.. {
                let body = format!(
                    r#"{{"name":"{tag}-w{writer}-{i}","categoryId":{i},"status":"pending"}}"#
                );
                let request = client
                    .authed(Method::POST, "/v1/pets")
                    .header(CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .expect("a valid request");
                let Some(reply) = client.try_send(request).await else {
                    break;
                };
                assert_eq!(reply.status, 201, "{:?}", reply.body);
                acknowledged.lock().expect("lock").push(reply.json());
            }
        });
    }
    writers
}

/// A TLS connection offering HTTP/1.1, for tests that write raw bytes.
pub async fn raw_tls(addr: SocketAddr) -> TlsStream<TcpStream> {
    tls_connect(addr, tls_config(b"http/1.1", rustls::DEFAULT_VERSIONS))
        .await
        .expect("TLS connects")
}

/// The member names of a JSON object, in the order sent (a `Value` keeps them sorted).
pub struct Members(pub Vec<String>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Members, D::Error> {
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    names.push(name);
                }
                Ok(Members(names))
            }
        }
        deserializer.deserialize_map(Names)
    }
}

/// The member names of the JSON object `body`, in the order sent.
pub fn member_names(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<Members>(body)
        .unwrap_or_else(|e| panic!("not an object ({e}): {}", String::from_utf8_lossy(body)))
        .0
}

/// The member names of each object of the JSON array `body`, in the order sent.
pub fn members_of_each(body: &[u8]) -> Vec<Vec<String>> {
    serde_json::from_slice::<Vec<Members>>(body)
        .unwrap_or_else(|e| panic!("not objects ({e}): {}", String::from_utf8_lossy(body)))
        .into_iter()
        .map(|members| members.0)
        .collect()
}

/// A keys file with the development key and a read-only key `reader`; returns it and that key.
pub fn keys_with_a_reader(dir: &Path) -> (PathBuf, String) {
    let file = dir.join("api-keys");
    std::fs::copy(cert("dev-keys.txt"), &file).expect("copy the keys");
    let args = [
        "keys".as_ref(),
        "add".as_ref(),
        "reader".as_ref(),
        "--read-only".as_ref(),
        "--expires".as_ref(),
        "2999-12-31".as_ref(),
        "--api-keys".as_ref(),
        file.as_os_str(),
    ];
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, Some(0), "{stderr}");
    (file, stdout.trim().to_owned())
}

/// Polls `check` every 50 ms until it gives a value; fails the test past `within`.
pub async fn poll_until<T>(
    within: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The commands of one `Exec…=` kind (`ExecStartPre`, `ExecReload`) in the shipped unit file or
/// drop-in `file` (at the repository's root), as systemd would run them here: each word with
/// `replace`'s specifiers and paths put in (`%t`, `/etc/petstore/…`, `$MAINPID`), and the `+`
/// prefix (full privileges) dropped, since the tests run as root. An empty `ExecReload=` (a
/// drop-in's reset) empties the list so far, as in systemd.
pub fn unit_commands(file: &str, kind: &str, replace: &[(&str, String)]) -> Vec<Vec<String>> {
    let unit = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .expect("the unit file");
    let mut commands: Vec<Vec<String>> = Vec::new();
    for command in unit
        .lines()
        .filter_map(|line| line.strip_prefix(kind)?.strip_prefix('='))
    {
        if command.trim().is_empty() {
            commands.clear();
            continue;
        }
        commands.push(
            command
                .trim_start_matches('+')
                .split_whitespace()
                .map(|word| {
                    replace
                        .iter()
                        .fold(word.to_owned(), |word, (from, to)| word.replace(from, to))
                })
                .collect(),
        );
    }
    assert!(!commands.is_empty(), "no {kind}= in {file}");
    commands
}

/// Runs each of `commands` (`unit_commands`), each of which must succeed.
pub fn run_unit_commands(commands: &[Vec<String>]) {
    for command in commands {
        let status = Command::new(&command[0])
            .args(&command[1..])
            .status()
            .expect("the unit's command runs");
        assert!(status.success(), "{command:?}: {status}");
    }
}

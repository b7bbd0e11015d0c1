//! ACME (RFC 8555) with the TLS-ALPN-01 challenge (RFC 8737): the account, the orders, the
//! state directory (account key and certificate, 0600, written atomically) and the renewal
//! schedule with its backoff. instant-acme speaks the protocol; `tls::Certificate` serves what
//! this module installs, and the challenge certificates while an order is validated.
//! Invariants: a certificate is installed only once it parses and fits its key, and a failed
//! renewal never takes the serving certificate away.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, BodyWrapper, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::{self, Precision, unix_now};
use crate::durable;
use crate::metrics;
use crate::tls;

/// Let's Encrypt's production directory, the default CA (as Caddy's).
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The first wait after a failed attempt; it doubles up to `MAX_BACKOFF`.
const MIN_BACKOFF: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(6 * 3600);
/// Never spin: with seconds left, retries still come at most once a second.
const MIN_WAIT: Duration = Duration::from_secs(1);
/// The schedule looks at the clock again at least this often (a suspended machine, a clock
/// step), rather than trusting one long sleep.
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// One attempt (account, order, validation, issuance) gives up after this.
const ATTEMPT_DEADLINE: Duration = Duration::from_secs(300);
/// Polling the order while the CA validates, and while it issues.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(120));
/// A `badNonce` that outlives instant-acme's own retries (3 per request) restarts the attempt
/// at once, this many times.
const NONCE_RETRIES: usize = 3;

/// What `--acme-*` asked for, checked by `config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Lowercase DNS names, at least one, no duplicates.
    pub domains: Vec<String>,
    pub directory: String,
    pub email: Option<String>,
    pub ca_root: Option<PathBuf>,
    /// The EAB key id and the file holding its HMAC key.
    pub eab: Option<(String, PathBuf)>,
    pub state_dir: PathBuf,
}

/// A `--acme-domain` value, lowercased without a trailing dot, or why it cannot be one.
pub fn check_domain(name: &str) -> Result<String, String> {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.starts_with("*.") {
        return Err(
            "a wildcard needs the DNS-01 challenge, which petstore does not answer; \
                    list each name"
                .into(),
        );
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err("an IP address; give a DNS name".into());
    }
    match ServerName::try_from(name.as_str()) {
        Ok(ServerName::DnsName(_)) => Ok(name),
        _ => Err("not a valid DNS name".into()),
    }
}

/// What `/healthz` and the log say about the certificate.
#[derive(Clone, Debug, Default, Serialize)]
struct Status {
    domains: Vec<String>,
    directory: String,
    /// RFC 3339, UTC; `None` before the first certificate.
    not_after: Option<String>,
    renew_at: Option<String>,
    last_renewal: Option<String>,
    last_error: Option<String>,
    next_attempt: Option<String>,
}

static STATUS: Mutex<Option<Status>> = Mutex::new(None);

fn update_status(change: impl FnOnce(&mut Status)) {
    let mut status = STATUS.lock().unwrap_or_else(PoisonError::into_inner);
    change(status.get_or_insert_with(Status::default));
}

/// The ACME details for `/healthz`, when the certificate comes from ACME.
pub fn health() -> Option<serde_json::Value> {
    let status = STATUS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut details = serde_json::to_value(status.as_ref()?).ok()?;
    details["not_after_unix"] = tls::not_after().into();
    Some(details)
}

fn rfc3339(unix: u64) -> String {
    clock::rfc3339(UNIX_EPOCH + Duration::from_secs(unix), Precision::Seconds).to_string()
}

type Http = HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>;

/// The certificate this module serves: its pair's parts and validity.
struct Issued {
    pem: String,
    not_before: u64,
    not_after: u64,
}

/// The account and the certificate of one directory, and the schedule that renews it.
pub struct Manager {
    settings: Settings,
    http: Http,
    certificate: Arc<tls::Certificate>,
    account: Option<Account>,
    account_path: PathBuf,
    certificate_path: PathBuf,
    /// Validity of the certificate being served, seconds since the epoch.
    serving: Option<(u64, u64)>,
}

/// On disk: the account's credentials and the directory they belong to.
#[derive(Serialize, Deserialize)]
struct StoredAccount {
    directory: String,
    credentials: AccountCredentials,
}

impl Manager {
    /// Prepares the state directory and the HTTPS client; talks to nobody yet.
    pub fn new(settings: Settings, certificate: Arc<tls::Certificate>) -> anyhow::Result<Manager> {
        let http = http_client(settings.ca_root.as_deref())?;
        let dir = &settings.state_dir;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the ACME state directory {}", dir.display()))?;
        // An existing directory keeps whatever mode it had: tighten it.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private (0700)", dir.display()))?;
        // One account and one certificate per directory URL, as Caddy keeps them per issuer:
        // moving from a staging CA to production orders anew instead of serving staging's.
        let tag = hex(&Sha256::digest(settings.directory.as_bytes())[..8]);
        update_status(|status| {
            status.domains = settings.domains.clone();
            status.directory = settings.directory.clone();
        });
        Ok(Manager {
            account_path: dir.join(format!("account-{tag}.json")),
            certificate_path: dir.join(format!("certificate-{tag}.pem")),
            settings,
            http,
            certificate,
            account: None,
            serving: None,
        })
    }

    /// Serves the cached certificate when it is still valid for every domain; otherwise
    /// obtains one, retrying with backoff until it succeeds (the server is not ready before).
    /// An error is one the operator must fix (the CA refused the account or the names).
    pub async fn first_certificate(&mut self) -> anyhow::Result<()> {
        match self.cached() {
            Ok(Some(issued)) => {
                tracing::info!(
                    path = %self.certificate_path.display(),
                    not_after = %rfc3339(issued.not_after),
                    "serving the cached ACME certificate; no order placed"
                );
                return self.install(issued);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "the cached ACME certificate is unusable; ordering a new one"
            ),
        }
        let mut failures = 0;
        loop {
            match self.obtain().await {
                Ok(issued) => return self.install(issued),
                Err(Failure::Permanent(e)) => {
                    update_status(|status| status.last_error = Some(format!("{e:#}")));
                    return Err(e);
                }
                Err(Failure::Transient(e)) => {
                    failures += 1;
                    let wait = backoff(failures, None);
                    self.failed(&e, wait);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Renews for ever: when a third of the lifetime is left, then with backoff after a
    /// failure. The old certificate serves until a new one is installed.
    pub async fn renew(mut self) {
        let mut failures: u32 = 0;
        let mut retry_at: Option<u64> = None;
        loop {
            let Some((not_before, not_after)) = self.serving else {
                return;
            };
            let due = retry_at.unwrap_or_else(|| renew_at(not_before, not_after));
            let now = unix_now();
            if now < due {
                let wait = Duration::from_secs(due - now).min(MAX_SLEEP);
                tokio::time::sleep(wait).await;
                continue;
            }
            tracing::info!(domains = ?self.settings.domains, not_after = %rfc3339(not_after), "renewing the ACME certificate");
            let outcome = match self.obtain().await {
                Ok(issued) => self.install(issued).map_err(Failure::Transient),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => {
                    failures = 0;
                    retry_at = None;
                }
                Err(Failure::Permanent(e) | Failure::Transient(e)) => {
                    failures = failures.saturating_add(1);
                    let left = not_after.saturating_sub(unix_now());
                    let wait = backoff(failures, Some(Duration::from_secs(left)));
                    self.failed(&e, wait);
                    retry_at = Some(unix_now() + wait.as_secs().max(1));
                }
            }
        }
    }

    fn failed(&self, error: &anyhow::Error, wait: Duration) {
        let message = format!("{error:#}");
        let next = unix_now() + wait.as_secs();
        metrics::acme_order(false);
        tracing::error!(
            error = %message,
            retry_in_s = wait.as_secs(),
            serving_until = %self.serving.map_or_else(|| "none".to_owned(), |(_, until)| rfc3339(until)),
            "ACME certificate order failed"
        );
        update_status(|status| {
            status.last_error = Some(message);
            status.next_attempt = Some(rfc3339(next));
        });
    }

    fn install(&mut self, issued: Issued) -> anyhow::Result<()> {
        let (chain, key) = parse_pem(&issued.pem)?;
        let pair = self.certificate.pair(chain, key)?;
        self.certificate.install(pair);
        self.serving = Some((issued.not_before, issued.not_after));
        let renew = renew_at(issued.not_before, issued.not_after);
        tracing::info!(
            domains = ?self.settings.domains,
            not_after = %rfc3339(issued.not_after),
            renew_at = %rfc3339(renew),
            "ACME certificate in service"
        );
        update_status(|status| {
            status.not_after = Some(rfc3339(issued.not_after));
            status.renew_at = Some(rfc3339(renew));
            status.last_error = None;
            status.next_attempt = None;
        });
        Ok(())
    }

    /// The cached certificate, if it is for exactly our domains and not yet expired.
    fn cached(&self) -> anyhow::Result<Option<Issued>> {
        let pem = match fs::read_to_string(&self.certificate_path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading {}", self.certificate_path.display()));
            }
        };
        let issued = describe(pem)
            .with_context(|| format!("reading {}", self.certificate_path.display()))?;
        let (chain, key) = parse_pem(&issued.pem)?;
        self.certificate
            .pair(chain.clone(), key)
            .with_context(|| format!("checking {}", self.certificate_path.display()))?;
        let mut names = tls::dns_names(&chain[0])?;
        names.sort();
        let mut wanted = self.settings.domains.clone();
        wanted.sort();
        if names != wanted {
            tracing::info!(cached = ?names, wanted = ?wanted, "the cached ACME certificate is for other names");
            return Ok(None);
        }
        if issued.not_after <= unix_now() {
            tracing::info!(not_after = %rfc3339(issued.not_after), "the cached ACME certificate has expired");
            return Ok(None);
        }
        Ok(Some(issued))
    }

    /// One attempt, within its deadline; `badNonce` restarts it at once, and an account the
    /// CA does not know (any more) is registered again.
    async fn obtain(&mut self) -> Result<Issued, Failure> {
        let mut nonce_retries = 0;
        let mut registered_again = false;
        loop {
            let attempt = tokio::time::timeout(ATTEMPT_DEADLINE, self.attempt()).await;
            let error = match attempt {
                Ok(Ok(issued)) => {
                    metrics::acme_order(true);
                    return Ok(issued);
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(Failure::Transient(anyhow!(
                        "no certificate within {} s",
                        ATTEMPT_DEADLINE.as_secs()
                    )));
                }
            };
            let kind = problem_type(&error);
            match kind.as_deref() {
                Some("badNonce") if nonce_retries < NONCE_RETRIES => {
                    nonce_retries += 1;
                    tracing::debug!("badNonce: trying again with a fresh nonce");
                }
                Some("accountDoesNotExist") if !registered_again => {
                    registered_again = true;
                    tracing::warn!(directory = %self.settings.directory, "the ACME CA does not know our account; registering again");
                    self.account = None;
                    if let Err(e) = fs::remove_file(&self.account_path)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        return Err(Failure::Transient(
                            anyhow::Error::new(e)
                                .context(format!("removing {}", self.account_path.display())),
                        ));
                    }
                }
                _ => return Err(classify(error)),
            }
        }
    }

    async fn attempt(&mut self) -> anyhow::Result<Issued> {
        let account = self.account().await?;
        let identifiers: Vec<Identifier> = self
            .settings
            .domains
            .iter()
            .map(|domain| Identifier::Dns(domain.clone()))
            .collect();
        tracing::info!(domains = ?self.settings.domains, "placing an ACME order");
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .context(Step::Place)?;
        let mut challenges = Challenges {
            certificate: Arc::clone(&self.certificate),
            domains: Vec::new(),
        };
        {
            let mut authorizations = order.authorizations();
            while let Some(authorization) = authorizations.next().await {
                let mut authorization = authorization.context("reading an authorization")?;
                match authorization.status {
                    AuthorizationStatus::Pending => {}
                    AuthorizationStatus::Valid => continue,
                    other => bail!(
                        "the authorization for {} is {other:?}",
                        authorization.identifier()
                    ),
                }
                let name = authorization.identifier().to_string();
                let mut challenge = authorization
                    .challenge(ChallengeType::TlsAlpn01)
                    .ok_or_else(|| anyhow!("the CA offers no tls-alpn-01 challenge for {name}"))?;
                let digest = challenge.key_authorization().digest();
                let pair = challenge_certificate(&self.certificate, &name, digest.as_ref())?;
                self.certificate.set_challenge(&name, Some(pair));
                challenges.domains.push(name.clone());
                challenge
                    .set_ready()
                    .await
                    .with_context(|| format!("asking the CA to validate {name}"))?;
            }
        }
        // A failed validation may pass by itself (a DNS record not yet pointing here, a
        // firewall): it is retried, never fatal.
        let refused = match order.poll_ready(&POLL).await {
            Ok(OrderStatus::Ready) => None,
            Ok(_) => Some(refusal(&mut order).await),
            Err(instant_acme::Error::Api(problem)) => Some(problem.to_string()),
            Err(e) => return Err(anyhow::Error::new(e).context("waiting for validation")),
        };
        if let Some(reason) = refused {
            bail!(
                "the CA refused the order for {}: {reason}",
                self.settings.domains.join(", ")
            );
        }
        drop(challenges);

        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .context("generating the certificate key")?;
        let mut params = rcgen::CertificateParams::new(self.settings.domains.clone())
            .context("making the certificate request")?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params
            .serialize_request(&key)
            .context("signing the certificate request")?;
        order
            .finalize_csr(csr.der())
            .await
            .context("finalizing the order")?;
        let chain = order
            .poll_certificate(&POLL)
            .await
            .context("downloading the certificate")?;
        let pem = format!("{}{}", key.serialize_pem(), chain);
        let issued = describe(pem)?;
        write_private(&self.certificate_path, issued.pem.as_bytes())?;
        tracing::info!(
            path = %self.certificate_path.display(),
            not_after = %rfc3339(issued.not_after),
            "ACME certificate obtained"
        );
        update_status(|status| status.last_renewal = Some(rfc3339(unix_now())));
        Ok(issued)
    }

    /// The account: in memory, else from the state directory, else a new registration.
    async fn account(&mut self) -> anyhow::Result<Account> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let builder = || Account::builder_with_http(Box::new(self.http.clone()));
        if let Some(stored) = self.stored_account()? {
            let account = builder()
                .from_credentials(stored.credentials)
                .await
                .with_context(|| format!("reaching the ACME directory {}", stored.directory))?;
            self.account = Some(account.clone());
            return Ok(account);
        }
        let meta = self.directory_meta().await?;
        let eab = match (&self.settings.eab, meta.external_account_required) {
            (Some((kid, file)), _) => Some(eab_key(kid, file)?),
            (None, true) => {
                return Err(Refused(format!(
                    "the ACME CA {} requires External Account Binding: give --acme-eab-kid and \
                     --acme-eab-hmac-key-file",
                    self.settings.directory
                ))
                .into());
            }
            (None, false) => None,
        };
        let contact: Vec<String> = self
            .settings
            .email
            .iter()
            .map(|email| format!("mailto:{email}"))
            .collect();
        let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
        tracing::info!(
            directory = %self.settings.directory,
            terms_of_service = meta.terms_of_service.as_deref().unwrap_or("none published"),
            "registering an ACME account; starting with --acme-domain agrees to the CA's terms of service"
        );
        let (account, credentials) = builder()
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.settings.directory.clone(),
                eab.as_ref(),
            )
            .await
            .context(Step::Register)?;
        let stored = StoredAccount {
            directory: self.settings.directory.clone(),
            credentials,
        };
        let json = serde_json::to_vec_pretty(&stored).context("encoding the account")?;
        write_private(&self.account_path, &json)?;
        tracing::info!(account = account.id(), "ACME account registered");
        self.account = Some(account.clone());
        Ok(account)
    }

    fn stored_account(&self) -> anyhow::Result<Option<StoredAccount>> {
        let json = match fs::read(&self.account_path) {
            Ok(json) => json,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", self.account_path.display()));
            }
        };
        let stored: StoredAccount = serde_json::from_slice(&json)
            .with_context(|| format!("reading {}", self.account_path.display()))?;
        Ok((stored.directory == self.settings.directory).then_some(stored))
    }

    /// The directory's `meta`, read by us: instant-acme does not show the terms of service.
    /// A URL that is not an ACME directory fails here, by name.
    async fn directory_meta(&self) -> anyhow::Result<DirectoryMeta> {
        let url = &self.settings.directory;
        let request = http::Request::get(url.as_str())
            .body(BodyWrapper::default())
            .with_context(|| format!("--acme-directory {url}"))?;
        let response = self
            .http
            .request(request)
            .await
            .with_context(|| format!("reaching the ACME directory {url}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("reading the ACME directory {url}"))?
            .to_bytes();
        let directory: Directory = match serde_json::from_slice(&body) {
            Ok(directory) if status.is_success() => directory,
            _ => {
                return Err(
                    Refused(format!("{url} is not an ACME directory (HTTP {status})")).into(),
                );
            }
        };
        Ok(directory.meta.unwrap_or_default())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Directory {
    #[allow(dead_code)]
    new_order: String,
    meta: Option<DirectoryMeta>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DirectoryMeta {
    terms_of_service: Option<String>,
    #[serde(default)]
    external_account_required: bool,
}

/// Removes the challenge certificates when an attempt ends, however it ends.
struct Challenges {
    certificate: Arc<tls::Certificate>,
    domains: Vec<String>,
}

impl Drop for Challenges {
    fn drop(&mut self) {
        for domain in &self.domains {
            self.certificate.set_challenge(domain, None);
        }
    }
}

/// Why an attempt failed: `Permanent` needs the operator (the CA refused the account or the
/// names); `Transient` may pass by itself (network, CA down, rate limit, failed validation).
enum Failure {
    Permanent(anyhow::Error),
    Transient(anyhow::Error),
}

/// A refusal found by us, that only the operator can fix.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The steps whose refusals (RFC 8555 section 6.7 problem types) another attempt will not
/// fix: the account, and the names in an order. A failed validation is not among them.
#[derive(Clone, Copy, Debug)]
enum Step {
    Register,
    Place,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Register => "registering the ACME account",
            Step::Place => "placing the order",
        })
    }
}

const REFUSED_ACCOUNT: [&str; 7] = [
    "externalAccountRequired",
    "unauthorized",
    "malformed",
    "invalidContact",
    "unsupportedContact",
    "badPublicKey",
    "badSignatureAlgorithm",
];
const REFUSED_ORDER: [&str; 4] = [
    "rejectedIdentifier",
    "unsupportedIdentifier",
    "malformed",
    "unauthorized",
];

fn classify(error: anyhow::Error) -> Failure {
    let kind = problem_type(&error);
    let refused = |kinds: &[&str]| kind.as_deref().is_some_and(|kind| kinds.contains(&kind));
    let permanent = error.chain().any(|cause| cause.is::<Refused>())
        || kind.as_deref() == Some("userActionRequired")
        || match error.downcast_ref::<Step>() {
            Some(Step::Register) => refused(&REFUSED_ACCOUNT),
            Some(Step::Place) => refused(&REFUSED_ORDER),
            None => false,
        };
    if permanent {
        Failure::Permanent(error)
    } else {
        Failure::Transient(error)
    }
}

/// The ACME problem type in an error's chain, without its `urn:ietf:params:acme:error:`.
fn problem_type(error: &anyhow::Error) -> Option<String> {
    error.chain().find_map(|cause| {
        let problem = match cause.downcast_ref::<instant_acme::Error>()? {
            instant_acme::Error::Api(problem) => problem,
            _ => return None,
        };
        let kind = problem.r#type.as_deref()?;
        Some(
            kind.strip_prefix("urn:ietf:params:acme:error:")
                .unwrap_or(kind)
                .to_owned(),
        )
    })
}

/// What the CA said about an invalid order: each failed challenge's problem.
async fn refusal(order: &mut instant_acme::Order) -> String {
    let mut reasons = Vec::new();
    if let Some(problem) = &order.state().error {
        reasons.push(problem.to_string());
    }
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        for challenge in &state.challenges {
            if let Some(problem) = &challenge.error {
                reasons.push(format!("{}: {problem}", state.identifier()));
            }
        }
    }
    if reasons.is_empty() {
        "order invalid, no reason given".into()
    } else {
        reasons.join("; ")
    }
}

/// RFC 8737 section 3: a self-signed certificate for `domain` alone, with the critical
/// acmeIdentifier extension holding the SHA-256 of the key authorization.
fn challenge_certificate(
    certificate: &tls::Certificate,
    domain: &str,
    digest: &[u8],
) -> anyhow::Result<rustls::sign::CertifiedKey> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .context("generating the challenge key")?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()])
        .context("making the challenge certificate")?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params
        .self_signed(&key)
        .context("signing the challenge certificate")?;
    let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    certificate.challenge_pair(cert.der().clone(), key)
}

/// When to renew: a third of the lifetime before it ends.
fn renew_at(not_before: u64, not_after: u64) -> u64 {
    not_after.saturating_sub(not_after.saturating_sub(not_before) / 3)
}

/// The wait after the `failures`-th failure in a row: 1 minute doubling to 6 hours, but never
/// more than a tenth of the time the serving certificate has `left`.
fn backoff(failures: u32, left: Option<Duration>) -> Duration {
    let doubled = MIN_BACKOFF.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let wait = doubled.min(MAX_BACKOFF);
    match left {
        Some(left) => wait.min(left / 10).max(MIN_WAIT),
        None => wait,
    }
}

/// The private key and chain in one PEM text.
fn parse_pem(pem: &str) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the certificate chain")?;
    anyhow::ensure!(!chain.is_empty(), "no CERTIFICATE block");
    let key = PrivateKeyDer::from_pem_slice(pem.as_bytes()).context("reading the private key")?;
    Ok((chain, key))
}

fn describe(pem: String) -> anyhow::Result<Issued> {
    let (chain, _) = parse_pem(&pem)?;
    let (not_before, not_after) = tls::validity(&chain[0])?;
    Ok(Issued {
        pem,
        not_before,
        not_after,
    })
}

/// Writes `bytes` to `path` so that a reader sees the old file or the new one, never part:
/// a 0600 temp file beside it, fsynced, renamed over it, and the directory fsynced.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let temp = path.with_extension("tmp");
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut file| file.write_all(bytes))
        .with_context(|| format!("writing {}", temp.display()))
        .and_then(|()| durable::publish_private(&temp, path));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

fn eab_key(kid: &str, file: &Path) -> anyhow::Result<ExternalAccountKey> {
    use base64::Engine;
    let text = fs::read_to_string(file)
        .with_context(|| format!("reading --acme-eab-hmac-key-file {}", file.display()))?;
    let text = text.trim().trim_end_matches('=');
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .with_context(|| {
            format!(
                "--acme-eab-hmac-key-file {}: not base64url, as CAs give EAB keys",
                file.display()
            )
        })?;
    Ok(ExternalAccountKey::new(kid.to_owned(), &key))
}

/// The HTTPS client for the CA: ring, and the `--acme-ca-root` certificates or else the
/// system's roots.
fn http_client(ca_root: Option<&Path>) -> anyhow::Result<Http> {
    let tls = crate::tls::client_config(ca_root, "the ACME CA", "--acme-ca-root")?;
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector);
    Ok(HyperClient::builder(TokioExecutor::new()).build(https))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_with_a_third_of_the_lifetime_left() {
        assert_eq!(renew_at(0, 90 * 86400), 60 * 86400);
        assert_eq!(renew_at(1000, 1120), 1080);
    }

    #[test]
    fn backoff_doubles_from_a_minute_to_six_hours_within_a_tenth_of_what_is_left() {
        let long = Some(Duration::from_secs(90 * 86400));
        let waits: Vec<u64> = (1..=11).map(|n| backoff(n, long).as_secs()).collect();
        assert_eq!(
            waits,
            [
                60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600
            ]
        );
        assert_eq!(backoff(1000, long), MAX_BACKOFF);
        assert_eq!(
            backoff(3, Some(Duration::from_secs(600))),
            Duration::from_secs(60)
        );
        assert_eq!(backoff(1, Some(Duration::from_secs(5))), MIN_WAIT);
        assert_eq!(backoff(1, None), MIN_BACKOFF);
    }

    #[test]
    fn domains_are_dns_names_without_wildcards() {
        assert_eq!(
            check_domain("Pets.Example.COM."),
            Ok("pets.example.com".into())
        );
        for bad in ["*.example.com", "192.0.2.1", "::1", "bad name", ""] {
            assert!(check_domain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_challenge_certificate_names_the_domain_and_carries_the_critical_digest() {
        let (_, certificate) = tls::acme().expect("config");
        let digest = [7u8; 32];
        let pair = challenge_certificate(&certificate, "pets.test", &digest).expect("cert");
        let der = pair.cert[0].to_vec();
        assert_eq!(tls::dns_names(&der).expect("names"), ["pets.test"]);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).expect("parses");
        let oid = x509_parser::oid_registry::Oid::from(&[1, 3, 6, 1, 5, 5, 7, 1, 31])
            .expect("the acmeIdentifier OID");
        let extension = parsed
            .extensions()
            .iter()
            .find(|extension| extension.oid == oid)
            .expect("acmeIdentifier");
        assert!(extension.critical);
        // An OCTET STRING of 32 bytes: tag, length, the digest.
        assert_eq!(extension.value, [&[0x04, 32][..], &digest].concat());
    }

    #[test]
    fn private_files_are_0600_and_replaced_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("account.json");
        write_private(&path, b"one").expect("write");
        write_private(&path, b"two").expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let mode = fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!path.with_extension("tmp").exists());
    }
}

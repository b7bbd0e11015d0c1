# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_petstore_global_optspecs
    string join \n listen= tls-cert= tls-key= api-keys= acme-domain= acme-directory= acme-email= acme-ca-root= acme-eab-kid= acme-eab-hmac-key-file= acme-state-dir= db= cache-size= max-write-batch= shared-reads idempotency-ttl= events-keep= order-hold= db-password-file= db-ca= db-pool-size= db-statement-timeout= max-connections= max-subscribers= handshake-timeout= header-timeout= body-timeout= idle-timeout= shutdown-timeout= rate-limit= rate-burst= auth-failure-limit= auth-failure-burst= backup-dir= backup-keep= backup-every= webhooks= webhook-retry-schedule= webhooks-allow-private webhooks-ca= console-path= no-console session-idle= metrics-listen= log-format= log-level= h/help V/version
end

function __fish_petstore_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_petstore_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_petstore_using_subcommand
    set -l cmd (__fish_petstore_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c petstore -n "__fish_petstore_needs_command" -l listen -d 'Where to serve HTTPS, as HOST:PORT: an IP address (`0.0.0.0:443`, `[::]:8443`) or a host name (`localhost:8443`)' -r
complete -c petstore -n "__fish_petstore_needs_command" -l tls-cert -d 'PEM file with the certificate chain, leaf first, then any intermediates (or --acme-domain instead); re-read on reload' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l tls-key -d 'PEM file with the certificate\'s private key: PKCS#8, SEC1 or PKCS#1; re-read on reload' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l api-keys -d 'API keys file: one `LABEL SHA256HEX [read-only] [expires=TIME]` a line, managed with `petstore keys`; re-read on reload' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l acme-domain -d 'Obtain and renew the certificate over ACME for this DNS name, instead of --tls-cert/--tls-key (repeatable; comma-separated in the variable)' -r
complete -c petstore -n "__fish_petstore_needs_command" -l acme-directory -d 'The ACME CA\'s directory URL [default: Let\'s Encrypt production, https://acme-v02.api.letsencrypt.org/directory]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l acme-email -d 'Contact address given to the ACME CA (expiry and policy notices)' -r
complete -c petstore -n "__fish_petstore_needs_command" -l acme-ca-root -d 'PEM file with the CA certificates that sign the ACME server\'s own HTTPS certificate (a private ACME CA); without it, the system\'s roots' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l acme-eab-kid -d 'External Account Binding key id, from the CA (with --acme-eab-hmac-key-file)' -r
complete -c petstore -n "__fish_petstore_needs_command" -l acme-eab-hmac-key-file -d 'File holding the External Account Binding HMAC key, base64url as the CA gives it' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l acme-state-dir -d 'Directory for the ACME account key and certificates (created if missing, mode 0700) [default: acme/ in systemd\'s StateDirectory, else beside a redb --db; required with a PostgreSQL --db outside systemd]' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l db -d 'Where the pets are kept: a redb file, created if missing, or a PostgreSQL URL' -r
complete -c petstore -n "__fish_petstore_needs_command" -l cache-size -d 'Most memory, in MiB, redb\'s page cache may hold' -r
complete -c petstore -n "__fish_petstore_needs_command" -l max-write-batch -d 'Most queued writes one transaction takes (group commit)' -r
complete -c petstore -n "__fish_petstore_needs_command" -l idempotency-ttl -d 'How long a create\'s Idempotency-Key is remembered and answers retries, e.g. `90s`, `15m`, `24h`, `7d`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l events-keep -d 'How long the event feed (`GET /v1/events`) keeps an event, e.g. `12h`, `7d`, `30d`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l order-hold -d 'How long a new order holds its pet before it expires, e.g. `15m`, `2h`, `1d`; `0` for no expiry' -r
complete -c petstore -n "__fish_petstore_needs_command" -l db-password-file -d 'PostgreSQL only: file holding the database password (a trailing line break is ignored), e.g. `$CREDENTIALS_DIRECTORY/db-password` with systemd\'s LoadCredential=' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l db-ca -d 'PostgreSQL only: PEM file with the CA certificates that sign the server\'s certificate; without it, sslmode=verify-ca and verify-full use the system\'s roots' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l db-pool-size -d 'PostgreSQL only: connections the pool keeps at most [default: 16]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l db-statement-timeout -d 'PostgreSQL only: the longest one statement may run, e.g. `500ms`, `5s`, `1m` [default: 5s]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l max-connections -d 'Connections served at once; beyond it the connection idle longest is closed to make room' -r
complete -c petstore -n "__fish_petstore_needs_command" -l max-subscribers -d 'Event streams (`GET /v1/events` as text/event-stream) open at once; one more gets 503' -r
complete -c petstore -n "__fish_petstore_needs_command" -l handshake-timeout -d 'Time a client has to finish its TLS handshake, e.g. `10s`, `1m`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l header-timeout -d 'Time a client has to send a whole HTTP/1.1 request head (slowloris), e.g. `10s`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l body-timeout -d 'Time a client has to send a whole request body, e.g. `10s`, `1m`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l idle-timeout -d 'A connection with nothing in flight and no bytes moving is closed after this, e.g. `60s`, `5m`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l shutdown-timeout -d 'How long requests in flight may take to finish after SIGTERM or SIGINT, e.g. `10s`, `1m`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l rate-limit -d 'Requests each API key may make, as COUNT/UNIT with s, min, h or d: e.g. `200/s`, `6000/min`, `100000/h` [default: no limit]. Over it: 429 rate_limited' -r
complete -c petstore -n "__fish_petstore_needs_command" -l rate-burst -d 'Requests a key may make at once before --rate-limit spaces them out [default: the RATE\'s count]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l auth-failure-limit -d 'Requests with an API key that is not valid one client address may make, as RATE, or `off`; past it they get 429 instead of 401' -r
complete -c petstore -n "__fish_petstore_needs_command" -l auth-failure-burst -d 'Requests with a key that is not valid an address may make at once before --auth-failure-limit spaces them out' -r
complete -c petstore -n "__fish_petstore_needs_command" -l backup-dir -d 'redb only: directory for snapshots of the live file, taken while serving' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l backup-keep -d 'Snapshots kept in --backup-dir; the oldest beyond these are removed' -r
complete -c petstore -n "__fish_petstore_needs_command" -l backup-every -d 'Take a snapshot this often, e.g. `1h`, `30m`, `1d` [default: only on SIGUSR1]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l webhooks -d 'Webhook endpoints file: one `ID url=https://… secret=whsec_… [types=…] [label=…]` a line, managed with `petstore webhooks`; re-read on reload [default: no webhooks]' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l webhook-retry-schedule -d 'How long to wait before each retry of a delivery that failed, comma-separated: 1 to 20 durations, each above zero' -r
complete -c petstore -n "__fish_petstore_needs_command" -l webhooks-ca -d 'PEM file with the CA certificates receivers\' certificates are verified against, instead of the system\'s roots' -r -F
complete -c petstore -n "__fish_petstore_needs_command" -l console-path -d 'Where the staff console is served on the listener: a path prefix such as `/console` or `/shop/admin`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l session-idle -d 'How long a console session lasts without use, e.g. `30m`, `12h`, `7d`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l metrics-listen -d 'Socket address (an IP address and port) to serve Prometheus metrics on, over plain HTTP at `/metrics`, e.g. 127.0.0.1:9464; for localhost or a private network only [default: off]' -r
complete -c petstore -n "__fish_petstore_needs_command" -l log-format -d 'Log line format on stderr' -r -f -a "text\t'One human-readable line per event'
json\t'One JSON object per line, for log shippers'"
complete -c petstore -n "__fish_petstore_needs_command" -l log-level -d 'Log filter, e.g. `info`, `debug` or `petstore=debug`; when absent, RUST_LOG, else `info`' -r
complete -c petstore -n "__fish_petstore_needs_command" -l shared-reads -d 'redb only: let `petstore backup` and `petstore check` open the live file from another process'
complete -c petstore -n "__fish_petstore_needs_command" -l webhooks-allow-private -d 'Deliver to receivers at loopback, private, link-local and other addresses that are not public; by default a URL whose host resolves to one is refused'
complete -c petstore -n "__fish_petstore_needs_command" -l no-console -d 'Serve no console: its paths answer 404 and no session is accepted'
complete -c petstore -n "__fish_petstore_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_needs_command" -s V -l version -d 'Print version'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "new-key" -d 'Print a new random API key and the line that admits it in the keys file'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "keys" -d 'Add, list and revoke API keys in the keys file'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "webhooks" -d 'Add, list, remove and enable webhook endpoints, and rotate their secrets, in the endpoints file'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "copy" -d 'Copy one store into an empty one (redb or PostgreSQL, either way)'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "check" -d 'Check a redb file: its indexes, ids and pages; exits 0 only when everything agrees'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "backup" -d 'Copy a redb file, a live one included, into a new complete redb file'
complete -c petstore -n "__fish_petstore_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand new-key" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -l api-keys -d 'The API keys file to edit, as the server\'s --api-keys' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -f -a "add" -d 'Make a new key and admit it: the key is printed once, alone on the first line of standard output'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -f -a "list" -d 'Show each key\'s label, scope and expiry (never the keys or their hashes)'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -f -a "revoke" -d 'Remove every key with this label'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and not __fish_seen_subcommand_from add list revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from add" -l expires -d 'When the key stops working: an RFC 3339 date (2027-01-31, from the start of that day, UTC) or date-time (2027-01-31T12:00:00Z)' -r
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from add" -l api-keys -d 'The API keys file to edit, as the server\'s --api-keys' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from add" -l read-only -d 'The key may read but not create, change or delete (403 forbidden)'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from list" -l api-keys -d 'The API keys file to edit, as the server\'s --api-keys' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from revoke" -l api-keys -d 'The API keys file to edit, as the server\'s --api-keys' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "add" -d 'Make a new key and admit it: the key is printed once, alone on the first line of standard output'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "list" -d 'Show each key\'s label, scope and expiry (never the keys or their hashes)'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Remove every key with this label'
complete -c petstore -n "__fish_petstore_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "add" -d 'Add an endpoint: its new signing secret (`whsec_…`) is printed alone on the first line of standard output, and `id ep_…` on the second. Makes the file (mode 0600) if missing'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "list" -d 'Show each endpoint\'s id, label, URL, types, number of secrets and start (never a secret), and with --db its delivery state'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "remove" -d 'Remove the endpoint with this id: its deliveries stop'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "enable" -d 'Resume an endpoint the server disabled, from the event it could not deliver'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "rotate" -d 'Add a new secret (printed alone on the first line of standard output) after the endpoint\'s others; deliveries are signed with every one until --finish'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and not __fish_seen_subcommand_from add list remove enable rotate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from add" -l types -d 'Deliver only these event types, comma-separated, e.g. `pet.created,order.placed` [default: every type]' -r
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from add" -l label -d 'A name for the endpoint in metrics and logs (A-Z a-z 0-9 . _ -)' -r
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from add" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from add" -l from-start -d 'Start at the oldest event the store keeps, not at the newest'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from list" -l db -d 'The server\'s store, a redb file or a PostgreSQL URL as --db takes them: each endpoint\'s state (delivering, retrying since, disabled and why) and how many events it is behind. A running server lets another process read its redb file with --shared-reads (as for `petstore backup`)' -r
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from list" -l db-password-file -d 'PostgreSQL only: file holding the database password, as the server\'s' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from list" -l db-ca -d 'PostgreSQL only: PEM file with the CA certificates to verify the server against' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from list" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from remove" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from enable" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from enable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from rotate" -l webhooks -d 'The webhooks file to edit, as the server\'s --webhooks' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from rotate" -l finish -d 'Keep only the newest secret, once the receiver verifies with it'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from rotate" -s h -l help -d 'Print help'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add an endpoint: its new signing secret (`whsec_…`) is printed alone on the first line of standard output, and `id ep_…` on the second. Makes the file (mode 0600) if missing'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "list" -d 'Show each endpoint\'s id, label, URL, types, number of secrets and start (never a secret), and with --db its delivery state'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Remove the endpoint with this id: its deliveries stop'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "enable" -d 'Resume an endpoint the server disabled, from the event it could not deliver'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "rotate" -d 'Add a new secret (printed alone on the first line of standard output) after the endpoint\'s others; deliveries are signed with every one until --finish'
complete -c petstore -n "__fish_petstore_using_subcommand webhooks; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand copy" -l from -d 'The store to copy: a redb file or a PostgreSQL URL, as --db takes them' -r
complete -c petstore -n "__fish_petstore_using_subcommand copy" -l to -d 'The store to fill, which must be empty: a redb file (created if missing) or a PostgreSQL URL' -r
complete -c petstore -n "__fish_petstore_using_subcommand copy" -l db-password-file -d 'PostgreSQL only: file holding the database password, for each PostgreSQL side' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand copy" -l db-ca -d 'PostgreSQL only: PEM file with the CA certificates to verify each PostgreSQL side against; without it, the system\'s roots' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand copy" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand check" -l db -d 'The redb file to check. It is never written: a file no server has open is checked on a copy, a live one from one read transaction beside the server' -r
complete -c petstore -n "__fish_petstore_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand backup" -l db -d 'The redb file to back up, e.g. the running server\'s `--db`' -r
complete -c petstore -n "__fish_petstore_using_subcommand backup" -l to -d 'Where the backup goes; an existing file is replaced only once the new one is whole' -r -F
complete -c petstore -n "__fish_petstore_using_subcommand backup" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "new-key" -d 'Print a new random API key and the line that admits it in the keys file'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "keys" -d 'Add, list and revoke API keys in the keys file'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "webhooks" -d 'Add, list, remove and enable webhook endpoints, and rotate their secrets, in the endpoints file'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "copy" -d 'Copy one store into an empty one (redb or PostgreSQL, either way)'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "check" -d 'Check a redb file: its indexes, ids and pages; exits 0 only when everything agrees'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "backup" -d 'Copy a redb file, a live one included, into a new complete redb file'
complete -c petstore -n "__fish_petstore_using_subcommand help; and not __fish_seen_subcommand_from new-key keys webhooks copy check backup help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "add" -d 'Make a new key and admit it: the key is printed once, alone on the first line of standard output'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "list" -d 'Show each key\'s label, scope and expiry (never the keys or their hashes)'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "revoke" -d 'Remove every key with this label'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from webhooks" -f -a "add" -d 'Add an endpoint: its new signing secret (`whsec_…`) is printed alone on the first line of standard output, and `id ep_…` on the second. Makes the file (mode 0600) if missing'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from webhooks" -f -a "list" -d 'Show each endpoint\'s id, label, URL, types, number of secrets and start (never a secret), and with --db its delivery state'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from webhooks" -f -a "remove" -d 'Remove the endpoint with this id: its deliveries stop'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from webhooks" -f -a "enable" -d 'Resume an endpoint the server disabled, from the event it could not deliver'
complete -c petstore -n "__fish_petstore_using_subcommand help; and __fish_seen_subcommand_from webhooks" -f -a "rotate" -d 'Add a new secret (printed alone on the first line of standard output) after the endpoint\'s others; deliveries are signed with every one until --finish'

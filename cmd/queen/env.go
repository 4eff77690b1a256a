package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/internal/envconf"
	"github.com/queenmq/ephemeral/store/postgres"
	"github.com/queenmq/ephemeral/store/storeenv"
)

// settings lists every variable, in the order --help prints them.
var settings = []envconf.Setting{
	{Name: "PORT", Default: "6632", Help: "TCP port to listen on"},
	{Name: "HOST", Default: "0.0.0.0", Help: "address to listen on"},
	{Name: "QUEEN_DATA_DIR", Default: storeenv.DefaultDataDir, Help: "directory of the embedded store (used when no database URL is set)"},
	{Name: "QUEEN_DATABASE_URL", Default: "", Help: "PostgreSQL URL for declarations and grants (PGHOST and the other PG* variables work too)"},
	{Name: "QUEEN_DATABASE_SCHEMA", Default: postgres.DefaultSchema, Help: "PostgreSQL schema the broker creates and uses (never public)"},
	{Name: "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS", Default: ms(postgres.DefaultAcquireTimeout), Help: "PostgreSQL: wait this long for a connection, then 503"},
	{Name: "QUEEN_DATABASE_STATEMENT_TIMEOUT_MS", Default: ms(postgres.DefaultStatementTimeout), Help: "PostgreSQL: bound on one statement"},
	{Name: "QUEEN_CELL_ADVERTISE", Default: "", Help: "host:port where the other members of a cell reach this broker (its relay listens on that port, which must differ from PORT); needs PostgreSQL; unset: a cell of one"},
	{Name: "QUEEN_CELL_SECRET", Default: "", Help: "with QUEEN_CELL_ADVERTISE: shared secret authenticating member-to-member traffic (at least 16 bytes)"},
	{Name: "QUEEN_CELL_HEARTBEAT_MS", Default: ms(cell.DefaultHeartbeat), Help: "with QUEEN_CELL_ADVERTISE: how often a member renews its row and reloads the live set"},
	{Name: "QUEEN_CELL_LISTEN", Default: "", Help: "with QUEEN_CELL_ADVERTISE: the host the relay binds, on the advertised port (default: HOST when set, else every interface)"},
	{Name: "QUEEN_CELL_PUBLIC_URL", Default: "", Help: "with QUEEN_CELL_ADVERTISE: the URL clients reach this member's public port at (http:// or https://, host, port, no path), given to clients so that they send each queue to its owner (default: http://HOST:PORT when HOST names a dialable address, else none)"},
	{Name: "QUEEN_CELL_MEMBER_TIMEOUT_MS", Default: ms(cell.DefaultMemberTimeout), Help: "with QUEEN_CELL_ADVERTISE: a member silent this long leaves the cell (and fences itself); at least twice the heartbeat"},
	{Name: "QUEEN_EPHEMERAL_MAX_BYTES", Default: "268435456", Help: "the broker's total payload budget (256 MiB): 503 ephemeral_unavailable past it"},
	{Name: "QUEEN_EPHEMERAL_QUEUE_MAX_BYTES", Default: "16777216", Help: "default maxBytes of a queue (16 MiB)"},
	{Name: "QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH", Default: "10000", Help: "default maxLength of a queue"},
	{Name: "QUEEN_EPHEMERAL_TTL_S", Default: "0", Help: "default ttlSeconds of every queue (0 = off): how an operator bounds abandoned inboxes"},
	{Name: "QUEEN_EPHEMERAL_LEASE_S", Default: "30", Help: "default leaseSeconds"},
	{Name: "QUEEN_EPHEMERAL_RETRY_LIMIT", Default: "5", Help: "default retryLimit"},
	{Name: "QUEEN_EPHEMERAL_CEILING_MAX_BYTES", Default: "", Help: "ceiling of maxBytes (default: the broker total)"},
	{Name: "QUEEN_EPHEMERAL_CEILING_MAX_LENGTH", Default: "1000000", Help: "ceiling of maxLength"},
	{Name: "QUEEN_EPHEMERAL_CEILING_LEASE_S", Default: "3600", Help: "ceiling of leaseSeconds"},
	{Name: "QUEEN_EPHEMERAL_CEILING_TTL_S", Default: "86400", Help: "ceiling of ttlSeconds"},
	{Name: "QUEEN_EPHEMERAL_CEILING_RETRY_LIMIT", Default: "100", Help: "ceiling of retryLimit"},
	{Name: "QUEEN_EPHEMERAL_GROUP_IDLE_S", Default: "300", Help: "a group that neither popped nor acked this long is forgotten"},
	{Name: "QUEEN_EPHEMERAL_IMPLICIT_IDLE_S", Default: "300", Help: "an empty, unpolled implicit queue is collected after this long"},
	{Name: "QUEEN_EPHEMERAL_POP_TIMEOUT_MS", Default: "30000", Help: "a waiting pop's timeout when the request names none"},
	{Name: "QUEEN_EPHEMERAL_TENANT_MAX_BYTES", Default: "0", Help: "a tenant's byte allowance without a grant (0 = unlimited)"},
	{Name: "QUEEN_EPHEMERAL_TENANT_MAX_QUEUES", Default: "0", Help: "a tenant's queue allowance without a grant (0 = unlimited)"},
	{Name: "QUEEN_EPHEMERAL_TENANT_MSGS_PER_S", Default: "0", Help: "a tenant's messages per second without a grant (0 = unlimited): 429 rate_limited past it"},
	{Name: "QUEEN_EPHEMERAL_REQUIRE_GRANT", Default: "", Help: "true|false: a tenant without a grant row gets 403 feature_gated (default: true in gateway mode, false otherwise)"},
	{Name: "QUEEN_AUTH_MODE", Default: "none", Help: "identity: none (tenant default, full access), jwt or gateway"},
	{Name: "QUEEN_JWT_SECRET", Default: "", Help: "jwt: HS256 secret"},
	{Name: "QUEEN_JWT_JWKS_URL", Default: "", Help: "jwt: URL of a JWK Set (RS256/EdDSA keys by kid), fetched in the background"},
	{Name: "QUEEN_JWT_JWKS_REFRESH_S", Default: "300", Help: "jwt: how often the JWK Set is fetched again"},
	{Name: "QUEEN_JWT_PUBLIC_KEY", Default: "", Help: "jwt: path of a PEM public key (RSA for RS256, Ed25519 for EdDSA)"},
	{Name: "QUEEN_JWT_ISSUER", Default: "", Help: "jwt: required iss (unset = not checked)"},
	{Name: "QUEEN_JWT_AUDIENCE", Default: "", Help: "jwt: required aud (unset = not checked)"},
	{Name: "QUEEN_JWT_TENANT_CLAIM", Default: "tenant", Help: "jwt: the claim naming the tenant (absent = tenant default)"},
	{Name: "QUEEN_JWT_ALLOW_NO_EXP", Default: "false", Help: "jwt: true accepts tokens without an exp claim (default: 401, exp is required)"},
	{Name: "QUEEN_GATEWAY_SECRET", Default: "", Help: "gateway: the shared secret the gateway sends in X-Queen-Gateway-Secret"},
	{Name: "QUEEN_ADMIN_TOKEN", Default: "", Help: "the broker operator's token (Authorization: Bearer <token>) for the admin routes and /metrics, in every mode; unset in mode none = loopback clients only"},
	{Name: "QUEEN_OPERATOR_TENANT", Default: "", Help: "jwt/gateway: an admin of this tenant is the broker operator (kill switch, every grant); unset = no tenant is"},
	{Name: "QUEEN_METRICS_PUBLIC", Default: "false", Help: "true serves /metrics to anyone; by default it needs what the admin routes need"},
	{Name: "QUEEN_TRUSTED_ORIGINS", Default: "", Help: "comma-separated browser origins (scheme://host[:port]) whose pages may change state from another origin; others get 403 forbidden (D20)"},
	{Name: "QUEEN_TRUSTED_HOSTS", Default: "", Help: "comma-separated host names (no port) protected mode accepts in Host from a loopback client, besides localhost, 127.0.0.1 and [::1] (D20)"},
	{Name: "QUEEN_MAX_BODY_BYTES", Default: "67108864", Help: "largest request body (64 MiB): a larger one is a 400 and the connection closes"},
	{Name: "QUEEN_MAX_INFLIGHT_BYTES", Default: "", Help: "request bytes all connections may hold while bodies arrive (default: a quarter of QUEEN_EPHEMERAL_MAX_BYTES, at least 16 MiB): a body past it is a 503 ephemeral_unavailable on its head"},
	{Name: "QUEEN_CONNECTION_CHARGE_BYTES", Default: "2048", Help: "what each open connection counts against QUEEN_EPHEMERAL_MAX_BYTES (what a connection measures; 0 = none)"},
	{Name: "QUEEN_HEADER_TIMEOUT_MS", Default: "10000", Help: "close a connection whose request head takes longer than this"},
	{Name: "QUEEN_BODY_TIMEOUT_MS", Default: "30000", Help: "close a connection whose request body takes longer than this"},
	{Name: "QUEEN_OUTBOUND_SOFT_BYTES", Default: "1048576", Help: "stop serving a connection's requests while its unread answers pass this (1 MiB)"},
	{Name: "QUEEN_OUTBOUND_HARD_BYTES", Default: "8388608", Help: "close a connection whose unread answers pass this (8 MiB; one answer alone may be larger)"},
	{Name: "QUEEN_OUTBOUND_SOFT_S", Default: "10", Help: "close a connection over the soft limit for this long"},
	{Name: "QUEEN_IDLE_TIMEOUT_S", Default: "120", Help: "close a keep-alive connection idle this long"},
	{Name: "QUEEN_EVENT_LOOPS", Default: "0", Help: "event loops (0 = half the CPUs, at least one; docs/server.md says why)"},
	{Name: "GOMEMLIMIT", Default: "", Help: "the Go heap's soft limit (default: 1.125 × QUEEN_EPHEMERAL_MAX_BYTES + 48 MiB; docs/server.md says why)"},
	{Name: "QUEEN_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
	{Name: "QUEEN_PPROF_ADDR", Default: "", Help: "serve net/http/pprof at this separate address, e.g. 127.0.0.1:6060 (unset = off); also samples mutex and block profiles"},
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "queen: the broker of the ephemeral storage class, HTTP/1.1 at /api/v1/ephemeral/*")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: queen [--help | --version]   (configured by environment variables)")
	fmt.Fprintln(w)
	envconf.PrintHelp(w, settings)
}

// ms renders a default duration as the milliseconds a variable takes, so
// that --help shows the default its package declares.
func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// newEnv reads the broker's settings through getenv.
func newEnv(getenv func(string) string) *envconf.Env {
	return &envconf.Env{Get: getenv, Settings: settings}
}

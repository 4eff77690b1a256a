package main

import (
	"fmt"
	"io"

	"strconv"
	"strings"
)

// setting is one environment variable the broker reads.
type setting struct {
	name string
	def  string
	help string
}

// settings lists every variable, in the order --help prints them.
var settings = []setting{
	{"PORT", "6632", "TCP port to listen on"},
	{"HOST", "0.0.0.0", "address to listen on"},
	{"QUEEN_DATA_DIR", "./queen-data", "directory of the embedded store (used when no database URL is set)"},
	{"QUEEN_DATABASE_URL", "", "PostgreSQL URL for declarations and grants (PGHOST and the other PG* variables work too)"},
	{"QUEEN_DATABASE_SCHEMA", "queen_ephemeral", "PostgreSQL schema the broker creates and uses (never public)"},
	{"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS", "2000", "PostgreSQL: wait this long for a connection, then 503"},
	{"QUEEN_DATABASE_STATEMENT_TIMEOUT_MS", "2000", "PostgreSQL: bound on one statement"},
	{"QUEEN_CELL_ADVERTISE", "", "host:port where the other members of a cell reach this broker (its relay listens on that port, which must differ from PORT); needs PostgreSQL; unset: a cell of one"},
	{"QUEEN_CELL_SECRET", "", "with QUEEN_CELL_ADVERTISE: shared secret authenticating member-to-member traffic (at least 16 bytes)"},
	{"QUEEN_CELL_HEARTBEAT_MS", "1000", "with QUEEN_CELL_ADVERTISE: how often a member renews its row and reloads the live set"},
	{"QUEEN_CELL_MEMBER_TIMEOUT_MS", "5000", "with QUEEN_CELL_ADVERTISE: a member silent this long leaves the cell (and fences itself); at least twice the heartbeat"},
	{"QUEEN_EPHEMERAL_MAX_BYTES", "268435456", "the broker's total payload budget (256 MiB): 503 ephemeral_unavailable past it"},
	{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES", "16777216", "default maxBytes of a queue (16 MiB)"},
	{"QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH", "10000", "default maxLength of a queue"},
	{"QUEEN_EPHEMERAL_TTL_S", "0", "default ttlSeconds of every queue (0 = off): how an operator bounds abandoned inboxes"},
	{"QUEEN_EPHEMERAL_LEASE_S", "30", "default leaseSeconds"},
	{"QUEEN_EPHEMERAL_RETRY_LIMIT", "5", "default retryLimit"},
	{"QUEEN_EPHEMERAL_CEILING_MAX_BYTES", "", "ceiling of maxBytes (default: the broker total)"},
	{"QUEEN_EPHEMERAL_CEILING_MAX_LENGTH", "1000000", "ceiling of maxLength"},
	{"QUEEN_EPHEMERAL_CEILING_LEASE_S", "3600", "ceiling of leaseSeconds"},
	{"QUEEN_EPHEMERAL_CEILING_TTL_S", "86400", "ceiling of ttlSeconds"},
	{"QUEEN_EPHEMERAL_CEILING_RETRY_LIMIT", "100", "ceiling of retryLimit"},
	{"QUEEN_EPHEMERAL_GROUP_IDLE_S", "300", "a group that neither popped nor acked this long is forgotten"},
	{"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S", "300", "an empty, unpolled implicit queue is collected after this long"},
	{"QUEEN_EPHEMERAL_POP_TIMEOUT_MS", "30000", "a waiting pop's timeout when the request names none"},
	{"QUEEN_EPHEMERAL_TENANT_MAX_BYTES", "0", "a tenant's byte allowance without a grant (0 = unlimited)"},
	{"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES", "0", "a tenant's queue allowance without a grant (0 = unlimited)"},
	{"QUEEN_EPHEMERAL_TENANT_MSGS_PER_S", "0", "a tenant's messages per second without a grant (0 = unlimited): 429 rate_limited past it"},
	{"QUEEN_EPHEMERAL_REQUIRE_GRANT", "", "true|false: a tenant without a grant row gets 403 feature_gated (default: true in gateway mode, false otherwise)"},
	{"QUEEN_AUTH_MODE", "none", "identity: none (tenant default, full access), jwt or gateway"},
	{"QUEEN_JWT_SECRET", "", "jwt: HS256 secret"},
	{"QUEEN_JWT_JWKS_URL", "", "jwt: URL of a JWK Set (RS256/EdDSA keys by kid), fetched in the background"},
	{"QUEEN_JWT_JWKS_REFRESH_S", "300", "jwt: how often the JWK Set is fetched again"},
	{"QUEEN_JWT_PUBLIC_KEY", "", "jwt: path of a PEM public key (RSA for RS256, Ed25519 for EdDSA)"},
	{"QUEEN_JWT_ISSUER", "", "jwt: required iss (unset = not checked)"},
	{"QUEEN_JWT_AUDIENCE", "", "jwt: required aud (unset = not checked)"},
	{"QUEEN_JWT_TENANT_CLAIM", "tenant", "jwt: the claim naming the tenant (absent = tenant default)"},
	{"QUEEN_JWT_ALLOW_NO_EXP", "false", "jwt: true accepts tokens without an exp claim (default: 401, exp is required)"},
	{"QUEEN_GATEWAY_SECRET", "", "gateway: the shared secret the gateway sends in X-Queen-Gateway-Secret"},
	{"QUEEN_ADMIN_TOKEN", "", "the broker operator's token (Authorization: Bearer <token>) for the admin routes and /metrics, in every mode; unset in mode none = loopback clients only"},
	{"QUEEN_OPERATOR_TENANT", "", "jwt/gateway: an admin of this tenant is the broker operator (kill switch, every grant); unset = no tenant is"},
	{"QUEEN_METRICS_PUBLIC", "false", "true serves /metrics to anyone; by default it needs what the admin routes need"},
	{"QUEEN_MAX_BODY_BYTES", "67108864", "largest request body (64 MiB): a larger one is a 400 and the connection closes"},
	{"QUEEN_MAX_INFLIGHT_BYTES", "", "request bytes all connections may hold while bodies arrive (default: a quarter of QUEEN_EPHEMERAL_MAX_BYTES, at least 16 MiB): a body past it is a 503 ephemeral_unavailable on its head"},
	{"QUEEN_CONNECTION_CHARGE_BYTES", "2048", "what each open connection counts against QUEEN_EPHEMERAL_MAX_BYTES (what a connection measures; 0 = none)"},
	{"QUEEN_HEADER_TIMEOUT_MS", "10000", "close a connection whose request head takes longer than this"},
	{"QUEEN_BODY_TIMEOUT_MS", "30000", "close a connection whose request body takes longer than this"},
	{"QUEEN_OUTBOUND_SOFT_BYTES", "1048576", "stop serving a connection's requests while its unread answers pass this (1 MiB)"},
	{"QUEEN_OUTBOUND_HARD_BYTES", "8388608", "close a connection whose unread answers pass this (8 MiB; one answer alone may be larger)"},
	{"QUEEN_OUTBOUND_SOFT_S", "10", "close a connection over the soft limit for this long"},
	{"QUEEN_IDLE_TIMEOUT_S", "120", "close a keep-alive connection idle this long"},
	{"QUEEN_EVENT_LOOPS", "0", "event loops (0 = half the CPUs, at least one; docs/server.md says why)"},
	{"GOMEMLIMIT", "", "the Go heap's soft limit (default: 1.125 × QUEEN_EPHEMERAL_MAX_BYTES + 48 MiB; docs/server.md says why)"},
	{"QUEEN_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"QUEEN_PPROF_ADDR", "", "serve net/http/pprof at this separate address, e.g. 127.0.0.1:6060 (unset = off); also samples mutex and block profiles"},
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "queen: the broker of the ephemeral storage class, HTTP/1.1 at /api/v1/ephemeral/*")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: queen [--help | --version]   (configured by environment variables)")
	fmt.Fprintln(w)
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "(unset)"
		}
		fmt.Fprintf(w, "  %-36s %-12s %s\n", s.name, def, s.help)
	}
}

// env reads the settings; every value is checked and an error names the
// variable.
type env struct {
	get  func(string) string
	errs []string
}

func (e *env) str(name string) string {
	if v := e.get(name); v != "" {
		return v
	}
	for _, s := range settings {
		if s.name == name {
			return s.def
		}
	}
	return ""
}

// int64 reads a non-negative integer; "" means the default, which may be
// empty (0).
func (e *env) int64(name string) int64 {
	v := strings.TrimSpace(e.str(name))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a non-negative integer", name, v))
		return 0
	}
	return n
}

// bool reads true|false; "" means def.
func (e *env) bool(name string, def bool) bool {
	switch v := strings.TrimSpace(e.str(name)); v {
	case "":
		return def
	case "true":
		return true
	case "false":
		return false
	default:
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not true or false", name, v))
		return def
	}
}

func (e *env) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("bad configuration: %s", strings.Join(e.errs, "; "))
}

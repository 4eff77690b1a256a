package server

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/store"
)

// Config is what a Server needs; zero durations and sizes take defaults.
type Config struct {
	// Addr is host:port to listen on (TCP).
	Addr   string
	Engine *engine.Engine
	Store  store.Store
	Logger *slog.Logger
	// Version is what /health's "version" says; Commit is the source
	// revision, shown beside it in queen_ephemeral_build_info (cmd/queen
	// fills both: stamped by `make build` or read from the build info).
	Version string
	Commit  string

	// MaxBodyBytes is QUEEN_MAX_BODY_BYTES (64 MiB): a larger body is a
	// 400 and the connection is closed (D7).
	MaxBodyBytes int64
	// PopTimeout is a pop's timeout when the request names none
	// (QUEEN_EPHEMERAL_POP_TIMEOUT_MS). Left zero it is the default, 30 s,
	// unless PopTimeoutSet says the zero is meant.
	PopTimeout time.Duration
	// PopTimeoutSet says PopTimeout is used as given, zero included: a
	// waiting pop that names no timeout then answers at once. Without it, a
	// zero (or negative) PopTimeout means the default.
	PopTimeoutSet bool
	// HeaderTimeout closes a connection whose request head has been
	// arriving for this long (10 s).
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request in
	// flight for this long (120 s).
	IdleTimeout time.Duration
	// MaxInflightBytes bounds the request bytes all connections together
	// may hold while bodies arrive (QUEEN_MAX_INFLIGHT_BYTES; default
	// 64 MiB, cmd/queen derives it from the budget): a body that cannot be
	// reserved is refused on its head with 503 ephemeral_unavailable.
	MaxInflightBytes int64
	// BodyTimeout closes a connection whose request body has been
	// arriving for this long (QUEEN_BODY_TIMEOUT_MS, 30 s).
	BodyTimeout time.Duration
	// OutboundSoft stops serving a connection's requests while its unsent
	// answers pass this many bytes (QUEEN_OUTBOUND_SOFT_BYTES, 1 MiB);
	// OutboundHard closes it when they pass this many with answers
	// already waiting before the last one (QUEEN_OUTBOUND_HARD_BYTES,
	// 8 MiB); OutboundSoftTime closes it after this long over the soft
	// limit (QUEEN_OUTBOUND_SOFT_S, 10 s).
	OutboundSoft     int
	OutboundHard     int
	OutboundSoftTime time.Duration
	// ConnCharge is what each open connection counts against the broker
	// total (QUEEN_CONNECTION_CHARGE_BYTES; cmd/queen defaults it to 2 KiB,
	// what a connection measures; 0 = none): its conn, gnet's connection
	// and the buffers it keeps (docs/server.md, accepting connections).
	ConnCharge int64
	// MaxPipelined closes a connection that queues more than this many
	// bytes of requests behind a busy one (default MaxBodyBytes + 64 KiB).
	MaxPipelined int
	// Cell is the cell this broker is a member of, for the status reads
	// (cellstatus.go); nil outside a cell. *cell.Membership satisfies it.
	Cell CellStatus
	// StoreTimeout bounds one declaration write (5 s).
	StoreTimeout time.Duration
	// SyncInterval is how often the broker looks at the store's revision
	// for changes made by other brokers on the same database (default 1 s;
	// in a cell, QUEEN_CELL_HEARTBEAT_MS). Notifications make it prompt;
	// this bounds how late a lost one is made up for (sync.go).
	SyncInterval time.Duration
	// Loops is the number of event loops (0: DefaultLoops).
	Loops int

	// Auth identifies requests (D14); nil is mode none.
	Auth *identity.Auth
	// RequireGrant refuses a tenant without a grant row with 403
	// feature_gated (QUEEN_EPHEMERAL_REQUIRE_GRANT).
	RequireGrant bool
	// TenantMsgsPerSecond is the rate of a tenant without a grant
	// (QUEEN_EPHEMERAL_TENANT_MSGS_PER_S, 0 = unlimited).
	TenantMsgsPerSecond int64

	// The admin scope (docs/server.md, "Admin scope"). AdminToken
	// (QUEEN_ADMIN_TOKEN), sent as "Authorization: Bearer <token>", makes a
	// request the broker's operator in every mode; empty = none. In mode
	// none without it, only loopback clients may use the admin routes.
	AdminToken []byte
	// OperatorTenant (QUEEN_OPERATOR_TENANT): in jwt and gateway modes, an
	// admin of this tenant is the broker's operator; empty = no tenant is.
	OperatorTenant string
	// MetricsPublic (QUEEN_METRICS_PUBLIC) serves /metrics to anyone;
	// otherwise it follows the operator rule of the admin routes.
	MetricsPublic bool
	// Browsers holds what the operator lets browsers do (D20,
	// docs/server.md "Browsers"): the trusted origins
	// (QUEEN_TRUSTED_ORIGINS) exempt from the cross-origin refusal, and the
	// trusted hosts (QUEEN_TRUSTED_HOSTS) that protected mode accepts from
	// a loopback client besides loopback's own names. nil trusts neither.
	Browsers *crossorigin.Guard
}

// fillDefaults sets every field left zero (or negative) to its default.
func (c *Config) fillDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Loops <= 0 {
		c.Loops = DefaultLoops()
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 64 << 20
	}
	if c.PopTimeoutSet {
		c.PopTimeout = max(0, c.PopTimeout)
	} else if c.PopTimeout <= 0 {
		c.PopTimeout = 30 * time.Second
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = 64 << 20
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
	if c.OutboundSoft <= 0 {
		c.OutboundSoft = 1 << 20
	}
	if c.OutboundHard <= 0 {
		c.OutboundHard = 8 << 20
	}
	if c.OutboundSoftTime <= 0 {
		c.OutboundSoftTime = 10 * time.Second
	}
	if c.MaxPipelined <= 0 {
		c.MaxPipelined = int(c.MaxBodyBytes) + 64<<10
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 5 * time.Second
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = time.Second
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// DefaultLoops is the number of event loops when none is configured: half
// the CPUs the process may use, at least one. The other half is left to
// the kernel's TCP work, which is more than half of what an operation costs
// (queenbench's "kernel us" rows), to the Go runtime, and to clients on
// the same machine. Measured on 2 CPUs with the load tool beside the
// broker (docs/server.md, event loops): one loop against two, every
// scenario even or better, request/reply p99 a third lower.
func DefaultLoops() int { return max(1, runtime.GOMAXPROCS(0)/2) }

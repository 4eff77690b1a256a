package cell

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// Defaults of QUEEN_CELL_HEARTBEAT_MS and QUEEN_CELL_MEMBER_TIMEOUT_MS.
const (
	DefaultHeartbeat     = time.Second
	DefaultMemberTimeout = 5 * time.Second
)

// MinSecretBytes is the shortest QUEEN_CELL_SECRET accepted: the secret
// authenticates member-to-member traffic, and a short one is guessable.
const MinSecretBytes = 16

// Config is the cell's part of the broker's environment (D17).
type Config struct {
	// Advertise is host:port where the other members reach this broker
	// (QUEEN_CELL_ADVERTISE); it is also the member's id. Empty: a broker
	// of its own (no cell), and every other field is zero.
	Advertise string
	// Secret authenticates member-to-member traffic (QUEEN_CELL_SECRET).
	Secret []byte
	// Heartbeat is how often the member renews its row and reloads the live
	// set (QUEEN_CELL_HEARTBEAT_MS, default 1000).
	Heartbeat time.Duration
	// MemberTimeout: a row older than this is not live, and a member that
	// could not renew its own row for this long is fenced
	// (QUEEN_CELL_MEMBER_TIMEOUT_MS, default 5000).
	MemberTimeout time.Duration
	// Listen is the host the relay binds, on Advertise's port
	// (QUEEN_CELL_LISTEN; default HOST, so that HOST=127.0.0.1 keeps the
	// relay local too). Empty: every interface.
	Listen string
	// PublicURL is where clients reach this member's public port
	// (QUEEN_CELL_PUBLIC_URL: http:// or https://, a host, an optional
	// port, no path), published with the member so that clients can send
	// each queue's calls to its owner (docs/cell.md, "Public URLs"). Empty:
	// none; the broker's wiring derives one from HOST and PORT when HOST
	// names a dialable address (DerivePublicURL).
	PublicURL string
}

// Enabled reports whether the broker is a member of a cell (more than a
// cell of one).
func (c Config) Enabled() bool { return c.Advertise != "" }

// RelayAddr is the address the relay's listener binds: Listen with the
// advertised port. The advertised host is not bound: it may be a name, or
// an address translated on the way (a container's published port).
func (c Config) RelayAddr() string {
	_, port, _ := net.SplitHostPort(c.Advertise)
	return net.JoinHostPort(c.Listen, port)
}

// The variables FromEnv reads.
const (
	EnvAdvertise     = "QUEEN_CELL_ADVERTISE"
	EnvSecret        = "QUEEN_CELL_SECRET"
	EnvHeartbeat     = "QUEEN_CELL_HEARTBEAT_MS"
	EnvMemberTimeout = "QUEEN_CELL_MEMBER_TIMEOUT_MS"
	EnvListen        = "QUEEN_CELL_LISTEN"
	EnvPublicURL     = "QUEEN_CELL_PUBLIC_URL"
	// EnvHost is the broker's own HOST, the default of EnvListen.
	EnvHost = "HOST"
)

// FromEnv reads the cell's configuration; getenv is os.Getenv outside
// tests. It refuses, with a message naming the variables, what D17 refuses:
// an advertised address without a database (QUEEN_DATABASE_URL, or PGHOST,
// which the store takes for PostgreSQL too) or without a secret. It also
// refuses a QUEEN_CELL_* variable set without QUEEN_CELL_ADVERTISE, because
// a broker meant for a cell that silently runs as a cell of one on the same
// database would answer for every queue beside the real owners.
func FromEnv(getenv func(string) string) (Config, error) {
	adv := strings.TrimSpace(getenv(EnvAdvertise))
	if adv == "" {
		var set []string
		for _, n := range []string{EnvSecret, EnvHeartbeat, EnvMemberTimeout, EnvListen, EnvPublicURL} {
			if getenv(n) != "" {
				set = append(set, n)
			}
		}
		if len(set) > 0 {
			return Config{}, fmt.Errorf("%s is set without %s: set %s to this broker's host:port to join a cell, or unset %s to run alone",
				strings.Join(set, ", "), EnvAdvertise, EnvAdvertise, strings.Join(set, ", "))
		}
		return Config{}, nil
	}
	var errs []string
	if err := validAdvertise(adv); err != nil {
		errs = append(errs, err.Error())
	}
	if getenv("QUEEN_DATABASE_URL") == "" && getenv("PGHOST") == "" {
		errs = append(errs, fmt.Sprintf("%s needs QUEEN_DATABASE_URL: the members of a cell share one PostgreSQL database, where membership lives", EnvAdvertise))
	}
	secret := getenv(EnvSecret)
	switch {
	case secret == "":
		errs = append(errs, fmt.Sprintf("%s needs %s: it authenticates member-to-member traffic", EnvAdvertise, EnvSecret))
	case len(secret) < MinSecretBytes:
		errs = append(errs, fmt.Sprintf("%s is %d bytes; at least %d are required", EnvSecret, len(secret), MinSecretBytes))
	}
	hb, err := millis(getenv, EnvHeartbeat, DefaultHeartbeat)
	if err != nil {
		errs = append(errs, err.Error())
	}
	to, err := millis(getenv, EnvMemberTimeout, DefaultMemberTimeout)
	if err != nil {
		errs = append(errs, err.Error())
	}
	if hb > 0 && to > 0 && to < 2*hb {
		// One late heartbeat must not make a member leave.
		errs = append(errs, fmt.Sprintf("%s=%d must be at least twice %s=%d",
			EnvMemberTimeout, to.Milliseconds(), EnvHeartbeat, hb.Milliseconds()))
	}
	listen, err := listenHost(getenv)
	if err != nil {
		errs = append(errs, err.Error())
	}
	public, err := publicURL(getenv(EnvPublicURL))
	if err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return Config{}, errors.New("bad cell configuration: " + strings.Join(errs, "; "))
	}
	return Config{Advertise: adv, Secret: []byte(secret), Heartbeat: hb, MemberTimeout: to, Listen: listen, PublicURL: public}, nil
}

// listenHost reads QUEEN_CELL_LISTEN, or HOST when it is unset: a host to
// bind, without a port (an IPv6 address with or without brackets).
func listenHost(getenv func(string) string) (string, error) {
	name := EnvListen
	h := strings.TrimSpace(getenv(name))
	if h == "" {
		name = EnvHost
		h = strings.TrimSpace(getenv(name))
	}
	if inner, ok := strings.CutPrefix(h, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); ok && strings.Contains(inner, ":") {
			h = inner
		}
	}
	switch {
	case strings.ContainsAny(h, " \t\r\n[]/"):
		return "", fmt.Errorf("%s=%q is not a host to bind", name, h)
	case strings.Contains(h, ":") && net.ParseIP(h) == nil:
		return "", fmt.Errorf("%s=%q: give the host only; the relay listens on %s's port", name, h, EnvAdvertise)
	}
	return h, nil
}

// validAdvertise accepts host:port with a port of 1 to 65535 and a host the
// other members can dial: not empty, not an unspecified address.
func validAdvertise(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%s=%q is not host:port: %v", EnvAdvertise, a, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s=%q: the port must be 1 to 65535", EnvAdvertise, a)
	}
	if host == "" {
		return fmt.Errorf("%s=%q names no host: the other members must be able to dial it", EnvAdvertise, a)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%s=%q is an unspecified address: advertise one the other members can dial", EnvAdvertise, a)
	}
	if strings.ContainsAny(a, " \t\r\n") {
		return fmt.Errorf("%s=%q contains white space", EnvAdvertise, a)
	}
	return nil
}

// millis reads a positive integer of milliseconds, 1 to 3600000; unset is
// def.
func millis(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 3_600_000 {
		return 0, fmt.Errorf("%s=%q: want milliseconds, 1 to 3600000", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// LogValue keeps the secret out of logs: a Config logged with slog shows
// the secret's length only.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("advertise", c.Advertise),
		slog.Int("secret_bytes", len(c.Secret)),
		slog.Duration("heartbeat", c.Heartbeat),
		slog.Duration("member_timeout", c.MemberTimeout),
		slog.String("relay_listen", c.RelayAddr()),
		slog.String("public_url", c.PublicURL),
	)
}

// String is LogValue for fmt: the secret is never printed.
func (c Config) String() string {
	return fmt.Sprintf("cell{advertise=%s secret=<%d bytes> heartbeat=%v member_timeout=%v relay_listen=%s public_url=%s}",
		c.Advertise, len(c.Secret), c.Heartbeat, c.MemberTimeout, c.RelayAddr(), c.PublicURL)
}

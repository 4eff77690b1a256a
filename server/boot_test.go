package server

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/embedded"
	"github.com/queenmq/ephemeral/store/postgres"
	"github.com/queenmq/ephemeral/store/storetest"
)

var pg *storetest.Postgres

// TestMain starts the throwaway PostgreSQL the store tests use, and
// doubles as the owner process that the relay Client's kill -9 and
// SIGSTOP tests start (RELAY_OWNER_ADDR set: relayOwnerProcess).
func TestMain(m *testing.M) {
	if addr := os.Getenv("RELAY_OWNER_ADDR"); addr != "" {
		relayOwnerProcess(addr, os.Getenv("RELAY_OWNER_DIR"))
		return
	}
	os.Exit(storetest.MainWithPostgres(m, &pg))
}

func startWithStore(t *testing.T, st store.Store) *testServer {
	return startWith(t, engine.Config{}, st, 1)
}

// startWith starts a server on a free loopback port over a new engine.
func startWith(t *testing.T, ecfg engine.Config, st store.Store, loops int) *testServer {
	t.Helper()
	return serve(t, engine.New(ecfg), st, Config{Loops: loops})
}

// hs256 signs claims with secret, for a server in jwt mode (its own tests
// of identity are package identity's).
func hs256(tb testing.TB, secret []byte, claims jwt.MapClaims) string {
	tb.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// serve starts a server over e and st with cfg (Addr, Engine and Store are
// filled in) on a free loopback port; it is shut down, and e closed, when
// the test ends.
func serve(t testing.TB, e *engine.Engine, st store.Store, cfg Config) *testServer {
	t.Helper()
	return serveWith(t, e, st, cfg, nil)
}

// serveWith is serve with prepare run on the server before it starts.
func serveWith(t testing.TB, e *engine.Engine, st store.Store, cfg Config, prepare func(*Server)) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = l.Addr().String()
	l.Close()
	cfg.Engine, cfg.Store = e, st
	s := New(cfg)
	if prepare != nil {
		prepare(s)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		e.Close()
	})
	return &testServer{s: s, e: e, addr: cfg.Addr}
}

// openStore opens an embedded store in a temporary directory, closed when
// the test ends (after the server that uses it).
func openStore(t testing.TB) store.Store {
	t.Helper()
	st, err := embedded.Open(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// D16: boot loads every declaration before the broker serves: each
// declared queue exists, configured as stored and empty.
func TestBootLoadsDeclarationsBeforeServing(t *testing.T) {
	st, err := embedded.Open(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	must(t, st.PutDeclaration(ctx, store.Declaration{Tenant: "default", Queue: "presence", Options: []byte(`{"maxLength": 7, "policy": "dropOldest"}`)}))
	must(t, st.PutDeclaration(ctx, store.Declaration{Tenant: "default", Queue: "plain", Options: []byte(`{}`)}))
	ts := startWithStore(t, st)
	code, body := ts.do(t, "GET", "/api/v1/ephemeral/queues", "")
	if code != 200 || !strings.Contains(body, `"queue":"presence","tier":"declared","depth":0,"bytes":0`) ||
		!strings.Contains(body, `"maxLength":7,"policy":"dropOldest"`) || !strings.Contains(body, `"queue":"plain","tier":"declared"`) {
		t.Fatalf("listing after boot: %d %s", code, body)
	}
	if _, body := ts.do(t, "GET", "/health", ""); !strings.Contains(body, `"store":"ok"`) {
		t.Fatalf("health: %s", body)
	}
}

// D16: with PostgreSQL down at boot the broker still starts and
// serves implicit queues, /health says the store is down, and when the
// database comes back the declarations are loaded and /health says ok.
func TestBootWithDatabaseDownLoadsWhenItComesBack(t *testing.T) {
	storetest.NeedManaged(t, pg)
	schema := pg.FreshSchema(t)
	ctx := context.Background()
	seed, err := postgres.Open(ctx, postgres.Config{URL: pg.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	<-seed.Ready()
	must(t, seed.PutDeclaration(ctx, store.Declaration{Tenant: "default", Queue: "declared-q", Options: []byte(`{"leaseSeconds":9}`)}))
	seed.Close()

	must(t, pg.Stop())
	restarted := false
	defer func() {
		if !restarted {
			pg.Start()
		}
	}()
	st, err := postgres.Open(ctx, postgres.Config{URL: pg.URL(), Schema: schema, RetryInterval: 100 * time.Millisecond, AcquireTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts := startWithStore(t, st)
	if _, body := ts.do(t, "GET", "/health", ""); !strings.Contains(body, `"status":"ok","store":"down"`) {
		t.Fatalf("health with the database down: %s", body)
	}
	if code, body := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"implicit-q","messages":[{"payload":1}]}`); code != 201 {
		t.Fatalf("implicit push with the database down: %d %s", code, body)
	}
	must(t, pg.Start())
	restarted = true
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, body := ts.do(t, "GET", "/health", "")
		if strings.Contains(body, `"store":"ok"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never became ok: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, body := ts.do(t, "GET", "/api/v1/ephemeral/queues", "")
	if !strings.Contains(body, `"queue":"declared-q","tier":"declared"`) || !strings.Contains(body, `"leaseSeconds":9`) ||
		!strings.Contains(body, `"queue":"implicit-q","tier":"implicit","depth":1`) {
		t.Fatalf("listing after the database came back: %s", body)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The cell's start order (AttachCell, the membership started and handed
// over with SetMembership, then Start) is enforced: a server attached to a
// cell without its membership refuses to start, and neither call is taken
// after Start.
func TestCellStartOrderEnforced(t *testing.T) {
	rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	e := engine.New(engine.Config{})
	defer e.Close()
	s := New(Config{Addr: "tcp://127.0.0.1:0", Engine: e, Logger: slog.New(slog.DiscardHandler)})
	s.AttachCell(rc, RelayOptions{Secret: testSecret})
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), "SetMembership") {
		t.Fatalf("Start after AttachCell alone: %v, want the missing SetMembership named", err)
	}
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s after Start did not panic", name)
			}
		}()
		f()
	}
	mustPanic("AttachCell", func() { s.AttachCell(rc, RelayOptions{Secret: testSecret}) })
	mustPanic("SetMembership", func() { s.SetMembership(nil) })
}

package storeenv

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store/embedded"
	"github.com/queenmq/ephemeral/store/postgres"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Choice
	}{
		{"nothing set: embedded in ./queen-data", nil,
			Choice{Backend: Embedded, Embedded: embedded.Config{Dir: DefaultDataDir}}},
		{"QUEEN_DATA_DIR", map[string]string{"QUEEN_DATA_DIR": "/var/lib/queen"},
			Choice{Backend: Embedded, Embedded: embedded.Config{Dir: "/var/lib/queen"}}},
		{"QUEEN_DATABASE_URL wins over the data dir", map[string]string{"QUEEN_DATABASE_URL": "postgres://db/queen", "QUEEN_DATA_DIR": "/x"},
			Choice{Backend: Postgres, Postgres: postgres.Config{URL: "postgres://db/queen"}}},
		{"PGHOST alone", map[string]string{"PGHOST": "db"},
			Choice{Backend: Postgres}},
		{"schema and timeouts", map[string]string{"QUEEN_DATABASE_URL": "host=db", "QUEEN_DATABASE_SCHEMA": "queen_eu",
			"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": "500", "QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": "1500"},
			Choice{Backend: Postgres, Postgres: postgres.Config{URL: "host=db", Schema: "queen_eu",
				AcquireTimeout: 500 * time.Millisecond, StatementTimeout: 1500 * time.Millisecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("FromEnv = %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"0", "-1", "1.5", "2s", "3600001"} {
		if _, err := FromEnv(env(map[string]string{"QUEEN_DATABASE_URL": "x", "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": bad})); err == nil {
			t.Errorf("QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS=%s accepted", bad)
		}
		if _, err := FromEnv(env(map[string]string{"QUEEN_DATABASE_URL": "x", "QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": bad})); err == nil {
			t.Errorf("QUEEN_DATABASE_STATEMENT_TIMEOUT_MS=%s accepted", bad)
		}
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "queen-data")
	c, err := FromEnv(env(map[string]string{"QUEEN_DATA_DIR": dir}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*embedded.Store); !ok || !s.Healthy() {
		t.Fatalf("Open(%+v) = %T healthy=%v", c, s, s.Healthy())
	}
	s.Close()

	// An unreachable database still opens (down, retrying); a bad schema
	// name does not, and comes back as a nil interface.
	c, err = FromEnv(env(map[string]string{"QUEEN_DATABASE_URL": "postgres://u@192.0.2.1/x?sslmode=disable", "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": "200"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*postgres.Store); !ok || s.Healthy() {
		t.Fatalf("Open(%+v) = %T healthy=%v", c, s, s.Healthy())
	}
	s.Close()
	c.Postgres.Schema = "public"
	if s, err := Open(ctx, c, nil); err == nil || s != nil {
		t.Fatalf("Open with schema public = %v, %v", s, err)
	}
	if s, err := Open(ctx, Choice{Backend: Embedded}, nil); err == nil || s != nil {
		t.Fatalf("Open with no data dir = %v, %v", s, err)
	}
}

package catalog

import (
	"os"
	"testing"

	"github.com/queenmq/ephemeral/store/storetest"
)

// pgServer is the run's PostgreSQL, started once for the package (the broker's
// store tests' own throwaway server; see storetest.StartPostgres). Without
// one the PostgreSQL tests skip, except under CI=true, where they fail.
var pgServer *storetest.Postgres

func TestMain(m *testing.M) {
	os.Exit(storetest.MainWithPostgres(m, &pgServer))
}

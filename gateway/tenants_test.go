package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/gateway/catalog"
)

// The catalog is read whole (Snapshot) only when its revision moves: the
// poll's ticks with the revision unchanged read the revision alone, and a
// write is taken at the next tick.
func TestCatalogReloadedOnlyWhenItsRevisionMoves(t *testing.T) {
	t.Parallel()
	cat := newMemCatalog()
	_ = cat.PutPlan(context.Background(), catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}})
	_ = cat.PutTenant(context.Background(), catalog.Tenant{Name: "default", Plan: "pro"})
	g := startGatewayWith(t, "http://127.0.0.1:1", func(c *Config) { c.Catalog = cat })
	ticks := func(n int64) { // waits for n more polls (each reads the revision)
		t.Helper()
		want := cat.revisions.Load() + n
		for deadline := time.Now().Add(30 * time.Second); cat.revisions.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the catalog's revision read %d times, want %d: the poll stopped", cat.revisions.Load(), want)
			}
		}
	}
	ticks(1)
	loaded := cat.snapshots.Load()
	if loaded != 1 {
		t.Fatalf("%d snapshots after the start, want 1", loaded)
	}
	ticks(10)
	if n := cat.snapshots.Load(); n != loaded {
		t.Fatalf("%d snapshots after ten polls of an unchanged revision, want %d", n, loaded)
	}

	_ = cat.PutTenant(context.Background(), catalog.Tenant{Name: "acme", Plan: "pro"})
	ticks(2)
	if n := cat.snapshots.Load(); n != loaded+1 {
		t.Fatalf("%d snapshots after a write, want %d", n, loaded+1)
	}
	if v := g.view.Load(); v == nil || v.tenants["acme"] != "pro" {
		t.Fatal("the tenant written is not in the gateway's view")
	}
	ticks(10)
	if n := cat.snapshots.Load(); n != loaded+1 {
		t.Fatalf("%d snapshots after ten more polls, want %d", n, loaded+1)
	}
}

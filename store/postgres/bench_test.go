package postgres

import (
	"context"
	"testing"

	"github.com/queenmq/ephemeral/store/storetest"
)

// BenchmarkCalls measures one store call against the run's PostgreSQL on
// loopback: a put (an upsert of one declaration) and a read (one grant).
// Off the hot path (configure and grants only), it is kept to compare the
// pool's and the call wrapper's cost across changes (docs/operator.md,
// "Storage").
func BenchmarkCalls(b *testing.B) {
	storetest.NeedPostgres(b, pgServer)
	s, err := Open(context.Background(), Config{URL: pgServer.URL(), Schema: pgServer.FreshSchema(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	<-s.Ready()
	ctx := context.Background()
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.PutDeclaration(ctx, decl("q", `{"maxLength":2}`)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.GetGrant(ctx, "t"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

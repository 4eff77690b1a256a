package routes_test

import (
	"testing"

	"github.com/queenmq/ephemeral/gateway/routes"
)

// BenchmarkMatch: what classifying one request costs the gateway, per
// route and for a path that is none (it runs per request).
func BenchmarkMatch(b *testing.B) {
	tb := routes.Default()
	for _, c := range []struct{ name, method, path string }{
		{"push", "POST", "/api/v1/ephemeral/push"},
		{"pop", "GET", "/api/v1/ephemeral/pop?queue=orders&batch=10&wait=true"},
		{"queues", "GET", "/api/v1/ephemeral/queues"},
		{"delete", "DELETE", "/api/v1/ephemeral/queue/orders"},
		{"depth", "GET", "/api/v1/ephemeral/queues/orders/depth"},
		{"unknown", "GET", "/api/v1/ephemeral/nope"},
		{"outside", "GET", "/health"},
	} {
		path := []byte(c.path)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tb.Match(c.method, path)
			}
		})
	}
}

package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen) }

const testSecret = "gateway-test-secret"

// startBehind starts a broker in gateway mode (no grant required) and an
// in-process gateway in front of it, in mode none (tenant default), with
// cat as its catalog.
func startBehind(t *testing.T, cat catalog.Store) (*Gateway, *brokertest.Broker) {
	t.Helper()
	b := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          testSecret,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	})
	auth, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{
		Addr: "127.0.0.1:0", Upstreams: []string{b.URL()}, Secret: testSecret, Auth: auth, Catalog: cat,
		PollInterval: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond, Loops: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g, b
}

func call(t *testing.T, method, url, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestProxySmoke(t *testing.T) {
	cat := newMemCatalog()
	_ = cat.PutPlan(context.Background(), catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}})
	_ = cat.PutTenant(context.Background(), catalog.Tenant{Name: "default", Plan: "pro"})
	g, _ := startBehind(t, cat)
	base := "http://" + g.Addr().String()

	st, body, _ := call(t, "POST", base+"/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1},{"payload":2},{"payload":3}]}`)
	if st != 201 {
		t.Fatalf("push: %d %s", st, body)
	}
	st, body, h := call(t, "GET", base+"/api/v1/ephemeral/pop?queue=q&batch=10&autoAck=true", "")
	if st != 200 || strings.Count(body, `"id"`) != 3 {
		t.Fatalf("pop: %d %s %v", st, body, h)
	}
	st, body, _ = call(t, "GET", base+"/api/v1/ephemeral/queues", "")
	if st != 200 || !strings.Contains(body, `"q"`) {
		t.Fatalf("queues: %d %s", st, body)
	}
	st, body, _ = call(t, "GET", base+"/api/v1/gateway/usage/default", "")
	if st != 200 || body != `{"tenant":"default","messages":3,"deliveries":3,"parked":0}` {
		t.Fatalf("usage: %d %s", st, body)
	}
	st, body, _ = call(t, "GET", base+"/api/v1/ephemeral/nope", "")
	if st != 404 || !strings.Contains(body, `"route_blocked"`) {
		t.Fatalf("unknown route: %d %s", st, body)
	}
	// A waiting pop, answered by a push from another connection.
	done := make(chan string, 1)
	go func() {
		_, body, _ := call(t, "GET", base+"/api/v1/ephemeral/pop?queue=w&wait=true&timeout=5000&autoAck=true", "")
		done <- body
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, u, _ := call(t, "GET", base+"/api/v1/gateway/usage/default", "")
		if strings.Contains(u, `"parked":1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiting pop never held a slot: %s", u)
		}
		time.Sleep(5 * time.Millisecond)
	}
	call(t, "POST", base+"/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":"hi"}]}`)
	select {
	case b := <-done:
		if !strings.Contains(b, `"hi"`) {
			t.Fatalf("woken pop: %s", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting pop was not answered")
	}
}

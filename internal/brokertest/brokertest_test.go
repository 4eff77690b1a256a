package brokertest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m, Queen) }

// The harness's own promises: one build a process, a restart on the same
// data (and, under KeepPort, the same port), the log kept across starts.
func TestBrokerRestartsOnItsData(t *testing.T) {
	bin := Binary(t, Queen)
	if again := Binary(t, Queen); again != bin {
		t.Fatalf("a second Binary built again: %s, then %s", bin, again)
	}
	b := New(t, bin, nil)
	b.KeepPort, b.WaitStoreOK = true, true
	b.Start(t)
	port := b.Port()
	resp, err := http.Post(b.URL()+"/api/v1/ephemeral/configure", "application/json",
		strings.NewReader(`{"queue":"kept","options":{"maxLength":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("configure: status %d", resp.StatusCode)
	}
	b.Stop(t)
	b.Start(t)
	if b.Port() != port {
		t.Fatalf("KeepPort: restarted on %d, had %d", b.Port(), port)
	}
	resp, err = http.Get(b.URL() + "/api/v1/ephemeral/queues")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"kept"`) {
		t.Fatalf("the declaration did not survive the restart: %s", body)
	}
	if n := strings.Count(b.Log(), "=== start on port"); n != 2 {
		t.Fatalf("the log marks %d starts, want 2:\n%s", n, b.Log())
	}
}

// A silent server takes the connection and never answers.
func TestSilentServer(t *testing.T) {
	c := &http.Client{Timeout: 200 * time.Millisecond}
	if _, err := c.Get("http://" + SilentServer(t) + "/health"); err == nil {
		t.Fatal("the silent server answered")
	}
}

package gateway

import (
	"strings"
	"testing"
)

// /metrics carries the process's and the Go runtime's own figures beside
// the gateway's (docs/operator.md, "Process and runtime"), each with a
// TYPE line and a value a live process has; the page is made off the loop
// and a keep-alive connection goes on being served after it.
func TestMetricsProcessAndRuntime(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.AdminToken = []byte("admin-token") })
	status, _, page := adminDo(t, g, "GET", "/metrics", "admin-token", "")
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, page)
	}
	for _, name := range []string{
		"process_resident_memory_bytes", "process_open_fds", "process_max_fds",
		"go_goroutines", "go_memstats_heap_inuse_bytes", "queen_gateway_clients",
	} {
		v, ok := unlabelled(page, name)
		switch {
		case !ok:
			t.Errorf("no %s on the page", name)
		case v == "0" || strings.HasPrefix(v, "-"):
			t.Errorf("%s %s: want a positive value", name, v)
		}
		if !strings.Contains(page, "# TYPE "+name+" gauge\n") {
			t.Errorf("%s has no TYPE line", name)
		}
	}
	if _, ok := unlabelled(page, "go_gc_duration_seconds_count"); !ok {
		t.Errorf("no GC pauses (go_gc_duration_seconds) on the page")
	}
	if status, _, body := adminDo(t, g, "GET", "/api/v1/gateway/routes", "admin-token", ""); status != 200 {
		t.Errorf("a request after the scrape: %d %s", status, body)
	}
}

// unlabelled answers the value of the sample "name value" on a page.
func unlabelled(page, name string) (string, bool) {
	for line := range strings.Lines(page) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

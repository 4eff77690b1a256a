package bench

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSmoke starts the broker binary and runs every scenario against it for
// about a second, so the load tool keeps working. It asserts that each run
// completes with operations done, and nothing about speed (P6: numbers are
// benchmarks, never timed tests).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the broker")
	}
	addr, pid := startBroker(t)
	for _, sc := range Scenarios {
		t.Run(sc, func(t *testing.T) {
			cfg := Defaults()
			cfg.Scenario, cfg.Target, cfg.Addr, cfg.PID = sc, "broker", addr, pid
			cfg.Duration, cfg.Warmup = 2*time.Second, 200*time.Millisecond // the 2-second smoke
			cfg.Requesters, cfg.Responders = 4, 2
			cfg.Inboxes, cfg.Collect = 2000, 15*time.Second
			cfg.Parked = 200
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if sc == "idle" { // nothing is done: what it reports is the target's CPU
				if res.CPU.Target < 0 || res.Seconds < 1.9 {
					t.Fatalf("idle: target CPU %v over %.1fs", res.CPU.Target, res.Seconds)
				}
				t.Logf("idle: the broker used %.2f ms of CPU a second", res.CPU.Target*1000)
				return
			}
			if res.Ops == 0 {
				t.Fatalf("no %s in %.1fs", res.Unit, res.Seconds)
			}
			t.Logf("%d %s, %.0f/s; notes %q", res.Ops, res.Unit, res.Rate, res.Notes)
		})
	}
	// reqreply's other ways to drive the broker: through the Go SDK (a
	// fresh inbox per Request), and the raw client with a fresh inbox per
	// round trip (-inbox request); and the SDK over 3 request queues with
	// 2 responders (one serving two queues): a queue nobody served would
	// leave its requests unanswered and the run in error.
	for _, v := range []struct {
		name, client, inbox string
		services            int
	}{
		{"reqreply-sdk", ClientSDK, "", 1},
		{"reqreply-raw-fresh-inbox", ClientRaw, InboxRequest, 1},
		{"reqreply-sdk-services", ClientSDK, "", 3},
	} {
		t.Run(v.name, func(t *testing.T) {
			cfg := Defaults()
			cfg.Scenario, cfg.Target, cfg.Addr, cfg.PID = "reqreply", "broker", addr, pid
			cfg.Client, cfg.Inbox, cfg.Services = v.client, v.inbox, v.services
			cfg.Duration, cfg.Warmup = 2*time.Second, 200*time.Millisecond
			cfg.Requesters, cfg.Responders = 4, 2
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Ops == 0 || res.Errors != 0 {
				t.Fatalf("%d round trips, %d errors in %.1fs", res.Ops, res.Errors, res.Seconds)
			}
			if res.Client != v.client || res.Params["inbox"] != InboxRequest || res.Params["services"] != v.services {
				t.Fatalf("result says client %q, inbox %v; want %q, %q", res.Client, res.Params["inbox"], v.client, InboxRequest)
			}
			if res.CPU.ClientPerOp <= 0 {
				t.Fatalf("no client CPU per round trip: %+v", res.CPU)
			}
			t.Logf("%d round trips, %.0f/s, %.1f us of client CPU each", res.Ops, res.Rate, res.CPU.ClientPerOp)
		})
	}
}

// startBroker builds cmd/queen and runs it on a free loopback port with an
// embedded store in a temporary directory and a short idle collection.
func startBroker(t *testing.T) (addr string, pid int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "queen")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the broker with")
	}
	// The broker is built in the root module (bench is a module of its own),
	// with the root's requirements, as it ships.
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/queen")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the broker: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+port,
		"QUEEN_DATA_DIR="+filepath.Join(dir, "data"),
		"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S=1",
		"QUEEN_LOG_LEVEL=warn",
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr, cmd.Process.Pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not answer /health at %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

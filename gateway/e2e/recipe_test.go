package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// recipeMarker precedes the fenced block of docs/gateway.md that
// TestGatewayRecipe runs.
const recipeMarker = "<!-- recipe: gateway -->"

// recipe reads the block that follows recipeMarker in docs/gateway.md, the
// lines between its ```sh fence and the closing one.
func recipe(t *testing.T) []string {
	t.Helper()
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != recipeMarker {
			continue
		}
		if !sc.Scan() || sc.Text() != "```sh" {
			t.Fatalf("docs/gateway.md: %s is not followed by a ```sh fence", recipeMarker)
		}
		var lines []string
		for sc.Scan() {
			if sc.Text() == "```" {
				return lines
			}
			lines = append(lines, sc.Text())
		}
		t.Fatalf("docs/gateway.md: the recipe's fence is not closed")
	}
	t.Fatalf("docs/gateway.md has no %s", recipeMarker)
	return nil
}

// runRecipe runs the recipe's lines as one sh -e script in a fresh
// directory whose bin/ holds the binaries `make build` writes (so its own
// `make build` line is left out), with the documented ports 6632 and 6630
// moved to free ones. It answers sh's exit status and what the script
// printed; the processes it started in the background are killed when t
// ends.
func runRecipe(t *testing.T, lines []string) (code int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, pkg := range map[string]string{"queen": brokertest.Queen, "queen-gateway": gatewayPkg, "queenctl": "./cmd/queenctl"} {
		if err := os.Symlink(brokertest.Binary(t, pkg), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	broker, gateway := strconv.Itoa(brokertest.Port(t)), strconv.Itoa(brokertest.Port(t))
	var script []string
	for _, l := range lines {
		if strings.HasPrefix(l, "make build") {
			continue
		}
		l = strings.ReplaceAll(l, "6632", broker)
		script = append(script, strings.ReplaceAll(l, "6630", gateway))
	}
	outFile, errFile := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	out, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := os.Create(errFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", strings.Join(script, "\n"))
	cmd.Dir = dir
	// Files, not pipes: the background processes keep their copies open,
	// and Wait would wait for them. HOST keeps both on loopback.
	cmd.Stdout, cmd.Stderr = out, errOut
	cmd.Env = append(brokertest.BaseEnv(), "HOST=127.0.0.1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		// The script's background processes are in its process group.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && syscall.Kill(-pgid, 0) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	out.Close()
	errOut.Close()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sh: %v", err)
	}
	o, _ := os.ReadFile(outFile)
	e, _ := os.ReadFile(errFile)
	return code, string(o), string(e)
}

// docs/gateway.md's recipe, "From nothing to a push through the gateway",
// runs as written: built binaries, the plan and the tenant at the gateway,
// the grant at the broker, a token from queenctl token, a push and a pop
// through the gateway. Without its grant line the same push is the
// broker's 403 feature_gated: the gate no step opened before the recipe
// said how.
func TestGatewayRecipe(t *testing.T) {
	t.Parallel()
	lines := recipe(t)
	code, stdout, stderr := runRecipe(t, lines)
	if code != 0 {
		t.Fatalf("the recipe exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		`{"name":"starter"`, `"tenant":"acme"`, "pushed 2\n", `{"id":1}`, `{"id":2}`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %s in the recipe's stdout:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
	if !strings.Contains(stderr, "acked 2 of 2\n") {
		t.Errorf("no acked 2 of 2 in the recipe's stderr:\n%s", stderr)
	}

	var withoutGrant []string
	for _, l := range lines {
		if !strings.Contains(l, " grant set ") {
			withoutGrant = append(withoutGrant, l)
		}
	}
	if len(withoutGrant) != len(lines)-1 {
		t.Fatalf("the recipe has %d grant lines, want 1", len(lines)-len(withoutGrant))
	}
	code, stdout, stderr = runRecipe(t, withoutGrant)
	if code != 1 || !strings.Contains(stderr, "error: 403 feature_gated: ") || strings.Contains(stdout, "pushed") {
		t.Fatalf("without the grant: exit %d, want 1 with the broker's 403 feature_gated\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// What docs/dashboard.md says of a broker behind a gateway: the gateway
// answers /dashboard 404 route_blocked; on the broker the page is served,
// the admin token reads /metrics, and the queue listing, a tenant's, is
// 401 without the gateway's secret.
func TestDashboardIsTheBrokers(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	want(t, "/dashboard through the gateway", p.admin.do(t, "GET", "/dashboard", ""), 404, "route_blocked")
	direct := &client{base: p.broker.URL(), hc: newHTTPClient()}
	want(t, "/dashboard on the broker", direct.do(t, "GET", "/dashboard", ""), 200, "")
	op := operatorOf(p.broker)
	want(t, "/metrics with the admin token", op.do(t, "GET", "/metrics", ""), 200, "")
	want(t, "the listing with the admin token", op.do(t, "GET", "/api/v1/ephemeral/queues", ""), 401, "unauthorized")
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/internal/buildinfo"
)

// moduleRoot is the directory of go.mod, two up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runOut runs a command in dir and returns its trimmed standard output.
func runOut(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// versionLines runs bin --version (or flag) and returns its three lines,
// requiring exit status 0.
func versionLines(t *testing.T, bin, flag string) (version, commit, goLine string) {
	t.Helper()
	out := runOut(t, "", nil, bin, flag)
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "queen ") || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "go ") {
		t.Fatalf("%s %s printed:\n%s", bin, flag, out)
	}
	return strings.TrimPrefix(lines[0], "queen "), strings.TrimPrefix(lines[1], "commit "), lines[2]
}

// healthVersion starts bin (internal/brokertest: a free loopback port, a
// store in a temporary directory), reads /health's version and the
// build_info series of /metrics; the broker is killed when the test ends.
func healthVersion(t *testing.T, bin string) (version, buildInfo string) {
	t.Helper()
	base := brokertest.Start(t, bin, nil).URL()
	var h struct {
		Status, Version string
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("/health: %v", err)
	}
	resp, err = http.Get(base + "/metrics") // loopback: the operator by default
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "queen_ephemeral_build_info{") {
			buildInfo = line
		}
	}
	return h.Version, buildInfo
}

// `make build` stamps git describe (or VERSION) and the commit; --version
// and -v print them with the toolchain and exit 0; /health says the same
// version, and queen_ephemeral_build_info carries all three.
func TestMakeBuildVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := moduleRoot(t)
	wantVersion := ""
	if v, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
		wantVersion = strings.TrimSpace(string(v))
	} else {
		wantVersion = runOut(t, root, nil, "git", "describe", "--tags", "--always", "--dirty")
	}
	wantCommit := runOut(t, root, nil, "git", "rev-parse", "HEAD")
	if strings.HasSuffix(wantVersion, "-dirty") {
		wantCommit += "-dirty"
	}

	bin := filepath.Join(t.TempDir(), "queen")
	runOut(t, root, nil, "make", "-s", "build", "BIN="+bin)

	v, c, g := versionLines(t, bin, "--version")
	if v != wantVersion || c != wantCommit {
		t.Fatalf("--version says %s, commit %s; want %s, commit %s", v, c, wantVersion, wantCommit)
	}
	if want := "go " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH; g != want {
		t.Errorf("--version's toolchain line %q, want %q", g, want)
	}
	if v2, c2, _ := versionLines(t, bin, "-v"); v2 != v || c2 != c {
		t.Errorf("-v says %s %s, --version %s %s", v2, c2, v, c)
	}
	hv, bi := healthVersion(t, bin)
	if hv != v {
		t.Errorf("/health's version %q, --version's %q", hv, v)
	}
	if want := `queen_ephemeral_build_info{version="` + v + `",commit="` + c + `",goversion="` + runtime.Version() + `"} 1`; bi != want {
		t.Errorf("build info series %q, want %q", bi, want)
	}
}

// A binary built without the Makefile's ldflags (go build, go run) reads
// its identity from the build info the toolchain embedded, as `go version
// -m` shows it: the module version when there is one (Go 1.24 and later
// stamp a pseudo-version naming the revision in a git checkout), else
// dev-<revision>. /health says the same.
func TestGoBuildVersionFromBuildInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker")
	}
	root := moduleRoot(t)
	bin := filepath.Join(t.TempDir(), "queen")
	// -buildvcs=auto whatever GOFLAGS says: the point is what a plain go
	// build records.
	runOut(t, root, []string{"GOFLAGS=-buildvcs=auto"}, "go", "build", "-o", bin, "./cmd/queen")

	// `go version -m` prints the build info with a tab before each line
	// and the file's name first; debug.ParseBuildInfo reads the rest.
	m := runOut(t, root, nil, "go", "version", "-m", bin)
	first, rest, _ := strings.Cut(m, "\n")
	goVer := first[strings.LastIndexByte(first, ' ')+1:]
	lines := []string{"go\t" + goVer}
	for _, l := range strings.Split(rest, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	// Every line ends in a newline for ParseBuildInfo (runOut trimmed the
	// last one), or it drops the last setting, vcs.modified.
	bi, err := debug.ParseBuildInfo(strings.Join(lines, "\n") + "\n")
	if err != nil {
		t.Fatalf("parse go version -m: %v\n%s", err, m)
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	wantVersion, wantCommit := "dev", "unknown"
	if rev != "" {
		wantCommit = rev
		if modified == "true" {
			wantCommit += "-dirty"
		}
		wantVersion = "dev-" + buildinfo.Short(wantCommit)
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		wantVersion = mv
	}
	t.Logf("build info: module version %q, revision %q, modified %q", bi.Main.Version, rev, modified)

	v, c, _ := versionLines(t, bin, "--version")
	if v != wantVersion || c != wantCommit {
		t.Fatalf("--version says %s, commit %s; want %s, commit %s (go version -m:\n%s)", v, c, wantVersion, wantCommit, m)
	}
	// In a plain git checkout (CI's clone) the toolchain records the
	// revision, so the binary names the commit it was built from. (Go
	// does not see a linked worktree's .git file as a repository: there
	// it records none, and the binary says dev.)
	if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil && rev != "" {
		if h := strings.TrimSpace(string(head)); !strings.HasPrefix(c, h) {
			t.Errorf("commit %s, but HEAD is %s", c, h)
		}
	}
	if hv, _ := healthVersion(t, bin); hv != v {
		t.Errorf("/health's version %q, --version's %q", hv, v)
	}
}

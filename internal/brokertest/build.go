package brokertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Queen is the broker's package, what Binary builds for a broker.
const Queen = "./cmd/queen"

// Build builds the Go package pkg (e.g. "./cmd/queen") of the module rooted
// at moduleDir into out, with extra go build flags (e.g. "-race").
func Build(moduleDir, pkg, out string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// ModuleRoot is the directory of the go.mod that holds the working
// directory (a test's working directory is its package's).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// A build is one package built once per test process.
type build struct {
	done chan struct{} // closed when the build ended
	path string
	err  error
}

// builds are the process's binaries, in one temporary directory that
// Cleanup removes.
var builds struct {
	mu  sync.Mutex
	dir string
	m   map[string]*build
}

// Prebuild starts building pkg (a package path from the module root, e.g.
// Queen) with flags in the background, unless this process built or builds
// it already: a TestMain calls it so that the build runs while the rest
// of the set-up does.
func Prebuild(pkg string, flags ...string) {
	buildOf(pkg, flags)
}

// Binary answers the path of pkg built with flags, building it on the first
// call of the process and waiting for a build in flight; it fails t when
// the build failed.
func Binary(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	p, err := Wait(pkg, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Wait is Binary for a caller without a test (a TestMain).
func Wait(pkg string, flags ...string) (string, error) {
	b := buildOf(pkg, flags)
	<-b.done
	return b.path, b.err
}

func buildOf(pkg string, flags []string) *build {
	key := strings.Join(append([]string{pkg}, flags...), " ")
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if b := builds.m[key]; b != nil {
		return b
	}
	b := &build{done: make(chan struct{})}
	if builds.m == nil {
		builds.m = map[string]*build{}
	}
	builds.m[key] = b
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "queen-test-")
		if err != nil {
			b.err = err
			close(b.done)
			return b
		}
		builds.dir = dir
	}
	// One directory a build, so that the binary has its package's name.
	out := filepath.Join(builds.dir, strconv.Itoa(len(builds.m)), path.Base(pkg))
	go func() {
		defer close(b.done)
		root, err := ModuleRoot()
		if err == nil {
			err = os.MkdirAll(filepath.Dir(out), 0o755)
		}
		if err == nil {
			err = Build(root, pkg, out, flags...)
		}
		b.path, b.err = out, err
	}()
	return b
}

// Cleanup waits for the builds in flight and removes every binary the
// process built: a TestMain calls it after m.Run.
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	for _, b := range builds.m {
		<-b.done
	}
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.dir, builds.m = "", nil
}

// Main is a TestMain that builds pkgs (all at once) before the tests, exits
// 1 saying why if one does not build, runs the tests, and removes the
// binaries: `func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen) }`.
// Without pkgs, Binary builds what a test asks for when it asks.
func Main(m *testing.M, pkgs ...string) {
	for _, p := range pkgs {
		Prebuild(p)
	}
	for _, p := range pkgs {
		if _, err := Wait(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			Cleanup()
			os.Exit(1)
		}
	}
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// BenchResult is what one queenbench run reports of its scenario (its -out
// file): the rate, the errors it counted, the latency's median (µs) and
// the target's CPU over the window (cores).
type BenchResult struct {
	Rate    float64 `json:"rate"`
	Errors  int64   `json:"errors"`
	Latency struct {
		P50 float64 `json:"p50"`
	} `json:"latency"`
	CPU struct {
		Target float64 `json:"target"`
	} `json:"cpu"`
}

// Queenbench runs the queenbench binary bench with args (one scenario; -q
// and -out are added) and returns its result; a run that fails or counts
// errors fails t.
func Queenbench(t testing.TB, bench string, args ...string) BenchResult {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	args = append(args, "-q", "-out", out)
	if o, err := exec.Command(bench, args...).CombinedOutput(); err != nil {
		t.Fatalf("queenbench %v: %v\n%s", args, err, o)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Results []BenchResult `json:"results"`
	}
	if err := json.Unmarshal(data, &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("queenbench's report %s: %v", data, err)
	}
	if r := rep.Results[0]; r.Errors != 0 {
		t.Fatalf("queenbench %v counted %d errors", args, r.Errors)
	}
	return rep.Results[0]
}

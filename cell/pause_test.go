package cell

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store/storetest"
)

// Environment of the child process TestPausedMemberIsFencedOnResume starts.
const (
	envChild        = "QUEEN_CELL_TEST_CHILD"
	envChildURL     = "QUEEN_CELL_TEST_URL"
	envChildSchema  = "QUEEN_CELL_TEST_SCHEMA"
	pauseProbeKeys  = 200
	childLineFormat = "t=%d gen=%d fenced=%t owns=%d members=%s\n"
)

// runChild is the child: a member "c:1" that prints its view every
// millisecond (wall time in ns, generation, fencing, how many of the probe
// keys it owns, the members) until it is killed.
func runChild() {
	m, err := Start(Options{
		Config:      Config{Advertise: "c:1", Heartbeat: hb, MemberTimeout: to},
		DatabaseURL: os.Getenv(envChildURL),
		Schema:      os.Getenv(envChildSchema),
		Incarnation: fmt.Sprintf("child%d", os.Getpid()),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		// The time first: a line stamped after SIGCONT was computed
		// entirely after it.
		now := time.Now().UnixNano()
		v := m.View()
		owns := 0
		for i := range pauseProbeKeys {
			if tn, q := key(i); v.Owns(tn, q) {
				owns++
			}
		}
		fmt.Fprintf(w, childLineFormat, now, v.Generation, v.Fenced(), owns, ids(v))
		if w.Flush() != nil {
			os.Exit(0) // the test is gone
		}
		time.Sleep(time.Millisecond)
	}
}

type childLine struct {
	t       int64
	gen     uint64
	fenced  bool
	owns    int
	members string
}

func parseChildLine(s string) (childLine, bool) {
	var l childLine
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "t":
			l.t, _ = strconv.ParseInt(v, 10, 64)
		case "gen":
			l.gen, _ = strconv.ParseUint(v, 10, 64)
		case "fenced":
			l.fenced = v == "true"
		case "owns":
			l.owns, _ = strconv.Atoi(v)
		case "members":
			l.members = v
		}
	}
	return l, l.t != 0
}

// A member paused with SIGSTOP past the timeout, for real: the others drop
// it; when it resumes, it never answers as an owner under the view it held
// before the pause (every line it prints with that generation after
// SIGCONT says fenced and owns nothing), then it rejoins with a new
// generation and owns again.
func TestPausedMemberIsFencedOnResume(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	a := start(t, schema, "a:1", hb, to)
	b := start(t, schema, "b:1", hb, to)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envChildURL+"="+pgServer.URL(), envChildSchema+"="+schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	var (
		mu    sync.Mutex
		lines []childLine
	)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := parseChildLine(sc.Text()); ok {
				mu.Lock()
				lines = append(lines, l)
				mu.Unlock()
			}
		}
	}()
	last := func() childLine {
		mu.Lock()
		defer mu.Unlock()
		if len(lines) == 0 {
			return childLine{}
		}
		return lines[len(lines)-1]
	}
	waitFor(t, 10*time.Second, "three members everywhere", func() bool {
		l := last()
		return viewIs("a:1,b:1,c:1", a, b)() && l.members == "a:1,b:1,c:1" && !l.fenced && l.owns > 0
	})
	pre := last()

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a and b drop the paused member", viewIs("a:1,b:1", a, b))
	time.Sleep(to) // well past its timeout
	cont := time.Now().UnixNano()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the resumed member rejoins", func() bool {
		l := last()
		return l.t > cont && l.gen > pre.gen && !l.fenced && l.members == "a:1,b:1,c:1" && l.owns > 0
	})
	waitFor(t, 5*time.Second, "a and b see it back", viewIs("a:1,b:1,c:1", a, b))

	final := last()
	mu.Lock()
	defer mu.Unlock()
	var after, fencedAfter int
	for _, l := range lines {
		if l.t <= cont {
			continue
		}
		after++
		if l.gen <= pre.gen {
			if !l.fenced || l.owns != 0 {
				t.Fatalf("after SIGCONT, under its pre-pause generation %d: fenced=%v owns=%d", l.gen, l.fenced, l.owns)
			}
			fencedAfter++
		}
	}
	t.Logf("paused member: %d lines after SIGCONT, %d of them still under the pre-pause view (all fenced, owning nothing), then rejoined at generation %d (was %d)",
		after, fencedAfter, final.gen, pre.gen)
}

package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/storetest"
	bolt "go.etcd.io/bbolt"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func() store.Store {
		dir := t.TempDir()
		return func() store.Store {
			s, err := Open(Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

func TestOpenCreatesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "queen-data")
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v, want 0700", fi.Mode(), err)
	}
	fi, err = os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v %v, want 0600", fi.Mode(), err)
	}
	if s.Path() != filepath.Join(dir, FileName) {
		t.Fatalf("Path() = %s", s.Path())
	}
}

func TestOpenRefuses(t *testing.T) {
	if _, err := Open(Config{}); err == nil {
		t.Error("Open with no directory succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: file}); err == nil {
		t.Error("Open on a regular file succeeded")
	}
	// A file of another format version is refused, not rewritten.
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(keyVersion, []byte("99"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("Open of a version-99 file = %v, want a version error", err)
	}
}

// A second broker on the same data directory fails to open it, quickly,
// instead of writing the same file.
func TestLockedByAnotherOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	s2, err := Open(Config{Dir: dir, LockTimeout: 200 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatal("a second Open of a locked store succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the second Open took %v to fail", d)
	}
	if !strings.Contains(err.Error(), "locked") {
		t.Fatalf("error %q does not say the file is locked", err)
	}
	s.Close()
	s3, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	s3.Close()
}

// Environment of the helper process that TestKill9 starts and kills.
const (
	envCrashDir   = "QUEEN_EMBEDDED_CRASH_DIR"
	envCrashRound = "QUEEN_EMBEDDED_CRASH_ROUND"
	crashKeys     = 40
)

// crashDecl is the i-th write of round r: it overwrites one of crashKeys
// queues with options of varying size (1 to 13 KiB, so spanning pages).
func crashDecl(r, i int) store.Declaration {
	pad := strings.Repeat(string(rune('a'+i%26)), 1000+(i*7919)%12000)
	return store.Declaration{
		Tenant:  "crash",
		Queue:   fmt.Sprintf("q%02d", i%crashKeys),
		Options: fmt.Appendf(nil, `{"round":%d,"seq":%d,"pad":"%s"}`, r, i, pad),
	}
}

// TestMain turns the test binary into the helper process of TestKill9
// when that test starts it.
func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		crashHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// crashHelper writes declarations forever and prints "acked N" after each
// write returned, until it is killed.
func crashHelper(dir string) {
	round, _ := strconv.Atoi(os.Getenv(envCrashRound))
	s, err := Open(Config{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		if err := s.PutDeclaration(context.Background(), crashDecl(round, i)); err != nil {
			fmt.Println("put:", err)
			os.Exit(3)
		}
		if _, err := fmt.Printf("acked %d\n", i); err != nil {
			os.Exit(4)
		}
	}
}

// TestKill9 kills a writing process with SIGKILL at a random moment,
// several times over one file, and checks after each kill that every
// write that returned is there, that the write in flight is wholly there
// or wholly absent, that nothing written before is lost, and that the
// file passes bbolt's consistency check.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	model := map[string]string{} // queue -> options the store must hold
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		acked := runAndKill(t, dir, round, 20+rng.IntN(60), time.Duration(rng.IntN(3000))*time.Microsecond)
		// Every acknowledged write of this round is applied to the model.
		for i := 0; i <= acked; i++ {
			d := crashDecl(round, i)
			model[d.Queue] = string(d.Options)
		}
		inFlight := crashDecl(round, acked+1)

		s, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if err := check(s); err != nil {
			t.Fatalf("round %d: bbolt check: %v", round, err)
		}
		ds, err := s.LoadDeclarations(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		inFlightLanded := false
		if len(ds) != len(model) {
			t.Fatalf("round %d: %d declarations after the kill, want %d", round, len(ds), len(model))
		}
		for _, d := range ds {
			got := string(d.Options)
			switch {
			case got == model[d.Queue]:
			case d.Queue == inFlight.Queue && got == string(inFlight.Options):
				model[d.Queue] = got // the write in flight committed before the kill
				inFlightLanded = true
			default:
				t.Fatalf("round %d: queue %s holds %.60s..., want %.60s... (or the write in flight)", round, d.Queue, got, model[d.Queue])
			}
		}
		t.Logf("round %d: killed after %d acknowledged writes (the write in flight landed: %v); all %d declarations intact",
			round, acked+1, inFlightLanded, len(ds))
	}
}

// runAndKill starts the helper on dir, lets it acknowledge at least
// minAcks writes, waits delay, kills it with SIGKILL and returns the last
// write it acknowledged.
func runAndKill(t *testing.T, dir string, round, minAcks int, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashRound+"="+strconv.Itoa(round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	acked := -1
	read := func() {
		for lines.Scan() {
			line := lines.Text()
			n, ok := strings.CutPrefix(line, "acked ")
			if !ok {
				t.Errorf("helper: %s", line)
				continue
			}
			acked, _ = strconv.Atoi(n)
			if acked+1 >= minAcks {
				return
			}
		}
	}
	read()
	if acked+1 < minAcks {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper stopped after %d writes", acked+1)
	}
	time.Sleep(delay)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	minAcks = int(^uint(0) >> 1)
	read() // what it acknowledged before dying, up to EOF
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("helper did not die of the signal: %v", err)
	}
	return acked
}

// check runs bbolt's consistency check over the whole file.
func check(s *Store) error {
	return s.db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvTestDatabaseURL names a PostgreSQL to use instead of starting one. The
// tests create and drop their own schemas in it; the tests that stop and
// start the server skip.
const EnvTestDatabaseURL = "QUEEN_TEST_DATABASE_URL"

// EnvPostgresBinDir names the directory of initdb, pg_ctl and postgres when
// they are in none of the usual places.
const EnvPostgresBinDir = "QUEEN_TEST_PG_BINDIR"

// ErrNoPostgres: neither a URL nor the server binaries were found.
var ErrNoPostgres = errors.New("no PostgreSQL for the tests")

// Postgres is the server a test run uses: a throwaway one (initdb into a
// temporary directory, pg_ctl on a free port, fsync off, removed by Close)
// or the one QUEEN_TEST_DATABASE_URL names.
type Postgres struct {
	url     string
	managed bool

	bin, dir, data string
	port           int
	cred           *syscall.Credential // set when running as root

	mu      sync.Mutex // serialises Stop, Start and Close
	running bool
	schemas atomic.Int64
}

// StartPostgres starts the run's server, or connects to the one named by
// QUEEN_TEST_DATABASE_URL. Its error wraps ErrNoPostgres when there is
// neither.
func StartPostgres() (*Postgres, error) {
	if url := os.Getenv(EnvTestDatabaseURL); url != "" {
		p := &Postgres{url: url}
		if err := p.Exec(context.Background(), "SELECT 1"); err != nil {
			return nil, fmt.Errorf("storetest: %s is set but unusable: %w", EnvTestDatabaseURL, err)
		}
		return p, nil
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin, managed: true}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("storetest: running as root, and initdb refuses root, but there is no postgres user to run it as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	base := os.TempDir()
	if p.cred != nil && !reachableByOthers(base) {
		base = "/tmp"
	}
	if p.dir, err = os.MkdirTemp(base, "queen-pg-"); err != nil {
		return nil, err
	}
	p.data = filepath.Join(p.dir, "data")
	if p.cred != nil {
		if err := os.Chown(p.dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			p.removeDir()
			return nil, err
		}
	}
	if out, err := p.run("initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		p.removeDir()
		return nil, fmt.Errorf("storetest: initdb: %w\n%s", err, out)
	}
	var lastErr error
	for range 3 { // a free port can be taken between finding it and binding it
		if p.port, err = freePort(); err != nil {
			p.removeDir()
			return nil, err
		}
		if lastErr = p.Start(); lastErr == nil {
			p.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
			return p, nil
		}
	}
	p.removeDir()
	return nil, lastErr
}

// findBinDir finds initdb, pg_ctl and postgres: QUEEN_TEST_PG_BINDIR, then
// pg_config --bindir, then /usr/lib/postgresql/<newest>/bin, then PATH.
func findBinDir() (string, error) {
	var tried []string
	has := func(dir string) bool {
		if dir == "" {
			return false
		}
		tried = append(tried, dir)
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvPostgresBinDir); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("storetest: %s=%s lacks initdb, pg_ctl or postgres: %w", EnvPostgresBinDir, d, ErrNoPostgres)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", fmt.Errorf("storetest: initdb, pg_ctl and postgres not found (tried %s, and PATH); install Debian's postgresql package, or set %s or %s: %w",
		strings.Join(tried, ", "), EnvTestDatabaseURL, EnvPostgresBinDir, ErrNoPostgres)
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// reachableByOthers reports whether every directory from / to dir lets
// other users through, so the postgres user can reach a directory in it.
func reachableByOthers(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run runs one of the server binaries, as the postgres user when root,
// with no PG* variables of the caller's leaking in.
func (p *Postgres) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.Env = []string{"HOME=" + p.dir, "LC_ALL=C", "PATH=" + p.bin + ":/usr/bin:/bin"}
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// URL is a superuser connection URL to the database "postgres".
func (p *Postgres) URL() string { return p.url }

// Managed is true for a server this run started, which Stop and Start
// control.
func (p *Postgres) Managed() bool { return p.managed }

// Port is the managed server's TCP port on 127.0.0.1.
func (p *Postgres) Port() int { return p.port }

// Start starts the managed server and waits until it accepts connections.
func (p *Postgres) Start() error {
	if !p.managed {
		return errors.New("storetest: Start on a server this run did not start")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s' -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
		p.port, p.dir)
	logFile := filepath.Join(p.dir, "server.log")
	if out, err := p.run("pg_ctl", "-D", p.data, "-l", logFile, "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("storetest: pg_ctl start: %w\n%s\n%s", err, out, tail(log, 2000))
	}
	p.running = true
	return nil
}

// Stop stops the managed server (fast shutdown: sessions are terminated)
// and waits until it is gone. Its data stays for Start.
func (p *Postgres) Stop() error {
	return p.stop("fast")
}

func (p *Postgres) stop(mode string) error {
	if !p.managed {
		return errors.New("storetest: Stop on a server this run did not start")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	if out, err := p.run("pg_ctl", "-D", p.data, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("storetest: pg_ctl stop: %w\n%s", err, out)
	}
	p.running = false
	return nil
}

// Close stops a managed server at once and removes its directory. It does
// nothing to a server named by QUEEN_TEST_DATABASE_URL.
func (p *Postgres) Close() error {
	if !p.managed {
		return nil
	}
	err := p.stop("immediate")
	p.removeDir()
	return err
}

func (p *Postgres) removeDir() {
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Exec runs one statement on a fresh superuser connection.
func (p *Postgres) Exec(ctx context.Context, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// FreshSchema names a schema no other test uses, and drops it when the
// test ends.
func (p *Postgres) FreshSchema(t testing.TB) string {
	name := fmt.Sprintf("queen_test_%d_%d", os.Getpid(), p.schemas.Add(1))
	t.Cleanup(func() {
		if err := p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// MainWithPostgres is a TestMain body: it starts the run's server into
// *pg, runs the tests and stops it. Without PostgreSQL it leaves *pg nil,
// so that NeedPostgres skips, unless CI=true: there it fails the run.
func MainWithPostgres(m *testing.M, pg **Postgres) int {
	p, err := StartPostgres()
	switch {
	case errors.Is(err, ErrNoPostgres) && os.Getenv("CI") != "true":
		fmt.Fprintf(os.Stderr, "%v\nPostgreSQL tests will SKIP.\n", err)
	case err != nil:
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		if errors.Is(err, ErrNoPostgres) {
			fmt.Fprintln(os.Stderr, "CI=true: PostgreSQL tests must run; .ci/run installs the postgresql package.")
		}
		return 1
	default:
		*pg = p
		defer func() {
			if err := p.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	code := m.Run()
	if code != 0 && *pg != nil {
		// Close removes the log with the data; a failed run keeps its tail,
		// the only witness of what the server did when the tests lost it.
		(*pg).printLogTail(os.Stderr, 16<<10)
	}
	return code
}

// printLogTail writes the last n bytes of a managed server's log to w.
func (p *Postgres) printLogTail(w io.Writer, n int) {
	if !p.managed {
		return
	}
	log, err := os.ReadFile(filepath.Join(p.dir, "server.log"))
	if err != nil {
		fmt.Fprintf(w, "storetest: the PostgreSQL log: %v\n", err)
		return
	}
	fmt.Fprintf(w, "storetest: the last %d bytes of the run's PostgreSQL log (%s):\n%s\n", min(n, len(log)), p.dir, tail(log, n))
}

// NeedPostgres skips t when the run has no PostgreSQL (never under CI=true:
// MainWithPostgres has failed the run already).
func NeedPostgres(t testing.TB, pg *Postgres) {
	t.Helper()
	if pg == nil {
		t.Skip("no PostgreSQL: install the postgresql package or set " + EnvTestDatabaseURL)
	}
}

// NeedManaged skips t unless the run started its own server, which t may
// stop and start.
func NeedManaged(t testing.TB, pg *Postgres) {
	t.Helper()
	NeedPostgres(t, pg)
	if !pg.Managed() {
		t.Skip("stops and starts the server: needs the run's own PostgreSQL, not " + EnvTestDatabaseURL)
	}
}

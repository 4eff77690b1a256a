package docs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// pg is the run's PostgreSQL, nil when there is none (recipes marked
// postgres then skip, or the run fails under CI=true: MainWithPostgres).
var pg *storetest.Postgres

func TestMain(m *testing.M) {
	code := storetest.MainWithPostgres(m, &pg)
	brokertest.Cleanup() // the binaries TestOpenAPIRealAnswers and TestTLSProxySnippet built
	os.Exit(code)
}

// recipeTimeout bounds one recipe, its processes included: generous, since
// a recipe may compile a program (go run) while make test loads the machine.
const recipeTimeout = 3 * time.Minute

// docPorts are the ports the docs use as a user types them: the broker's
// default and the cell's members and relays, and the gateway's default.
// Each run of a recipe maps each to a free loopback port of its own, in the
// text and in the defaults (PORT and QUEEN_URL name the broker's).
var docPorts = []string{"6630", "6632", "6633", "6634", "7632", "7633", "7634"}

var docPortRE = regexp.MustCompile(`\b(` + strings.Join(docPorts, "|") + `)\b`)

// A recipe is the blocks of one file marked with one name, joined.
type recipe struct {
	file     string // relative to the module root
	name     string
	line     int  // of the first block's fence
	postgres bool // a PostgreSQL server in the PG* variables
	node     bool // node (20.3 or later) and npm
	text     string
}

var markerRE = regexp.MustCompile(`^<!-- recipe: ([A-Za-z0-9._-]+)((?: (?:postgres|node))*) -->$`)

// parseRecipes reads the recipes of one Markdown file. A marker that is
// not followed by a ```sh block and a block that does not end are errors:
// a recipe that is not run is not tested. What a name's blocks need
// (postgres, node) is what any of them says.
func parseRecipes(root, file string) ([]recipe, error) {
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	var out []recipe
	index := map[string]int{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r")
		if !strings.HasPrefix(line, "<!-- recipe") {
			continue
		}
		m := markerRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: a recipe marker is <!-- recipe: NAME -->, with postgres and node after NAME when it needs them, not %q", file, i+1, line)
		}
		if i+1 >= len(lines) || strings.TrimRight(lines[i+1], "\r") != "```sh" {
			return nil, fmt.Errorf("%s:%d: the recipe marker %q must be the line just before a ```sh fence", file, i+1, line)
		}
		start := i + 2
		end := start
		for end < len(lines) && strings.TrimRight(lines[end], "\r") != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: recipe %s: its ```sh block never ends", file, i+2, m[1])
		}
		text := strings.Join(lines[start:end], "\n") + "\n"
		name, needs := m[1], strings.Fields(m[2])
		k, ok := index[name]
		if ok {
			out[k].text += "\n" + text
		} else {
			k = len(out)
			index[name] = k
			out = append(out, recipe{file: file, name: name, line: i + 2, text: text})
		}
		out[k].postgres = out[k].postgres || slices.Contains(needs, "postgres")
		out[k].node = out[k].node || slices.Contains(needs, "node")
		i = end
	}
	return out, nil
}

// TestRecipes runs every recipe of the module's Markdown files (README.md,
// docs/ and any other: markdownFiles) with bash, in a
// copy of the checkout where `make build` has run (as the docs tell a user
// to first), each with its ports moved to free ones, and fails when one
// exits with a status other than 0 (bash -e: any command that fails) or
// outlives recipeTimeout. Every process a recipe starts is killed when it
// ends: they share the recipe's process group.
func TestRecipes(t *testing.T) {
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var recipes []recipe
	for _, f := range markdownFiles(t, root) {
		rs, err := parseRecipes(root, f)
		if err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, rs...)
	}
	if len(recipes) == 0 {
		t.Fatal("no recipe is marked runnable in any Markdown file")
	}
	dir := copyCheckout(t, root)
	build := exec.Command("make", "build")
	build.Dir = dir
	build.Env = append(baseEnv(), "GOFLAGS=-trimpath")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build in the copy of the checkout: %v\n%s", err, out)
	}
	for _, r := range recipes {
		t.Run(r.file+"/"+r.name, func(t *testing.T) {
			if r.postgres {
				storetest.NeedPostgres(t, pg)
			}
			if r.node {
				needNode(t)
			}
			runRecipe(t, dir, r)
		})
	}
}

// TestNoBackgroundGoRun checks every ```sh block of every Markdown file,
// recipe or not: none puts go run in the background, since killing go run
// leaves the program it started running (and holding its port and data
// directory); the docs start bin/ binaries instead.
func TestNoBackgroundGoRun(t *testing.T) {
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		inSh := false
		for i, line := range strings.Split(string(b), "\n") {
			switch trimmed := strings.TrimSpace(line); {
			case !inSh && trimmed == "```sh":
				inSh = true
			case inSh && trimmed == "```":
				inSh = false
			case inSh && backgroundsGoRun(line):
				t.Errorf("%s:%d: %q puts go run in the background: killing go run leaves the program it started running; start a bin/ binary (make build) instead", f, i+1, line)
			}
		}
	}
}

// backgroundsGoRun reports whether a shell line runs `go run` in the
// background: a single & (not &&) after it, before any comment.
func backgroundsGoRun(line string) bool {
	i := strings.Index(line, "go run ")
	if i < 0 {
		return false
	}
	rest := line[i:]
	if c := strings.Index(rest, " #"); c >= 0 {
		rest = rest[:c]
	}
	for j := 0; j < len(rest); j++ {
		if rest[j] != '&' {
			continue
		}
		if j+1 < len(rest) && rest[j+1] == '&' {
			j++ // &&
			continue
		}
		return true
	}
	return false
}

// copyCheckout copies the files git knows of (tracked, and untracked but
// not ignored) into a temporary directory, so that what recipes write (bin/,
// ./queen-data, node_modules) stays out of the checkout.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the recipes run in a copy of a git checkout)", err)
	}
	dir := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the working tree, or a symbolic link
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, dst, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// baseEnv is this process's environment less what would choose a store,
// a port or a broker behind a recipe's back.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "QUEEN_") || strings.HasPrefix(k, "PG") || k == "HOST" || k == "PORT" || k == "GOFLAGS" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// needNode skips t, or fails it under QUEEN_TEST_REQUIRE_NODE=1 (as CI
// runs), unless node 20.3 or later (what queen-mq needs: AbortSignal.any)
// and npm are on PATH.
func needNode(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("npm"); err != nil {
		why = "npm is not on PATH"
	}
	if out, err := exec.Command("node", "-e", "process.stdout.write(typeof AbortSignal.any)").Output(); err != nil || string(out) != "function" {
		why = "node 20.3 or later is not on PATH"
	}
	if why == "" {
		return
	}
	if os.Getenv("QUEEN_TEST_REQUIRE_NODE") == "1" {
		t.Fatal(why)
	}
	t.Skip(why + " (QUEEN_TEST_REQUIRE_NODE=1 makes this a failure)")
}

// runRecipe runs r in dir after removing what an earlier recipe left there
// (the data directories), and kills its process group when it ends.
func runRecipe(t *testing.T, dir string, r recipe) {
	for _, d := range []string{"queen-data", "queen-gateway-data"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	ports := map[string]string{}
	for _, p := range docPorts {
		ports[p] = freePort(t)
	}
	text := docPortRE.ReplaceAllStringFunc(r.text, func(p string) string { return ports[p] })
	script := filepath.Join(t.TempDir(), "recipe.sh")
	if err := os.WriteFile(script, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(baseEnv(),
		"HOST=127.0.0.1", // loopback only, unless the recipe says otherwise
		"PORT="+ports["6632"],
		"QUEEN_URL=http://localhost:"+ports["6632"],
		"QUEEN_LOG_LEVEL=warn",
		"GOFLAGS=-trimpath", // the build cache then serves every copy of the checkout
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false",
	)
	var before map[string]bool
	if r.postgres {
		env = append(env, pgEnv(t)...)
		before = databases(t)
	}
	var log bytes.Buffer
	logFile, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// -x: the log shows each command before its output; -e and pipefail: a
	// command that fails fails the recipe.
	cmd := exec.Command("bash", "--noprofile", "--norc", "-e", "-x", "-o", "pipefail", script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil
	cmd.Stdout = logFile // a file, not a pipe: the recipe's background processes hold it open
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(recipeTimeout):
		runErr = fmt.Errorf("still running after %v", recipeTimeout)
	}
	// The recipe's processes (brokers started with &) end with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if runErr != nil && cmd.ProcessState == nil {
		<-done
	}
	if r.postgres {
		dropNewDatabases(t, before)
	}
	_, _ = logFile.Seek(0, io.SeekStart)
	_, _ = io.Copy(&log, logFile)
	if runErr == nil && testing.Verbose() {
		t.Logf("%s", log.String())
	}
	if runErr != nil {
		t.Errorf("recipe %s (%s:%d) failed: %v\nports: %v\n%s", r.name, r.file, r.line, runErr, ports, clip(log.String(), 16<<10))
	}
}

// clip is s when it is short, else its first and last lines, about n bytes
// in all: a process that failed at start says so near the beginning, and
// the command that failed is at the end.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head, tail := s[:n/3], s[len(s)-n+n/3:]
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	if i := strings.IndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	return head + "...\n" + tail
}

// pgEnv is the run's PostgreSQL as the PG* variables psql, createdb and the
// broker read.
func pgEnv(t *testing.T) []string {
	t.Helper()
	u, err := url.Parse(pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PGHOST=" + u.Hostname(), "PGPORT=" + u.Port(), "PGUSER=" + u.User.Username()}
	if pw, ok := u.User.Password(); ok {
		env = append(env, "PGPASSWORD="+pw)
	}
	if mode := u.Query().Get("sslmode"); mode != "" {
		env = append(env, "PGSSLMODE="+mode)
	}
	return env
}

// databases are the names of the server's databases.
func databases(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// dropNewDatabases drops the databases a recipe created (createdb queen),
// so that the next recipe creates its own as a user would.
func dropNewDatabases(t *testing.T, before map[string]bool) {
	t.Helper()
	for name := range databases(t) {
		if before[name] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := pg.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		cancel()
		if err != nil {
			t.Errorf("dropping the recipe's database %s: %v", name, err)
		}
	}
}

// TestParseRecipes pins the marker's grammar (blocks of one name join, a
// marker must sit on the line before a ```sh fence, and a name needs what
// any of its blocks says) and which lines put go run in the background.
func TestParseRecipes(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return "x.md"
	}
	f := write("text\n<!-- recipe: a -->\n```sh\necho 1\n```\n\n```sh\nnot run\n```\n<!-- recipe: b postgres -->\n```sh\ncreatedb q\n```\n<!-- recipe: a node -->\n```sh\necho 2\n```\n")
	rs, err := parseRecipes(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].name != "a" || rs[0].text != "echo 1\n\necho 2\n" || rs[0].line != 3 || rs[0].postgres || !rs[0].node ||
		rs[1].name != "b" || !rs[1].postgres || rs[1].node || rs[1].text != "createdb q\n" {
		t.Fatalf("parsed %+v", rs)
	}
	for line, want := range map[string]bool{
		"go run ./cmd/queen &":                      true,
		"QUEEN_X=1 go run ./cmd/queen & sleep 1":    true,
		"go run ./cmd/queen":                        false,
		"go run ./examples/36 && echo ok":           false,
		"go run ./cmd/queen   # not & in a comment": false,
		"bin/queen &":                               false,
	} {
		if got := backgroundsGoRun(line); got != want {
			t.Errorf("backgroundsGoRun(%q) = %v, want %v", line, got, want)
		}
	}
	for _, bad := range []string{
		"<!-- recipe: a -->\n\n```sh\necho\n```\n",   // not the line before
		"<!-- recipe: a -->\n```bash\necho\n```\n",   // not sh
		"<!-- recipe: a -->\n```sh\necho\n",          // never ends
		"<!-- recipe: a b c -->\n```sh\necho\n```\n", // not the grammar
		"<!-- recipe: a mysql -->\n```sh\necho\n```\n",
	} {
		if _, err := parseRecipes(dir, write(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

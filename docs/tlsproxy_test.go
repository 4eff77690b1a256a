package docs_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
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

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/wire"
)

// nginxMarkerRE is the line that marks a tested nginx block in a Markdown
// file, indented as the list item that holds it: the next line is its
// ```nginx fence.
var nginxMarkerRE = regexp.MustCompile(`^\s*<!-- nginx: ([A-Za-z0-9._-]+) -->$`)

// nginxBlock is the ```nginx block of file (relative to root) after the
// marker <!-- nginx: name -->, with the fence's indentation taken off each
// line: the text a user copies.
func nginxBlock(t *testing.T, root, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		m := nginxMarkerRE.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil || m[1] != name {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```nginx" {
			t.Fatalf("%s:%d: the marker %q must be the line just before a ```nginx fence", file, i+1, strings.TrimSpace(line))
		}
		indent := lines[i+1][:strings.Index(lines[i+1], "```")]
		var out strings.Builder
		for j := i + 2; j < len(lines); j++ {
			l := strings.TrimRight(lines[j], "\r")
			if strings.TrimSpace(l) == "```" {
				return out.String()
			}
			out.WriteString(strings.TrimPrefix(l, indent) + "\n")
		}
		t.Fatalf("%s:%d: the ```nginx block after %q never ends", file, i+2, strings.TrimSpace(line))
	}
	t.Fatalf("%s has no <!-- nginx: %s --> marker before a ```nginx block", file, name)
	return ""
}

// needNginx answers the nginx binary, or skips t when there is none
// (Debian installs it in /usr/sbin, which a user's PATH may lack), unless
// CI=true: there it fails, since .ci/run installs the nginx package.
func needNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and no nginx on PATH or in /usr/sbin: .ci/run installs the nginx package")
	}
	t.Skip("no nginx on PATH or in /usr/sbin (apt-get install nginx); under CI=true this is a failure")
	return ""
}

// TestTLSProxySnippet runs the nginx server block of docs/guide.md
// ("Deploying across hosts", after <!-- nginx: tls-proxy -->) as written,
// in front of a real broker, with a self-signed certificate made here. The
// test changes only what a test must, each exactly once, or it fails:
// `listen 443 ssl;` becomes a free loopback port, the two certificate paths
// under /etc/ssl become this test's files, and the upstream's port 6632
// the broker's; nginx runs it as startNginx says. Through
// https://localhost it then checks /health, a push and a pop over HTTPS
// (net/http trusting the certificate), a pop parked 2 s and answered by a
// push, a request/reply with queenctl (the Go SDK) trusting the
// certificate through SSL_CERT_FILE, and a push and a pop with the
// JavaScript SDK trusting it through NODE_EXTRA_CA_CERTS, as the guide
// tells a user (that part skips without Node 20.3, as needNode says).
// Each SDK's calls are on links: the broker counts the responder's while
// it serves, and nginx's access log shows an upgrade (101) for each SDK
// and none of their calls as a plain push or pop.
func TestTLSProxySnippet(t *testing.T) {
	bin := needNginx(t)
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	block := nginxBlock(t, root, "docs/guide.md", "tls-proxy")

	// A pop may park up to the broker's clamp; nginx must wait longer
	// for its answer, or a long pop fails at the proxy with 504. Checked
	// on the text: waiting 300 s is too long for a test.
	m := regexp.MustCompile(`(?m)^\s*proxy_read_timeout\s+(\d+)s;`).FindStringSubmatch(block)
	if m == nil {
		t.Fatal("docs/guide.md's nginx block sets no proxy_read_timeout in seconds: nginx's default (60 s) cuts pops parked longer")
	}
	if secs, _ := strconv.Atoi(m[1]); secs*1000 <= wire.MaxPopTimeoutMs {
		t.Errorf("docs/guide.md's nginx block: proxy_read_timeout %ss is not above the longest pop wait (%d ms)", m[1], wire.MaxPopTimeoutMs)
	}

	b := brokertest.StartQueen(t, nil)
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "queen.crt"), filepath.Join(dir, "queen.key")
	pool := selfSigned(t, crt, key)
	addr := "127.0.0.1:" + freePort(t)
	server := block
	for _, s := range []struct{ doc, test string }{
		{"listen 443 ssl;", "listen " + addr + " ssl;"},
		{"/etc/ssl/queen.crt", crt},
		{"/etc/ssl/queen.key", key},
		{"http://127.0.0.1:6632;", "http://" + b.Addr() + ";"},
	} {
		if n := strings.Count(server, s.doc); n != 1 {
			t.Fatalf("docs/guide.md's nginx block has %q %d times, want once: the test substitutes it (update the test with the snippet)", s.doc, n)
		}
		server = strings.Replace(server, s.doc, s.test, 1)
	}
	accessLog := startNginx(t, bin, dir, server, addr)

	base := "https://localhost:" + strings.TrimPrefix(addr, "127.0.0.1:")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: tr}

	// (1) A push and a pop over HTTPS.
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s through nginx: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s through nginx: %d %s, want %d", method, path, resp.StatusCode, got, want)
		}
		if resp.TLS == nil {
			t.Fatalf("%s %s: answered without TLS", method, path)
		}
		return got
	}
	call("GET", "/health", "", http.StatusOK)
	call("POST", "/api/v1/ephemeral/push", `{"queue":"tls-jobs","messages":[{"payload":{"n":1}}]}`, http.StatusCreated)
	if got := popPayloads(t, call("GET", "/api/v1/ephemeral/pop?queue=tls-jobs&autoAck=true", "", http.StatusOK)); got != `[{"n":1}]` {
		t.Errorf("pop through nginx: payloads %s, want [{\"n\":1}]", got)
	}

	// (2) A pop parked through the proxy, answered by a push 2 s later:
	// the broker counts it parked first, so the push cannot come before.
	type answer struct {
		body []byte
		took time.Duration
	}
	parked := make(chan answer, 1)
	start := time.Now()
	go func() {
		// call's t.Fatal must stay on the test's goroutine: Errorf here.
		resp, err := hc.Get(base + "/api/v1/ephemeral/pop?queue=tls-parked&wait=true&timeout=60000&autoAck=true")
		if err != nil {
			t.Errorf("parked pop through nginx: %v", err)
			parked <- answer{}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("parked pop through nginx: %d %s, want 200", resp.StatusCode, body)
		}
		parked <- answer{body, time.Since(start)}
	}()
	waitGauge(t, b, "queen_ephemeral_parked_pops", 1)
	time.Sleep(time.Until(start.Add(2 * time.Second))) // the scenario: the message comes 2 s after the pop
	call("POST", "/api/v1/ephemeral/push", `{"queue":"tls-parked","messages":[{"payload":"late"}]}`, http.StatusCreated)
	select {
	case a := <-parked:
		if a.body != nil {
			if got := popPayloads(t, a.body); got != `["late"]` {
				t.Errorf("parked pop through nginx: payloads %s, want [\"late\"]", got)
			}
			if a.took < 2*time.Second {
				t.Errorf("parked pop answered after %v, before its message was pushed (2 s)", a.took)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parked pop through nginx was not answered within 30 s of its message")
	}

	// (3) Request/reply with the Go SDK (queenctl) over links through the
	// proxy, trusting the certificate as the guide says: SSL_CERT_FILE.
	// Its calls carry a User-Agent of their own, for the access log.
	const goAgent = "TestTLSProxySnippet-go"
	ctl := brokertest.Binary(t, "./cmd/queenctl")
	env := append(brokertest.BaseEnv(), "SSL_CERT_FILE="+crt, "QUEEN_URL="+base)
	reply := exec.Command(ctl, "--header", "User-Agent="+goAgent, "reply", "tls-upper", "tr", "a-z", "A-Z")
	var replyOut brokertest.LockedBuffer // written by exec's goroutine while it runs
	reply.Env, reply.Stdout, reply.Stderr = env, &replyOut, &replyOut
	reply.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := reply.Start(); err != nil {
		t.Fatal(err)
	}
	replied := make(chan struct{})
	go func() { _ = reply.Wait(); close(replied) }()
	defer func() {
		_ = syscall.Kill(-reply.Process.Pid, syscall.SIGKILL)
		<-replied
	}()
	// The responder's parked pop is on a link: the broker counts it.
	waitGauge(t, b, "queen_ephemeral_client_links", 1)
	request := exec.Command(ctl, "--header", "User-Agent="+goAgent, "request", "tls-upper", `"hello"`, "--timeout", "20s")
	request.Env = env
	out, err := request.CombinedOutput()
	if err != nil || string(out) != "\"HELLO\"\n" {
		t.Fatalf("queenctl request through nginx: %v, output %q, want \"HELLO\"\n(the responder: %s)", err, out, replyOut.String())
	}
	// nginx logs an upgraded connection when it closes: the requester's
	// links (it has exited), while the responder's is still open.
	onLinks(t, accessLog, goAgent)

	// (4) A push and a pop with the JavaScript SDK, trusting the
	// certificate as the guide says: NODE_EXTRA_CA_CERTS.
	t.Run("JavaScript", func(t *testing.T) {
		needNode(t)
		const jsAgent = "TestTLSProxySnippet-js"
		script := filepath.Join(t.TempDir(), "tls.mjs")
		program := fmt.Sprintf(`import { Queen } from %q
const queen = new Queen(process.env.QUEEN_URL, { headers: { 'User-Agent': %q } })
await queen.ephemeral.push('tls-js', [{ n: 2 }])
const { messages } = await queen.ephemeral.pop('tls-js', { autoAck: true })
console.log(JSON.stringify(messages.map((m) => m.payload)))
await queen.close()
`, "file://"+filepath.Join(root, "clients", "js", "index.js"), jsAgent)
		if err := os.WriteFile(script, []byte(program), 0o600); err != nil {
			t.Fatal(err)
		}
		node := exec.Command("node", script)
		node.Env = append(brokertest.BaseEnv(), "NODE_EXTRA_CA_CERTS="+crt, "QUEEN_URL="+base)
		out, err := node.CombinedOutput()
		if err != nil || string(out) != "[{\"n\":2}]\n" {
			t.Fatalf("node through nginx: %v, output %q, want [{\"n\":2}]\n%s", err, out, program)
		}
		onLinks(t, accessLog, jsAgent)
	})
}

// onLinks waits (30 s at most) until nginx's access log shows a link
// upgraded (101) for the calls with User-Agent agent, then checks that
// none of them went over plain HTTP (a push or a pop line of theirs).
func onLinks(t *testing.T, accessLog, agent string) {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines = lines[:0]
		for _, l := range strings.Split(string(readFile(t, accessLog)), "\n") {
			if strings.HasSuffix(l, ` "`+agent+`"`) {
				lines = append(lines, l)
			}
		}
		if slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, `101 "GET /api/v1/ephemeral/link HTTP/1.1"`) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx logged no upgrade to a link (101) for %s within 30 s; its lines: %q", agent, lines)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, l := range lines {
		if strings.Contains(l, "/api/v1/ephemeral/push") || strings.Contains(l, "/api/v1/ephemeral/pop") {
			t.Errorf("nginx logged a call of %s over HTTP, not on a link: %q", agent, l)
		}
	}
}

// startNginx runs nginx (bin) with server, an http-level block, inside a
// configuration of the test's own: pid, logs and temp paths in dir, so that
// it needs no root and touches nothing of the machine's; in the foreground
// as one process (-g "daemon off; master_process off;": no worker to
// orphan, no switch to another user when run as root). It waits until
// addr accepts connections, answers the access log's path (one line a
// request: status, request line, User-Agent), and kills nginx when the
// test ends, printing its configuration and logs if the test failed.
func startNginx(t *testing.T, bin, dir, server, addr string) string {
	t.Helper()
	accessLog := filepath.Join(dir, "access.log")
	conf := fmt.Sprintf(`pid %[1]s/nginx.pid;
events { worker_connections 64; }
http {
    log_format status '$status "$request" "$http_user_agent"';
    access_log %[1]s/access.log status;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;

%[2]s}
`, dir, server)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	errorLog := filepath.Join(dir, "error.log")
	var out bytes.Buffer
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", errorLog,
		"-g", "daemon off; master_process off;")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("nginx.conf:\n%s\nnginx's output:\n%s\nerror.log:\n%s\naccess.log:\n%s", conf, out.String(), readFile(t, errorLog), readFile(t, accessLog))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatal("nginx exited at start")
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return accessLog
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s after 30 s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readFile is what path holds, nothing when it does not exist yet (nginx
// creates its access log at start, but a failed start leaves none).
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

// popPayloads is the payloads of a pop's answer, as one JSON array.
func popPayloads(t *testing.T, body []byte) string {
	t.Helper()
	var a struct {
		Messages []struct {
			Payload json.RawMessage `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("a pop's answer %s: %v", body, err)
	}
	ps := make([]string, len(a.Messages))
	for i, m := range a.Messages {
		ps[i] = string(m.Payload)
	}
	return "[" + strings.Join(ps, ",") + "]"
}

// waitGauge waits until the broker's /metrics (read directly, not through
// the proxy) shows the unlabelled gauge name at least min, for 30 s at most.
func waitGauge(t *testing.T, b *brokertest.Broker, name string, min float64) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+-]+)$`)
	deadline := time.Now().Add(30 * time.Second)
	last := "absent"
	for {
		resp, err := http.Get(b.URL() + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := re.FindSubmatch(body); m != nil {
				last = string(m[1])
				if v, _ := strconv.ParseFloat(last, 64); v >= min {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker's %s stayed below %v for 30 s (last %s)", name, min, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// selfSigned writes a self-signed certificate for localhost and 127.0.0.1
// (ECDSA P-256, valid one hour) to crt and its key to key, in PEM as nginx
// reads them, and answers a pool that trusts it.
func selfSigned(t *testing.T, crt, key string) *x509.CertPool {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

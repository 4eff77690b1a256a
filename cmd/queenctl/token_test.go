package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// writePEM writes der as a PEM block of typ into dir/name.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mint runs `queenctl token args...` and answers the token it printed: one
// line, nothing on stderr.
func mint(t *testing.T, args ...string) string {
	t.Helper()
	r := ctl(t, "http://127.0.0.1:1", "", append([]string{"token"}, args...)...).ok(t, "token "+strings.Join(args, " "))
	tok, rest, _ := strings.Cut(r.stdout, "\n")
	if rest != "" || strings.Count(tok, ".") != 2 {
		t.Fatalf("token printed %q: want the token alone on one line", r.stdout)
	}
	return tok
}

// A token queenctl mints is accepted by a broker in mode jwt holding the
// secret (HS256) or the public key (EdDSA), as the tenant and role asked
// for, and refused 401 unauthorized by one holding another secret.
func TestTokenAgainstABroker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := writePEM(t, dir, "dev.pem", "PRIVATE KEY", der)
	der, _ = x509.MarshalPKIXPublicKey(pub)
	pubFile := writePEM(t, dir, "dev.pub.pem", "PUBLIC KEY", der)

	hs := brokertest.StartQueen(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "the-dev-secret"}).URL()
	ed := brokertest.StartQueen(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_PUBLIC_KEY": pubFile}).URL()
	other := brokertest.StartQueen(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "another-secret"}).URL()

	for _, c := range []struct {
		name, url string
		args      []string
	}{
		{"HS256", hs, []string{"--secret", "the-dev-secret"}},
		{"EdDSA", ed, []string{"--key", keyFile}},
	} {
		acme := mint(t, append(c.args, "--tenant", "acme")...) // role read-write, ttl 1h: the defaults
		if r := ctl(t, c.url, "", "--token", acme, "push", "jobs", `{"n":1}`).ok(t, c.name+" push"); r.stdout != "pushed 1\n" {
			t.Fatalf("%s push: %q", c.name, r.stdout)
		}
		r := ctl(t, c.url, "", "--token", acme, "pop", "jobs", "--json").ok(t, c.name+" pop")
		if !strings.Contains(r.stdout, `"payload":{"n":1}`) {
			t.Fatalf("%s pop: %q", c.name, r.stdout)
		}
		// Another tenant's token sees none of acme's queues.
		globex := mint(t, append(c.args, "--tenant", "globex", "--role", "read-only")...)
		r = ctl(t, c.url, "", "--token", globex, "depth", "jobs")
		r.want(t, c.name+" another tenant's depth", 1, "404 ephemeral_queue_not_found")
		// read-only may not push.
		ctl(t, c.url, "", "--token", globex, "push", "jobs", "1").want(t, c.name+" read-only push", 1, "403 forbidden")
	}
	acme := mint(t, "--secret", "the-dev-secret", "--tenant", "acme")
	ctl(t, other, "", "--token", acme, "push", "jobs", "1").want(t, "another secret", 1, "401 unauthorized")
	edToken := mint(t, "--key", keyFile, "--tenant", "acme")
	ctl(t, hs, "", "--token", edToken, "push", "jobs", "1").want(t, "EdDSA at an HS256 broker", 1, "401 unauthorized")
}

// Bad flags are exit 2 with a message naming what to change, and print
// nothing on stdout.
func TestTokenUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pubFile := writePEM(t, dir, "pub.pem", "PUBLIC KEY", der)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "error: token needs --secret (HS256, the broker's QUEEN_JWT_SECRET) or --key FILE"},
		{[]string{"--secret", "s", "--key", pubFile}, "error: --secret and --key exclude each other"},
		{[]string{"--secret", "s", "--role", "writer"}, `error: --role "writer": want one of [read-only write-only read-write admin]`},
		{[]string{"--secret", "s", "--ttl", "0s"}, "error: --ttl 0s: want a positive duration"},
		{[]string{"--secret", "s", "--ttl", "5"}, `invalid argument "5" for "--ttl" flag`},
		{[]string{"--secret", "s", "--tenant", "a\x01b"}, "error: --tenant carries a control character"},
		{[]string{"--key", filepath.Join(dir, "missing.pem")}, "error: --key: open "},
		{[]string{"--key", pubFile}, "that is a public key: sign with the private key"},
		{[]string{"--secret", "s", "extra"}, "accepts 0 arg(s)"},
	} {
		r := ctl(t, "http://127.0.0.1:1", "", append([]string{"token"}, c.args...)...).want(t, strings.Join(c.args, " "), 2, c.want)
		if r.stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", c.args, r.stdout)
		}
	}
}

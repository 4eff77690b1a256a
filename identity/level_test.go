package identity

import (
	"strings"
	"testing"
)

// The four names read back to the levels they print as, and the levels
// nest as D14 says: admin ⊃ read-write ⊃ {read-only, write-only}.
func TestLevels(t *testing.T) {
	for _, l := range []Level{ReadOnly, WriteOnly, ReadWrite, Admin} {
		got, ok := ParseLevel([]byte(l.String()))
		if !ok || got != l {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", l.String(), got, ok, l)
		}
	}
	for _, name := range []string{"", "Admin", "read", "write", "readwrite", "root"} {
		if l, ok := ParseLevel([]byte(name)); ok {
			t.Errorf("ParseLevel(%q) = %v; want no level", name, l)
		}
	}
	if s := Level(0).String(); s != "" {
		t.Errorf("Level(0).String() = %q, want empty", s)
	}
	if s := Level(4).String(); s != "level(4)" { // a relayed frame's byte that is no level
		t.Errorf("Level(4).String() = %q, want level(4)", s)
	}
	allows := map[Level][]Level{
		ReadOnly:  {Read},
		WriteOnly: {Write},
		ReadWrite: {Read, Write, ReadWrite},
		Admin:     {Read, Write, ReadWrite, Admin},
	}
	for l, yes := range allows {
		for _, need := range []Level{Read, Write, ReadWrite, Admin} {
			want := false
			for _, y := range yes {
				want = want || y == need
			}
			if got := l.Allows(need); got != want {
				t.Errorf("%v.Allows(%v) = %v, want %v", l, need, got, want)
			}
		}
	}
}

// Gateway mode trusts the tenancy headers only with the secret: no or a
// wrong secret is 401, the secret without a tenant 401, no or an unknown
// access 403 (D14).
func TestIdentifyGateway(t *testing.T) {
	a, err := New(Config{Mode: ModeGateway, GatewaySecret: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode() != ModeGateway {
		t.Fatalf("Mode() = %q", a.Mode())
	}
	req := func(headers string) string { return "GET /q HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" }
	for _, c := range []struct {
		headers string
		tenant  string
		level   Level
		status  int
	}{
		{"X-Queen-Gateway-Secret: gw\r\nX-Queen-Tenant: acme\r\nX-Queen-Access: write-only\r\n", "acme", WriteOnly, 0},
		{"X-Queen-Tenant: acme\r\nX-Queen-Access: admin\r\n", "", 0, 401},
		{"X-Queen-Gateway-Secret: gx\r\nX-Queen-Tenant: acme\r\nX-Queen-Access: admin\r\n", "", 0, 401},
		{"X-Queen-Gateway-Secret: gw\r\nX-Queen-Access: admin\r\n", "", 0, 401},
		{"X-Queen-Gateway-Secret: gw\r\nX-Queen-Tenant: " + strings.Repeat("t", 513) + "\r\nX-Queen-Access: admin\r\n", "", 0, 401},
		{"X-Queen-Gateway-Secret: gw\r\nX-Queen-Tenant: acme\r\n", "", 0, 403},
		{"X-Queen-Gateway-Secret: gw\r\nX-Queen-Tenant: acme\r\nX-Queen-Access: root\r\n", "", 0, 403},
	} {
		tenant, level, werr := a.Identify(parseReq(t, req(c.headers)))
		status := 0
		if werr != nil {
			status = werr.Status
		}
		if tenant != c.tenant || level != c.level || status != c.status {
			t.Errorf("%q: %q %v %v; want %q %v status %d", c.headers, tenant, level, werr, c.tenant, c.level, c.status)
		}
	}
}

package crossorigin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/wire"
)

// headers is a request head as the checks read it.
type headers map[string]string

func (h headers) Header(name string) ([]byte, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return []byte(v), true
		}
	}
	return nil, false
}

// TestCheckDecidesAsNetHTTP holds Check to net/http.CrossOriginProtection
// on every combination of the headers it reads: the same requests pass and
// the same are refused, with and without a trusted origin.
func TestCheckDecidesAsNetHTTP(t *testing.T) {
	sites := []string{"", "same-origin", "none", "same-site", "cross-site", "bogus"}
	origins := []string{"", "null", "http://127.0.0.1:6632", "http://localhost:6632", "https://app.example.com",
		"http://evil.example", "http://127.0.0.1:6632/path", "127.0.0.1:6632"}
	hosts := []string{"127.0.0.1:6632", "localhost:6632", "app.example.com", "evil.example"}
	trusted := "https://app.example.com"

	for _, trust := range []bool{false, true} {
		cop := http.NewCrossOriginProtection()
		var list []string
		if trust {
			if err := cop.AddTrustedOrigin(trusted); err != nil {
				t.Fatal(err)
			}
			list = []string{trusted}
		}
		g, err := New(list, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, site := range sites {
			for _, origin := range origins {
				for _, host := range hosts {
					req, _ := http.NewRequest("POST", "http://"+host+"/api/v1/ephemeral/push", nil)
					h := headers{"Host": host}
					if site != "" {
						req.Header.Set("Sec-Fetch-Site", site)
						h["Sec-Fetch-Site"] = site
					}
					if origin != "" {
						req.Header.Set("Origin", origin)
						h["Origin"] = origin
					}
					want := cop.Check(req) == nil
					got := g.Check(h) == nil
					if got != want {
						t.Errorf("trusted=%v Sec-Fetch-Site=%q Origin=%q Host=%q: Check passes=%v, net/http passes=%v",
							trust, site, origin, host, got, want)
					}
				}
			}
		}
	}
}

func TestCheckRefusals(t *testing.T) {
	g, _ := New(nil, nil)
	cases := []struct {
		h    headers
		want *wire.Error
	}{
		{headers{"Host": "127.0.0.1:6632"}, nil}, // curl, the SDKs
		{headers{"Host": "127.0.0.1:6632", "Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:6632"}, nil},
		{headers{"Host": "127.0.0.1:6632", "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, ErrCrossSite},
		{headers{"Host": "127.0.0.1:6632", "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8080"}, ErrCrossSite},
		{headers{"Host": "127.0.0.1:6632", "Origin": "http://evil.example"}, ErrOriginMismatch},
		{headers{"Host": "127.0.0.1:6632", "Origin": "null"}, ErrOriginMismatch},
		// Host names are case-insensitive: a stricter byte compare would
		// only refuse a same-origin request.
		{headers{"Host": "LOCALHOST:6632", "Origin": "http://localhost:6632"}, nil},
	}
	for _, c := range cases {
		if got := g.Check(c.h); got != c.want {
			t.Errorf("%v: got %v, want %v", c.h, got, c.want)
		}
	}
	for _, e := range []*wire.Error{ErrCrossSite, ErrOriginMismatch, ErrHostNotLoopback} {
		if e.Status != 403 || e.Code != wire.CodeForbidden {
			t.Errorf("%q: %d %s, want 403 forbidden", e.Msg, e.Status, e.Code)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	g, err := New(nil, []string{"Queen.Internal", "[fd00::1]", "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"localhost": true, "localhost:6632": true, "LocalHost:1": true, "127.0.0.1": true, "127.0.0.1:6632": true,
		"[::1]": true, "[::1]:6632": true, "queen.internal:6632": true, "QUEEN.INTERNAL": true, "[fd00::1]:80": true,
		"10.0.0.5:6632":    true,
		"attacker.example": false, "attacker.example:6632": false, "127.0.0.2:6632": false, "localhost.attacker.example": false,
		"[::2]:6632": false, "queen.internal.evil": false, "0.0.0.0:6632": false,
	} {
		if got := g.LoopbackHost(headers{"Host": host}); got != want {
			t.Errorf("Host %q: LoopbackHost = %v, want %v", host, got, want)
		}
	}
	if !g.LoopbackHost(headers{}) {
		t.Error("a request without Host (no browser sends one) must pass")
	}
	var none *Guard
	if none.LoopbackHost(headers{"Host": "queen.internal"}) || !none.LoopbackHost(headers{"Host": "localhost"}) {
		t.Error("a nil Guard trusts loopback names only")
	}
}

func TestNewRefusesMalformedEntries(t *testing.T) {
	for _, o := range []string{"app.example.com", "https://app.example.com/", "https://app.example.com/x",
		"https://app.example.com?q", "https://app.example.com#f", "https://u@app.example.com", "*"} {
		if _, err := New([]string{o}, nil); err == nil || !strings.Contains(err.Error(), "scheme://host") {
			t.Errorf("origin %q: got %v, want an error naming the shape", o, err)
		}
	}
	for _, h := range []string{"http://x", "x:80", "a/b", "[::1"} {
		if _, err := New(nil, []string{h}); err == nil || !strings.Contains(err.Error(), "without a scheme or port") {
			t.Errorf("host %q: got %v, want an error naming the shape", h, err)
		}
	}
	if _, err := New(Split(" https://a.example , http://b.example:8080,, "), Split("q.internal")); err != nil {
		t.Fatal(err)
	}
}

func TestChecksAllocateNothing(t *testing.T) {
	g, _ := New([]string{"https://app.example.com"}, []string{"queen.internal"})
	buf := []byte("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: queen.internal:6632\r\n" +
		"Origin: https://app.example.com\r\nSec-Fetch-Site: cross-site\r\nContent-Length: 0\r\n\r\n")
	h, _, err := wire.NewParser(wire.Limits{}).Parse(buf)
	if err != nil || h == nil {
		t.Fatalf("parse: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = g.Check(h)
		_ = g.LoopbackHost(h)
	}); n != 0 {
		t.Fatalf("%v allocations per check, want 0", n)
	}
}

// BenchmarkCheckSDKPush is what every push pays: the head of a push as
// the SDKs send it, with no browser header.
func BenchmarkCheckSDKPush(b *testing.B) {
	g, _ := New(nil, nil)
	buf := []byte("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: 127.0.0.1:6632\r\nUser-Agent: queen-go\r\n" +
		"Content-Type: application/json\r\nAuthorization: Bearer x.y.z\r\nContent-Length: 0\r\n\r\n")
	req, _, err := wire.NewParser(wire.Limits{}).Parse(buf)
	if err != nil || req == nil {
		b.Fatalf("parse: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if g.Check(req) != nil {
			b.Fatal("refused")
		}
	}
}

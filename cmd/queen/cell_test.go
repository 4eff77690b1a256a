package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/cell"
)

// QUEEN_CELL_LISTEN (default HOST) from the environment to the relay's
// bound address, on the advertised port.
func TestRelayListenerFromEnv(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(free.Addr().(*net.TCPAddr).Port)
	free.Close()
	base := map[string]string{
		"QUEEN_DATABASE_URL":   "postgres://db/q",
		"QUEEN_CELL_ADVERTISE": "broker-a.example:" + port,
		"QUEEN_CELL_SECRET":    "0123456789abcdef-cell",
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the listener's address
	}{
		{"HOST keeps the relay local", map[string]string{"HOST": "127.0.0.1"}, "127.0.0.1:" + port},
		{"QUEEN_CELL_LISTEN over HOST", map[string]string{"HOST": "0.0.0.0", "QUEEN_CELL_LISTEN": "127.0.0.1"}, "127.0.0.1:" + port},
		{"neither: every interface", nil, ":" + port},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if v, ok := tc.env[k]; ok {
					return v
				}
				return base[k]
			}
			cc, err := cellConfig(getenv, "6632")
			if err != nil {
				t.Fatal(err)
			}
			ln, err := relayListener(cc)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := ln.Addr().(*net.TCPAddr)
			host, _, _ := net.SplitHostPort(tc.want)
			if strconv.Itoa(got.Port) != port {
				t.Fatalf("bound %v, want port %s", got, port)
			}
			if host != "" && got.IP.String() != host {
				t.Fatalf("bound %v, want %s", got, tc.want)
			}
			if host == "" && !got.IP.IsUnspecified() {
				t.Fatalf("bound %v, want every interface", got)
			}
		})
	}
	// A port in QUEEN_CELL_LISTEN is refused with what to do instead.
	_, err = cellConfig(func(k string) string {
		if k == "QUEEN_CELL_LISTEN" {
			return "127.0.0.1:7000"
		}
		return base[k]
	}, "6632")
	if err == nil || !strings.Contains(err.Error(), "give the host only") {
		t.Fatalf("QUEEN_CELL_LISTEN with a port: %v", err)
	}
}

// --help lists QUEEN_CELL_LISTEN with its default.
func TestHelpListsCellListen(t *testing.T) {
	var b strings.Builder
	printHelp(&b)
	if !strings.Contains(b.String(), "QUEEN_CELL_LISTEN") || !strings.Contains(b.String(), "default: HOST when set, else every interface") {
		t.Fatalf("--help does not describe QUEEN_CELL_LISTEN:\n%s", b.String())
	}
}

// A relay bound to loopback while the advertised address is not one is
// warned about (members elsewhere cannot reach it); a cell on one machine,
// or a relay on every interface, is not.
func TestUnreachableRelayWarning(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise string
		warn              bool
	}{
		{"127.0.0.1", "10.0.0.5:7000", true},
		{"::1", "broker-a.internal:7000", true},
		{"localhost", "10.0.0.5:7000", true},
		{"127.0.0.1", "127.0.0.1:7000", false},
		{"127.0.0.1", "localhost:7000", false},
		{"", "10.0.0.5:7000", false},
		{"10.0.0.5", "10.0.0.5:7000", false},
	} {
		w := unreachableRelay(cell.Config{Listen: tc.listen, Advertise: tc.advertise})
		if (w != "") != tc.warn {
			t.Errorf("listen %q, advertise %q: warning %q, want one: %v", tc.listen, tc.advertise, w, tc.warn)
		}
		if tc.warn && !strings.Contains(w, "set QUEEN_CELL_LISTEN") {
			t.Errorf("the warning does not say what to set: %q", w)
		}
	}
}

// QUEEN_CELL_PUBLIC_URL, or its default derived from HOST and PORT, through
// configFromEnv: the URL published, or none and the warning at start; and
// the refusals of a bad value.
func TestPublicURLFromEnv(t *testing.T) {
	base := map[string]string{
		"QUEEN_DATABASE_URL":   "postgres://db/q",
		"QUEEN_CELL_ADVERTISE": "10.0.0.1:7000",
		"QUEEN_CELL_SECRET":    "0123456789abcdef-cell",
	}
	for _, tc := range []struct {
		name      string
		env       map[string]string
		want      string // the URL published; "" = none, and the warning
		refusedAs string // a refusal containing this
	}{
		{"HOST and PORT", map[string]string{"HOST": "10.0.0.1", "PORT": "8080"}, "http://10.0.0.1:8080", ""},
		{"HOST and the default PORT", map[string]string{"HOST": "broker-a.internal"}, "http://broker-a.internal:6632", ""},
		{"an IPv6 HOST", map[string]string{"HOST": "fd00::1"}, "http://[fd00::1]:6632", ""},
		{"loopback HOST", map[string]string{"HOST": "127.0.0.1"}, "http://127.0.0.1:6632", ""},
		{"HOST unset (every interface)", nil, "", ""},
		{"HOST 0.0.0.0", map[string]string{"HOST": "0.0.0.0"}, "", ""},
		{"HOST ::", map[string]string{"HOST": "::"}, "", ""},
		{"the variable over HOST", map[string]string{"HOST": "10.0.0.1", "QUEEN_CELL_PUBLIC_URL": "https://broker-a.example.com"}, "https://broker-a.example.com", ""},
		{"the variable with HOST 0.0.0.0", map[string]string{"HOST": "0.0.0.0", "QUEEN_CELL_PUBLIC_URL": "http://10.0.0.1:6632/"}, "http://10.0.0.1:6632", ""},
		{"a path", map[string]string{"QUEEN_CELL_PUBLIC_URL": "http://10.0.0.1:6632/queen"}, "", "QUEEN_CELL_PUBLIC_URL=\"http://10.0.0.1:6632/queen\" must have no path"},
		{"no scheme", map[string]string{"QUEEN_CELL_PUBLIC_URL": "10.0.0.1:6632"}, "", "must start with http:// or https://"},
		{"an unspecified host", map[string]string{"QUEEN_CELL_PUBLIC_URL": "http://0.0.0.0:6632"}, "", "unspecified address"},
		{"without QUEEN_CELL_ADVERTISE", map[string]string{"QUEEN_CELL_ADVERTISE": "", "QUEEN_CELL_PUBLIC_URL": "http://10.0.0.1:6632"}, "", "QUEEN_CELL_PUBLIC_URL is set without QUEEN_CELL_ADVERTISE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range base {
				e[k] = v
			}
			for k, v := range tc.env {
				e[k] = v
			}
			c, err := configFromEnv(envOf(e))
			if tc.refusedAs != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusedAs) {
					t.Fatalf("error %v, want one containing %q", err, tc.refusedAs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Cell.PublicURL != tc.want {
				t.Fatalf("public URL %q, want %q", c.Cell.PublicURL, tc.want)
			}
			w := noPublicURL(c.Cell)
			if (w != "") != (tc.want == "") {
				t.Fatalf("warning %q with public URL %q", w, c.Cell.PublicURL)
			}
			if w != "" && (!strings.Contains(w, "Set QUEEN_CELL_PUBLIC_URL") || strings.Contains(w, "\n")) {
				t.Fatalf("the warning is not one line naming the variable: %q", w)
			}
		})
	}
	// A broker outside a cell publishes nothing and warns of nothing.
	c, err := configFromEnv(envOf(map[string]string{"HOST": "10.0.0.1"}))
	if err != nil || c.Cell.PublicURL != "" || noPublicURL(c.Cell) != "" {
		t.Fatalf("outside a cell: %+v %v", c.Cell, err)
	}
}

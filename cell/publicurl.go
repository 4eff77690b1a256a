package cell

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Public URLs (docs/cell.md, "Public URLs"). Each member publishes where
// clients reach its public port, so that a client given one URL of a cell
// can send each queue's calls to its owner instead of having a member
// relay them. The URL travels in the member's row and in every view; the
// broker serves it to clients (GET /api/v1/ephemeral/cell).

// publicURL validates QUEEN_CELL_PUBLIC_URL: http or https, a host a
// client can dial (not an unspecified address), an optional port, and
// nothing else: no credentials (every client is given the URL), no path,
// query or fragment (clients append the routes' paths to it). A single
// trailing "/" is dropped. Unset is "".
func publicURL(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%s=%q %s: give the scheme, host and port clients use to reach this member's public port, e.g. http://10.0.0.1:6632", EnvPublicURL, v, why)
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return "", bad("contains white space")
	}
	if !strings.Contains(v, "://") {
		return "", bad("must start with http:// or https://")
	}
	u, err := url.Parse(strings.TrimSuffix(v, "/"))
	switch {
	case err != nil:
		return "", bad("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", bad("must start with http:// or https://")
	case u.Opaque != "" || u.Host == "":
		return "", bad("names no host")
	case u.User != nil:
		return "", bad("must not carry credentials (every client is given it)")
	case u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", bad("must have no path, query or fragment")
	}
	host := u.Hostname()
	if host == "" {
		return "", bad("names no host")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "", bad("is an unspecified address, which no client can dial")
	}
	if p := u.Port(); p != "" {
		if n, err := parsePort(p); err != nil || n < 1 {
			return "", bad("has a bad port")
		}
	}
	return u.Scheme + "://" + u.Host, nil
}

// parsePort reads 1 to 65535.
func parsePort(p string) (int, error) {
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' || n > 65535 {
			return 0, fmt.Errorf("bad port %q", p)
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, fmt.Errorf("bad port %q", p)
	}
	return n, nil
}

// DerivePublicURL is the default of QUEEN_CELL_PUBLIC_URL: http://HOST:PORT
// when HOST names an address a client can dial, "" when it does not (empty,
// 0.0.0.0 or ::, which name every interface and no address). The broker
// serves plain HTTP, so the derived scheme is http; a member behind TLS or
// a proxy sets the variable.
func DerivePublicURL(host, port string) string {
	host = strings.TrimSpace(host)
	if inner, ok := strings.CutPrefix(host, "["); ok {
		host = strings.TrimSuffix(inner, "]")
	}
	if host == "" || port == "" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	u, err := publicURL("http://" + net.JoinHostPort(host, port))
	if err != nil {
		return ""
	}
	return u
}

package wire

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

const popGET = "GET /api/v1/ephemeral/pop?queue=inbox-7&wait=true&timeout=30000&batch=10 HTTP/1.1\r\n" +
	"Host: localhost:6632\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\nAuthorization: Bearer abc.def\r\n" +
	"X-Queen-Tenant: acme\r\n\r\n"

func TestParseGET(t *testing.T) {
	req, err := parseOne(t, popGET)
	if err != nil || req == nil {
		t.Fatalf("req %v err %v", req, err)
	}
	if req.Method != MethodGet || string(req.MethodName) != "GET" || req.Minor != 1 {
		t.Errorf("method %v %q minor %d", req.Method, req.MethodName, req.Minor)
	}
	if string(req.Path) != "/api/v1/ephemeral/pop" || string(req.RawQuery) != "queue=inbox-7&wait=true&timeout=30000&batch=10" {
		t.Errorf("path %q query %q", req.Path, req.RawQuery)
	}
	if !req.KeepAlive || req.Body != nil || req.Chunked || req.ExpectContinue {
		t.Errorf("keepAlive %v body %q chunked %v expect %v", req.KeepAlive, req.Body, req.Chunked, req.ExpectContinue)
	}
	for name, want := range map[string]string{
		"host": "localhost:6632", "AUTHORIZATION": "Bearer abc.def", "x-queen-tenant": "acme", "X-Queen-Tenant": "acme",
	} {
		if v, ok := req.Header(name); !ok || string(v) != want {
			t.Errorf("Header(%q) = %q, %v; want %q", name, v, ok, want)
		}
	}
	if _, ok := req.Header("X-Queen-Access"); ok {
		t.Error("absent header found")
	}
	if req.NumHeaders() != 5 {
		t.Errorf("%d headers", req.NumHeaders())
	}
	if n, v := req.HeaderAt(1); string(n) != "User-Agent" || string(v) != "bench/1.0" {
		t.Errorf("HeaderAt(1) = %q %q", n, v)
	}
}

func TestParseHeaderWhitespaceTrimmed(t *testing.T) {
	req, err := parseOne(t, "GET / HTTP/1.1\r\nX-A:  \t spaced value \t \r\nX-B:\r\nContent-Length:  3 \r\n\r\nabc")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := req.Header("x-a"); string(v) != "spaced value" {
		t.Errorf("x-a %q", v)
	}
	if v, ok := req.Header("x-b"); !ok || len(v) != 0 {
		t.Errorf("x-b %q %v", v, ok)
	}
	// A value of whitespace only is empty.
	blank, err := parseOne(t, "GET / HTTP/1.1\r\nX-C: \t \r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := blank.Header("x-c"); !ok || len(v) != 0 {
		t.Errorf("x-c %q %v", v, ok)
	}
	if string(req.Body) != "abc" {
		t.Errorf("body %q", req.Body)
	}
}

func TestParseMethods(t *testing.T) {
	for _, m := range []Method{MethodGet, MethodHead, MethodPost, MethodPut, MethodDelete, MethodOptions} {
		req, err := parseOne(t, m.String()+" /x HTTP/1.1\r\n\r\n")
		if err != nil || req.Method != m {
			t.Errorf("%v: got %v, %v", m, req, err)
		}
	}
	// Other tokens parse; routing decides (404/405).
	for _, name := range []string{"PATCH", "get", "BREW"} {
		req, err := parseOne(t, name+" /x HTTP/1.1\r\n\r\n")
		if err != nil || req.Method != MethodOther || string(req.MethodName) != name {
			t.Errorf("%s: got %+v, %v", name, req, err)
		}
	}
	if req, err := parseOne(t, "OPTIONS * HTTP/1.1\r\n\r\n"); err != nil || string(req.Path) != "*" {
		t.Errorf("OPTIONS *: %v %v", req, err)
	}
}

func TestParseNoQueryAndEmptyQuery(t *testing.T) {
	req, _ := parseOne(t, "GET /a/b HTTP/1.1\r\n\r\n")
	if req.RawQuery != nil || string(req.Path) != "/a/b" {
		t.Errorf("path %q query %q", req.Path, req.RawQuery)
	}
	req, _ = parseOne(t, "GET /a? HTTP/1.1\r\n\r\n")
	if req.RawQuery == nil || len(req.RawQuery) != 0 {
		t.Errorf("empty query: %q", req.RawQuery)
	}
}

func TestParseNeedsMore(t *testing.T) {
	p := NewParser(Limits{})
	for _, part := range []string{"", "G", "GET / HTTP/1.1\r", "GET / HTTP/1.1\r\nHost: x\r\n", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc"} {
		p.Reset()
		req, n, err := p.Parse([]byte(part))
		if req != nil || n != 0 || err != nil {
			t.Errorf("%q: req %v n %d err %v", part, req, n, err)
		}
	}
}

func TestParsePipelined(t *testing.T) {
	stream := "GET /api/v1/ephemeral/pop?queue=a HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"queue\":\"a\"}" +
		"POST /api/v1/ephemeral/ack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"qu\r\n0\r\n\r\n"
	out := parseStream(t, Limits{}, []byte(stream), nil)
	if out.Err != "" || len(out.Reqs) != 3 || out.Consumed != len(stream) {
		t.Fatalf("%+v", out)
	}
	if out.Reqs[0].Path != "/api/v1/ephemeral/pop" || out.Reqs[1].Body != `{"queue":"a"}` || out.Reqs[2].Body != `{"qu` || !out.Reqs[2].Chunked {
		t.Errorf("%+v", out.Reqs)
	}
	// One Parse call per request, in order, each reporting its own length.
	p := NewParser(Limits{})
	buf := []byte(stream)
	var lens []int
	for {
		req, n, err := p.Parse(buf)
		if err != nil {
			t.Fatal(err)
		}
		if req == nil {
			break
		}
		lens = append(lens, n)
		buf = buf[n:]
	}
	if len(lens) != 3 || len(buf) != 0 {
		t.Errorf("lens %v rest %q", lens, buf)
	}
}

// sampleStream exercises every stage: leading empty lines, a GET, a
// Content-Length POST, and a chunked POST with extensions and trailers.
const sampleStream = "\r\n\r\nGET /api/v1/ephemeral/queues/a%2Fb/depth?group=g+1 HTTP/1.1\r\nHost: h\r\n\r\n" +
	"POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\nhello world" +
	"POST /api/v1/ephemeral/push HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n" +
	"POST /api/v1/ephemeral/ack HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n" +
	"5;name=value;q=\"a \\\" b\"\r\nhello\r\n1 ; x\r\n \r\n0006\r\nworld!\r\n0\r\nX-Trailer: t\r\nX-Other: o\r\n\r\n" +
	"DELETE /api/v1/ephemeral/queue/q HTTP/1.1\r\nConnection: close\r\n\r\n"

func TestParseSplitAnywhere(t *testing.T) {
	buf := []byte(sampleStream)
	whole := parseStream(t, Limits{}, buf, nil)
	if whole.Err != "" || len(whole.Reqs) != 5 || whole.Consumed != len(buf) {
		t.Fatalf("whole: %+v", whole)
	}
	if got := whole.Reqs[3].Body; got != "hello world!" {
		t.Errorf("chunked body %q", got)
	}
	for i := 0; i <= len(buf); i++ {
		if got := parseStream(t, Limits{}, buf, []int{i}); !reflect.DeepEqual(got, whole) {
			t.Fatalf("split at %d: %+v\nwant %+v", i, got, whole)
		}
	}
	for i := 0; i < len(buf); i += 7 {
		for j := i; j <= len(buf); j += 13 {
			if got := parseStream(t, Limits{}, buf, []int{i, j}); !reflect.DeepEqual(got, whole) {
				t.Fatalf("split at %d,%d: %+v", i, j, got)
			}
		}
	}
	if got := parseStream(t, Limits{}, buf, everyByte(len(buf))); !reflect.DeepEqual(got, whole) {
		t.Fatalf("byte by byte: %+v", got)
	}
}

func everyByte(n int) []int {
	cuts := make([]int, n)
	for i := range cuts {
		cuts[i] = i
	}
	return cuts
}

// The parser remembers offsets, not pointers: the buffer may move between
// reads (an inbound ring buffer that compacts or grows).
func TestParseBufferMovesBetweenReads(t *testing.T) {
	p := NewParser(Limits{})
	raw := "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	for i := 1; i < len(raw); i++ {
		p.Reset()
		if req, _, err := p.Parse([]byte(raw[:i])); req != nil || err != nil {
			t.Fatalf("prefix %d: %v %v", i, req, err)
		}
		moved := append(make([]byte, 0, 1024), raw...)
		req, n, err := p.Parse(moved)
		if err != nil || req == nil || n != len(raw) || string(req.Body) != "abc" {
			t.Fatalf("after %d: %v %d %v", i, req, n, err)
		}
	}
}

func TestParseChunkedExtensionsAndTrailers(t *testing.T) {
	raw := "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3;a\r\nabc\r\n2 ;b=\"q\\\"d\" ;c=tok\r\nde\r\n0;last\r\nTrailer-A: 1\r\nTrailer-B:\r\n\r\n"
	req, err := parseOne(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Body) != "abcde" || !req.Chunked {
		t.Errorf("body %q", req.Body)
	}
	if _, ok := req.Header("Trailer-A"); ok {
		t.Error("trailers must not become headers")
	}
	// A chunked body with no data chunk is empty.
	req, err = parseOne(t, "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if err != nil || len(req.Body) != 0 {
		t.Errorf("%v %v", req, err)
	}
}

func TestParseChunkedBodyReusesBuffer(t *testing.T) {
	p := NewParser(Limits{})
	raw := []byte("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	req, _, _ := p.Parse(raw)
	first := &req.Body[0]
	req, _, _ = p.Parse(raw)
	if &req.Body[0] != first {
		t.Error("de-chunking buffer not reused")
	}
	// A large one is not kept for the next request.
	big := "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + "40001\r\n" + strings.Repeat("a", 0x40001) + "\r\n0\r\n\r\n"
	if req, _, err := p.Parse([]byte(big)); err != nil || len(req.Body) != 0x40001 {
		t.Fatal(err)
	}
	if cap(p.body) != 0 {
		t.Errorf("kept a %d-byte buffer", cap(p.body))
	}
}

func TestParseKeepAlive(t *testing.T) {
	cases := []struct {
		raw       string
		keepAlive bool
		head      Head
	}{
		{"GET / HTTP/1.1\r\n\r\n", true, Head{Status: 200}},
		{"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false, Head{Status: 200, Close: true}},
		{"GET / HTTP/1.1\r\nConnection: keep-alive, CLOSE\r\n\r\n", false, Head{Status: 200, Close: true}},
		{"GET / HTTP/1.1\r\nConnection: Upgrade\r\nConnection: close\r\n\r\n", false, Head{Status: 200, Close: true}},
		{"GET / HTTP/1.0\r\n\r\n", false, Head{Status: 200, Close: true}},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true, Head{Status: 200, KeepAlive: true}},
		{"GET / HTTP/1.0\r\nConnection: foo , Keep-Alive\r\n\r\n", true, Head{Status: 200, KeepAlive: true}},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false, Head{Status: 200, Close: true}},
	}
	for _, c := range cases {
		req, err := parseOne(t, c.raw)
		if err != nil {
			t.Fatalf("%q: %v", c.raw, err)
		}
		if req.KeepAlive != c.keepAlive {
			t.Errorf("%q: keepAlive %v", c.raw, req.KeepAlive)
		}
		if h := req.Head(200); !reflect.DeepEqual(h, c.head) {
			t.Errorf("%q: head %+v, want %+v", c.raw, h, c.head)
		}
	}
}

func TestParseHTTP10KeepAliveStream(t *testing.T) {
	stream := "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nPOST /b HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhiGET /c HTTP/1.0\r\n\r\n"
	out := parseStream(t, Limits{}, []byte(stream), nil)
	if len(out.Reqs) != 3 || !out.Reqs[0].KeepAlive || !out.Reqs[1].KeepAlive || out.Reqs[2].KeepAlive || out.Reqs[1].Body != "hi" {
		t.Errorf("%+v", out)
	}
}

func TestParseExpectContinue(t *testing.T) {
	head := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n"
	p := NewParser(Limits{})
	if p.TakeContinue() {
		t.Fatal("continue before any bytes")
	}
	req, n, err := p.Parse([]byte(head[:20]))
	if req != nil || n != 0 || err != nil || p.TakeContinue() {
		t.Fatal("continue before the head is complete")
	}
	req, n, err = p.Parse([]byte(head))
	if req != nil || n != 0 || err != nil {
		t.Fatalf("%v %d %v", req, n, err)
	}
	if !p.TakeContinue() {
		t.Fatal("head read, body awaited: want continue")
	}
	if p.TakeContinue() {
		t.Fatal("continue reported twice")
	}
	if p.ReadingHead() {
		t.Error("ReadingHead while awaiting the body")
	}
	req, n, err = p.Parse([]byte(head + "ab"))
	if req != nil || n != 0 || err != nil || p.TakeContinue() {
		t.Fatal("continue again after a partial body")
	}
	req, n, err = p.Parse([]byte(head + "abcd"))
	if err != nil || req == nil || n != len(head)+4 || !req.ExpectContinue || string(req.Body) != "abcd" {
		t.Fatalf("%+v %d %v", req, n, err)
	}
	if !p.ReadingHead() {
		t.Error("ReadingHead false between requests")
	}

	// A request that arrives whole never asks for 100 Continue.
	p.Reset()
	if req, _, _ := p.Parse([]byte(head + "abcd")); req == nil || p.TakeContinue() {
		t.Error("continue for a whole request")
	}
	// No body, no interim response.
	p.Reset()
	if req, _, _ := p.Parse([]byte("GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")); req == nil || p.TakeContinue() || !req.ExpectContinue {
		t.Error("continue for a bodiless request")
	}
	// Chunked bodies ask too.
	p.Reset()
	if req, _, _ := p.Parse([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")); req != nil || !p.TakeContinue() {
		t.Error("no continue for a chunked body")
	}
	// HTTP/1.0 expectations are ignored (RFC 9110 10.1.1), even unknown ones.
	p.Reset()
	req, _, err = p.Parse([]byte("POST / HTTP/1.0\r\nExpect: 100-continue\r\nExpect: fancy\r\nContent-Length: 1\r\n\r\n"))
	if req != nil || err != nil || p.TakeContinue() {
		t.Error("HTTP/1.0 expectation honoured")
	}
	// An error clears a pending continue.
	p.Reset()
	p.Parse([]byte(head))
	p.Parse([]byte(head + "abcdGARBAGE\r\n"))
	if p.TakeContinue() {
		t.Error("continue after an error")
	}
}

func TestParseExpectationFailed(t *testing.T) {
	_, err := parseOne(t, "POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx")
	if e := wantErr(t, err, 417, "200-ok"); !e.Close {
		t.Error("417 must close")
	}
}

func TestParseLeadingEmptyLines(t *testing.T) {
	out := parseStream(t, Limits{}, []byte("\r\n\r\nGET / HTTP/1.1\r\n\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"), nil)
	if out.Err != "" || len(out.Reqs) != 2 || out.Reqs[1].Path != "/2" {
		t.Errorf("%+v", out)
	}
}

func TestParseStickyError(t *testing.T) {
	p := NewParser(Limits{})
	_, _, err1 := p.Parse([]byte("GET / HTTP/1.1\nHost: x\r\n\r\n"))
	_, _, err2 := p.Parse([]byte("GET / HTTP/1.1\r\n\r\n"))
	if err1 == nil || err2 != err1 {
		t.Errorf("%v then %v", err1, err2)
	}
	p.Reset()
	if req, _, err := p.Parse([]byte("GET / HTTP/1.1\r\n\r\n")); req == nil || err != nil {
		t.Errorf("after Reset: %v", err)
	}
}

func TestParseRefusals(t *testing.T) {
	const get = "GET / HTTP/1.1\r\n"
	const post = "POST / HTTP/1.1\r\n"
	cases := []struct {
		name, raw, frag string
	}{
		// Smuggling shapes.
		{"CL then TE", post + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "Content-Length together with Transfer-Encoding"},
		{"TE then CL", post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", "Content-Length together with Transfer-Encoding"},
		{"two equal CL", post + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "two Content-Length"},
		{"CL list", post + "Content-Length: 3, 3\r\n\r\nabc", "not a non-negative integer"},
		{"CL negative", post + "Content-Length: -1\r\n\r\n", "not a non-negative integer"},
		{"CL plus sign", post + "Content-Length: +3\r\n\r\nabc", "not a non-negative integer"},
		{"CL hex", post + "Content-Length: 0x3\r\n\r\nabc", "not a non-negative integer"},
		{"CL inner space", post + "Content-Length: 1 2\r\n\r\n", "not a non-negative integer"},
		{"CL empty", post + "Content-Length:\r\n\r\n", "empty Content-Length"},
		{"CL overflow", post + "Content-Length: 99999999999999999999999999\r\n\r\n", "exceeds the body limit"},
		{"CL just past int64", post + "Content-Length: 9223372036854775810\r\n\r\n", "Content-Length \"9223372036854775810\" exceeds the body limit"},
		{"CL over max body", post + "Content-Length: 67108865\r\n\r\n", "exceeds the body limit of 67108864"},
		{"TE gzip", post + "Transfer-Encoding: gzip\r\n\r\n", "only chunked"},
		{"TE list", post + "Transfer-Encoding: gzip, chunked\r\n\r\n", "only chunked"},
		{"TE chunked twice in a list", post + "Transfer-Encoding: chunked, chunked\r\n\r\n", "only chunked"},
		{"TE identity", post + "Transfer-Encoding: identity\r\n\r\n", "only chunked"},
		{"two TE", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "two Transfer-Encoding"},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.0"},
		{"two Host", get + "Host: a\r\nHost: b\r\n\r\n", "two Host"},
		{"two Authorization", get + "Authorization: a\r\nauthorization: b\r\n\r\n", "two \"authorization\""},
		{"two X-Queen-Tenant", get + "X-Queen-Tenant: a\r\nX-QUEEN-TENANT: b\r\n\r\n", "two \"X-QUEEN-TENANT\""},

		// Line endings.
		{"bare LF request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", "bare LF"},
		{"bare LF header", get + "Host: x\n\r\n", "bare LF"},
		{"bare LF end of head", get + "Host: x\r\n\n", "bare LF"},
		{"bare CR header value", get + "X-A: a\rb\r\n\r\n", "bare CR"},
		{"bare CR request line", "GET /\r HTTP/1.1\r\n\r\n", "byte '\\r'"},
		{"bare CR leading", "\rGET / HTTP/1.1\r\n\r\n", "bare CR"},
		{"lone LF leading", "\nGET / HTTP/1.1\r\n\r\n", "bare LF"},

		// Header syntax.
		{"obs-fold", get + "X-A: a\r\n b\r\n\r\n", "obs-fold"},
		{"whitespace after request line", get + " Host: x\r\n\r\n", "obs-fold"},
		{"space in name", get + "Bad Header: x\r\n\r\n", "carries the byte ' '"},
		{"space before colon", get + "Host : x\r\n\r\n", "whitespace between"},
		{"tab before colon", get + "Host\t: x\r\n\r\n", "whitespace between a header name and its colon"},
		{"bad name char before colon", get + "X(: x\r\n\r\n", "header name carries the byte '('"},
		{"no colon", get + "Host\r\n\r\n", "no colon"},
		{"empty name", get + ": x\r\n\r\n", "empty header name"},
		{"bad name char", get + "X(a): x\r\n\r\n", "carries the byte '('"},
		{"NUL in value", get + "X-A: a\x00b\r\n\r\n", "NUL"},
		{"NUL in name", get + "X\x00A: b\r\n\r\n", "carries the byte '\\x00'"},
		{"control in value", get + "X-A: a\x01b\r\n\r\n", "control character"},
		{"DEL in value", get + "X-A: a\x7fb\r\n\r\n", "control character"},

		// Request line.
		{"no version", "GET /\r\n\r\n", "malformed request line"},
		{"double space", "GET  / HTTP/1.1\r\n\r\n", "malformed request line"},
		{"no target", "GET  HTTP/1.1\r\n\r\n", "malformed request line"},
		{"no method", " / HTTP/1.1\r\n\r\n", "malformed request line"},
		{"trailing token", "GET / HTTP/1.1 x\r\n\r\n", "malformed request line"},
		{"HTTP/2", "GET / HTTP/2.0\r\n\r\n", "not supported"},
		{"HTTP/1.2", "GET / HTTP/1.2\r\n\r\n", "not supported"},
		{"lowercase version", "GET / http/1.1\r\n\r\n", "malformed request line"},
		{"method with slash", "GE/T / HTTP/1.1\r\n\r\n", "in the method"},
		{"absolute form", "GET http://h/x HTTP/1.1\r\n\r\n", "origin-form"},
		{"authority form", "CONNECT h:443 HTTP/1.1\r\n\r\n", "origin-form"},
		{"asterisk with GET", "GET * HTTP/1.1\r\n\r\n", "origin-form"},
		{"fragment", "GET /x#y HTTP/1.1\r\n\r\n", "fragment"},
		{"control in target", "GET /x\x01 HTTP/1.1\r\n\r\n", "request target carries"},
		{"bad escape", "GET /x?q=%zz HTTP/1.1\r\n\r\n", "malformed percent-escape at byte 5"},
		{"truncated escape", "GET /x%4 HTTP/1.1\r\n\r\n", "malformed percent-escape"},

		// Chunked framing.
		{"chunk size not hex", post + "Transfer-Encoding: chunked\r\n\r\nxyz\r\n", "not hexadecimal"},
		{"chunk size negative", post + "Transfer-Encoding: chunked\r\n\r\n-1\r\n", "not hexadecimal"},
		{"chunk size bare LF", post + "Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", "bare LF"},
		{"chunk size trailing space", post + "Transfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk ext no name", post + "Transfer-Encoding: chunked\r\n\r\n3;\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk ext bad value", post + "Transfer-Encoding: chunked\r\n\r\n3;a=\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk ext open quote", post + "Transfer-Encoding: chunked\r\n\r\n3;a=\"x\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk ext bare CR", post + "Transfer-Encoding: chunked\r\n\r\n3;a\rb\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk data no CRLF", post + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n", "not followed by CRLF"},
		{"chunk data LF only", post + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\n0\r\n\r\n", "not followed by CRLF"},
		// The stream ends one or two bytes after the data: the bytes there
		// are already wrong, so the answer does not wait for more.
		{"chunk data then one wrong byte", post + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcx", "not followed by CRLF"},
		{"chunk data then CR and a wrong byte", post + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\rx", "not followed by CRLF"},
		{"chunk ext quoted-string ends in a backslash", post + "Transfer-Encoding: chunked\r\n\r\n3;a=\"\\\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk ext quoted-pair of a control", post + "Transfer-Encoding: chunked\r\n\r\n3;a=\"\\\x01\"\r\nabc\r\n0\r\n\r\n", "malformed chunk extension"},
		{"chunk over max body", post + "Transfer-Encoding: chunked\r\n\r\n4000001\r\n", "exceeds the body limit"},
		{"chunk size overflow", post + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffffffff\r\n", "exceeds the body limit"},
		{"trailer obs-fold", post + "Transfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n c\r\n\r\n", "obs-fold"},
		{"trailer bare LF", post + "Transfer-Encoding: chunked\r\n\r\n0\r\nA: b\n\r\n", "bare LF"},
		{"trailer NUL", post + "Transfer-Encoding: chunked\r\n\r\n0\r\nA: \x00\r\n\r\n", "NUL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The same refusal whole and byte by byte.
			out := parseStream(t, Limits{}, []byte(c.raw), nil)
			if out.Err == "" || !strings.Contains(out.Err, c.frag) {
				t.Fatalf("got %+v, want an error with %q", out, c.frag)
			}
			if got := parseStream(t, Limits{}, []byte(c.raw), everyByte(len(c.raw))); got.Err != out.Err {
				t.Fatalf("byte by byte: %q, whole: %q", got.Err, out.Err)
			}
			_, err := parseOne(t, c.raw)
			if e := wantErr(t, err, 400); !e.Close || e.Code != CodeBadRequest {
				t.Errorf("close %v code %q", e.Close, e.Code)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	lim := Limits{MaxHeaderBytes: 64, MaxHeaders: 3, MaxBody: 10}
	ok := func(raw string) {
		t.Helper()
		if out := parseStream(t, lim, []byte(raw), nil); out.Err != "" || len(out.Reqs) != 1 {
			t.Errorf("%q: %+v", raw, out)
		}
	}
	refused := func(raw, frag string) {
		t.Helper()
		out := parseStream(t, lim, []byte(raw), nil)
		if !strings.Contains(out.Err, frag) {
			t.Errorf("%q: %+v, want %q", raw, out, frag)
		}
		if got := parseStream(t, lim, []byte(raw), everyByte(len(raw))); got.Err != out.Err {
			t.Errorf("%q byte by byte: %q", raw, got.Err)
		}
	}
	// The head may be exactly MaxHeaderBytes long.
	head := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 64-len("GET / HTTP/1.1\r\nX: \r\n\r\n")) + "\r\n\r\n"
	if len(head) != 64 {
		t.Fatal(len(head))
	}
	ok(head)
	refused("GET / HTTP/1.1\r\nX: a"+head[len("GET / HTTP/1.1\r\nX: "):], "request head exceeds 64 bytes")
	refused("GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 100), "request head exceeds 64 bytes")
	refused("GET /"+strings.Repeat("a", 100), "request head exceeds 64 bytes")
	refused(strings.Repeat("\r\n", 40)+"GET / HTTP/1.1\r\n\r\n", "request head exceeds 64 bytes")
	ok("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")
	refused("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", "more than 3 header lines")
	ok("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789")
	refused("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", "exceeds the body limit of 10 bytes")
	ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n")
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n6\r\n", "chunked body exceeds the body limit of 10 bytes")
	// One chunk of exactly MaxBody bytes fits; a size whose digits pass
	// MaxBody on the way (a0 = 160: a, then 160) does not.
	ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n")
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\na0\r\n", "chunked body exceeds the body limit of 10 bytes")
	// Trailers have their own budget of the same size.
	ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", "more than 3 trailer lines")
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: "+strings.Repeat("a", 70)+"\r\n\r\n", "trailer section exceeds 64 bytes")
}

func TestParseChunkFramingBounds(t *testing.T) {
	// A chunk-size line may not grow without end.
	raw := "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("a", maxChunkLine) + "\r\n"
	if out := parseStream(t, Limits{}, []byte(raw), nil); !strings.Contains(out.Err, "chunk-size line exceeds") {
		t.Errorf("%+v", out.Err)
	}
	// Framing overhead is bounded: a body of one-byte chunks with fat
	// extensions is refused once its framing passes the cap.
	var b strings.Builder
	b.WriteString("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
	ext := ";" + strings.Repeat("e", 1000)
	for b.Len() < maxChunkFraming+4096 {
		b.WriteString("1" + ext + "\r\nx\r\n")
	}
	if out := parseStream(t, Limits{}, []byte(b.String()), nil); !strings.Contains(out.Err, "chunked framing exceeds") {
		t.Errorf("%+v", out.Err)
	}
}

// A chunk-size line may be exactly maxChunkLine bytes before its CRLF,
// whole or split anywhere; one byte more is refused.
func TestParseChunkLineAtTheBound(t *testing.T) {
	line := func(n int) string { return "1;" + strings.Repeat("a", n-2) }
	head := "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	raw := head + line(maxChunkLine) + "\r\nx\r\n0\r\n\r\n"
	for _, cuts := range [][]int{nil, everyByte(len(raw))} {
		if out := parseStream(t, Limits{}, []byte(raw), cuts); out.Err != "" || len(out.Reqs) != 1 || out.Reqs[0].Body != "x" {
			t.Errorf("a chunk-size line of %d bytes: %+v", maxChunkLine, out)
		}
	}
	raw = head + line(maxChunkLine+1) + "\r\nx\r\n0\r\n\r\n"
	if out := parseStream(t, Limits{}, []byte(raw), nil); out.Err != fmt.Sprintf("chunk-size line exceeds %d bytes", maxChunkLine) {
		t.Errorf("a chunk-size line of %d bytes: %+v", maxChunkLine+1, out.Err)
	}
}

// A header named exactly "X-Queen-" is an X-Queen-* header: a second one
// is refused like any other.
func TestParseXQueenPrefixAlone(t *testing.T) {
	_, err := parseOne(t, "GET / HTTP/1.1\r\nX-Queen-: a\r\nx-queen-: b\r\n\r\n")
	wantErr(t, err, 400, `two "x-queen-" headers`)
}

// The framing of one chunked body (chunk-size lines and the CRLF after
// each chunk's data, the last chunk's line included) may be exactly
// maxChunkFraming bytes; one byte more is refused.
func TestParseChunkFramingAtTheBound(t *testing.T) {
	build := func(framing int) (raw string, chunks int) {
		var b strings.Builder
		b.WriteString("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
		rem := framing - len("0\r\n")
		for rem > 0 {
			// "1;" + ext + CRLF, one data byte, CRLF: len(ext)+6 bytes of framing.
			k := 1000
			if rem <= 2000 {
				k = rem - 6
			}
			b.WriteString("1;" + strings.Repeat("e", k) + "\r\nx\r\n")
			rem -= k + 6
			chunks++
		}
		b.WriteString("0\r\n\r\n")
		return b.String(), chunks
	}
	raw, n := build(maxChunkFraming)
	if out := parseStream(t, Limits{}, []byte(raw), nil); out.Err != "" || len(out.Reqs) != 1 || out.Reqs[0].Body != strings.Repeat("x", n) {
		t.Errorf("framing of exactly %d bytes: %d requests, %q", maxChunkFraming, len(out.Reqs), out.Err)
	}
	raw, _ = build(maxChunkFraming + 1)
	if out := parseStream(t, Limits{}, []byte(raw), nil); out.Err != fmt.Sprintf("chunked framing exceeds %d bytes; send larger chunks", maxChunkFraming) {
		t.Errorf("framing of %d bytes: %q", maxChunkFraming+1, out.Err)
	}
}

// With a body limit near the top of int64 (QUEEN_MAX_BODY_BYTES set to
// "no limit"), a Content-Length that reaches past it once the head's length
// is added is a body still to come, and Need says the buffer must grow
// without end: the sum must not wrap around.
func TestParseContentLengthNearMaxInt64(t *testing.T) {
	for _, cl := range []int64{math.MaxInt64, math.MaxInt64 - 10} {
		p := NewParser(Limits{MaxBody: math.MaxInt64})
		raw := []byte(fmt.Sprintf("POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\nabc", cl))
		req, n, err := p.Parse(raw)
		if req != nil || n != 0 || err != nil {
			t.Fatalf("Content-Length %d: %v, %d, %v; want a body still to come", cl, req, n, err)
		}
		if !p.InBody() {
			t.Errorf("Content-Length %d: not in the body", cl)
		}
		if need := p.Need(); need != math.MaxInt64 {
			t.Errorf("Content-Length %d: Need() = %d, want %d", cl, need, int64(math.MaxInt64))
		}
	}
	// Below the top, Need is exact.
	p := NewParser(Limits{MaxBody: math.MaxInt64})
	head := fmt.Sprintf("POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n", int64(math.MaxInt64-100))
	if req, _, err := p.Parse([]byte(head)); req != nil || err != nil {
		t.Fatal(req, err)
	}
	if need, want := p.Need(), int64(len(head))+math.MaxInt64-100; need != want {
		t.Errorf("Need() = %d, want %d", need, want)
	}
}

func TestParseGETWithBody(t *testing.T) {
	req, err := parseOne(t, "GET /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
	if err != nil || string(req.Body) != "hi" {
		t.Errorf("%v %v", req, err)
	}
}

func TestParseHTTP10WithoutLengthHasNoBody(t *testing.T) {
	// RFC 9112 6.3: a request without Content-Length or Transfer-Encoding
	// has no body; what follows is the next request.
	out := parseStream(t, Limits{}, []byte("POST /a HTTP/1.0\r\n\r\nGET /b HTTP/1.0\r\n\r\n"), nil)
	if len(out.Reqs) != 2 || out.Reqs[0].Body != "" {
		t.Errorf("%+v", out)
	}
}

func TestParseObsTextInTarget(t *testing.T) {
	req, err := parseOne(t, "GET /x?queue=caf\xc3\xa9 HTTP/1.1\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := req.Query().Get("queue"); string(v) != "café" {
		t.Errorf("%q", v)
	}
}

func TestParseShrunkBufferIsRefused(t *testing.T) {
	p := NewParser(Limits{})
	raw := []byte("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
	if req, _, err := p.Parse(raw); req != nil || err != nil {
		t.Fatal(req, err)
	}
	_, _, err := p.Parse(raw[:5])
	if e := wantErr(t, err, 500, "shrank"); !e.Close {
		t.Error("must close")
	}
}

// TestIdle pins when a parser may be lent to another connection: between
// requests only, never with part of a request examined or an error sticky.
func TestIdle(t *testing.T) {
	p := NewParser(Limits{})
	if !p.Idle() {
		t.Fatal("a new parser is not idle")
	}
	whole := []byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	part := []byte("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"qu")
	req, n, err := p.Parse(append(append([]byte(nil), whole...), part...))
	if err != nil || req == nil || n != len(whole) {
		t.Fatalf("Parse = %v, %d, %v", req, n, err)
	}
	if !p.Idle() {
		t.Fatal("not idle after a whole request")
	}
	if req, _, err = p.Parse(part); req != nil || err != nil {
		t.Fatalf("a partial request gave %v, %v", req, err)
	}
	if p.Idle() {
		t.Fatal("idle with part of a request examined")
	}
	p.Reset()
	if !p.Idle() {
		t.Fatal("not idle after Reset")
	}
	if _, _, err = p.Parse([]byte("BREW / HTTP/9.9\r\n\r\n")); err == nil {
		t.Fatal("a bad request line was accepted")
	}
	if p.Idle() {
		t.Fatal("idle with a sticky error")
	}
}

// Need, InBody and PendingHead describe a request whose head is read and
// whose body is still arriving.
func TestParserBodyStillArriving(t *testing.T) {
	head := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer abc\r\nContent-Length: 10\r\n\r\n"
	p := NewParser(Limits{})
	buf := []byte(head + "01234")
	if req, _, err := p.Parse(buf); req != nil || err != nil {
		t.Fatalf("partial body: %v %v", req, err)
	}
	if !p.InBody() || p.Need() != int64(len(head)+10) {
		t.Fatalf("InBody %v, Need %d; want true, %d", p.InBody(), p.Need(), len(head)+10)
	}
	h := p.PendingHead(buf)
	if auth, _ := h.Header("Authorization"); string(auth) != "Bearer abc" || h.Body != nil || string(h.Path) != "/api/v1/ephemeral/push" || h.Method != MethodPost {
		t.Fatalf("PendingHead: %q %q %q %v", auth, h.Body, h.Path, h.Method)
	}
	buf = append(buf, "56789"...)
	req, n, err := p.Parse(buf)
	if err != nil || req == nil || n != len(buf) || string(req.Body) != "0123456789" {
		t.Fatalf("whole: %v %d %v", req, n, err)
	}
	if p.InBody() || p.Need() != 0 {
		t.Fatalf("after the request: InBody %v, Need %d", p.InBody(), p.Need())
	}

	p = NewParser(Limits{})
	chunked := []byte("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
	if req, _, err := p.Parse(chunked); req != nil || err != nil {
		t.Fatalf("chunked: %v %v", req, err)
	}
	if !p.InBody() || p.Need() != 0 || !p.PendingHead(chunked).Chunked {
		t.Fatalf("chunked: InBody %v, Need %d", p.InBody(), p.Need())
	}
	if data, line := p.Want(); data != 3 || line {
		t.Fatalf("Want in chunk data: %d %v, want 3 false", data, line)
	}
	chunked = append(chunked, "cde"...)
	if req, _, err := p.Parse(chunked); req != nil || err != nil {
		t.Fatalf("chunked: %v %v", req, err)
	}
	if data, line := p.Want(); data != 0 || !line {
		t.Fatalf("Want after chunk data: %d %v, want 0 true", data, line)
	}
	chunked = append(chunked, "\r\n0\r\n\r\n"...)
	if req, n, err := p.Parse(chunked); req == nil || err != nil || n != len(chunked) || string(req.Body) != "abcde" {
		t.Fatalf("chunked whole: %v %d %v", req, n, err)
	}
	if data, line := p.Want(); data != 0 || line {
		t.Fatalf("Want between requests: %d %v", data, line)
	}
}

// Header lookups ignore ASCII case on both sides, A to Z included.
func TestHeaderLookupFoldsEveryLetter(t *testing.T) {
	req, err := parseOne(t, "GET / HTTP/1.1\r\nX-AZ: upper\r\nx-za: lower\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"x-az": "upper", "X-AZ": "upper", "X-ZA": "lower", "x-za": "lower"} {
		if v, ok := req.Header(name); !ok || string(v) != want {
			t.Errorf("Header(%q) = %q, %v; want %q", name, v, ok, want)
		}
	}
}

// A Method outside the known ones prints as OTHER.
func TestMethodStringOutOfRange(t *testing.T) {
	for _, m := range []Method{MethodOther, MethodOptions + 1, 255} {
		if m.String() != "OTHER" {
			t.Errorf("Method(%d).String() = %q", m, m.String())
		}
	}
}

// ReadingHead is true from the request line's first byte through the
// blank line that ends the headers, and false once the body is due.
func TestReadingHead(t *testing.T) {
	p := NewParser(Limits{})
	raw := []byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	for _, n := range []int{0, 5, len("POST / HTTP/1.1\r\n"), len("POST / HTTP/1.1\r\nHost: x\r\n")} {
		if req, _, err := p.Parse(raw[:n]); req != nil || err != nil {
			t.Fatal(req, err)
		}
		if !p.ReadingHead() {
			t.Errorf("after %d bytes: not reading the head", n)
		}
	}
	if req, _, err := p.Parse(raw[:len(raw)-1]); req != nil || err != nil {
		t.Fatal(req, err)
	}
	if p.ReadingHead() {
		t.Error("reading the head inside the body")
	}
}

// decisions.md, memory: a de-chunking buffer of up to 256 KiB is kept for
// the next request, a larger one is dropped when its request completes.
func TestParseChunkedBufferRetainedUpTo256KiB(t *testing.T) {
	raw := []byte("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	for _, c := range []struct {
		cap, kept int
	}{{retainBody, retainBody}, {retainBody + 1, 0}} {
		p := NewParser(Limits{})
		p.body = make([]byte, 0, c.cap)
		if req, _, err := p.Parse(raw); err != nil || string(req.Body) != "hello" {
			t.Fatal(err)
		}
		if cap(p.body) != c.kept {
			t.Errorf("a %d-byte buffer: %d bytes kept, want %d", c.cap, cap(p.body), c.kept)
		}
	}
}

// InBody holds through the whole chunked body, trailers included.
func TestInBodyThroughTrailers(t *testing.T) {
	p := NewParser(Limits{})
	raw := []byte("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\n")
	if req, _, err := p.Parse(raw); req != nil || err != nil {
		t.Fatal(req, err)
	}
	if !p.InBody() {
		t.Error("not in the body while its trailers arrive")
	}
	if req, _, err := p.Parse(append(raw, "\r\n"...)); req == nil || err != nil || p.InBody() {
		t.Fatalf("%v %v, InBody %v", req, err, p.InBody())
	}
}

// A head is refused when it passes MaxHeaderBytes, not when it reaches it:
// with exactly MaxHeaderBytes bytes of a head not yet whole, "exceeds 64
// bytes" would not be true yet (the same holds for a trailer section).
func TestParseHeadAtExactlyTheLimitIsNotYetRefused(t *testing.T) {
	lim := Limits{MaxHeaderBytes: 64}
	head := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 64-len("GET / HTTP/1.1\r\nX: \r\n\r")) + "\r\n\r"
	if len(head) != 64 {
		t.Fatal(len(head))
	}
	if out := parseStream(t, lim, []byte(head), nil); out.Err != "" || len(out.Reqs) != 0 {
		t.Errorf("64 bytes of a head: %+v", out)
	}
	if out := parseStream(t, lim, []byte(head+"\n"), nil); out.Err != "request head exceeds 64 bytes" {
		t.Errorf("65 bytes: %+v", out)
	}
	post := "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	trailers := post + "0\r\nA: " + strings.Repeat("a", 64-len("A: \r\n\r")) + "\r\n\r"
	if out := parseStream(t, lim, []byte(trailers), nil); out.Err != "" || len(out.Reqs) != 0 {
		t.Errorf("64 bytes of trailers: %+v", out)
	}
}

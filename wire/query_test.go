package wire

import (
	"net/url"
	"strings"
	"testing"
)

func reqWithTarget(t *testing.T, target string) *Request {
	t.Helper()
	req, err := parseOne(t, "GET "+target+" HTTP/1.1\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestQueryGet(t *testing.T) {
	req := reqWithTarget(t, "/p?queue=a%2Fb%20c&group=g+1&empty=&flag&%71ueue2=x&&plain=v&queue=second")
	q := req.Query()
	cases := map[string]string{"queue": "a/b c", "group": "g 1", "empty": "", "flag": "", "queue2": "x", "plain": "v"}
	for name, want := range cases {
		if v, ok := q.Get(name); !ok || string(v) != want {
			t.Errorf("Get(%q) = %q, %v; want %q", name, v, ok, want)
		}
	}
	if _, ok := q.Get("missing"); ok {
		t.Error("missing found")
	}
	var names []string
	for it := q.Params(); it.Next(); {
		names = append(names, string(it.Name())+"="+string(it.Value()))
	}
	if got := strings.Join(names, ","); got != "queue=a/b c,group=g 1,empty=,flag=,queue2=x,plain=v,queue=second" {
		t.Errorf("params %s", got)
	}
	if string(q.Raw()) != string(req.RawQuery) {
		t.Error("Raw")
	}
}

func TestQueryNoDecodingReturnsSubslices(t *testing.T) {
	req := reqWithTarget(t, "/p?queue=abc")
	v, _ := req.Query().Get("queue")
	if &v[0] != &req.RawQuery[len("queue=")] {
		t.Error("an unescaped value was copied")
	}
}

func TestQueryDecodedValuesDoNotMove(t *testing.T) {
	// Values decoded into the arena stay valid while more are decoded.
	var b strings.Builder
	b.WriteString("/p?")
	for i := 0; i < 120; i++ {
		b.WriteString("k" + string(rune('a'+i%26)) + "=%41%42" + strings.Repeat("x", i) + "&")
	}
	req := reqWithTarget(t, b.String())
	var vals [][]byte
	for it := req.Query().Params(); it.Next(); {
		vals = append(vals, it.Value())
	}
	for i, v := range vals {
		if want := "AB" + strings.Repeat("x", i); string(v) != want {
			t.Fatalf("value %d = %q", i, v)
		}
	}
}

func TestParseQueryStandalone(t *testing.T) {
	q, err := ParseQuery([]byte("a=%41+b"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := q.Get("a"); string(v) != "A b" {
		t.Errorf("%q", v)
	}
	_, err = ParseQuery([]byte("a=%4"))
	wantErr(t, err, 400, "malformed percent-escape")
	var zero Query
	if _, ok := zero.Get("a"); ok {
		t.Error("zero query")
	}
}

func TestUnescapeMatchesNetURL(t *testing.T) {
	for _, s := range []string{"", "abc", "a+b", "%41%42", "%e2%82%ac", "a%2Fb", "%2B+%20", "%00", "100%25"} {
		want, err := url.QueryUnescape(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := unescape(new(scratch), []byte(s), true); string(got) != want {
			t.Errorf("query %q: %q want %q", s, got, want)
		}
		want, _ = url.PathUnescape(s)
		if got := unescape(new(scratch), []byte(s), false); string(got) != want {
			t.Errorf("path %q: %q want %q", s, got, want)
		}
	}
}

func TestPathSegments(t *testing.T) {
	req := reqWithTarget(t, "/api/v1/ephemeral/queues/a%2Fb+c/depth")
	var segs []string
	rest := req.Path
	for len(rest) > 0 {
		seg, r, ok := NextSegment(rest)
		if !ok {
			t.Fatal("not ok")
		}
		segs = append(segs, string(req.PathUnescape(seg)))
		rest = r
	}
	if got := strings.Join(segs, "|"); got != "api|v1|ephemeral|queues|a/b+c|depth" {
		t.Errorf("%s", got)
	}
	if _, _, ok := NextSegment([]byte("x/y")); ok {
		t.Error("relative path")
	}
	if seg, rest, ok := NextSegment([]byte("/")); !ok || len(seg) != 0 || rest != nil {
		t.Errorf("%q %q", seg, rest)
	}
	if seg, rest, ok := NextSegment([]byte("/a/")); !ok || string(seg) != "a" || string(rest) != "/" {
		t.Errorf("%q %q", seg, rest)
	}
}

func TestCheckName(t *testing.T) {
	good := []string{"a", "presence", "room-7", "q\"u\\o/te", "café", strings.Repeat("x", MaxNameBytes), "日本語", "\u00a0nbsp"}
	for _, n := range good {
		if err := CheckName("queue", []byte(n)); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	bad := map[string]string{
		"":                                  "queue is required",
		strings.Repeat("x", MaxNameBytes+1): "513 bytes; at most 512",
		"a\x00b":                            "control character at byte 1",
		"a\tb":                              "control character",
		"a\x7fb":                            "control character",
		"a\u0085b":                          "control character", // C1 (NEL)
		"a\u009fb":                          "control character",
		"a\xffb":                            "not valid UTF-8",
		"\xed\xa0\x80":                      "not valid UTF-8", // a surrogate
	}
	for n, frag := range bad {
		wantErr(t, CheckName("queue", []byte(n)), 400, frag)
	}
	if err := checkOptionalName("group", nil); err != nil {
		t.Error(err)
	}
}

// A malformed escape at the very start of a standalone query is refused
// like one further in.
func TestParseQueryBadEscapeAtByteZero(t *testing.T) {
	for _, raw := range []string{"%zz=1", "%", "%4"} {
		_, err := ParseQuery([]byte(raw))
		wantErr(t, err, 400, "query string has a malformed percent-escape at byte 0")
	}
}

// NameIs on an escaped name that is longer than the name asked for is
// false, not a read past the name.
func TestParamNameIsLongerEscapedName(t *testing.T) {
	q, err := ParseQuery([]byte("queu%65x=1&queu%65=2"))
	if err != nil {
		t.Fatal(err)
	}
	it := q.Params()
	if !it.Next() || it.NameIs("queue") {
		t.Error(`"queu%65x" is not "queue"`)
	}
	if !it.Next() || !it.NameIs("queue") {
		t.Error(`"queu%65" is "queue"`)
	}
}

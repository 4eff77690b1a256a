package wire

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// Fuzz targets (T3). Each checks more than "no panic": the parser must give
// the same result however the stream is split, and every decoder must agree
// with encoding/json, an independent reader, whenever it accepts.

// within reports whether sub lies inside buf (an empty sub always does).
func within(sub, buf []byte) bool {
	if len(sub) == 0 {
		return true
	}
	s, b := uintptr(unsafe.Pointer(unsafe.SliceData(sub))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return s >= b && s+uintptr(len(sub)) <= b+uintptr(len(buf))
}

func FuzzParser(f *testing.F) {
	f.Add([]byte(sampleStream), uint16(10), uint16(200))
	f.Add([]byte(popGET), uint16(3), uint16(50))
	f.Add([]byte("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3;a=\"b\"\r\nabc\r\n0\r\nT: 1\r\n\r\n"), uint16(40), uint16(80))
	f.Add([]byte("POST /x HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n"), uint16(0), uint16(1))
	f.Add([]byte("GET /x?a=%41 HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), uint16(5), uint16(9))
	f.Add(postRequest("/api/v1/ephemeral/push", []byte(`{"queue":"q","messages":[{"payload":1}]}`)), uint16(70), uint16(100))
	f.Fuzz(func(t *testing.T, data []byte, c1, c2 uint16) {
		for _, lim := range []Limits{{}, {MaxHeaderBytes: 96, MaxHeaders: 4, MaxBody: 64}} {
			whole := fuzzStream(t, lim, data, nil)
			cuts := []int{int(c1) % (len(data) + 1), int(c2) % (len(data) + 1)}
			if cuts[0] > cuts[1] {
				cuts[0], cuts[1] = cuts[1], cuts[0]
			}
			if got := fuzzStream(t, lim, data, cuts); !reflect.DeepEqual(got, whole) {
				t.Fatalf("split at %v:\n%+v\nwhole:\n%+v", cuts, got, whole)
			}
			if len(data) <= 4096 {
				if got := fuzzStream(t, lim, data, everyByte(len(data))); !reflect.DeepEqual(got, whole) {
					t.Fatalf("byte by byte:\n%+v\nwhole:\n%+v", got, whole)
				}
			}
		}
	})
}

// fuzzStream is parseStream plus the aliasing invariants: everything a
// request holds lies in the bytes delivered (or, for a chunked body, in the
// parser's own buffer), and a request's query and path decode.
func fuzzStream(t *testing.T, lim Limits, buf []byte, cuts []int) outcome {
	p := NewParser(lim)
	var out outcome
	start, avail := 0, 0
	for _, c := range append(append([]int(nil), cuts...), len(buf)) {
		if c < avail {
			continue
		}
		avail = c
		for {
			in := buf[start:avail]
			req, n, err := p.Parse(in)
			if n < 0 || n > len(in) {
				t.Fatalf("consumed %d of %d", n, len(in))
			}
			if err != nil {
				e, ok := err.(*Error)
				if !ok || !e.Close || e.Status != 400 && e.Status != 417 {
					t.Fatalf("error %#v", err)
				}
				out.Err = e.Msg
				return out
			}
			if req == nil {
				if n != 0 {
					t.Fatalf("consumed %d without a request", n)
				}
				break
			}
			if n == 0 {
				t.Fatal("a request of 0 bytes")
			}
			head := in[:n]
			for _, s := range [][]byte{req.MethodName, req.Target, req.Path, req.RawQuery} {
				if !within(s, head) {
					t.Fatalf("%q is not inside the request", s)
				}
			}
			for i := 0; i < req.NumHeaders(); i++ {
				name, value := req.HeaderAt(i)
				if !within(name, head) || !within(value, head) || bytes.ContainsAny(value, "\r\n\x00") {
					t.Fatalf("header %q: %q", name, value)
				}
			}
			filled := lim
			filled.fillDefaults()
			if int64(len(req.Body)) > filled.MaxBody || !req.Chunked && !within(req.Body, head) {
				t.Fatalf("body of %d bytes", len(req.Body))
			}
			for it := req.Query().Params(); it.Next(); {
				if want, err := url.QueryUnescape(string(it.RawValue())); err != nil || string(it.Value()) != want {
					t.Fatalf("query value %q: %q vs %q (%v)", it.RawValue(), it.Value(), want, err)
				}
			}
			_, _ = ParsePop(req.Query(), 30000)
			out.Reqs = append(out.Reqs, snapshot(req))
			start += n
			out.Consumed = start
		}
	}
	return out
}

// stdPush is the push shape as encoding/json reads it.
type stdPush struct {
	Queue     string                       `json:"queue"`
	Partition *string                      `json:"partition"`
	Messages  []map[string]json.RawMessage `json:"messages"`
}

func compact(t *testing.T, raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return b.String()
}

// checkRefusal: a body we call "not valid JSON" must be invalid for
// encoding/json too, unless it holds something we are stricter about
// (invalid UTF-8, which encoding/json lets through) or nests too deeply.
func checkRefusal(t *testing.T, data []byte, err error) {
	e, ok := err.(*Error)
	if !ok || e.Status != 400 || e.Close {
		t.Fatalf("error %#v", err)
	}
	if strings.Contains(e.Msg, "not valid JSON") && json.Valid(data) && utf8.Valid(data) {
		t.Fatalf("valid JSON refused as invalid: %s", e.Msg)
	}
}

func FuzzPushBody(f *testing.F) {
	f.Add(pushBody100x64())
	f.Add([]byte(`{"queue":"q\u00e9","partition":null,"messages":[{"payload":null},{"payload":"a\"b"},{"payload":[1,{"x":-0.5e-3}]}]}`))
	f.Add([]byte(`{"queue":"q","messages":[{"payload":1,"x":2}]}`))
	f.Add([]byte(`{"queue":"\ud83c\udf89","messages":[{"payload":{"a":[true,false,null]}}]} `))
	var b PushBody
	f.Fuzz(func(t *testing.T, data []byte) {
		err := b.Decode(data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		var std stdPush
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("accepted, but encoding/json says %v", err)
		}
		if std.Queue != string(b.Queue) || (std.Partition != nil && *std.Partition != string(b.Partition)) || len(std.Messages) != len(b.Payloads) {
			t.Fatalf("disagree: %+v vs %q %q %d", std, b.Queue, b.Partition, len(b.Payloads))
		}
		for i, p := range b.Payloads {
			if !within(p, data) {
				t.Fatalf("payload %d is not inside the body", i)
			}
			if len(std.Messages[i]) != 1 || compact(t, std.Messages[i]["payload"]) != compact(t, p) {
				t.Fatalf("payload %d: %q vs %v", i, p, std.Messages[i])
			}
		}
		for _, s := range [][]byte{b.Queue, b.Partition} {
			if CheckName("name", s) != nil && len(s) > 0 {
				t.Fatalf("unchecked name %q", s)
			}
		}
	})
}

type stdAck struct {
	Queue string  `json:"queue"`
	Group *string `json:"group"`
	Acks  []struct {
		ID     *string `json:"id"`
		Status *string `json:"status"`
	} `json:"acks"`
}

func FuzzAckBody(f *testing.F) {
	f.Add(ackBody100())
	f.Add([]byte(`{"queue":"q","group":"g","acks":[{"id":"a\"b","status":"failed","error":"x"},{"id":"c","status":null}]}`))
	f.Add([]byte(`{"queue":"q","acks":[{"id":"\u00e9\ud83c\udf89"}]}`))
	var b AckBody
	f.Fuzz(func(t *testing.T, data []byte) {
		err := b.Decode(data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		var std stdAck
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("accepted, but encoding/json says %v", err)
		}
		if std.Queue != string(b.Queue) || (std.Group != nil && *std.Group != string(b.Group)) || len(std.Acks) != len(b.Acks) {
			t.Fatalf("disagree: %+v vs %+v", std, b)
		}
		for i, a := range b.Acks {
			if std.Acks[i].ID == nil || *std.Acks[i].ID != string(a.ID) {
				t.Fatalf("id %d: %q vs %v", i, a.ID, std.Acks[i].ID)
			}
			status := "completed"
			if std.Acks[i].Status != nil {
				status = *std.Acks[i].Status
			}
			if status != a.Status.String() {
				t.Fatalf("status %d: %v vs %s", i, a.Status, status)
			}
			if !within(a.ID, data) && !bytes.Contains(data, []byte(`\`)) {
				t.Fatalf("id %d without escapes lies outside the body", i)
			}
		}
	})
}

func FuzzConfigureBody(f *testing.F) {
	f.Add([]byte(configureBody))
	f.Add([]byte(`{"queue":"q","options":{"ttlSeconds":1.5}}`))
	f.Add([]byte(`{"queue":"q","options":null}`))
	f.Add([]byte(`{"queue":"q","options":{"windowBuffer":{"ms":0,"count":9223372036854775807}}}`))
	var b ConfigureBody
	f.Fuzz(func(t *testing.T, data []byte) {
		err := b.Decode(data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		var std struct {
			Queue   string          `json:"queue"`
			Options json.RawMessage `json:"options"`
		}
		if err := json.Unmarshal(data, &std); err != nil || std.Queue != string(b.Queue) {
			t.Fatalf("accepted, but encoding/json says %v, %+v", err, std)
		}
		if b.RawOptions == nil {
			if b.Options.Has != 0 {
				t.Fatal("options without raw bytes")
			}
			return
		}
		if !within(b.RawOptions, data) || compact(t, b.RawOptions) != compact(t, std.Options) {
			t.Fatalf("raw options %q vs %q", b.RawOptions, std.Options)
		}
		again, err := ParseOptions(b.RawOptions)
		if err != nil || again != b.Options {
			t.Fatalf("ParseOptions: %+v %v vs %+v", again, err, b.Options)
		}
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(b.RawOptions))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		for k := range m {
			if !strings.Contains(optionNames, k) {
				t.Fatalf("unknown option %q accepted", k)
			}
		}
	})
}

func FuzzSystemBodies(f *testing.F) {
	f.Add([]byte(`{"enabled":false,"retryAfterSeconds":30}`))
	f.Add([]byte(`{"maxBytes":1,"maxQueues":2,"messagesPerSecond":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var k KillSwitchBody
		if err := k.Decode(data); err == nil {
			var std struct {
				Enabled *bool  `json:"enabled"`
				Retry   *int64 `json:"retryAfterSeconds"`
			}
			if err := json.Unmarshal(data, &std); err != nil || std.Enabled == nil || *std.Enabled != k.Enabled ||
				std.Retry != nil && *std.Retry != k.RetryAfterSeconds || k.RetryAfterSeconds < 0 {
				t.Fatalf("kill switch %+v vs %+v (%v)", k, std, err)
			}
		} else if e := err.(*Error); e.Code != CodeSystemBadRequest {
			t.Fatal(e.Code)
		}
		var g GrantBody
		if err := g.Decode(data); err == nil {
			var std map[string]int64
			if err := json.Unmarshal(data, &std); err != nil || std["maxBytes"] != g.MaxBytes ||
				std["maxQueues"] != g.MaxQueues || std["messagesPerSecond"] != g.MessagesPerSecond {
				t.Fatalf("grant %+v vs %+v (%v)", g, std, err)
			}
		} else if e := err.(*Error); e.Code != CodeSystemBadRequest {
			t.Fatal(e.Code)
		}
	})
}

// FuzzJSONValue checks the payload walkers against encoding/json's Valid,
// and the fast walker against the careful one.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`1`, `-0.5e+10`, `"a\u00e9\n"`, `[1,{"a":[null,true]}]`, `{"a":}`, `[1,]`, `01`, "\"\xff\"", `{"a":1}x`, ` null `, `{"a" : [ ] , "b":{ }}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := scanner{b: data, what: "payload", code: CodeBadRequest, decoded: new(scratch)}
		err := s.skipValue()
		end, fastOK := skipFast(data, 0)
		if fastOK != (err == nil) || fastOK && end != s.i {
			t.Fatalf("%q: fast walker %v at %d, careful %v at %d", data, fastOK, end, err, s.i)
		}
		s.ws()
		ok := err == nil && s.i == len(data)
		if ok && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if !ok && json.Valid(data) && utf8.Valid(data) && bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) <= maxDepth {
			t.Fatalf("refused valid JSON %q: %v", data, err)
		}
	})
}

// FuzzJSONString checks string writing against encoding/json's reader,
// and string reading (with unquote) against its decoder.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"\\/", "\x00\x1f\x7f", "é🎉", "\xff\xc3", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := AppendString(nil, in)
		if len(out) != StringLen(in) {
			t.Fatalf("StringLen %d, wrote %d", StringLen(in), len(out))
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q wrote invalid JSON %s: %v", in, out, err)
		}
		var want strings.Builder
		for i := 0; i < len(in); {
			r, n := utf8.DecodeRuneInString(in[i:])
			want.WriteRune(r) // an invalid byte decodes as U+FFFD, one per byte
			i += n
		}
		if back != want.String() {
			t.Fatalf("%q -> %s -> %q", in, out, back)
		}
		// Read it back with our own scanner.
		s := scanner{b: out, what: "string", code: CodeBadRequest, decoded: new(scratch)}
		got, err := s.stringLit()
		if err != nil || string(got) != back {
			t.Fatalf("scanner read %s as %q (%v)", out, got, err)
		}
		// And read the input as a raw JSON string body, if it is one.
		quoted := []byte(`"` + in + `"`)
		s = scanner{b: quoted, what: "string", code: CodeBadRequest, decoded: new(scratch)}
		if got, err := s.stringLit(); err == nil && s.i == len(quoted) {
			var std string
			if err := json.Unmarshal(quoted, &std); err != nil || std != string(got) {
				t.Fatalf("%s: ours %q, encoding/json %q (%v)", quoted, got, std, err)
			}
		}
	})
}

func FuzzQuery(f *testing.F) {
	for _, s := range []string{"queue=a%2Fb&batch=10&wait=true", "queue=q&batch=0", "a+b=%41%42&&=x&", "queue=%ZZ", "queue=q&timeout=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseQuery([]byte(raw))
		if err != nil {
			if _, uerr := url.ParseQuery(raw); uerr == nil && !strings.Contains(raw, ";") {
				t.Fatalf("refused %q, net/url accepts it", raw)
			}
			return
		}
		for it := q.Params(); it.Next(); {
			for _, pair := range [][2][]byte{{it.RawName(), it.Name()}, {it.RawValue(), it.Value()}} {
				want, err := url.QueryUnescape(string(pair[0]))
				if err != nil || want != string(pair[1]) {
					t.Fatalf("%q decoded as %q, net/url %q (%v)", pair[0], pair[1], want, err)
				}
			}
			if !it.NameIs(string(it.Name())) {
				t.Fatalf("NameIs(%q) false", it.Name())
			}
		}
		p, err := ParsePop(q, 30000)
		if err == nil {
			if p.Batch < 1 || p.Batch > MaxBatch || p.TimeoutMs < 0 || p.TimeoutMs > MaxPopTimeoutMs || CheckName("queue", p.Queue) != nil {
				t.Fatalf("%+v", p)
			}
		} else if e := err.(*Error); e.Status != 400 || e.Close {
			t.Fatalf("%#v", e)
		}
	})
}

func FuzzQueueBody(f *testing.F) {
	f.Add([]byte(`{"queue":"presence"}`))
	f.Add([]byte(`{"queue":"a\u00e9\"b"}`))
	f.Add([]byte(`{"queue":"a","x":1}`))
	var b QueueBody
	f.Fuzz(func(t *testing.T, data []byte) {
		err := b.Decode(data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		var std struct {
			Queue string `json:"queue"`
		}
		if err := json.Unmarshal(data, &std); err != nil || std.Queue != string(b.Queue) || CheckName("queue", b.Queue) != nil {
			t.Fatalf("accepted %q as %q; encoding/json: %q %v", data, b.Queue, std.Queue, err)
		}
	})
}

// FuzzUnescape: percent-decoding agrees with net/url on every target the
// parser accepts (no malformed escape), as a path segment and as a query
// value, never lengthens, and rejects exactly what net/url rejects (T3:
// queue names in paths and every query value are decoded with it).
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"", "abc", "a+b", "%41%42", "%e2%82%ac", "a%2Fb", "%2B+%20", "%00", "100%25", "%", "%4", "%zz", "a%2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bad := badEscape([]byte(s)) >= 0
		_, errPath := url.PathUnescape(s)
		if bad != (errPath != nil) {
			t.Fatalf("%q: badEscape says %v, net/url says %v", s, bad, errPath)
		}
		path := unescape(new(scratch), []byte(s), false)
		query := unescape(new(scratch), []byte(s), true)
		if len(path) > len(s) || len(query) > len(s) {
			t.Fatalf("%q: decoding lengthened it: %q, %q", s, path, query)
		}
		if bad {
			return // refused by the parser before anything decodes it
		}
		if want, _ := url.PathUnescape(s); string(path) != want {
			t.Fatalf("path %q: %q, net/url %q", s, path, want)
		}
		if want, _ := url.QueryUnescape(s); string(query) != want {
			t.Fatalf("query %q: %q, net/url %q", s, query, want)
		}
	})
}

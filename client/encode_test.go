package client

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/queenmq/ephemeral/wire"
)

// FuzzEncodeString: the string encoder of the client's bodies
// (wire.AppendString) writes what encoding/json reads back as the same
// string (invalid UTF-8 as U+FFFD, as encoding/json writes it), and queries
// are escaped as url.QueryEscape does.
func FuzzEncodeString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uo\te`, "ctl\x00\x01\x1f\x7f", "tab\tnl\ncr\r", "é日本", "\u2028\u2029", "bad\xff\xfeutf8", "a/b c?"} {
		f.Add(s)
	}
	every := make([]byte, 256) // each byte once: every edge of the query's byte classes
	for i := range every {
		every[i] = byte(i)
	}
	f.Add(string(every))
	f.Fuzz(func(t *testing.T, s string) {
		enc := wire.AppendString(nil, s)
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("%q encoded as %s, which does not decode: %v", s, enc, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q encoded as %s decodes to %q, encoding/json's to %q", s, enc, back, wantBack)
		}
		if q := appendQuery(nil, true, "k", s); string(q) != "?k="+url.QueryEscape(s) {
			t.Fatalf("query of %q: %s, want %s", s, q, "?k="+url.QueryEscape(s))
		}
	})
}

// FuzzDecodePop: the hand-written pop reader agrees with encoding/json on
// every answer encoding/json accepts, extra keys and nested payloads
// included.
func FuzzDecodePop(f *testing.F) {
	for _, s := range []string{
		`{"queue":"q","messages":[]}`,
		`{"queue":"q","messages":[{"id":"e:1:P:1","partition":"P","attempts":2,"payload":{"s":"]}\"{["}}]}`,
		` { "messages" : [ { "payload" : [1, {"a": null}], "id" : "x\"y", "extra": {"k": [true]} , "partition": "p\u00e9" } , {"id":"2","payload":"str","attempts":0} ], "queue":"q", "more": 1 } `,
		`{"queue":"q","messages":[{"id":"a","partition":"Default","attempts":0,"payload":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The broker writes its keys in lower case, once each, and valid
		// UTF-8 (the D10 name rule, internal/names); encoding/json also accepts other cases
		// and repairs invalid UTF-8, which the reader does not.
		if !utf8.Valid(data) {
			return
		}
		for _, k := range []string{"queue", "messages", "id", "partition", "attempts", "payload"} {
			if bytes.Count(bytes.ToLower(data), []byte(`"`+k+`"`)) != bytes.Count(data, []byte(`"`+k+`"`)) {
				return
			}
		}
		var want PopResult
		if json.Unmarshal(data, &want) != nil || want.Messages == nil {
			return
		}
		for i := range want.Messages {
			want.Messages[i].Queue = "q"
			if want.Messages[i].Payload == nil {
				return // no payload key: the answers never lack it
			}
		}
		var got PopResult
		if err := decodePop(data, "q", &got); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		for i := range got.Messages {
			var a, b any
			if json.Unmarshal(got.Messages[i].Payload, &a) != nil {
				t.Fatalf("%s: payload %d %s does not decode", data, i, got.Messages[i].Payload)
			}
			_ = json.Unmarshal(want.Messages[i].Payload, &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: payload %d %s, want %s", data, i, got.Messages[i].Payload, want.Messages[i].Payload)
			}
			got.Messages[i].Payload, want.Messages[i].Payload = nil, nil
		}
		want.Queue = "q"
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", data, got, want)
		}
	})
}

// TestDecodePushed reads the push answer, extra keys and spaces allowed.
func TestDecodePushed(t *testing.T) {
	for in, want := range map[string]int{`{"pushed":3}`: 3, ` { "x" : [1,{"pushed":9}], "pushed" : 12 } `: 12,
		`{"pushed":0}`: 0, `{"pushed":9}`: 9, `{"pushed":10}`: 10, "{\t\"pushed\"\r\n:\n7\t}": 7} {
		if n, err := decodePushed([]byte(in)); err != nil || n != want {
			t.Fatalf("%s: %d %v, want %d", in, n, err, want)
		}
	}
	for _, in := range []string{``, `{}`, `{"pushed":"3"}`, `[1]`, `{"pushed":3`, `{"pushed":}`, `{"pushed":-1}`, `{"extra":12`} {
		if _, err := decodePushed([]byte(in)); err == nil {
			t.Fatalf("%s: no error", in)
		}
	}
}

// TestDecodePopRefusals: a pop answer the hand-written reader cannot read
// whole is an error (never a panic, never a partial result taken as the
// answer): cut anywhere, a key or value of the wrong kind, a separator
// missing. And the white space JSON allows is read anywhere it may be.
func TestDecodePopRefusals(t *testing.T) {
	for _, in := range []string{
		``,
		` `,
		`[]`,
		`{`,
		`{"messages"`,
		`{"messages":`,
		`{"messages":[]`,
		`{"messages":[] "queue":"q"}`,
		`{"messages":{}}`,
		`{"messages":"[]"}`,
		`{"messages":[`,
		`{"messages":[{"id":"a"}`,
		`{"messages":[{"id":"a"} {"id":"b"}]}`,
		`{"messages":[{"id":"a"},`,
		`{"messages":[{"id":1}]}`,
		`{"messages":[{"id":"a}]}`,
		`{"messages":[{"id":"a\"}]}`,
		`{"messages":[{"partition":"p`,
		`{"messages":[{"attempts":x}]}`,
		`{"messages":[{"attempts":}]}`,
		`{"messages":[{"payload":}]}`,
		`{"messages":[{"payload":"abc}]}`,
		`{"messages":[{"payload":{"s":"abc}]}`,
		`{"messages":[{"payload":{"a":[1]}]}`,
		`{"messages":[{"payload":[1,2]`,
		`{"messages":[{"payload":1`,
		`{"messages" []}`,
		`{"messages":[]x}`,
		`{"queue":"q",}`,
		`{"queue":"q"`,
		`{"queue":}`,
		`{"queue" "q"}`,
		`{1:2}`,
		`{"extra":12`,
	} {
		var got PopResult
		if err := decodePop([]byte(in), "q", &got); err == nil {
			t.Errorf("%q: no error, read %+v", in, got)
		}
	}

	ws := "{\t\"queue\"\r:\n\"q\" ,\r\n\"messages\"\t: [\n{ \"id\"\t:\r\"a\"\n,\t\"attempts\" : -2 , \"partition\":\"p\",\"payload\":\n[1,\t2]\r} \t,\r\n{\"id\":\"b\",\"attempts\":90,\"payload\":{}}\n]\r}\t"
	var got PopResult
	if err := decodePop([]byte(ws), "q", &got); err != nil {
		t.Fatalf("%q: %v", ws, err)
	}
	want := []Message{
		{ID: "a", Partition: "p", Attempts: -2, Queue: "q", Payload: json.RawMessage("[1,\t2]")},
		{ID: "b", Attempts: 90, Queue: "q", Payload: json.RawMessage("{}")},
	}
	if !reflect.DeepEqual(got.Messages, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", ws, got.Messages, want)
	}
	// An escaped id is decoded.
	esc := `{"messages":[{"id":"x\"y\\z","partition":"\u00e9","payload":1}]}`
	if err := decodePop([]byte(esc), "q", &got); err != nil || got.Messages[0].ID != `x"y\z` || got.Messages[0].Partition != "é" {
		t.Fatalf("%s: %+v %v", esc, got.Messages, err)
	}
	// Empty objects, inside the array and after it.
	in := `{"messages":[{},{ }],"extra":{}}`
	if err := decodePop([]byte(in), "q", &got); err != nil || !reflect.DeepEqual(got.Messages, []Message{{Queue: "q"}, {Queue: "q"}}) {
		t.Fatalf("%s: %+v %v", in, got.Messages, err)
	}
}

// A key written with escapes is read as encoding/json reads it: an escaped
// form of a key the reader reads is that key, any other is skipped.
func TestDecodePopEscapedKeys(t *testing.T) {
	in := `{"\\":"","mess\u0061ges":[{"\u0069d":"a","p\u0061yload":[1],"x\"y":{"\\":1}}],"queue":"q"}`
	var got PopResult
	if err := decodePop([]byte(in), "q", &got); err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	if len(got.Messages) != 1 || got.Messages[0].ID != "a" || string(got.Messages[0].Payload) != "[1]" {
		t.Fatalf("%s: read %+v, want one message a with payload [1]", in, got)
	}
	if n, err := decodePushed([]byte(`{"\"":1,"pushe\u0064":3}`)); err != nil || n != 3 {
		t.Fatalf("pushed with escaped keys: %d %v, want 3", n, err)
	}
	for _, in := range []string{`{"\x":1,"messages":[]}`, `{"\u12":1,"messages":[]}`} {
		var got PopResult
		if err := decodePop([]byte(in), "q", &got); err == nil {
			t.Errorf("%s: a key with a malformed escape read as %+v", in, got)
		}
	}
}

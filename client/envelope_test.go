package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseRequest: the hand-written envelope reader answers what
// encoding/json answers, for every payload, or leaves it to encoding/json.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"replyTo":"inbox-1","payload":{"name":"alice"}}`,
		` { "payload" : [1, "]}"] , "replyTo" : "inbox-2", "extra": {"k": null} } `,
		`{"replyTo":"a\"b","payload":1}`,
		`{"ReplyTo":"inbox-3","payload":2}`,
		`{"replyTo":"x","replyTo":"y","payload":null}`,
		`{"replyTo":"inbox-\xff","payload":"s"}`,
		`{"replyTo":"","payload":1}`,
		`{"payload":tru}`,
		`[1,2]`,
		`{"ReplyTo":"","payload":1}`,        // read by encoding/json, and still no replyTo
		`{"replyTo":5,"payload":1}`,         // a replyTo that is not a string
		`{"replyTo":"inbox-4","other":[1]}`, // no payload: another key's value is not it
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := ParseRequest(Message{Payload: data})
		var want RequestEnvelope
		wantErr := json.Unmarshal(data, &want)
		if wantErr == nil && want.ReplyTo == "" {
			wantErr = errors.New("no replyTo")
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v, encoding/json's %v", data, gotErr, wantErr)
		}
		if gotErr == nil && (got.ReplyTo != want.ReplyTo || !bytes.Equal(got.Payload, want.Payload)) {
			t.Fatalf("%s: %q %s, encoding/json's %q %s", data, got.ReplyTo, got.Payload, want.ReplyTo, want.Payload)
		}
	})
}

// The envelopes Request writes, and the same with spaces, keys in either
// order and other keys beside them, are read by hand (a quarter of a
// responder's CPU otherwise went to encoding/json), with exactly the
// fields encoding/json reads; the fuzz test above cannot tell, since
// anything parseEnvelope passes on is decided by encoding/json. Kills
// reqreply.go:283–294's mutants that passed every envelope on
// (`at < len(data)`, `data[at] == '"'`, `end >= 0`, `end - 1`, `err == nil`).
func TestParseEnvelopeByHand(t *testing.T) {
	for _, c := range []struct{ data, replyTo, payload string }{
		{`{"replyTo":"inbox-1","payload":{"name":"alice"}}`, "inbox-1", `{"name":"alice"}`},
		{` { "payload" : [1, "]}"] , "replyTo" : "inbox-2", "extra": {"k": null} } `, "inbox-2", `[1, "]}"]`},
		{`{"replyTo":"é-inbox","payload":"s"}`, "é-inbox", `"s"`},
		{`{"replyTo":"i","payload":null,"n":1}`, "i", `null`},
	} {
		for _, validate := range []bool{true, false} {
			env, ok := parseEnvelope([]byte(c.data), validate)
			if !ok || env.ReplyTo != c.replyTo || string(env.Payload) != c.payload {
				t.Errorf("%s (validate %v): %v %q %s; want read by hand: %q %s", c.data, validate, ok, env.ReplyTo, env.Payload, c.replyTo, c.payload)
			}
		}
	}
}

// BenchmarkParseRequest is what a responder pays to read each request.
func BenchmarkParseRequest(b *testing.B) {
	m := Message{Payload: json.RawMessage(`{"replyTo":"inbox-0123456789abcdef0123456789abcdef","payload":"t0000000000000001xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRequestReflect is what it cost with encoding/json alone.
func BenchmarkParseRequestReflect(b *testing.B) {
	m := Message{Payload: json.RawMessage(`{"replyTo":"inbox-0123456789abcdef0123456789abcdef","payload":"t0000000000000001xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)}
	b.ReportAllocs()
	for b.Loop() {
		var env RequestEnvelope
		if err := json.Unmarshal(m.Payload, &env); err != nil {
			b.Fatal(err)
		}
	}
}

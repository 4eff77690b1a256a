package wire

import (
	"fmt"
	"strings"
	"testing"
)

func TestPushDecode(t *testing.T) {
	body := `{
		"queue": "presence",
		"partition": "room-7",
		"messages": [
			{ "payload": { "user": "alice", "typing": true } },
			{"payload":null},
			{"payload": "str\"ing\u00e9"},
			{"payload":-1.5e+3},
			{"payload":[1,[2,{}],[]]},
			{"payload":false}
		]
	}`
	var b PushBody
	if err := b.Decode([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if string(b.Queue) != "presence" || string(b.Partition) != "room-7" {
		t.Errorf("%q %q", b.Queue, b.Partition)
	}
	want := []string{`{ "user": "alice", "typing": true }`, `null`, `"str\"ing\u00e9"`, `-1.5e+3`, `[1,[2,{}],[]]`, `false`}
	if len(b.Payloads) != len(want) {
		t.Fatalf("%d payloads", len(b.Payloads))
	}
	for i, w := range want {
		if string(b.Payloads[i]) != w {
			t.Errorf("payload %d = %s, want %s", i, b.Payloads[i], w)
		}
	}
}

func TestPushDecodeOptionalAndEscapes(t *testing.T) {
	var b PushBody
	for _, body := range []string{
		`{"queue":"q","messages":[]}`,
		`{"messages":[],"queue":"q","partition":""}`,
		`{"queue":"q","partition":null,"messages":[]}`,
	} {
		if err := b.Decode([]byte(body)); err != nil || string(b.Queue) != "q" || len(b.Partition) != 0 || len(b.Payloads) != 0 {
			t.Errorf("%s: %+v %v", body, b, err)
		}
	}
	// Escaped names are decoded; keys with escapes match too.
	if err := b.Decode([]byte(`{"\u0071ueue":"a\/b\"c\u00e9\ud83c\udf89","messages":[{"pay\u006coad":1}]}`)); err != nil {
		t.Fatal(err)
	}
	if string(b.Queue) != "a/b\"cé🎉" || string(b.Payloads[0]) != "1" {
		t.Errorf("%q %q", b.Queue, b.Payloads)
	}
}

func TestPushDecodeSpacing(t *testing.T) {
	// The compact fast path and the general path give the same payloads.
	var b PushBody
	for _, body := range []string{
		`{"queue":"q","messages":[{"payload":{"a":1}}]}`,
		`{"queue":"q","messages":[{"payload": {"a":1} }]}`,
		`{"queue":"q","messages":[ { "payload" : {"a":1}	} ]}`,
		"{\"queue\":\"q\",\"messages\":[{\"payload\":\n{\"a\":1}\r\n}]}",
	} {
		if err := b.Decode([]byte(body)); err != nil || len(b.Payloads) != 1 || string(b.Payloads[0]) != `{"a":1}` {
			t.Errorf("%s: %q %v", body, b.Payloads, err)
		}
	}
}

func TestPushDecodeReuse(t *testing.T) {
	var b PushBody
	b.Decode([]byte(`{"queue":"a","partition":"p","messages":[{"payload":1},{"payload":2}]}`))
	if err := b.Decode([]byte(`{"queue":"b","messages":[{"payload":3}]}`)); err != nil {
		t.Fatal(err)
	}
	if string(b.Queue) != "b" || b.Partition != nil || len(b.Payloads) != 1 || string(b.Payloads[0]) != "3" {
		t.Errorf("%+v", b)
	}
}

func TestPushDecodeMaxBatch(t *testing.T) {
	build := func(n int) []byte {
		var s strings.Builder
		s.WriteString(`{"queue":"q","messages":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				s.WriteByte(',')
			}
			s.WriteString(`{"payload":1}`)
		}
		s.WriteString(`]}`)
		return []byte(s.String())
	}
	var b PushBody
	if err := b.Decode(build(MaxBatch)); err != nil || len(b.Payloads) != MaxBatch {
		t.Fatalf("%v %d", err, len(b.Payloads))
	}
	wantErr(t, b.Decode(build(MaxBatch+1)), 400, "more than 10000 items")
}

func TestPushDecodeRefusals(t *testing.T) {
	cases := map[string]string{
		``:                                   "push body is empty",
		`   `:                                "push body is empty",
		`[]`:                                 "must be a JSON object",
		`"q"`:                                "must be a JSON object",
		`{"queue":"q","messages":[]} x`:      "data after the JSON object",
		`{"queue":"q","messages":[]}{}`:      "data after the JSON object",
		`{"messages":[]}`:                    "queue is required",
		`{"queue":"q"}`:                      "messages is required",
		`{"queue":"","messages":[]}`:         "queue is required",
		`{"queue":null,"messages":[]}`:       "queue must be a string, not null",
		`{"queue":5,"messages":[]}`:          "queue must be a string, not a number",
		`{"queue":"a\u0000b","messages":[]}`: "queue carries a control character",
		`{"queue":"a\u0085","messages":[]}`:  "queue carries a control character",
		`{"queue":"\ud800","messages":[]}`:   "lone UTF-16 surrogate",
		`{"queue":"q","partition":"\u0007","messages":[]}`:             "partition carries a control character",
		`{"queue":"q","partition":7,"messages":[]}`:                    "partition must be a string, not a number",
		`{"queue":"q","messages":{}}`:                                  "messages must be an array, not an object",
		`{"queue":"q","messages":null}`:                                "messages must be an array, not null",
		`{"queue":"q","messages":[1]}`:                                 `messages[0] must be an object {"payload": ...}, not a number`,
		`{"queue":"q","messages":[{"payload":1},{}]}`:                  "messages[1] has no payload",
		`{"queue":"q","messages":[{"payload":1,"x":2}]}`:               `messages[0] has the key "x"`,
		`{"queue":"q","messages":[{"transactionId":"t","payload":1}]}`: `messages[0] has the key "transactionId"`,
		`{"queue":"q","messages":[{"payload":1,"payload":2}]}`:         `messages[0] has the key "payload" twice`,
		`{"queue":"q","messages":[{"payload":1 , "x":2}]}`:             `messages[0] has the key "x"`,
		`{"queue":"q","messages":[{"payload":1 ]}`:                     "expected ',' or '}'",
		// The members of a message not written compactly need their commas too.
		`{"queue":"q","messages":[{ "payload":1 "x":2}]}`:          "expected ',' or '}' at byte 39",
		`{"queue":"q","messages":[{ "payload":1 "payload":2}]}`:    "expected ',' or '}' at byte 39",
		`{"queue":"q","messages":[{ "x":1,"payload":1}]}`:          `messages[0] has the key "x"`,
		`{"queue":"q","queue":"r","messages":[]}`:                  `has the key "queue" twice`,
		`{"queue":"q","messages":[],"tenant":"t"}`:                 `unknown key "tenant" in the push body; the keys are queue, partition and messages`,
		`{"queue":"q","messages":[{"payload":}]}`:                  "unexpected '}' at byte 36",
		`{"queue":"q","messages":[{"payload":01}]}`:                "expected ',' or '}'",
		`{"queue":"q","messages":[{"payload":1.}]}`:                "invalid number",
		`{"queue":"q","messages":[{"payload":-}]}`:                 "invalid number",
		`{"queue":"q","messages":[{"payload":nul}]}`:               "invalid literal",
		`{"queue":"q","messages":[{"payload":[1,]}]}`:              "unexpected ']'",
		`{"queue":"q","messages":[{"payload":{"a":1,}}]}`:          "expected a string key",
		`{"queue":"q","messages":[{"payload":{"a" 1}}]}`:           "expected ':'",
		`{"queue":"q","messages":[{"payload":[1 2]}]}`:             "expected ',' or ']'",
		`{"queue":"q","messages":[{"payload":"a` + "\x01" + `"}]}`: "control character in a string",
		`{"queue":"q","messages":[{"payload":"a` + "\xff" + `"}]}`: "invalid UTF-8",
		`{"queue":"q","messages":[{"payload":"\x"}]}`:              "invalid escape",
		`{"queue":"q","messages":[{"payload":"\u12"}]}`:            `invalid \u escape`,
		`{"queue":"q","messages":[{"payload":"abc}]}`:              "unterminated string",
		`{"queue":"q","messages":[{"payload":{"a":1}`:              "at the end of the body",
		`{"queue":"q","messages":[{"payload":1}`:                   "at the end of the body",
		`{"queue":"q","messages":[{"payload":'x'}]}`:               "unexpected '\\''",
		`{"queue":"q" "messages":[]}`:                              "expected ',' or '}'",
		`{queue:"q"}`:                                              "expected a string key",
		`{"queue":"q","messages":[]`:                               "expected ',' or '}' at the end of the body",
		// Cut where a value is due: refused, never read past the end.
		`{"queue":`:                 "queue must be a string, not nothing",
		`{"queue":"q","messages":`:  "messages must be an array, not nothing",
		`{"queue":"q","messages":[`: `messages[0] must be an object {"payload": ...}, not nothing`,
		`{"queue":"q","messages":[{"payload":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}]}`: "nests deeper than 1024 levels",
	}
	var b PushBody
	for body, frag := range cases {
		err := b.Decode([]byte(body))
		if e := wantErr(t, err, 400, frag); e.Code != CodeBadRequest || e.Close {
			t.Errorf("%s: code %s close %v", body, e.Code, e.Close)
		}
	}
	// The depth limit is exactly maxDepth.
	deep := `{"queue":"q","messages":[{"payload":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}]}`
	if err := b.Decode([]byte(deep)); err != nil {
		t.Errorf("depth %d: %v", maxDepth, err)
	}
}

func TestPushDecodeNameLength(t *testing.T) {
	var b PushBody
	ok := fmt.Sprintf(`{"queue":"%s","partition":"%s","messages":[]}`, strings.Repeat("q", 512), strings.Repeat("p", 512))
	if err := b.Decode([]byte(ok)); err != nil {
		t.Error(err)
	}
	wantErr(t, b.Decode([]byte(fmt.Sprintf(`{"queue":"%s","messages":[]}`, strings.Repeat("q", 513)))), 400, "queue is 513 bytes")
	wantErr(t, b.Decode([]byte(fmt.Sprintf(`{"queue":"q","partition":"%s","messages":[]}`, strings.Repeat("é", 257)))), 400, "partition is 514 bytes")
}

// A body cut anywhere inside a payload is refused with the precise
// message, whichever walker reaches the end first: never read past it,
// never "invalid value" (the fast walker's disagreement with the careful one).
func TestPushDecodeCutInsideAPayload(t *testing.T) {
	const end = "at the end of the body"
	cases := map[string]string{
		"":         "expected a value " + end,
		"[":        "expected a value " + end,
		"[ ":       "expected a value " + end,
		"[[":       "expected a value " + end,
		"[1,":      "expected a value " + end,
		"[1, ":     "expected a value " + end,
		`{"a":`:    "expected a value " + end,
		"{":        "expected a string key " + end,
		"{ ":       "expected a string key " + end,
		`{"a":1,`:  "expected a string key " + end,
		`{"a"`:     "expected ':' after a key " + end,
		`{"a" `:    "expected ':' after a key " + end,
		"[1":       "unterminated object or array " + end,
		"[1 ":      "unterminated object or array " + end,
		"[true":    "unterminated object or array " + end,
		`{"a":1`:   "unterminated object or array " + end,
		`{"a":1 `:  "unterminated object or array " + end,
		"true":     "expected ',' or '}' " + end,
		"false":    "expected ',' or '}' " + end,
		"null":     "expected ',' or '}' " + end,
		"1":        "expected ',' or '}' " + end,
		"12":       "expected ',' or '}' " + end,
		"-0":       "expected ',' or '}' " + end,
		"t":        "invalid literal at byte 36",
		"tru":      "invalid literal at byte 36",
		"fals":     "invalid literal at byte 36",
		"nul":      "invalid literal at byte 36",
		"[fals":    "invalid literal at byte 37",
		`{"a":nul`: "invalid literal at byte 41",
		"-":        "invalid number " + end,
		"1.":       "invalid number " + end,
		"1e":       "invalid number " + end,
		"1e+":      "invalid number " + end,
		"1.5":      "expected ',' or '}' " + end,
		"1e5":      "expected ',' or '}' " + end,
		"1.5e-5":   "expected ',' or '}' " + end,
		"[1.5":     "unterminated object or array " + end,
		"[1e5":     "unterminated object or array " + end,
		"[-12":     "unterminated object or array " + end,
		`"a`:       "unterminated string " + end,
		`"\`:       "unterminated string " + end,
		`"\n`:      "unterminated string " + end,
		`"\u0041`:  "unterminated string " + end,
		`"\u00`:    `invalid \u escape at byte 37`,
		`"\u004`:   `invalid \u escape at byte 37`,
	}
	var b PushBody
	for payload, want := range cases {
		// The body ends where its slice's capacity does, so that a read
		// past its end cannot land in spare capacity unnoticed.
		body := []byte(`{"queue":"q","messages":[{"payload":` + payload)
		err := b.Decode(body[:len(body):len(body)])
		if e := wantErr(t, err, 400); e.Msg != "the push body is not valid JSON: "+want {
			t.Errorf("payload %q: %q, want %q", payload, e.Msg, want)
		}
	}
}

// A \u escape is four hex digits, any of them 0 to f in either case, in
// any position: the payload is accepted and kept as sent.
func TestPushDecodePayloadEscapes(t *testing.T) {
	const payload = `"\u0000\u1234\u5678\u9abc\udef0\uABCD\uEF09\u0a0B\u00e9 \" \\ \/ \b \f \n \r \t"`
	var b PushBody
	if err := b.Decode([]byte(`{"queue":"q","messages":[{"payload":` + payload + `}]}`)); err != nil {
		t.Fatal(err)
	}
	if len(b.Payloads) != 1 || string(b.Payloads[0]) != payload {
		t.Errorf("payloads %q", b.Payloads)
	}
}

// Numbers with every digit at the edges of 0-9, in the integer, the
// fraction and the exponent, are payloads kept as sent.
func TestPushDecodeNumberPayloads(t *testing.T) {
	numbers := []string{"0", "9", "-0", "-9", "10", "19", "90", "1234567890", "0.0", "0.9", "9.09", "90.90",
		"1e0", "1e9", "1E09", "1e+0", "1e-9", "1E+90", "-0.0e+00", "90.90E-90"}
	var body strings.Builder
	body.WriteString(`{"queue":"q","messages":[`)
	for i, n := range numbers {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"payload":` + n + `}`)
	}
	body.WriteString(`]}`)
	var b PushBody
	if err := b.Decode([]byte(body.String())); err != nil {
		t.Fatal(err)
	}
	if len(b.Payloads) != len(numbers) {
		t.Fatalf("%d payloads", len(b.Payloads))
	}
	for i, n := range numbers {
		if string(b.Payloads[i]) != n {
			t.Errorf("payload %d = %q, want %q", i, b.Payloads[i], n)
		}
	}
}

// A payload that is not JSON is refused at the byte where it stops being
// JSON, after numbers with 0s and 9s, and inside containers nested around
// the 64th level (where the walkers' bit stacks change words).
func TestPushDecodeRefusalPositions(t *testing.T) {
	cases := map[string]string{
		"[1.09x]":     "expected ',' or ']' at byte 41",
		"[1e09x]":     "expected ',' or ']' at byte 41",
		"[1E+90x]":    "expected ',' or ']' at byte 42",
		"[90x]":       "expected ',' or ']' at byte 39",
		"[-09]":       "expected ',' or ']' at byte 39",
		"[0.90e-09x]": "expected ',' or ']' at byte 45",
		// An array after an object at the same depth, and the reverse.
		`[{},[1}]`:                              "expected ',' or ']' at byte 42",
		`[[],{"a":1]}]`:                         "expected ',' or '}' at byte 46",
		strings.Repeat("[", 62) + `{"a":1x`:     "expected ',' or '}' at byte 104",
		strings.Repeat("[", 63) + `{"a":1x`:     "expected ',' or '}' at byte 105",
		strings.Repeat("[", 64) + `{"a":1x`:     "expected ',' or '}' at byte 106",
		strings.Repeat(`{"a":`, 63) + `[1x`:     "expected ',' or ']' at byte 353",
		strings.Repeat(`{"a":`, 62) + `{"b":1x`: "expected ',' or '}' at byte 352",
	}
	var b PushBody
	for payload, want := range cases {
		err := b.Decode([]byte(`{"queue":"q","messages":[{"payload":` + payload + "}]}"))
		if e := wantErr(t, err, 400); e.Msg != "the push body is not valid JSON: "+want {
			t.Errorf("payload %.20q: %q, want %q", payload, e.Msg, want)
		}
	}
}

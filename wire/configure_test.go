package wire

import (
	"testing"
)

func TestConfigureDecode(t *testing.T) {
	opts := `{
    "maxBytes": 1048576,
    "maxLength": 1000,
    "policy": "dropOldest",
    "ttlSeconds": 30,
    "leaseSeconds": 15,
    "retryLimit": 3,
    "windowBuffer": { "ms": 20, "count": 50 }
  }`
	body := `{"queue": "presence", "options": ` + opts + `}`
	var b ConfigureBody
	if err := b.Decode([]byte(body)); err != nil {
		t.Fatal(err)
	}
	want := Options{Has: HasMaxBytes | HasMaxLength | HasPolicy | HasTTLSeconds | HasLeaseSeconds | HasRetryLimit | HasWindowBuffer,
		MaxBytes: 1048576, MaxLength: 1000, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3, WindowMs: 20, WindowCount: 50}
	if string(b.Queue) != "presence" || b.Options != want || string(b.RawOptions) != opts {
		t.Errorf("%q %+v %q", b.Queue, b.Options, b.RawOptions)
	}
	parsed, err := ParseOptions([]byte(" " + opts + "\n"))
	if err != nil || parsed != want {
		t.Errorf("ParseOptions: %+v %v", parsed, err)
	}
	if PolicyDropOldest.String() != "dropOldest" || PolicyReject.String() != "reject" {
		t.Error("String")
	}
}

func TestConfigureDecodeOptional(t *testing.T) {
	var b ConfigureBody
	for body, raw := range map[string]string{
		`{"queue":"q"}`:                            "",
		`{"queue":"q","options":null}`:             "",
		`{"queue":"q","options":{}}`:               "{}",
		`{"options":{ },"queue":"q"}`:              "{ }",
		`{"queue":"q","options":{"ttlSeconds":0}}`: `{"ttlSeconds":0}`,
	} {
		if err := b.Decode([]byte(body)); err != nil || string(b.RawOptions) != raw {
			t.Errorf("%s: %q %v", body, b.RawOptions, err)
		}
	}
	if err := b.Decode([]byte(`{"queue":"q","options":{"policy":"reject","ttlSeconds":0}}`)); err != nil ||
		b.Options != (Options{Has: HasPolicy | HasTTLSeconds, Policy: PolicyReject}) {
		t.Errorf("%+v %v", b.Options, err)
	}
	// Decode replaces, it does not merge.
	b.Decode([]byte(`{"queue":"q","options":{"maxBytes":5}}`))
	if err := b.Decode([]byte(`{"queue":"r"}`)); err != nil || b.Options.Has != 0 || b.Options.MaxBytes != 0 || b.RawOptions != nil {
		t.Errorf("%+v", b)
	}
}

func TestConfigureDecodeRefusals(t *testing.T) {
	const names = "the options are maxBytes, maxLength, policy, ttlSeconds, leaseSeconds, retryLimit and windowBuffer"
	cases := map[string]string{
		`{}`:                                                                  "queue is required",
		`{"queue":"q","opts":{}}`:                                             `unknown key "opts" in the configure body; the keys are queue and options`,
		`{"queue":"q","options":[]}`:                                          "options must be an object, not an array",
		`{"queue":"q","options":"x"}`:                                         "options must be an object, not a string",
		`{"queue":"q","options":{"ttlSecond":1}}`:                             `unknown option "ttlSecond"; ` + names,
		`{"queue":"q","options":{"ttlSeconds":1.5}}`:                          `options.ttlSeconds must be a non-negative integer, not "1.5"`,
		`{"queue":"q","options":{"ttlSeconds":1e3}}`:                          `options.ttlSeconds must be a non-negative integer, not "1e3"`,
		`{"queue":"q","options":{"ttlSeconds":1.0}}`:                          `not "1.0"`,
		`{"queue":"q","options":{"ttlSeconds":-1}}`:                           `options.ttlSeconds must be a non-negative integer, not "-1"`,
		`{"queue":"q","options":{"ttlSeconds":-0}}`:                           `not "-0"`,
		`{"queue":"q","options":{"ttlSeconds":"5"}}`:                          "options.ttlSeconds must be a non-negative integer, not a string",
		`{"queue":"q","options":{"ttlSeconds":null}}`:                         "options.ttlSeconds must be a non-negative integer, not null",
		`{"queue":"q","options":{"ttlSeconds":true}}`:                         "not a boolean",
		`{"queue":"q","options":{"maxBytes":9223372036854775808}}`:            "options.maxBytes is too large",
		`{"queue":"q","options":{"maxBytes":0}}`:                              "options.maxBytes must be at least 1",
		`{"queue":"q","options":{"maxLength":0}}`:                             "options.maxLength must be at least 1",
		`{"queue":"q","options":{"leaseSeconds":0}}`:                          "options.leaseSeconds must be at least 1",
		`{"queue":"q","options":{"retryLimit":0}}`:                            "options.retryLimit must be at least 1",
		`{"queue":"q","options":{"policy":"drop"}}`:                           `options.policy is "drop"; it must be reject or dropOldest`,
		`{"queue":"q","options":{"policy":"Reject"}}`:                         `options.policy is "Reject"`,
		`{"queue":"q","options":{"policy":1}}`:                                "options.policy must be a string, not a number",
		`{"queue":"q","options":{"policy":"reject","policy":"reject"}}`:       `options has the key "policy" twice`,
		`{"queue":"q","options":{"windowBuffer":{"ms":1}}}`:                   "options.windowBuffer needs both ms and count",
		`{"queue":"q","options":{"windowBuffer":{}}}`:                         "needs both ms and count",
		`{"queue":"q","options":{"windowBuffer":{"ms":1,"count":2,"max":3}}}`: `unknown key "max" in options.windowBuffer; the keys are ms and count`,
		`{"queue":"q","options":{"windowBuffer":{"ms":1.5,"count":2}}}`:       "options.windowBuffer.ms must be a non-negative integer",
		`{"queue":"q","options":{"windowBuffer":{"ms":1,"count":-2}}}`:        "options.windowBuffer.count must be a non-negative integer",
		`{"queue":"q","options":{"windowBuffer":[20,50]}}`:                    "options.windowBuffer must be an object",
		`{"queue":"q","options":{"windowBuffer":null}}`:                       "options.windowBuffer must be an object",
		// Cut where a value is due: refused, never read past the end.
		`{"queue":"q","options":`:                 "options must be an object, not nothing",
		`{"queue":"q","options":{"windowBuffer":`: `options.windowBuffer must be an object {"ms": ..., "count": ...}, not nothing`,
		`{"queue":"q","options":{"ttlSeconds":`:   "options.ttlSeconds must be a non-negative integer, not nothing",
	}
	var b ConfigureBody
	for body, frag := range cases {
		if e := wantErr(t, b.Decode([]byte(body)), 400, frag); e.Code != CodeBadRequest {
			t.Errorf("code %s", e.Code)
		}
	}
	// Bounds are inclusive and large values are kept as sent (clamping is
	// the engine's, D9).
	if err := b.Decode([]byte(`{"queue":"q","options":{"maxBytes":9223372036854775807,"maxLength":1,"leaseSeconds":1,"retryLimit":1,"ttlSeconds":0,"windowBuffer":{"ms":0,"count":0}}}`)); err != nil {
		t.Error(err)
	} else if b.Options.MaxBytes != 1<<63-1 {
		t.Error(b.Options.MaxBytes)
	}
	_, err := ParseOptions([]byte(`{"maxBytes":1} {}`))
	wantErr(t, err, 400, "data after the JSON object")
	_, err = ParseOptions([]byte(`[]`))
	wantErr(t, err, 400, "options must be an object")
	_, err = ParseOptions([]byte(" "))
	wantErr(t, err, 400, "options must be an object, not nothing")
}

package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDecodePlan(t *testing.T) {
	for _, tc := range []struct {
		body string
		want Plan
	}{
		{`{}`, Plan{Name: "p"}},
		{` {"features":{}} `, Plan{Name: "p"}},
		{`{"features":{"ephemeral":false}}`, Plan{Name: "p"}},
		{`{"features":{"ephemeral":true},"messagesPerPeriod":1000000,"periodSeconds":2592000,"messagesPerSecond":50,"parkedSlots":10}`,
			Plan{Name: "p", Features: Features{Ephemeral: true}, MessagesPerPeriod: 1000000, PeriodSeconds: 2592000, MessagesPerSecond: 50, ParkedSlots: 10}},
		{"{\n\t\"parkedSlots\": 0,\n\t\"periodSeconds\": 60\n}", Plan{Name: "p", PeriodSeconds: 60}},
		{`{"messagesPerSecond":9223372036854775807}`, Plan{Name: "p", MessagesPerSecond: 1<<63 - 1}},
		{`{"messagesPerSecond":-0}`, Plan{Name: "p"}},
	} {
		got, err := DecodePlan("p", []byte(tc.body))
		if err != nil || got != tc.want {
			t.Errorf("DecodePlan(%s) = %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}
}

func TestDecodePlanRefuses(t *testing.T) {
	long := `"` + strings.Repeat("é", 30) + `"`
	for _, tc := range []struct{ name, body, msg string }{
		{"", `{}`, "plan name is required"},
		{"a\tb", `{}`, "plan name carries a control character at byte 1"},
		{strings.Repeat("x", 513), `{}`, "plan name is 513 bytes; at most 512 are allowed"},
		{"p", ``, "the body must be a JSON object"},
		{"p", `   `, "the body must be a JSON object"},
		{"p", `null`, "the body must be a JSON object"},
		{"p", `[]`, "the body must be a JSON object"},
		{"p", `"plan"`, "the body must be a JSON object"},
		{"p", `{`, "the body is not valid JSON: it ends early"},
		{"p", `{"parkedSlots":1`, "the body is not valid JSON: it ends early"},
		{"p", `{"parkedSlots" 1}`, "the body is not valid JSON at byte 15: expected colon after object key"},
		{"p", `{1:2}`, "the body is not valid JSON at byte 1: invalid character '1'"},
		{"p", `{,}`, "the body is not valid JSON at byte 1: invalid character ','"},
		{"p", `{"parkedSlots":1,}`, "the body is not valid JSON at byte 17: invalid character '}' looking for beginning of object key string"},
		{"p", `{"parkedSlots":1 "periodSeconds":2}`, "the body is not valid JSON at byte 17: invalid character '\"' after object key:value pair"},
		{"p", `{"parkedSlots":[1}`, "the body is not valid JSON at byte 16: invalid character '}' after array element"},
		{"p", `{} {}`, "the body must hold one JSON object and nothing after it"},
		{"p", `{}x`, "the body must hold one JSON object and nothing after it"},
		{"p", `{"name":"p"}`, `unknown field "name"`},
		{"p", `{"messagesPerSec":5}`, `unknown field "messagesPerSec"`},
		{"p", `{"MessagesPerSecond":5}`, `unknown field "MessagesPerSecond"`},
		{"p", `{"parkedSlots":1,"parkedSlots":2}`, `duplicate field "parkedSlots"`},
		{"p", `{"features":true}`, "features must be a JSON object"},
		{"p", `{"features":null}`, "features must be a JSON object"},
		{"p", `{"features":{"ephemeral":true,"relay":true}}`, `unknown field "features.relay"`},
		{"p", `{"features":{"ephemeral":1}}`, "features.ephemeral must be true or false, got 1"},
		{"p", `{"features":{"ephemeral":"true"}}`, `features.ephemeral must be true or false, got "true"`},
		{"p", `{"features":{"ephemeral":true,"ephemeral":false}}`, `duplicate field "features.ephemeral"`},
		{"p", `{"messagesPerSecond":1.5}`, "messagesPerSecond must be a whole number, got 1.5"},
		{"p", `{"messagesPerSecond":1.0}`, "messagesPerSecond must be a whole number, got 1.0"},
		{"p", `{"messagesPerSecond":1e3}`, "messagesPerSecond must be a whole number, got 1e3"},
		{"p", `{"messagesPerSecond":"5"}`, `messagesPerSecond must be a whole number, got "5"`},
		{"p", `{"messagesPerSecond":null}`, "messagesPerSecond must be a whole number, got null"},
		{"p", `{"messagesPerSecond":"` + strings.Repeat("x", 38) + `"}`, `messagesPerSecond must be a whole number, got "` + strings.Repeat("x", 38) + `"`},
		{"p", `{"messagesPerSecond":"` + strings.Repeat("x", 39) + `"}`, `messagesPerSecond must be a whole number, got "` + strings.Repeat("x", 39) + "..."},
		{"p", `{"messagesPerSecond":` + long + `}`, `messagesPerSecond must be a whole number, got "` + strings.Repeat("é", 19) + "..."},
		{"p", `{"messagesPerSecond":9223372036854775808}`, "messagesPerSecond is out of range"},
		{"p", `{"messagesPerPeriod":-1,"periodSeconds":60}`, "messagesPerPeriod must not be negative, got -1"},
		{"p", `{"periodSeconds":-60}`, "periodSeconds must not be negative, got -60"},
		{"p", `{"messagesPerSecond":-5}`, "messagesPerSecond must not be negative, got -5"},
		{"p", `{"parkedSlots":-1}`, "parkedSlots must not be negative, got -1"},
		{"p", `{"messagesPerPeriod":100}`, "periodSeconds must be positive when messagesPerPeriod is set"},
		{"p", `{"messagesPerPeriod":100,"periodSeconds":0}`, "periodSeconds must be positive when messagesPerPeriod is set"},
	} {
		p, err := DecodePlan(tc.name, []byte(tc.body))
		if p != (Plan{}) {
			t.Errorf("DecodePlan(%q, %s) returned %+v with its error", tc.name, tc.body, p)
		}
		wantInvalid(t, "DecodePlan("+tc.body+")", err, tc.msg)
	}
}

func TestDecodeTenant(t *testing.T) {
	got, err := DecodeTenant("acme", []byte(` {"plan":"pro plan/été"} `))
	if want := (Tenant{Name: "acme", Plan: "pro plan/été"}); err != nil || got != want {
		t.Fatalf("DecodeTenant = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct{ name, body, msg string }{
		{"", `{"plan":"pro"}`, "tenant name is required"},
		{"a\x7f", `{"plan":"pro"}`, "tenant name carries a control character at byte 1"},
		{"acme", `{}`, "plan is required"},
		{"acme", `{"plan":""}`, "plan is required"},
		{"acme", `{"plan":null}`, "plan must be a string, got null"},
		{"acme", `{"plan":3}`, "plan must be a string, got 3"},
		{"acme", `{"plan":"a\u0000b"}`, "plan carries a control character at byte 1"},
		{"acme", `{"plan":"pro","plan":"free"}`, `duplicate field "plan"`},
		{"acme", `{"plan":"pro","tenant":"acme"}`, `unknown field "tenant"`},
		{"acme", `["pro"]`, "the body must be a JSON object"},
		{"acme", `{"plan":"pro"`, "the body is not valid JSON: it ends early"},
	} {
		ten, err := DecodeTenant(tc.name, []byte(tc.body))
		if ten != (Tenant{}) {
			t.Errorf("DecodeTenant(%q, %s) returned %+v with its error", tc.name, tc.body, ten)
		}
		wantInvalid(t, "DecodeTenant("+tc.body+")", err, tc.msg)
	}
}

// FuzzDecodePlan: any body is either refused as invalid or gives a valid
// plan that, written back as a body, decodes to itself.
func FuzzDecodePlan(f *testing.F) {
	for _, s := range []string{`{}`, `{"features":{"ephemeral":true},"messagesPerPeriod":5,"periodSeconds":60}`,
		`{"parkedSlots":1.5}`, `{"a":1}`, `[`, `{"features":{"x":[]}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		p, err := DecodePlan("p", []byte(body))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal not ErrInvalid: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded an invalid plan %+v: %v", p, err)
		}
		again := fmt.Sprintf(`{"features":{"ephemeral":%t},"messagesPerPeriod":%d,"periodSeconds":%d,"messagesPerSecond":%d,"parkedSlots":%d}`,
			p.Features.Ephemeral, p.MessagesPerPeriod, p.PeriodSeconds, p.MessagesPerSecond, p.ParkedSlots)
		if q, err := DecodePlan("p", []byte(again)); err != nil || q != p {
			t.Fatalf("%s decoded to %+v; written back, %+v, %v", body, p, q, err)
		}
	})
}

package server

import (
	"testing"

	"github.com/queenmq/ephemeral/wire"
)

// The owner answers a relayed request as an HTTP/1.1 keep-alive one; the
// landing member adds the connection fields its own client's request
// calls for (docs/cell.md, "Relaying in the server").
func TestConnectionFieldsOfARelayedAnswer(t *testing.T) {
	owner := wire.AppendResponse(nil, wire.Head{Status: 201}, []byte(`{"pushed":1}`))
	closing := wire.AppendError(nil, wire.Head{}, &wire.Error{Status: 400, Code: "x", Msg: "m", Close: true})
	cases := []struct {
		name      string
		raw       []byte
		head      wire.Head
		want      wire.Head
		body      []byte
		wantClose bool
	}{
		{"keep-alive HTTP/1.1: as is", owner, wire.Head{}, wire.Head{Status: 201}, []byte(`{"pushed":1}`), false},
		{"client asked to close", owner, wire.Head{Close: true}, wire.Head{Status: 201, Close: true}, []byte(`{"pushed":1}`), true},
		{"HTTP/1.0 keep-alive", owner, wire.Head{KeepAlive: true}, wire.Head{Status: 201, KeepAlive: true}, []byte(`{"pushed":1}`), false},
	}
	for _, c := range cases {
		got, closeAfter := connectionFields(c.raw, c.head)
		want := wire.AppendResponse(nil, c.want, c.body)
		if string(got) != string(want) || closeAfter != c.wantClose {
			t.Errorf("%s: got %q close %v, want %q close %v", c.name, got, closeAfter, want, c.wantClose)
		}
	}
	// An owner's answer that closes is passed on as is, and closes here.
	got, closeAfter := connectionFields(closing, wire.Head{KeepAlive: true})
	if string(got) != string(closing) || !closeAfter {
		t.Errorf("closing answer: got %q close %v", got, closeAfter)
	}
}

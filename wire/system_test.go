package wire

import "testing"

func TestKillSwitchDecode(t *testing.T) {
	var k KillSwitchBody
	for body, want := range map[string]KillSwitchBody{
		`{"enabled":false,"retryAfterSeconds":30}`:  {false, 30},
		`{"enabled":true}`:                          {true, 0},
		`{"retryAfterSeconds":null,"enabled":true}`: {true, 0},
	} {
		if err := k.Decode([]byte(body)); err != nil || k != want {
			t.Errorf("%s: %+v %v", body, k, err)
		}
	}
	for body, frag := range map[string]string{
		`{}`:                      "enabled is required",
		`{"retryAfterSeconds":1}`: "enabled is required",
		`{"enabled":"false"}`:     "enabled must be true or false, not a string",
		`{"enabled":null}`:        "enabled must be true or false, not null",
		`{"enabled":true,"retryAfterSeconds":-1}`:  "retryAfterSeconds must be a non-negative integer",
		`{"enabled":true,"retryAfterSeconds":1.5}`: "retryAfterSeconds must be a non-negative integer",
		`{"enabled":true,"paused":true}`:           `unknown key "paused"`,
		`{"enabled":true,"enabled":false}`:         "twice",
		`{"enabled":tru}`:                          "must be true or false",
		``:                                         "kill switch body is empty",
	} {
		if e := wantErr(t, k.Decode([]byte(body)), 400, frag); e.Code != CodeSystemBadRequest {
			t.Errorf("%s: code %s", body, e.Code)
		}
	}
}

func TestGrantDecode(t *testing.T) {
	var g GrantBody
	if err := g.Decode([]byte(`{"maxBytes":1048576,"maxQueues":0,"messagesPerSecond":500}`)); err != nil ||
		g != (GrantBody{Has: 7, MaxBytes: 1048576, MaxQueues: 0, MessagesPerSecond: 500}) {
		t.Errorf("%+v %v", g, err)
	}
	if err := g.Decode([]byte(`{}`)); err != nil || g != (GrantBody{}) {
		t.Errorf("%+v %v", g, err)
	}
	if err := g.Decode([]byte(`{"maxQueues":3}`)); err != nil || g != (GrantBody{Has: HasGrantMaxQueues, MaxQueues: 3}) {
		t.Errorf("%+v %v", g, err)
	}
	for body, frag := range map[string]string{
		`{"maxBytes":-1}`:             "maxBytes must be a non-negative integer",
		`{"maxQueues":2.5}`:           "maxQueues must be a non-negative integer",
		`{"messagesPerSecond":"5"}`:   "messagesPerSecond must be a non-negative integer, not a string",
		`{"maxBytes":null}`:           "not null",
		`{"maxbytes":1}`:              `unknown key "maxbytes" in the grant body; the keys are maxBytes, maxQueues and messagesPerSecond`,
		`{"maxBytes":1,"maxBytes":1}`: "twice",
		`[]`:                          "must be a JSON object",
	} {
		if e := wantErr(t, g.Decode([]byte(body)), 400, frag); e.Code != CodeSystemBadRequest {
			t.Errorf("%s: code %s", body, e.Code)
		}
	}
}

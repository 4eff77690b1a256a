package wire

import (
	"strings"
	"testing"
)

func TestAckDecode(t *testing.T) {
	body := `{"queue":"presence","group":"widget","acks":[
		{"id":"e:9f3a1c:room-7:41","status":"completed"},
		{"id":"e:9f3a1c:room-7:42"},
		{"status":"failed","id":"e:1:p:1","error":"boom"},
		{"id":"e:1:p:2","status":"retry","error":null},
		{"id":"e:1:r\"q:3","status":null},
		{"id":""}
	]}`
	var b AckBody
	if err := b.Decode([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if string(b.Queue) != "presence" || string(b.Group) != "widget" {
		t.Errorf("%q %q", b.Queue, b.Group)
	}
	want := []AckItem{
		{[]byte("e:9f3a1c:room-7:41"), AckCompleted}, {[]byte("e:9f3a1c:room-7:42"), AckCompleted},
		{[]byte("e:1:p:1"), AckFailed}, {[]byte("e:1:p:2"), AckRetry}, {[]byte(`e:1:r"q:3`), AckCompleted}, {[]byte(""), AckCompleted},
	}
	if len(b.Acks) != len(want) {
		t.Fatalf("%d acks", len(b.Acks))
	}
	for i, w := range want {
		if string(b.Acks[i].ID) != string(w.ID) || b.Acks[i].Status != w.Status {
			t.Errorf("ack %d = %q %v, want %q %v", i, b.Acks[i].ID, b.Acks[i].Status, w.ID, w.Status)
		}
	}
	if AckFailed.String() != "failed" || AckRetry.String() != "retry" || AckCompleted.String() != "completed" {
		t.Error("String")
	}
}

func TestAckIDsAliasBody(t *testing.T) {
	body := []byte(`{"queue":"q","acks":[{"id":"abc"},{"id":"a\"b"}]}`)
	var b AckBody
	if err := b.Decode(body); err != nil {
		t.Fatal(err)
	}
	if &b.Acks[0].ID[0] != &body[len(`{"queue":"q","acks":[{"id":"`)] {
		t.Error("plain id copied")
	}
	if string(b.Acks[1].ID) != `a"b` {
		t.Errorf("%q", b.Acks[1].ID)
	}
}

func TestAckDecodeOptional(t *testing.T) {
	var b AckBody
	for _, body := range []string{`{"queue":"q","acks":[]}`, `{"queue":"q","group":"","acks":[]}`, `{"queue":"q","group":null,"acks":[]}`} {
		if err := b.Decode([]byte(body)); err != nil || len(b.Group) != 0 || len(b.Acks) != 0 {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func TestAckDecodeMaxBatch(t *testing.T) {
	build := func(n int) []byte {
		items := make([]string, n)
		for i := range items {
			items[i] = `{"id":"e:1:p:1"}`
		}
		return []byte(`{"queue":"q","acks":[` + strings.Join(items, ",") + `]}`)
	}
	var b AckBody
	if err := b.Decode(build(MaxBatch)); err != nil || len(b.Acks) != MaxBatch {
		t.Fatal(err)
	}
	wantErr(t, b.Decode(build(MaxBatch+1)), 400, "acks holds more than 10000 items")
}

func TestAckDecodeRefusals(t *testing.T) {
	cases := map[string]string{
		`{"acks":[]}`:                                                  "queue is required",
		`{"queue":"q"}`:                                                "acks is required",
		`{"queue":"q","acks":{}}`:                                      "acks must be an array, not an object",
		`{"queue":"q","group":"\u0001","acks":[]}`:                     "group carries a control character",
		`{"queue":"q","group":1,"acks":[]}`:                            "group must be a string, not a number",
		`{"queue":"q","acks":[],"extra":1}`:                            `unknown key "extra" in the ack body; the keys are queue, group and acks`,
		`{"queue":"q","acks":["e:1:p:1"]}`:                             `acks[0] must be an object`,
		`{"queue":"q","acks":[{"status":"completed"}]}`:                "acks[0] has no id",
		`{"queue":"q","acks":[{"id":1}]}`:                              "acks[0].id must be a string, not a number",
		`{"queue":"q","acks":[{"id":null}]}`:                           "acks[0].id must be a string, not null",
		`{"queue":"q","acks":[{"id":"a"},{"id":"b","status":"done"}]}`: `acks[1].status is "done"; it must be completed, failed or retry`,
		`{"queue":"q","acks":[{"id":"a","status":""}]}`:                `acks[0].status is ""`,
		`{"queue":"q","acks":[{"id":"a","status":"Completed"}]}`:       `acks[0].status is "Completed"`,
		`{"queue":"q","acks":[{"id":"a","status":1}]}`:                 "acks[0].status must be completed, failed or retry, not a number",
		`{"queue":"q","acks":[{"id":"a","error":{}}]}`:                 "acks[0].error must be a string, not an object",
		`{"queue":"q","acks":[{"id":"a","leaseId":"x"}]}`:              `acks[0] has the unknown key "leaseId"; the keys are id, status and error`,
		`{"queue":"q","acks":[{"id":"a","id":"b"}]}`:                   `has the key "id" twice`,
		`{"queue":"q","acks":[{"id":"a","error":"\q"}]}`:               "invalid escape",
		`{"queue":"q","acks":[{"id":"\udc00"}]}`:                       "lone UTF-16 surrogate",
	}
	var b AckBody
	for body, frag := range cases {
		if e := wantErr(t, b.Decode([]byte(body)), 400, frag); e.Code != CodeBadRequest {
			t.Errorf("code %s", e.Code)
		}
	}
}

// A body that ends where an element or a member's value is due is a 400
// naming what was missing ("nothing"), never a read past the body's end.
func TestAckDecodeTruncated(t *testing.T) {
	cases := map[string]string{
		`{"queue":"q","acks":[`:                               `acks[0] must be an object {"id": ..., "status": ...}, not nothing`,
		`{"queue":"q","acks":[{"id":`:                         "acks[0].id must be a string, not nothing",
		`{"queue":"q","acks":[{"id":"a","error":`:             "acks[0].error must be a string, not nothing",
		`{"queue":"q","acks":[{"id":"a"},{"id":"b","status":`: "acks[1].status must be completed, failed or retry, not nothing",
		// A null that ends the body is a null (absent), then a cut body.
		`{"queue":"q","group":null`:                    "the ack body is not valid JSON: expected ',' or '}' at the end of the body",
		`{"queue":"q","acks":[{"id":"a","status":null`: "the ack body is not valid JSON: expected ',' or '}' at the end of the body",
	}
	var b AckBody
	for body, frag := range cases {
		if e := wantErr(t, b.Decode([]byte(body)), 400, frag); e.Code != CodeBadRequest {
			t.Errorf("%s: code %s", body, e.Code)
		}
	}
}

// A refusal echoes at most 64 bytes of what the client sent: a value of
// exactly 64 bytes whole, a longer one cut there and marked with "...".
func TestRefusalQuotesAtMost64Bytes(t *testing.T) {
	var b AckBody
	v := strings.Repeat("a", 64)
	wantErr(t, b.Decode([]byte(`{"queue":"q","acks":[{"id":"x","status":"`+v+`"}]}`)), 400,
		`acks[0].status is "`+v+`"; it must be`)
	wantErr(t, b.Decode([]byte(`{"queue":"q","acks":[{"id":"x","status":"`+v+`b"}]}`)), 400,
		`acks[0].status is "`+v+`"...; it must be`)
}

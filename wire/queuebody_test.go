package wire

import "testing"

func TestQueueBody(t *testing.T) {
	var b QueueBody
	if err := b.Decode([]byte(`{"queue":"presence"}`)); err != nil || string(b.Queue) != "presence" {
		t.Fatalf("decode: %q %v", b.Queue, err)
	}
	for _, bad := range []string{`{}`, `{"queue":""}`, `{"queue":"a","x":1}`, `{"queue":1}`, `[]`, `{"queue":"a","queue":"b"}`, `{"queue":"a\u0001"}`} {
		err := b.Decode([]byte(bad))
		e, ok := err.(*Error)
		if !ok || e.Status != 400 || e.Code != CodeBadRequest {
			t.Errorf("%s: got %v, want a 400 ephemeral_bad_request", bad, err)
		}
	}
}

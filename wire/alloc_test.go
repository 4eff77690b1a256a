package wire

import (
	"strings"
	"testing"
)

// P3: nothing allocates per request or per message in steady state. These
// pin it (they run under -race too).

func pinZero(t *testing.T, name string, f func()) {
	t.Helper()
	f() // warm up: reusable buffers reach their size
	if allocs := testing.AllocsPerRun(50, f); allocs != 0 {
		t.Errorf("%s allocates %.1f times per call", name, allocs)
	}
}

func TestSteadyStateIsAllocationFree(t *testing.T) {
	p := NewParser(Limits{})
	get := []byte(popGET)
	pinZero(t, "parse pop GET + ParsePop", func() {
		req, _, err := p.Parse(get)
		if err != nil || req == nil {
			t.Fatal(err)
		}
		if _, err := ParsePop(req.Query(), 30000); err != nil {
			t.Fatal(err)
		}
		if _, ok := req.Header("authorization"); !ok {
			t.Fatal("no authorization")
		}
	})

	escaped := []byte("GET /api/v1/ephemeral/pop?queue=a%2Fb&group=g+1&partition=%C3%A9 HTTP/1.1\r\n\r\n")
	pinZero(t, "parse pop GET with escapes", func() {
		req, _, _ := p.Parse(escaped)
		if pp, err := ParsePop(req.Query(), 30000); err != nil || string(pp.Queue) != "a/b" {
			t.Fatal(err)
		}
	})

	body := pushBody100x64()
	post := postRequest("/api/v1/ephemeral/push", body)
	var push PushBody
	pinZero(t, "parse push POST + decode 100 payloads", func() {
		req, _, err := p.Parse(post)
		if err != nil || req == nil {
			t.Fatal(err)
		}
		if err := push.Decode(req.Body); err != nil || len(push.Payloads) != 100 {
			t.Fatal(err)
		}
	})

	chunked := chunkedRequest("/api/v1/ephemeral/push", body, 1000)
	pinZero(t, "parse chunked push POST + decode", func() {
		req, _, err := p.Parse(chunked)
		if err != nil || req == nil {
			t.Fatal(err)
		}
		if err := push.Decode(req.Body); err != nil || len(push.Payloads) != 100 {
			t.Fatal(err)
		}
	})

	ackb := ackBody100()
	var ack AckBody
	pinZero(t, "decode 100 acks", func() {
		if err := ack.Decode(ackb); err != nil || len(ack.Acks) != 100 {
			t.Fatal(err)
		}
	})
	escapedAcks := []byte(`{"queue":"q\u00e9","acks":[{"id":"a\"b"},{"id":"c\\d","status":"retry"}]}`)
	pinZero(t, "decode acks with escapes", func() {
		if err := ack.Decode(escapedAcks); err != nil {
			t.Fatal(err)
		}
	})

	var cfg ConfigureBody
	cb := []byte(configureBody)
	pinZero(t, "decode configure", func() {
		if err := cfg.Decode(cb); err != nil {
			t.Fatal(err)
		}
	})

	ids, payloads := popFixture(100)
	var head, out []byte
	pinZero(t, "write a pop answer of 100 messages", func() {
		head, out = writePop(head, out, ids, payloads)
	})

	e := &Error{Status: 400, Code: CodeBadRequest, Msg: `unknown option "x"`}
	pinZero(t, "write an error answer", func() {
		out = AppendError(out[:0], Head{}, e)
	})
}

// decisions.md, memory: a scratch arena of up to 64 KiB is kept for the
// next request, a larger one is not. An ack id whose decoding takes exactly
// 64 KiB of arena is decoded again and again without allocating (the arena
// is kept, and its room fits the id exactly); one byte more allocates each
// time.
func TestScratchArenaRetainedUpTo64KiB(t *testing.T) {
	body := func(raw int) []byte {
		id := `\n` + strings.Repeat("a", raw-2) // raw bytes between the quotes
		return []byte(`{"queue":"q","acks":[{"id":"` + id + `"}]}`)
	}
	var b AckBody
	exact := body(retainScratch)
	pinZero(t, "an ack id that takes the whole arena", func() {
		if err := b.Decode(exact); err != nil || len(b.Acks[0].ID) != retainScratch-1 {
			t.Fatal(err)
		}
	})
	over := body(retainScratch + 1)
	if err := b.Decode(over); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(10, func() { _ = b.Decode(over) }); allocs == 0 {
		t.Error("an arena above 64 KiB is kept between requests")
	}
}

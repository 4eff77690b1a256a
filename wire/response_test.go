package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
	"unicode/utf8"
)

// readResponse parses out with net/http, an independent HTTP/1.1 reader.
func readResponse(t *testing.T, out []byte) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
	if err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestAppendResponse(t *testing.T) {
	out := AppendResponse([]byte("prefix"), Head{Status: 201}, []byte(`{"pushed":2}`))
	if !bytes.HasPrefix(out, []byte("prefixHTTP/1.1 201 Created\r\n")) {
		t.Fatalf("%q", out)
	}
	resp, body := readResponse(t, out[len("prefix"):])
	if resp.StatusCode != 201 || body != `{"pushed":2}` || resp.Header.Get("Content-Type") != "application/json" ||
		resp.ContentLength != 12 || resp.Close || resp.Header.Get("Retry-After") != "" {
		t.Errorf("%+v %q", resp, body)
	}
	want := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":2}"
	if string(out[len("prefix"):]) != want {
		t.Errorf("%q", out)
	}
}

func TestAppendHeadOptions(t *testing.T) {
	date := AppendDate(nil, time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600)))
	if string(date) != "Wed, 04 Mar 2026 04:06:07 GMT" {
		t.Errorf("%s", date)
	}
	out := AppendHead(nil, Head{Status: 503, ContentLength: 0, Close: true, RetryAfter: 7, Date: date,
		ContentType: "text/plain; version=0.0.4", Extra: []byte("X-Extra: 1\r\n")})
	resp, _ := readResponse(t, out)
	if resp.StatusCode != 503 || !resp.Close || resp.Header.Get("Retry-After") != "7" || resp.Header.Get("Date") != string(date) ||
		resp.Header.Get("Content-Type") != "text/plain; version=0.0.4" || resp.Header.Get("X-Extra") != "1" {
		t.Errorf("%q", out)
	}
	out = AppendHead(nil, Head{Status: 200, KeepAlive: true})
	if !bytes.Contains(out, []byte("\r\nConnection: keep-alive\r\n")) {
		t.Errorf("%q", out)
	}
	for _, status := range []int{200, 201, 400, 401, 403, 404, 405, 408, 413, 417, 429, 431, 500, 501, 502, 503, 504, 505, 299} {
		resp, _ := readResponse(t, AppendHead(nil, Head{Status: status}))
		if resp.StatusCode != status {
			t.Errorf("%d: %d", status, resp.StatusCode)
		}
		if status != 299 && resp.Status == "" {
			t.Errorf("%d: no reason", status)
		}
	}
	if got := string(AppendContinue(nil)); got != "HTTP/1.1 100 Continue\r\n\r\n" {
		t.Errorf("%q", got)
	}
}

func TestAppendError(t *testing.T) {
	e := &Error{Status: 400, Code: CodeBadRequest, Msg: `unknown option "ttlSecond"; the options are ...`, Close: true}
	out := AppendError(nil, Head{Status: 200}, e)
	resp, body := readResponse(t, out)
	if resp.StatusCode != 400 || !resp.Close {
		t.Errorf("%q", out)
	}
	want := `{"error":"unknown option \"ttlSecond\"; the options are ...","code":"ephemeral_bad_request"}`
	if body != want {
		t.Errorf("%s", body)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(body), &v); err != nil || len(v) != 2 || v["error"] != e.Msg || v["code"] != e.Code {
		t.Errorf("%v %v", v, err)
	}
	// A 429 keeps the connection and carries Retry-After.
	out = AppendError(nil, Head{Status: 0, RetryAfter: 2}, &Error{Status: 429, Code: "rate_limited", Msg: "over"})
	if resp, _ := readResponse(t, out); resp.StatusCode != 429 || resp.Close || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("%q", out)
	}
}

func TestAppendString(t *testing.T) {
	cases := map[string]string{
		"":                 `""`,
		"plain":            `"plain"`,
		`q"u\o/te`:         `"q\"u\\o/te"`,
		"\n\r\t\b\f":       `"\n\r\t\b\f"`,
		"\x00\x01\x1f\x7f": `"\u0000\u0001\u001f` + "\x7f\"",
		"café 日本 🎉":        `"café 日本 🎉"`,
		"bad\xffutf8\xc3":  `"bad\ufffdutf8\ufffd"`,
		"\u2028":           "\"\u2028\"",
		"a\x80b":           `"a\ufffdb"`, // the first byte past ASCII, alone
		// The first and last code points of each UTF-8 length and range,
		// kept; the sequences just outside them, replaced byte by byte.
		"\u0080\u00bf\u07ff\u0800\u0fff\u1000\ud7ff\ue000\uffff":                             "\"\u0080\u00bf\u07ff\u0800\u0fff\u1000\ud7ff\ue000\uffff\"",
		"\U00010000\U0003ffff\U00040000\U000fffff\U00100000\U0010ffff":                       "\"\U00010000\U0003ffff\U00040000\U000fffff\U00100000\U0010ffff\"",
		"\xc1\xbf|\xc2\xc0|\xe0\x9f\xbf|\xed\xa0\x80|\xf0\x8f\xbf\xbf|\xf4\x90\x80\x80|\xf5": `"\ufffd\ufffd|\ufffd\ufffd|\ufffd\ufffd\ufffd|\ufffd\ufffd\ufffd|\ufffd\ufffd\ufffd\ufffd|\ufffd\ufffd\ufffd\ufffd|\ufffd"`,
	}
	for in, want := range cases {
		if got := string(AppendString(nil, in)); got != want {
			t.Errorf("%q: %s want %s", in, got, want)
		}
		if got := string(AppendStringBytes(nil, []byte(in))); got != want {
			t.Errorf("bytes %q: %s", in, got)
		}
		if n := StringLen(in); n != len(want) {
			t.Errorf("StringLen(%q) = %d want %d", in, n, len(want))
		}
		var back string
		if err := json.Unmarshal([]byte(want), &back); err != nil {
			t.Errorf("%s: %v", want, err)
		} else if utf8.ValidString(in) && back != in {
			t.Errorf("round trip %q -> %q", in, back)
		}
	}
}

func TestAppendNumbers(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, -1, -10, 1 << 62, -1 << 63, 1<<63 - 1} {
		got := AppendInt(nil, v)
		if IntLen(v) != len(got) {
			t.Errorf("IntLen(%d) = %d, %q", v, IntLen(v), got)
		}
	}
	if string(AppendUint(nil, 1<<64-1)) != "18446744073709551615" || string(AppendBool(nil, true)) != "true" {
		t.Error("uint/bool")
	}
	if string(AppendKey(nil, `k"`)) != `"k\"":` {
		t.Error("key")
	}
}

func TestAnswerBodies(t *testing.T) {
	check := func(got []byte, want string) {
		t.Helper()
		if string(got) != want {
			t.Errorf("got %s\nwant %s", got, want)
		}
		if !json.Valid(got) {
			t.Errorf("invalid JSON %s", got)
		}
	}
	check(AppendPushed(nil, 2), `{"pushed":2}`)
	pop := AppendPopStart(nil, `pre"sence`)
	pop = AppendPopMessage(pop, 0, []byte("e:9f3a1c:room-7:41"), "room-7", 0, []byte(`{ "user": "alice" }`))
	pop = AppendPopMessage(pop, 1, []byte(`e:9f3a1c:r"q:42`), `r"q`, 2, []byte(`null`))
	check(AppendPopEnd(pop), `{"queue":"pre\"sence","messages":[{"id":"e:9f3a1c:room-7:41","partition":"room-7","attempts":0,"payload":{ "user": "alice" }},{"id":"e:9f3a1c:r\"q:42","partition":"r\"q","attempts":2,"payload":null}]}`)
	check(AppendPopEnd(AppendPopStart(nil, "q")), `{"queue":"q","messages":[]}`)
	ack := AppendAckStart(nil)
	ack = AppendAckResult(ack, 0, []byte("e:1:p:1"), "acked")
	ack = AppendAckResult(ack, 1, []byte("x"), "stale")
	check(AppendAckEnd(ack), `{"results":[{"id":"e:1:p:1","outcome":"acked"},{"id":"x","outcome":"stale"}]}`)
	check(AppendAckEnd(AppendAckStart(nil)), `{"results":[]}`)
	check(AppendConfigured(nil, "q", []byte(`{ "ttlSeconds": 30 }`)), `{"queue":"q","options":{ "ttlSeconds": 30 }}`)
	check(AppendConfigured(nil, "q", nil), `{"queue":"q","options":{}}`)
	check(AppendReset(nil, "q", 412), `{"queue":"q","dropped":412}`)
	check(AppendDeleted(nil, "q", true, false), `{"queue":"q","deleted":true,"declared":false}`)
	check(AppendKillSwitch(nil, false, 30), `{"enabled":false,"retryAfterSeconds":30}`)
	check(AppendGrant(nil, "t", 1, 2, 3), `{"tenant":"t","maxBytes":1,"maxQueues":2,"messagesPerSecond":3}`)
	check(AppendGrantDeleted(nil, "t", true), `{"tenant":"t","deleted":true}`)
	qs := QueueStatus{Name: "q", Depth: 1, Bytes: 2, Partitions: 3, Groups: 4, Drops: QueueDrops{5, 6, 7},
		Options: Options{MaxBytes: 8, MaxLength: 9, Policy: PolicyDropOldest, TTLSeconds: 10, LeaseSeconds: 11, RetryLimit: 12}}
	list := AppendQueueStatus(AppendQueuesStart(nil), 0, &qs)
	qs.Name, qs.Declared, qs.Options.WindowMs, qs.Options.WindowCount = "r", true, 13, 14
	list = AppendQueuesEnd(AppendQueueStatus(list, 1, &qs), 2, 99)
	check(list, `{"queues":[`+
		`{"queue":"q","tier":"implicit","depth":1,"bytes":2,"partitions":3,"groups":4,"drops":{"bounds":5,"ttl":6,"retry":7},`+
		`"options":{"maxBytes":8,"maxLength":9,"policy":"dropOldest","ttlSeconds":10,"leaseSeconds":11,"retryLimit":12,"windowBuffer":null}},`+
		`{"queue":"r","tier":"declared","depth":1,"bytes":2,"partitions":3,"groups":4,"drops":{"bounds":5,"ttl":6,"retry":7},`+
		`"options":{"maxBytes":8,"maxLength":9,"policy":"dropOldest","ttlSeconds":10,"leaseSeconds":11,"retryLimit":12,"windowBuffer":{"ms":13,"count":14}}}`+
		`],"count":2,"cellBytes":99}`)
	depth := AppendDepthStart(nil, &DepthStatus{Queue: []byte("q"), Pending: 3, PartitionsPending: 1, Bytes: 4})
	depth = AppendDepthPartition(depth, 0, "p", 3, 4)
	depth = AppendDepthGroup(AppendDepthGroupsStart(depth), 0, "g", 3, 0)
	check(AppendDepthEnd(AppendDepthGroup(depth, 1, "h", 0, 2)), `{"queue":"q","group":null,"tier":"implicit","pending":3,"partitionsPending":1,"bytes":4,`+
		`"partitions":[{"partition":"p","pending":3,"bytes":4}],"groups":[{"group":"g","pending":3,"skipped":0},{"group":"h","pending":0,"skipped":2}]}`)
	check(AppendErrorBody(nil, "no", "x"), `{"error":"no","code":"x"}`)
	if n := ErrorBodyLen(`a"b`, "c"); n != len(AppendErrorBody(nil, `a"b`, "c")) {
		t.Error(n)
	}
}

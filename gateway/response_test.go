package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// feedAll reads answers from s, split into pieces of at most step bytes as
// they would arrive, and returns each answer's bytes and status.
func feedAll(t *testing.T, s string, step int) (answers []string, statuses []int, delivered []int) {
	t.Helper()
	var r respReader
	buf := []byte{}
	cur := []byte{}
	for i := 0; i < len(s) || len(buf) > 0; {
		if i < len(s) {
			end := min(len(s), i+step)
			buf = append(buf, s[i:end]...)
			i = end
		}
		n, done, err := r.feed(buf)
		if err != nil {
			t.Fatalf("feed: %v", err)
		}
		cur = append(cur, buf[:n]...)
		buf = buf[n:]
		if done {
			answers = append(answers, string(cur))
			statuses = append(statuses, r.status)
			delivered = append(delivered, r.delivered)
			cur = nil
			continue
		}
		if n == 0 && i >= len(s) {
			t.Fatalf("stuck with %q left", buf)
		}
	}
	return answers, statuses, delivered
}

func TestRespReaderFramesEveryKindOfAnswer(t *testing.T) {
	a1 := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":3}"
	a2 := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Queen-Delivered: 0\r\n\r\n"
	a3 := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\nTrailer: x\r\n\r\n"
	a4 := "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-queen-delivered: 7\r\nConnection: close\r\n\r\n{}"
	a5 := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\na\r\n\r\nb\r\n0\r\n\r\n"       // an empty line inside the data
	a6 := "HTTP/1.1 204\r\nContent-Length: 0\r\n\r\n"                                               // no reason phrase
	a7 := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n000000000000002\r\nok\r\n0\r\n\r\n" // a chunk size of 15 digits, the most read
	all := a1 + a2 + a3 + a4 + a5 + a6 + a7
	for _, step := range []int{1, 3, 17, len(all)} {
		answers, statuses, delivered := feedAll(t, all, step)
		want := []string{a1, a2, a3, a4, a5, a6, a7}
		if strings.Join(answers, "|") != strings.Join(want, "|") {
			t.Fatalf("step %d: answers\n%q\nwant\n%q", step, answers, want)
		}
		if statuses[0] != 201 || statuses[1] != 200 || statuses[3] != 200 {
			t.Fatalf("step %d: statuses %v", step, statuses)
		}
		if delivered[0] != -1 || delivered[1] != 0 || delivered[3] != 7 {
			t.Fatalf("step %d: delivered %v, want [-1 0 _ 7]", step, delivered)
		}
	}
}

func TestRespReaderConnectionClose(t *testing.T) {
	var r respReader
	_, done, err := r.feed([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	if err != nil || !done || !r.close || r.status != 400 {
		t.Fatalf("done %v err %v close %v status %d", done, err, r.close, r.status)
	}
	_, done, err = r.feed([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	if err != nil || !done || r.close {
		t.Fatalf("the next answer kept close=%v (done %v, err %v)", r.close, done, err)
	}
}

func TestRespReaderRefusesWhatCannotBeFramed(t *testing.T) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\n\r\n",                      // neither length nor chunked
		"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", // status
		"SMTP ready\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\n", // an empty chunk-size line
		"\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",    // an empty head
	} {
		var r respReader
		if _, _, err := r.feed([]byte(s)); err == nil {
			t.Errorf("%q: framed", s)
		}
	}
	var r respReader
	if _, _, err := r.feed([]byte("HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", 4000))); err == nil {
		t.Error("a head over the bound without an end: no error")
	}
	// A head, or a chunk-size line, still without its end is read on up
	// to maxRespHead bytes, and refused past them.
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, c := range []struct {
		what, s string
		refused bool
	}{
		{"a head of the bound", strings.Repeat("h", maxRespHead), false},
		{"a head past it", strings.Repeat("h", maxRespHead+1), true},
		{"a chunk-size line of the bound", chunked + "1" + strings.Repeat(" ", maxRespHead-1), false},
		{"a chunk-size line past it", chunked + "1" + strings.Repeat(" ", maxRespHead), true},
	} {
		var r respReader
		if _, done, err := r.feed([]byte(c.s)); done || (err != nil) != c.refused {
			t.Errorf("%s: done %v, err %v; want refused %v", c.what, done, err, c.refused)
		}
	}
}

func TestCountMessages(t *testing.T) {
	for body, want := range map[string]int{
		`{"queue":"q","messages":[]}`:                                                                    0,
		`{"queue":"q","messages":[{"id":"a","payload":1}]}`:                                              1,
		`{"queue":"q","messages":[{"id":"a","payload":{"messages":[1,2]}},{"id":"b","payload":"],[,"}]}`: 2,
		`{"queue":"q","messages" : [ {"payload":[1,{"x":"\"}"}]} , {} , {} ]}`:                           3,
		`{"queue":"messages","messages":[{}]}`:                                                           1,
		`{"queue":"q"}`:                                                                                  -1,
	} {
		if got := countMessages([]byte(body)); got != want {
			t.Errorf("%s: %d, want %d", body, got, want)
		}
	}
}

// FuzzCountMessages: for a pop answer as encoding/json writes it, compact
// or indented, whatever its queue name and payloads hold (quotes, escapes,
// brackets, commas, a "messages" key of their own), countMessages counts
// what encoding/json decodes; -1 for an answer without the array.
func FuzzCountMessages(f *testing.F) {
	for _, s := range []struct {
		queue, payload string
		n              uint8
		indent         bool
	}{
		{"q", "x", 1, false}, {"messages", `"messages":[`, 3, true}, {`q"],`, `\"}`, 0, false},
		{"q", `{"a":[1,{"b":"]"}]}`, 5, true}, {"\t\n", "\\", 2, true}, {"q", "", 7, false},
		{"q", `"s"`, 2, false}, {"q", `1`, 2, true}, // a last element that is a string, a number
	} {
		f.Add(s.queue, s.payload, s.n, s.indent)
	}
	f.Fuzz(func(t *testing.T, queue, payload string, n uint8, indent bool) {
		elems := make([]any, n%8)
		for i := range elems {
			var e any = map[string]any{"id": strconv.Itoa(i), "payload": payload, "nested": []any{payload, map[string]any{"messages": []int{1, 2}}}}
			if i%2 == 1 && json.Valid([]byte(payload)) {
				e = json.RawMessage(payload)
			}
			elems[i] = e
		}
		for _, answer := range []map[string]any{{"queue": queue, "messages": elems}, {"queue": queue, "payload": payload}} {
			body, err := json.Marshal(answer)
			if err != nil {
				t.Fatal(err)
			}
			if indent {
				var b bytes.Buffer
				if err := json.Indent(&b, body, " ", "\t "); err != nil {
					t.Fatal(err)
				}
				body = b.Bytes()
			}
			var back struct{ Messages *[]json.RawMessage }
			if err := json.Unmarshal(body, &back); err != nil {
				t.Fatal(err)
			}
			want := -1
			if back.Messages != nil {
				want = len(*back.Messages)
			}
			if got := countMessages(body); got != want {
				t.Fatalf("%s: %d, want %d", body, got, want)
			}
		}
	})
}

package wire

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// A streamed answer reads back with a stock HTTP/1.1 client: chunked, and
// for HTTP/1.0 delimited by the end of the connection.
func TestStreamedAnswerReadsBack(t *testing.T) {
	parts := []string{`{"queues":[`, "", `{"queue":"a"}`, `],"count":1}`}
	want := `{"queues":[{"queue":"a"}],"count":1}`

	b := AppendStreamHead(nil, Head{Status: 200, Date: []byte("Tue, 01 Dec 2026 00:00:00 GMT")}, true)
	for _, p := range parts {
		b = AppendChunk(b, []byte(p))
	}
	b = append(b, LastChunk...)
	b = append(b, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"...) // the next answer follows
	r := bufio.NewReader(bytes.NewReader(b))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != want {
		t.Fatalf("body %q, %v; want %q", body, err, want)
	}
	if resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 || resp.Close ||
		resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Date") == "" {
		t.Fatalf("head %+v", resp)
	}
	if next, err := http.ReadResponse(r, nil); err != nil || next.StatusCode != 200 {
		t.Fatalf("the answer after the chunked one: %v", err)
	}

	b = AppendStreamHead(nil, Head{Status: 200, Close: true}, true)
	if !bytes.Contains(b, []byte("Transfer-Encoding: chunked\r\nConnection: close\r\n")) {
		t.Fatalf("a chunked answer that closes: %q", b)
	}

	b = AppendStreamHead(nil, Head{Status: 200, KeepAlive: true}, false)
	b = append(b, want...)
	resp, err = http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: "GET", ProtoMajor: 1, ProtoMinor: 0})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != want || !resp.Close || resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 {
		t.Fatalf("HTTP/1.0 answer: %q close %v length %d", body, resp.Close, resp.ContentLength)
	}
}

// Without a Date the streamed head has no Date line at all.
func TestStreamHeadWithoutDate(t *testing.T) {
	const want = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	if got := string(AppendStreamHead(nil, Head{Status: 200}, true)); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

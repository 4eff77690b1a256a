package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// startListServer starts a server whose engine holds n queues of tenant
// default (q000000, q000001, ...), with a small outbound limit: a connection
// whose unsent answers pass 2 MiB is closed.
func startListServer(t *testing.T, n int) *testServer {
	t.Helper()
	e := engine.New(engine.Config{})
	for i := range n {
		if err := e.Configure(identity.DefaultTenant, fmt.Sprintf("q%06d", i), engine.OptionSet{}); err != nil {
			t.Fatal(err)
		}
	}
	return serve(t, e, openStore(t), Config{Loops: 1, MaxBodyBytes: 1 << 20, OutboundHard: 2 << 20})
}

// sampleOutbound looks, on each connection's loop, at how many bytes gnet
// holds unsent for it, every millisecond until stop is called, and returns
// the largest seen and how many looks were taken. It measures the server
// from outside the listing code.
func sampleOutbound(s *Server) (stop func() (peak int64, looks int64)) {
	var peak, looks atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			s.conns.Range(func(cs *conn, _ struct{}) bool {
				_ = cs.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
					if !cs.isClosed {
						n := int64(cs.c.OutboundBuffered())
						looks.Add(1)
						for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
						}
					}
					return nil
				}))
				return true
			})
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return peak.Load(), looks.Load()
	}
}

type listedQueue struct {
	Queue string `json:"queue"`
	Tier  string `json:"tier"`
}

type listed struct {
	Queues    []listedQueue `json:"queues"`
	Count     int           `json:"count"`
	CellBytes *int64        `json:"cellBytes"`
}

// wantAll checks that l lists exactly q000000 .. q(n-1), once each.
func wantAll(t *testing.T, l listed, n int) {
	t.Helper()
	if l.Count != n || len(l.Queues) != n || l.CellBytes == nil {
		t.Fatalf("count %d, %d queues listed, cellBytes %v; want %d", l.Count, len(l.Queues), l.CellBytes, n)
	}
	seen := make(map[string]bool, n)
	for _, q := range l.Queues {
		if seen[q.Queue] {
			t.Fatalf("%s listed twice", q.Queue)
		}
		seen[q.Queue] = true
		if q.Tier != "declared" {
			t.Fatalf("%s: tier %q", q.Queue, q.Tier)
		}
	}
	for i := range n {
		if name := fmt.Sprintf("q%06d", i); !seen[name] {
			t.Fatalf("%s is missing", name)
		}
	}
}

// The listing of a tenant with many queues is written as it is produced:
// the answer is complete, valid JSON with the right count, the bytes the
// server holds unsent for the connection stay under a bound far below the
// answer's size (while the client is not reading, too), and requests
// pipelined behind it are answered after it, in order. Before, the whole
// answer (about 50 MB here) was made and written at once, passed the
// connection's outbound limit, and the connection was closed.
func TestListingIsStreamed(t *testing.T) {
	n := 200_000
	if raceOn {
		n = 50_000 // still over 10 MB of answer
	}
	ts := startListServer(t, n)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := sampleOutbound(ts.s)
	fmt.Fprint(c, "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /api/v1/ephemeral/queues/q000007/depth HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(300 * time.Millisecond) // the client reads nothing yet: the socket fills
	r := bufio.NewReaderSize(c, 64<<10)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
		t.Fatalf("status %d, Transfer-Encoding %v, Content-Length %d: want 200, chunked, none", resp.StatusCode, resp.TransferEncoding, resp.ContentLength)
	}
	var l listed
	dec := json.NewDecoder(resp.Body)
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("the listing is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("bytes after the listing's JSON: %v", err)
	}
	resp.Body.Close()
	peak, looks := stop()
	wantAll(t, l, n)

	for i, want := range []string{`"status"`, `"queue":"q000007"`} {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("pipelined request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !json.Valid(b) || !bytes.Contains(b, []byte(want)) {
			t.Fatalf("pipelined request %d: %d %s", i, resp.StatusCode, b)
		}
	}

	const bound = 64 << 10
	if looks < 10 {
		t.Fatalf("only %d looks at the outbound buffer", looks)
	}
	if peak > bound || ts.s.listPeak.Load() > bound {
		t.Fatalf("the server held %d bytes unsent for the connection (after a chunk: %d); bound %d", peak, ts.s.listPeak.Load(), bound)
	}
	if !eventually(func() bool { return ts.s.listStreams.Load() == 0 }) {
		t.Fatalf("%d listings still under way", ts.s.listStreams.Load())
	}
	t.Logf("%d queues; %d looks; peak outbound %d bytes (after a chunk %d)", n, looks, peak, ts.s.listPeak.Load())
}

// An HTTP/1.0 client does not read chunks: a streamed listing has no
// length and ends with the connection.
func TestStreamedListingToHTTP10(t *testing.T) {
	const n = 1000 // over listWholeMax
	ts := startListServer(t, n)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /api/v1/ephemeral/queues HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.TransferEncoding) != 0 || resp.ContentLength != -1 || !resp.Close {
		t.Fatalf("Transfer-Encoding %v, Content-Length %d, close %v: want none, none, close", resp.TransferEncoding, resp.ContentLength, resp.Close)
	}
	var l listed
	b, err := io.ReadAll(resp.Body) // to the end of the connection
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	wantAll(t, l, n)
}

// A listing of at most listWholeMax queues is answered whole, on the loop,
// with a Content-Length and sorted by name, as before.
func TestSmallListingIsWhole(t *testing.T) {
	ts := startListServer(t, listWholeMax)
	resp, err := http.Get("http://" + ts.addr + "/api/v1/ephemeral/queues")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l listed
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength <= 0 || len(resp.TransferEncoding) != 0 {
		t.Fatalf("Content-Length %d, Transfer-Encoding %v", resp.ContentLength, resp.TransferEncoding)
	}
	wantAll(t, l, listWholeMax)
	if !sort.SliceIsSorted(l.Queues, func(i, j int) bool { return l.Queues[i].Queue < l.Queues[j].Queue }) {
		t.Fatal("a small listing is not sorted by name")
	}
	if ts.s.listPeak.Load() != 0 {
		t.Fatal("a small listing was streamed")
	}
}

// A client that goes away in the middle of a streamed listing ends it: the
// producer stops, and the server serves on.
func TestStreamedListingClientGoesAway(t *testing.T) {
	n := 100_000
	if raceOn {
		n = 20_000
	}
	ts := startListServer(t, n)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 4096)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !eventually(func() bool { return ts.s.listStreams.Load() == 0 }) {
		t.Fatal("the listing's producer did not stop after its client left")
	}
	if code, _ := ts.do(t, "GET", "/health", ""); code != 200 {
		t.Fatalf("/health after: %d", code)
	}
}

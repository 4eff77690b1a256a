package conformance

import (
	"fmt"
	"sync"
	"testing"
)

// TestStreamedListing: a tenant with more queues than are answered whole
// (256) gets its listing chunked, and it is the same listing: every queue
// once, with every key, the right count and cellBytes, over the real
// binary and a stock HTTP client (docs/server.md, the listing). A request
// on the same connection after it is served.
func TestStreamedListing(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	const n = 3000
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				b.push(t, fmt.Sprintf("inbox-%05d", i), "", `{"reply":true}`)
			}
		}()
	}
	wg.Wait()

	resp, err := b.httpClient().Get(b.url("/api/v1/ephemeral/queues"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
		t.Fatalf("Transfer-Encoding %v, Content-Length %d: want a chunked answer", resp.TransferEncoding, resp.ContentLength)
	}

	l := b.queues(t) // every key of every row, through the harness's checks
	if l.Count != n || len(l.Queues) != n {
		t.Fatalf("count %d, %d rows; want %d", l.Count, len(l.Queues), n)
	}
	seen := map[string]bool{}
	var held int64
	for _, q := range l.Queues {
		if seen[q.Queue] {
			t.Fatalf("%s listed twice", q.Queue)
		}
		seen[q.Queue] = true
		if q.Depth != 1 {
			t.Fatalf("%s: depth %d, want 1", q.Queue, q.Depth)
		}
		held += q.Bytes
	}
	payload := int64(len(`{"reply":true}`))
	if held != n*payload {
		t.Fatalf("the rows hold %d bytes, want %d", held, n*payload)
	}
	// cellBytes is the footprint: every queue's payload, its own charge,
	// its Default partition's and a ring of 2 slots (docs/engine.md, "What
	// the budgets count"; every name is inbox-NNNNN, 11 bytes).
	if want := held + n*(queueCharge("inbox-00000")+partitionCharge("Default")+ringCharge(1)); l.CellBytes != want {
		t.Fatalf("cellBytes %d, want %d (the rows' %d payload bytes and the charges)", l.CellBytes, want, held)
	}
	b.do(t, "GET", "/health", nil).want(t, 200, nil) // the connection serves on
}

//go:build reliability

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestListingMillion: a broker with a budget that holds a million implicit
// queues (2 GiB), the queues made by pipelined pushes of one byte, then
// GET /api/v1/ephemeral/queues read through a counting, streaming JSON
// decoder (this process never holds the answer) while RSS is sampled. The
// answer must be complete valid JSON with count = every queue, and the
// broker's RSS must grow by far less than the answer's size (a quarter at
// most): the listing is written out as it is produced (docs/server.md).
// Before the fixes: a listing of ~764 k queues closed the connection.
func TestListingMillion(t *testing.T) {
	const big = 2 << 30
	c := newCase(t, map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": fmt.Sprint(big)})
	n := scaledN(1_000_000, 20_000)
	const conns = 8
	made := newCodes()
	start := time.Now()
	flood(c.ctx, c.addr, conns, 64, made, func(conn int) func() []byte {
		i := conn
		return func() []byte {
			if i >= n {
				return nil
			}
			i += conns
			return pushReq(fmt.Sprintf("lm-%d", i-conns), "", 1, "1")
		}
	}, nil)
	c.f.Extra["queues"] = float64(n)
	c.f.Extra["createSeconds"] = time.Since(start).Seconds()
	c.checkCodes("push ", made, "201")
	if made.get("201") != int64(n) {
		t.Fatalf("%d of %d queues made: %v", made.get("201"), n, made.snapshot())
	}

	before := c.rss.mark()
	c.f.Extra["rssBeforeListingMiB"] = mib(before)
	lst, err := readListing(c.ctx, c.b.URL(), "lm-")
	peak := c.rss.peakRSS()
	c.f.Extra["listingMiB"] = mib(lst.size)
	c.f.Extra["listingSeconds"] = lst.took.Seconds()
	c.f.Extra["listingRSSGrowthMiB"] = mib(peak - before)
	c.f.Extra["listedRows"] = float64(lst.rows)
	switch {
	case err != nil:
		c.fail("reading the listing of %d queues: %v (after %.1f MiB, %d rows)", n, err, mib(lst.size), lst.rows)
	case lst.count != lst.rows || lst.prefixed != n:
		c.fail("listing: count %d, %d rows, %d of ours; want count = rows and %d of ours", lst.count, lst.rows, lst.prefixed, n)
	case peak-before > lst.size/4:
		c.fail("RSS grew %.0f MiB while writing a %.0f MiB listing; want at most a quarter of it (written as produced)", mib(peak-before), mib(lst.size))
	}
	c.endLoad()
}

type listingRead struct {
	size                  int64
	count, rows, prefixed int
	took                  time.Duration
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readListing reads GET /queues as a stream: one row decoded at a time, the
// rows counted (and those named with prefix), "count" read, every other
// member skipped. It fails on anything that is not a complete JSON object.
func readListing(ctx context.Context, base, prefix string) (out listingRead, err error) {
	start := time.Now()
	defer func() { out.took = time.Since(start) }()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/ephemeral/queues", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("status %d", resp.StatusCode)
	}
	cr := &countingReader{r: resp.Body}
	defer func() { out.size = cr.n.Load() }()
	dec := json.NewDecoder(cr)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return out, fmt.Errorf("want an object, got %v %v", tok, err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return out, err
		}
		switch key {
		case "queues":
			if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
				return out, fmt.Errorf("queues: want an array, got %v %v", tok, err)
			}
			for dec.More() {
				var row struct {
					Queue string `json:"queue"`
				}
				if err := dec.Decode(&row); err != nil {
					return out, err
				}
				out.rows++
				if strings.HasPrefix(row.Queue, prefix) {
					out.prefixed++
				}
			}
			if _, err := dec.Token(); err != nil {
				return out, err
			}
		case "count":
			if err := dec.Decode(&out.count); err != nil {
				return out, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return out, err
			}
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return out, fmt.Errorf("want the object's end, got %v %v", tok, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return out, fmt.Errorf("data after the object: %v", err)
	}
	return out, nil
}

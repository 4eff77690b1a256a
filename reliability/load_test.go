//go:build reliability

package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// codes counts answers by status and, for a refusal, its `code`: "201",
// "503 ephemeral_unavailable". A refusal whose body is not the spec's
// {"error","code"} counts as "<status> malformed".
type codes struct {
	mu sync.Mutex
	m  map[string]int64
}

func newCodes() *codes { return &codes{m: map[string]int64{}} }

func (c *codes) add(status int, body []byte) {
	key := strconv.Itoa(status)
	if status >= 300 {
		var e struct {
			Error *string `json:"error"`
			Code  *string `json:"code"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == nil || e.Code == nil || *e.Code == "" {
			key += " malformed"
		} else {
			key += " " + *e.Code
		}
	}
	c.addKey(key)
}

func (c *codes) addKey(key string) {
	c.mu.Lock()
	c.m[key]++
	c.mu.Unlock()
}

func (c *codes) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

func (c *codes) get(key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// unexpected lists the keys seen that are not in allowed.
func (c *codes) unexpected(allowed ...string) []string {
	var out []string
	for k, n := range c.snapshot() {
		if !slices.Contains(allowed, k) {
			out = append(out, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	sort.Strings(out)
	return out
}

// The answers docs/routes.md allows a push that a bound refuses
// (Refusals; D7): the queue's own bound, the tenant's allowance, the
// broker's total.
var pushAnswers = []string{"201", "429 queue_full", "403 ephemeral_quota_exceeded", "503 ephemeral_unavailable"}

// request is one HTTP/1.1 request in wire form.
func request(method, path string, body []byte, headers ...string) []byte {
	b := make([]byte, 0, 128+len(body))
	b = append(b, method+" "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n"...)
	for _, h := range headers {
		b = append(b, h+"\r\n"...)
	}
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// pushBody is a push of n copies of payload (raw JSON) to queue/partition.
// The names this suite makes need no escaping.
func pushBody(queue, partition string, n int, payload string) []byte {
	b := []byte(`{"queue":"` + queue + `"`)
	if partition != "" {
		b = append(b, `,"partition":"`+partition+`"`...)
	}
	b = append(b, `,"messages":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"payload":`+payload+`}`...)
	}
	return append(b, "]}"...)
}

func pushReq(queue, partition string, n int, payload string) []byte {
	return request("POST", "/api/v1/ephemeral/push", pushBody(queue, partition, n, payload))
}

// pipe is one keep-alive connection that pipelines requests: up to window
// of them unanswered, answers read in order as they come.
type pipe struct {
	c      net.Conn
	br     *bufio.Reader
	window int
}

func dialPipe(addr string, window int) (*pipe, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &pipe{c: c, br: bufio.NewReaderSize(c, 64<<10), window: window}, nil
}

func (p *pipe) Close() error { return p.c.Close() }

// run sends next()'s requests until ctx is done or next returns nil, with at
// most p.window unanswered, and hands every answer to onAnswer with its
// latency (from the write of its request). It returns once every request
// sent is answered, or on the first connection error. A broker that stops
// answering does not hang it: reads and writes time out 10 s after ctx ends
// or a write blocks.
func (p *pipe) run(ctx context.Context, next func() []byte, onAnswer func(status int, body []byte, lat time.Duration)) error {
	sem := make(chan struct{}, p.window)
	sent := make(chan time.Time, p.window)
	dead := make(chan struct{})
	var rerr error
	go func() {
		defer close(dead)
		for t0 := range sent {
			resp, err := http.ReadResponse(p.br, nil)
			if err != nil {
				rerr = err
				return
			}
			// Answers here are small; anything past 1 MiB is read and dropped,
			// so that the test process never holds a large answer.
			body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if err != nil {
				rerr = err
				return
			}
			onAnswer(resp.StatusCode, body, time.Since(t0))
			<-sem
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second)) })
	defer stop()
	var werr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-dead:
			break loop
		case sem <- struct{}{}:
		}
		req := next()
		if req == nil {
			break loop
		}
		sent <- time.Now() // never blocks: sem holds as many slots
		_ = p.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, werr = p.c.Write(req); werr != nil {
			break loop
		}
	}
	close(sent)
	<-dead
	if rerr != nil {
		return rerr
	}
	return werr
}

// flood runs conns pipes of window each against addr until ctx ends or
// every next returns nil; next(conn) makes the conn-th pipe's requests.
// Connection errors are counted under "conn error" in cs.
func flood(ctx context.Context, addr string, conns, window int, cs *codes,
	next func(conn int) func() []byte, onAnswer func(status int, body []byte, lat time.Duration)) {
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			p, err := dialPipe(addr, window)
			if err != nil {
				cs.addKey("conn error")
				return
			}
			defer p.Close()
			err = p.run(ctx, next(i), func(status int, body []byte, lat time.Duration) {
				cs.add(status, body)
				if onAnswer != nil {
					onAnswer(status, body, lat)
				}
			})
			if err != nil {
				cs.addKey("conn error")
			}
		})
	}
	wg.Wait()
}

// tenths records latencies with the time they started at, to compare the
// cost of an operation at the start and at the end of a flood: the span
// from the first to the last sample is cut in tenths afterwards, so a flood
// that ends early (a count reached) still has a last tenth.
type tenths struct {
	start time.Time
	mu    sync.Mutex
	at    []time.Duration // since start
	lat   []time.Duration
}

func newTenths() *tenths { return &tenths{start: time.Now()} }

func (t *tenths) add(lat time.Duration) {
	at := time.Since(t.start)
	t.mu.Lock()
	t.at = append(t.at, at)
	t.lat = append(t.lat, lat)
	t.mu.Unlock()
}

// firstLast is the p50 latency and the rate of the first and last tenths.
func (t *tenths) firstLast() (p50First, p50Last time.Duration, rateFirst, rateLast float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.at) == 0 {
		return 0, 0, 0, 0
	}
	span := slices.Max(t.at)
	var first, last []time.Duration
	for i, at := range t.at {
		switch {
		case at < span/10:
			first = append(first, t.lat[i])
		case at >= span-span/10:
			last = append(last, t.lat[i])
		}
	}
	tenth := (span / 10).Seconds()
	return percentile(first, 0.5), percentile(last, 0.5), float64(len(first)) / tenth, float64(len(last)) / tenth
}

// percentile sorts d in place and returns its q-th quantile (0 when empty).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

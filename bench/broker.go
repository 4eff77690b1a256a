package bench

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/queenmq/ephemeral/bench/internal/rawhttp"
)

// broker drives the broker over HTTP/1.1 keep-alive connections with the
// raw client, one connection per worker, pipelining where the protocol
// allows (a push and the pop that follows it leave in one write).
type broker struct {
	addr, ns string
	respAddr string // the responders' (reqreply); addr when not set
	token    string // sent as a bearer token on every request (-token); empty: none
	size     int
}

const (
	pushPath = "/api/v1/ephemeral/push"
	ackPath  = "/api/v1/ephemeral/ack"
)

func newBroker(cfg *Config) (*broker, error) {
	b := &broker{addr: cfg.Addr, respAddr: cfg.RespAddr, ns: cfg.NS, token: cfg.Token, size: cfg.Size}
	if b.respAddr == "" {
		b.respAddr = b.addr
	}
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	defer c.CloseConn()
	c.WriteGet([]byte("/health"))
	if err := c.Flush(); err != nil {
		return nil, err
	}
	status, body, err := c.Read()
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("/health answered %d %s", status, body)
	}
	return b, nil
}

func (b *broker) close() {}

func (b *broker) dial(bufSize int) (*rawhttp.Conn, error) { return b.dialAt(b.addr, bufSize) }

// dialAt connects to addr with the run's bearer token set.
func (b *broker) dialAt(addr string, bufSize int) (*rawhttp.Conn, error) {
	c, err := rawhttp.Dial(addr, bufSize)
	if err != nil {
		return nil, err
	}
	c.SetBearer(b.token)
	return c, nil
}

func (b *broker) queue(name string) string { return b.ns + "-" + name }

// popTarget is the path and query of a pop.
func popTarget(queue, group string, batch, timeoutMs int, autoAck bool) []byte {
	s := "/api/v1/ephemeral/pop?queue=" + queue + "&batch=" + strconv.Itoa(batch)
	if group != "" {
		s += "&group=" + group
	}
	if timeoutMs > 0 {
		s += "&wait=true&timeout=" + strconv.Itoa(timeoutMs)
	}
	if autoAck {
		s += "&autoAck=true"
	}
	return []byte(s)
}

// appendPush appends a push body of payloads (each raw JSON) to queue.
func appendPush(dst []byte, queue, partition string, payloads ...[]byte) []byte {
	dst = append(dst, `{"queue":"`...)
	dst = append(dst, queue...)
	if partition != "" {
		dst = append(dst, `","partition":"`...)
		dst = append(dst, partition...)
	}
	dst = append(dst, `","messages":[`...)
	for i, p := range payloads {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"payload":`...)
		dst = append(dst, p...)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// expect reads one answer and checks its status.
func expect(c *rawhttp.Conn, want int) ([]byte, error) {
	status, body, err := c.Read()
	if err != nil {
		return nil, err
	}
	if status != want {
		return nil, fmt.Errorf("answered %d (want %d): %s", status, want, body)
	}
	return body, nil
}

func countMessages(body []byte) (int, error) { return eachMessage(body, func(_, _ []byte) {}) }

// closeOnDone closes c when ctx ends, which ends a Read parked on it; the
// returned function stops the watch.
func closeOnDone(ctx context.Context, c *rawhttp.Conn) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			c.CloseConn()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// --- reqreply ---

type brokerRequester struct {
	c    *rawhttp.Conn
	head []byte // the push body up to the payload
	body []byte
	pop  []byte
	// With a fresh inbox per round trip (-inbox request), head and pop end
	// where the inbox name goes; it is prefix followed by seq.
	fresh       bool
	prefix      []byte
	seq         uint64
	headN, popN int // the fixed parts' lengths
}

func (b *broker) rrRequester(id int, fresh bool) (requester, error) {
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	if fresh {
		// inbox-<id>-<seq>: a name nobody declared, used once, left for the
		// broker's idle collector (example 36's model).
		r := &brokerRequester{
			c:      c,
			fresh:  true,
			prefix: []byte(b.queue("inbox-" + strconv.Itoa(id) + "-")),
			head:   []byte(`{"queue":"` + b.queue("requests") + `","messages":[{"payload":{"inbox":"`),
			pop:    []byte("/api/v1/ephemeral/pop?batch=1&wait=true&timeout=30000&autoAck=true&queue="),
		}
		r.headN, r.popN = len(r.head), len(r.pop)
		return r, nil
	}
	inbox := b.queue("inbox-" + strconv.Itoa(id))
	return &brokerRequester{
		c:    c,
		head: []byte(`{"queue":"` + b.queue("requests") + `","messages":[{"payload":{"inbox":"` + inbox + `","data":`),
		pop:  popTarget(inbox, "", 1, 30000, true),
	}, nil
}

func (r *brokerRequester) roundTrip(payload []byte) error {
	if r.fresh {
		r.seq++
		r.head = strconv.AppendUint(append(r.head[:r.headN], r.prefix...), r.seq, 10)
		r.pop = strconv.AppendUint(append(r.pop[:r.popN], r.prefix...), r.seq, 10)
		r.body = append(append(append(append(r.body[:0], r.head...), `","data":`...), payload...), "}}]}"...)
	} else {
		r.body = append(append(append(r.body[:0], r.head...), payload...), "}}]}"...)
	}
	r.c.WritePost(pushPath, r.body)
	r.c.WriteGet(r.pop)
	if err := r.c.Flush(); err != nil {
		return err
	}
	if _, err := expect(r.c, 201); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	for {
		body, err := expect(r.c, 200)
		if err != nil {
			return fmt.Errorf("pop: %w", err)
		}
		if n, err := countMessages(body); err != nil || n > 0 {
			return err
		}
		r.c.WriteGet(r.pop) // timed out empty: wait again
		if err := r.c.Flush(); err != nil {
			return err
		}
	}
}

func (r *brokerRequester) close() { r.c.CloseConn() }

// splitRequest reads {"inbox":"NAME","data":DATA}, the request payload.
func splitRequest(p []byte) (inbox, data []byte, ok bool) {
	const pre, mid = `{"inbox":"`, `","data":`
	if !bytes.HasPrefix(p, []byte(pre)) || p[len(p)-1] != '}' {
		return nil, nil, false
	}
	rest := p[len(pre) : len(p)-1]
	i := bytes.Index(rest, []byte(mid))
	if i < 0 {
		return nil, nil, false
	}
	return rest[:i], rest[i+len(mid):], true
}

func (b *broker) rrServe(ctx context.Context, id, batch int, ready func()) error {
	c, err := b.dialAt(b.respAddr, 0)
	if err != nil {
		return err
	}
	defer c.CloseConn()
	defer closeOnDone(ctx, c)()
	pop := popTarget(b.queue("requests"), "", batch, 1000, true)
	var buf []byte
	c.WriteGet(pop)
	if err := c.Flush(); err != nil {
		return err
	}
	ready() // requests sent before the pop parks wait in the queue
	for {
		body, err := expect(c, 200)
		if err != nil {
			return fmt.Errorf("pop: %w", err)
		}
		var bad error
		n, err := eachMessage(body, func(_, p []byte) {
			inbox, data, ok := splitRequest(p)
			if !ok {
				bad = fmt.Errorf("a request payload the responder cannot read: %.80s", p)
				return
			}
			buf = appendPush(buf[:0], string(inbox), "", data)
			c.WritePost(pushPath, buf)
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			return err
		}
		c.WriteGet(pop) // the next pop leaves with the replies
		if err := c.Flush(); err != nil {
			return err
		}
		for range n {
			if _, err := expect(c, 201); err != nil {
				return fmt.Errorf("reply push: %w", err)
			}
		}
	}
}

// --- throughput and fanout ---

type brokerPusher struct {
	c                *rawhttp.Conn
	queue, partition string
	buf              []byte
}

type brokerTaker struct {
	c            *rawhttp.Conn
	pop          []byte
	queue, group string
	explicit     bool   // acks each batch (throughput); fanout pops with autoAck
	ack          []byte // the ack body of the last batch, sent with the next pop
	nAck         int
}

func (b *broker) flowQueue(kind flowKind) string {
	if kind == kindFanout {
		return b.queue("fanout")
	}
	return b.queue("throughput")
}

func (b *broker) flowSetup(flowKind, int, int) error { return nil }

func (b *broker) flowTeardown(kind flowKind) {
	c, err := b.dial(0)
	if err != nil {
		return
	}
	defer c.CloseConn()
	c.WritePost("/api/v1/ephemeral/reset", []byte(`{"queue":"`+b.flowQueue(kind)+`"}`))
	if c.Flush() == nil {
		_, _, _ = c.Read()
	}
}

func (b *broker) flowPusher(kind flowKind, id int) (pusher, error) {
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	p := &brokerPusher{c: c, queue: b.flowQueue(kind)}
	if kind == kindThroughput {
		p.partition = "p" + strconv.Itoa(id) // partitions do not contend (P4); leases are per partition (D1)
	}
	return p, nil
}

func (p *brokerPusher) push(payloads [][]byte) (bool, error) {
	p.buf = appendPush(p.buf[:0], p.queue, p.partition, payloads...)
	p.c.WritePost(pushPath, p.buf)
	if err := p.c.Flush(); err != nil {
		return false, err
	}
	status, body, err := p.c.Read()
	switch {
	case err != nil:
		return false, err
	case status == 201:
		return false, nil
	case status == 429 && bytes.Contains(body, []byte("queue_full")):
		return true, nil
	}
	return false, fmt.Errorf("push answered %d: %s", status, body)
}

func (p *brokerPusher) close() { p.c.CloseConn() }

func (b *broker) flowTaker(kind flowKind, id, group int) (taker, error) {
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	t := &brokerTaker{c: c, queue: b.flowQueue(kind), group: "g" + strconv.Itoa(group), explicit: kind == kindThroughput}
	return t, nil
}

func (t *brokerTaker) take(max int, fn func([]byte)) (int, error) {
	if t.pop == nil {
		t.pop = popTarget(t.queue, t.group, max, 500, !t.explicit)
	}
	acked := t.nAck > 0
	if acked {
		t.c.WritePost(ackPath, append(t.ack, "]}"...))
	}
	t.c.WriteGet(t.pop)
	if err := t.c.Flush(); err != nil {
		return 0, err
	}
	if acked {
		if _, err := expect(t.c, 200); err != nil {
			return 0, fmt.Errorf("ack: %w", err)
		}
	}
	body, err := expect(t.c, 200)
	if err != nil {
		return 0, fmt.Errorf("pop: %w", err)
	}
	t.ack = append(t.ack[:0], `{"queue":"`+t.queue+`","group":"`+t.group+`","acks":[`...)
	t.nAck = 0
	return eachMessage(body, func(id, p []byte) {
		fn(p)
		if t.explicit {
			if t.nAck > 0 {
				t.ack = append(t.ack, ',')
			}
			t.ack = append(append(append(t.ack, `{"id":"`...), id...), `"}`...)
			t.nAck++
		}
	})
}

func (t *brokerTaker) close() {
	if t.nAck > 0 { // settle the last batch
		t.c.WritePost(ackPath, append(t.ack, "]}"...))
		if t.c.Flush() == nil {
			_, _, _ = t.c.Read()
		}
	}
	t.c.CloseConn()
}

// --- inboxes ---

type brokerInboxer struct {
	b       *broker
	c       *rawhttp.Conn
	buf     []byte
	payload []byte
}

func (b *broker) inboxName(i int) string { return b.queue("box-" + strconv.Itoa(i)) }

func (b *broker) inboxer(int) (inboxer, error) {
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	return &brokerInboxer{b: b, c: c, payload: stamp(nil, b.size, 0)}, nil
}

func (w *brokerInboxer) use(ids []int) error {
	for _, i := range ids {
		name := w.b.inboxName(i)
		w.buf = appendPush(w.buf[:0], name, "", w.payload)
		w.c.WritePost(pushPath, w.buf)
		w.c.WriteGet(popTarget(name, "", 1, 0, true))
	}
	if err := w.c.Flush(); err != nil {
		return err
	}
	for range ids {
		if _, err := expect(w.c, 201); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		body, err := expect(w.c, 200)
		if err != nil {
			return fmt.Errorf("pop: %w", err)
		}
		if n, err := countMessages(body); err != nil || n != 1 {
			return fmt.Errorf("an inbox pop took %d messages (%v): %s", n, err, body)
		}
	}
	return nil
}

func (w *brokerInboxer) release() error { return nil }
func (w *brokerInboxer) close()         { w.c.CloseConn() }

func (b *broker) inboxGone(i int) (bool, error) {
	return b.queueGone(b.inboxName(i))
}

// queueGone asks the depth read: 404 means the queue is not there.
func (b *broker) queueGone(name string) (bool, error) {
	c, err := b.dial(0)
	if err != nil {
		return false, err
	}
	defer c.CloseConn()
	c.WriteGet([]byte("/api/v1/ephemeral/queues/" + name + "/depth"))
	if err := c.Flush(); err != nil {
		return false, err
	}
	status, body, err := c.Read()
	switch {
	case err != nil:
		return false, err
	case status == 404:
		return true, nil
	case status == 200:
		return false, nil
	}
	return false, fmt.Errorf("depth read answered %d: %s", status, body)
}

// --- parked ---

func (b *broker) parkNeedsConns() bool { return true }

func (b *broker) parkName(i int) string { return b.queue("park-" + strconv.Itoa(i)) }

func (b *broker) park(ctx context.Context, n int, woke func(int)) (func(), error) {
	conns := make([]*rawhttp.Conn, n)
	release := func() {
		for _, c := range conns {
			if c != nil {
				c.CloseConn()
			}
		}
	}
	const dialers = 8
	var wg sync.WaitGroup
	errs := make([]error, dialers)
	for d := range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n && ctx.Err() == nil; i += dialers {
				c, err := b.dial(512)
				if err != nil {
					errs[d] = fmt.Errorf("connection %d: %w", i, err)
					return
				}
				conns[i] = c
				c.WriteGet(popTarget(b.parkName(i), "", 1, 300000, true))
				if err := c.Flush(); err != nil {
					errs[d] = err
					return
				}
				go func() {
					body, err := expect(c, 200)
					if err == nil {
						if k, err := countMessages(body); err == nil && k == 1 {
							woke(i)
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			release()
			return nil, err
		}
	}
	// The pops were sent; wait until the broker holds the last ones (a
	// parked pop's inbox exists).
	for i := max(0, n-dialers); i < n; i++ {
		for {
			gone, err := b.queueGone(b.parkName(i))
			if err != nil {
				release()
				return nil, err
			}
			if !gone {
				break
			}
			if ctx.Err() != nil {
				release()
				return nil, ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return release, nil
}

type brokerWaker struct {
	b       *broker
	c       *rawhttp.Conn
	buf     []byte
	payload []byte
}

func (b *broker) waker(int) (waker, error) {
	c, err := b.dial(0)
	if err != nil {
		return nil, err
	}
	return &brokerWaker{b: b, c: c, payload: stamp(nil, b.size, 0)}, nil
}

func (w *brokerWaker) wake(ids []int) error {
	for _, i := range ids {
		w.buf = appendPush(w.buf[:0], w.b.parkName(i), "", w.payload)
		w.c.WritePost(pushPath, w.buf)
	}
	if err := w.c.Flush(); err != nil {
		return err
	}
	for range ids {
		if _, err := expect(w.c, 201); err != nil {
			return fmt.Errorf("push: %w", err)
		}
	}
	return nil
}

func (w *brokerWaker) close() { w.c.CloseConn() }

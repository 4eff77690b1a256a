package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// natsT drives NATS with nats.go: core request/reply with a queue group of
// responders, JetStream (memory storage, a work-queue stream and one
// durable pull consumer) for throughput, plain subscribers for fan-out,
// and a subscription per inbox or parked waiter.
type natsT struct {
	url, ns string
	size    int
	admin   *nats.Conn
}

func newNATS(cfg *Config) (*natsT, error) {
	t := &natsT{url: "nats://" + cfg.Addr, ns: cfg.NS, size: cfg.Size}
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	t.admin = nc
	return t, nil
}

func (t *natsT) connect() (*nats.Conn, error) {
	return nats.Connect(t.url, nats.Name("queenbench"), nats.NoReconnect(), nats.Timeout(10*time.Second))
}

func (t *natsT) close() { t.admin.Close() }

func (t *natsT) subject(name string) string { return t.ns + "." + name }

// --- reqreply ---

type natsRequester struct {
	nc   *nats.Conn
	subj string
}

// rrRequester ignores fresh: nc.Request always waits on a fresh reply
// subject per request (muxed on one wildcard subscription of the
// connection, nats.go's default), so both -inbox modes are the same here.
func (t *natsT) rrRequester(int, bool) (requester, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	return &natsRequester{nc: nc, subj: t.subject("requests")}, nil
}

func (q *natsRequester) roundTrip(payload []byte) error {
	_, err := q.nc.Request(q.subj, payload, 30*time.Second)
	return err
}

func (q *natsRequester) close() { q.nc.Close() }

// rrServe is one member of the "responders" queue group: NATS hands each
// request to one member, which answers on the request's reply subject.
// NATS has no batch to take, so batch is unused.
func (t *natsT) rrServe(ctx context.Context, _, _ int, ready func()) error {
	nc, err := t.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	var once sync.Once
	var failed error
	sub, err := nc.QueueSubscribe(t.subject("requests"), "responders", func(m *nats.Msg) {
		if err := m.Respond(m.Data); err != nil {
			once.Do(func() { failed = err })
		}
	})
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil { // the server has the subscription
		return err
	}
	ready()
	<-ctx.Done()
	return failed
}

// --- throughput: JetStream; fanout: core subjects ---

func (t *natsT) stream() string { return t.ns + "_throughput" }

func (t *natsT) flowSetup(kind flowKind, _, _ int) error {
	if kind != kindThroughput {
		return nil
	}
	js, err := t.admin.JetStream()
	if err != nil {
		return err
	}
	if _, err := js.AddStream(&nats.StreamConfig{
		Name:      t.stream(),
		Subjects:  []string{t.subject("throughput.>")},
		Storage:   nats.MemoryStorage,
		Retention: nats.WorkQueuePolicy, // an acked message is deleted, as a queue does
	}); err != nil {
		return fmt.Errorf("add a memory stream: %w", err)
	}
	_, err = js.AddConsumer(t.stream(), &nats.ConsumerConfig{
		Durable:       "g0",
		AckPolicy:     nats.AckExplicitPolicy,
		MaxAckPending: 1 << 20,
		AckWait:       30 * time.Second,
	})
	return err
}

func (t *natsT) flowTeardown(kind flowKind) {
	if kind != kindThroughput {
		return
	}
	if js, err := t.admin.JetStream(); err == nil {
		_ = js.DeleteStream(t.stream())
	}
}

type natsPusher struct {
	nc   *nats.Conn
	js   nats.JetStreamContext
	subj string
}

func (t *natsT) flowPusher(kind flowKind, id int) (pusher, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	p := &natsPusher{nc: nc, subj: t.subject("fanout")}
	if kind == kindThroughput {
		if p.js, err = nc.JetStream(nats.PublishAsyncMaxPending(1 << 16)); err != nil {
			nc.Close()
			return nil, err
		}
		p.subj = t.subject("throughput." + strconv.Itoa(id))
	}
	return p, nil
}

// push publishes the batch: to JetStream asynchronously, then waits for
// every acknowledgement (stored, as the broker's 201 says); to a core
// subject, then flushes with a PING/PONG round trip.
func (p *natsPusher) push(payloads [][]byte) (bool, error) {
	if p.js == nil {
		for _, pl := range payloads {
			if err := p.nc.Publish(p.subj, pl); err != nil {
				return false, err
			}
		}
		return false, p.nc.Flush()
	}
	futures := make([]nats.PubAckFuture, len(payloads))
	for i, pl := range payloads {
		f, err := p.js.PublishAsync(p.subj, pl)
		if err != nil {
			return false, err
		}
		futures[i] = f
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return false, errors.New("JetStream did not acknowledge a batch within 30 s")
	}
	for _, f := range futures {
		select {
		case err := <-f.Err():
			return false, err
		default:
		}
	}
	return false, nil
}

func (p *natsPusher) close() { p.nc.Close() }

type natsTaker struct {
	nc  *nats.Conn
	sub *nats.Subscription
	ch  chan *nats.Msg // fanout
}

func (t *natsT) flowTaker(kind flowKind, _, _ int) (taker, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	tk := &natsTaker{nc: nc}
	if kind == kindThroughput {
		js, err := nc.JetStream()
		if err == nil {
			tk.sub, err = js.PullSubscribe(t.subject("throughput.>"), "g0", nats.Bind(t.stream(), "g0"))
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
		return tk, nil
	}
	tk.ch = make(chan *nats.Msg, 1<<16) // above the credit window: no slow-consumer drops
	if tk.sub, err = nc.ChanSubscribe(t.subject("fanout"), tk.ch); err != nil {
		nc.Close()
		return nil, err
	}
	return tk, nil
}

func (tk *natsTaker) take(max int, fn func([]byte)) (int, error) {
	if tk.ch == nil {
		msgs, err := tk.sub.Fetch(max, nats.MaxWait(500*time.Millisecond))
		if errors.Is(err, nats.ErrTimeout) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		for _, m := range msgs {
			fn(m.Data)
			if err := m.Ack(); err != nil {
				return 0, err
			}
		}
		return len(msgs), nil
	}
	n := 0
	select {
	case m := <-tk.ch:
		fn(m.Data)
		n++
	case <-time.After(500 * time.Millisecond):
		return 0, nil
	}
	for n < max {
		select {
		case m := <-tk.ch:
			fn(m.Data)
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

func (tk *natsTaker) close() { tk.nc.Close() }

// --- inboxes: a subscription per inbox, held until released ---

type natsInboxer struct {
	t       *natsT
	nc      *nats.Conn
	ch      chan *nats.Msg
	subs    []*nats.Subscription
	payload []byte
}

func (t *natsT) inboxName(i int) string { return t.subject("box." + strconv.Itoa(i)) }

func (t *natsT) inboxer(int) (inboxer, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	return &natsInboxer{t: t, nc: nc, ch: make(chan *nats.Msg, 1024), payload: stamp(nil, t.size, 0)}, nil
}

func (w *natsInboxer) use(ids []int) error {
	for _, i := range ids {
		sub, err := w.nc.ChanSubscribe(w.t.inboxName(i), w.ch)
		if err != nil {
			return err
		}
		w.subs = append(w.subs, sub)
	}
	if err := w.nc.Flush(); err != nil { // the server has the subscriptions
		return err
	}
	for _, i := range ids {
		if err := w.nc.Publish(w.t.inboxName(i), w.payload); err != nil {
			return err
		}
	}
	if err := w.nc.Flush(); err != nil {
		return err
	}
	for range ids {
		select {
		case <-w.ch:
		case <-time.After(10 * time.Second):
			return errors.New("an inbox message did not arrive within 10 s")
		}
	}
	return nil
}

func (w *natsInboxer) release() error {
	for _, s := range w.subs {
		if err := s.Unsubscribe(); err != nil {
			return err
		}
	}
	w.subs = nil
	return w.nc.Flush()
}

func (w *natsInboxer) close() { w.nc.Close() }

// inboxGone: a NATS inbox is the subscription, and release dropped it.
func (t *natsT) inboxGone(int) (bool, error) { return true, nil }

// --- parked: a subscription per waiter, many to a connection ---

func (t *natsT) parkNeedsConns() bool { return false }

func (t *natsT) parkName(i int) string { return t.subject("park." + strconv.Itoa(i)) }

const natsSubsPerConn = 2000

func (t *natsT) park(ctx context.Context, n int, woke func(int)) (func(), error) {
	var conns []*nats.Conn
	done := make(chan struct{})
	release := func() {
		close(done)
		for _, nc := range conns {
			nc.Close()
		}
	}
	prefix := t.subject("park.")
	for from := 0; from < n; from += natsSubsPerConn {
		nc, err := t.connect()
		if err != nil {
			release()
			return nil, err
		}
		conns = append(conns, nc)
		ch := make(chan *nats.Msg, natsSubsPerConn)
		for i := from; i < min(from+natsSubsPerConn, n); i++ {
			if _, err := nc.ChanSubscribe(t.parkName(i), ch); err != nil {
				release()
				return nil, err
			}
		}
		if err := nc.Flush(); err != nil {
			release()
			return nil, err
		}
		go func() {
			for {
				select {
				case m := <-ch:
					if i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, prefix)); err == nil {
						woke(i)
					}
				case <-done:
					return
				}
			}
		}()
	}
	return release, ctx.Err()
}

type natsWaker struct {
	t       *natsT
	nc      *nats.Conn
	payload []byte
}

func (t *natsT) waker(int) (waker, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	return &natsWaker{t: t, nc: nc, payload: stamp(nil, t.size, 0)}, nil
}

func (w *natsWaker) wake(ids []int) error {
	for _, i := range ids {
		if err := w.nc.Publish(w.t.parkName(i), w.payload); err != nil {
			return err
		}
	}
	return w.nc.Flush()
}

func (w *natsWaker) close() { w.nc.Close() }

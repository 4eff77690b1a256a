package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisT drives Redis with go-redis: lists for request/reply (RPUSH, BLPOP),
// batches (RPUSH of many values, BLMPOP with a count), inboxes and parked
// pops; a stream with consumer groups (XADD, XREADGROUP) for fan-out.
type redisT struct {
	addr, ns string
	size     int
	window   int
	ctx      context.Context
	admin    *redis.Client
}

func newRedis(cfg *Config) (*redisT, error) {
	r := &redisT{addr: cfg.Addr, ns: cfg.NS, size: cfg.Size, window: cfg.Window, ctx: context.Background()}
	r.admin = r.client(4)
	if err := r.admin.Ping(r.ctx).Err(); err != nil {
		r.admin.Close()
		return nil, err
	}
	return r, nil
}

// client is a go-redis client with a pool of up to size connections.
func (r *redisT) client(size int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     r.addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		PoolSize:                 size,
		MaxRetries:               -1,
		ReadTimeout:              10 * time.Second,
		DialTimeout:              10 * time.Second,
		PoolTimeout:              30 * time.Second,
	})
}

func (r *redisT) key(name string) string { return r.ns + ":" + name }

// close deletes every key of the run.
func (r *redisT) close() {
	var keys []string
	iter := r.admin.Scan(r.ctx, 0, r.ns+":*", 1000).Iterator()
	for iter.Next(r.ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			r.admin.Del(r.ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		r.admin.Del(r.ctx, keys...)
	}
	r.admin.Close()
}

// view is s's bytes, for a callee that only reads them.
func view(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// --- reqreply ---

type redisRequester struct {
	c             *redis.Client
	pipe          redis.Pipeliner
	reqKey, inbox string
	ctx           context.Context
	// With a fresh key per round trip (-inbox request) the reply key is
	// inbox followed by seq, and buf builds it and the request.
	fresh bool
	seq   uint64
	buf   []byte
}

func (r *redisT) rrRequester(id int, fresh bool) (requester, error) {
	c := r.client(1)
	q := &redisRequester{c: c, pipe: c.Pipeline(), reqKey: r.key("requests"), inbox: r.key("inbox:" + strconv.Itoa(id)), ctx: r.ctx, fresh: fresh}
	if fresh {
		q.inbox += ":"
	}
	return q, nil
}

// roundTrip pipelines RPUSH requests "<inbox>|<payload>" and BLPOP inbox.
// With a fresh key per request, the key is used once: BLPOP takes its only
// element and Redis deletes a list when it empties, so no key lingers and
// no EXPIRE is needed; a reply that came after its requester gave up is
// swept with the run's other keys by close.
func (q *redisRequester) roundTrip(payload []byte) error {
	inbox := q.inbox
	if q.fresh {
		q.seq++
		q.buf = strconv.AppendUint(append(q.buf[:0], q.inbox...), q.seq, 10)
		inbox = string(q.buf)
	}
	q.pipe.RPush(q.ctx, q.reqKey, inbox+"|"+string(payload))
	pop := q.pipe.BLPop(q.ctx, 30*time.Second, inbox)
	if _, err := q.pipe.Exec(q.ctx); err != nil {
		return err
	}
	if v := pop.Val(); len(v) != 2 {
		return fmt.Errorf("BLPOP answered %q", v)
	}
	return nil
}

func (q *redisRequester) close() { q.c.Close() }

func (r *redisT) rrServe(ctx context.Context, id, batch int, ready func()) error {
	c := r.client(1)
	defer c.Close()
	ready()
	reqKey := r.key("requests")
	pipe := c.Pipeline()
	for ctx.Err() == nil {
		_, vals, err := c.BLMPop(ctx, time.Second, "left", int64(batch), reqKey).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return err
		}
		for _, v := range vals {
			inbox, data, ok := strings.Cut(v, "|")
			if !ok {
				return fmt.Errorf("a request the responder cannot read: %.80q", v)
			}
			pipe.RPush(ctx, inbox, data)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// --- throughput (a list) and fanout (a stream) ---

func (r *redisT) flowKey(kind flowKind) string {
	if kind == kindFanout {
		return r.key("fanout")
	}
	return r.key("throughput")
}

func (r *redisT) flowSetup(kind flowKind, _, groups int) error {
	if kind != kindFanout {
		return nil
	}
	for g := range groups {
		if err := r.admin.XGroupCreateMkStream(r.ctx, r.flowKey(kind), "g"+strconv.Itoa(g), "0").Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r *redisT) flowTeardown(kind flowKind) { r.admin.Del(r.ctx, r.flowKey(kind)) }

type redisPusher struct {
	c      *redis.Client
	pipe   redis.Pipeliner
	key    string
	stream bool
	maxLen int64
	args   []any
	ctx    context.Context
}

func (r *redisT) flowPusher(kind flowKind, _ int) (pusher, error) {
	c := r.client(1)
	// The stream is trimmed well behind the slowest group: the credit
	// window keeps every group within r.window entries of the head.
	return &redisPusher{c: c, pipe: c.Pipeline(), key: r.flowKey(kind), stream: kind == kindFanout, maxLen: int64(4 * r.window), ctx: r.ctx}, nil
}

func (p *redisPusher) push(payloads [][]byte) (bool, error) {
	if p.stream { // XADD takes one entry: pipeline them
		for _, pl := range payloads {
			p.pipe.XAdd(p.ctx, &redis.XAddArgs{Stream: p.key, MaxLen: p.maxLen, Approx: true, Values: []any{"p", pl}})
		}
		_, err := p.pipe.Exec(p.ctx)
		return false, err
	}
	p.args = p.args[:0]
	for _, pl := range payloads {
		p.args = append(p.args, pl)
	}
	return false, p.c.RPush(p.ctx, p.key, p.args...).Err()
}

func (p *redisPusher) close() { p.c.Close() }

type redisTaker struct {
	c        *redis.Client
	key      string
	group    string
	consumer string
	stream   bool
	ctx      context.Context
}

func (r *redisT) flowTaker(kind flowKind, id, group int) (taker, error) {
	return &redisTaker{c: r.client(1), key: r.flowKey(kind), group: "g" + strconv.Itoa(group),
		consumer: "c" + strconv.Itoa(id), stream: kind == kindFanout, ctx: r.ctx}, nil
}

func (t *redisTaker) take(max int, fn func([]byte)) (int, error) {
	if t.stream { // NOACK: delivery is the settlement, as with the broker's autoAck
		res, err := t.c.XReadGroup(t.ctx, &redis.XReadGroupArgs{Group: t.group, Consumer: t.consumer,
			Streams: []string{t.key, ">"}, Count: int64(max), Block: 500 * time.Millisecond, NoAck: true}).Result()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		n := 0
		for _, s := range res {
			for _, m := range s.Messages {
				if v, ok := m.Values["p"].(string); ok {
					fn(view(v))
				}
				n++
			}
		}
		return n, nil
	}
	_, vals, err := t.c.BLMPop(t.ctx, time.Second, "left", int64(max), t.key).Result() // whole seconds only
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, v := range vals {
		fn(view(v))
	}
	return len(vals), nil
}

func (t *redisTaker) close() { t.c.Close() }

// --- inboxes: a list per inbox, which Redis deletes once it is empty ---

type redisInboxer struct {
	r       *redisT
	c       *redis.Client
	pipe    redis.Pipeliner
	payload []byte
	pops    []*redis.StringCmd
}

func (r *redisT) inboxName(i int) string { return r.key("box:" + strconv.Itoa(i)) }

func (r *redisT) inboxer(int) (inboxer, error) {
	c := r.client(1)
	return &redisInboxer{r: r, c: c, pipe: c.Pipeline(), payload: stamp(nil, r.size, 0)}, nil
}

func (w *redisInboxer) use(ids []int) error {
	w.pops = w.pops[:0]
	for _, i := range ids {
		name := w.r.inboxName(i)
		w.pipe.RPush(w.r.ctx, name, w.payload)
		w.pops = append(w.pops, w.pipe.LPop(w.r.ctx, name))
	}
	if _, err := w.pipe.Exec(w.r.ctx); err != nil {
		return err
	}
	for _, p := range w.pops {
		if p.Val() == "" {
			return fmt.Errorf("LPOP of an inbox took nothing")
		}
	}
	return nil
}

func (w *redisInboxer) release() error { return nil }
func (w *redisInboxer) close()         { w.c.Close() }

func (r *redisT) inboxGone(i int) (bool, error) {
	n, err := r.admin.Exists(r.ctx, r.inboxName(i)).Result()
	return n == 0, err
}

// --- parked: BLPOP on a list per waiter, a connection each ---

func (r *redisT) parkNeedsConns() bool { return true }

func (r *redisT) parkName(i int) string { return r.key("park:" + strconv.Itoa(i)) }

func (r *redisT) park(ctx context.Context, n int, woke func(int)) (func(), error) {
	c := r.client(n + 8)
	var wg sync.WaitGroup
	release := func() {
		c.Close() // ends any BLPOP still waiting
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.BLPop(r.ctx, 290*time.Second, r.parkName(i)).Result()
			if err == nil && len(v) == 2 {
				woke(i)
			}
		}()
	}
	// Wait until Redis reports every waiter blocked.
	for {
		info, err := r.admin.Info(r.ctx, "clients").Result()
		if err != nil {
			release()
			return nil, err
		}
		if blockedClients(info) >= n {
			return release, nil
		}
		if ctx.Err() != nil {
			release()
			return nil, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func blockedClients(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

type redisWaker struct {
	r       *redisT
	c       *redis.Client
	pipe    redis.Pipeliner
	payload []byte
}

func (r *redisT) waker(int) (waker, error) {
	c := r.client(1)
	return &redisWaker{r: r, c: c, pipe: c.Pipeline(), payload: stamp(nil, r.size, 0)}, nil
}

func (w *redisWaker) wake(ids []int) error {
	for _, i := range ids {
		w.pipe.RPush(w.r.ctx, w.r.parkName(i), w.payload)
	}
	_, err := w.pipe.Exec(w.r.ctx)
	return err
}

func (w *redisWaker) close() { w.c.Close() }

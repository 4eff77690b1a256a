package conformance

// The chaos run of the cell (docs/cell.md, "the chaos run", in CI-sized form):
// three real brokers on one PostgreSQL schema under mixed load through the
// Go SDK and the JS SDK (cell_chaos_sdks_test.go), while members are killed
// (SIGKILL) or paused (SIGSTOP) and brought back at random, and a fourth
// joins.
// What it asserts afterwards is in TestCellChaos's comment; docs/cell.md,
// "The chaos run", says how the bookkeeping makes the duplicate check
// precise.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// Bounds of the chaos run's SDK calls: every client is built with
// chaosCallTimeout (WithTimeout), a request waits chaosRequestTimeout for
// its reply, a waiting pop chaosPopWait. A call must return within its
// bound plus chaosSlack (generous: the machine is shared, and the bound is
// about hangs, not latency).
const (
	chaosCallTimeout    = 5 * time.Second
	chaosRequestTimeout = 4 * time.Second
	chaosPopWait        = time.Second
	chaosPopBatch       = 16
	chaosSlack          = 3 * time.Second
	chaosLease          = 300 // seconds: longer than any run, so no lease expires during one
)

// specCodes is the specification's closed refusal taxonomy, each code with
// its status (server/codes.go lists them).
var specCodes = map[string]int{
	client.CodeBadRequest:      400,
	client.CodeQuotaExceeded:   403,
	client.CodeFeatureGated:    403,
	client.CodeQueueNotFound:   404,
	client.CodeQueueFull:       429,
	client.CodeRateLimited:     429,
	client.CodeConfigureFailed: 500,
	client.CodeDeleteFailed:    500,
	client.CodeUnavailable:     503,
	client.CodeOwnerMoved:      503,
	client.CodeForwardFailed:   503,
	client.CodeDisabled:        503,
}

// chaosSettings reads QUEEN_CHAOS_SECONDS (default 60, the CI size) and
// QUEEN_CHAOS_SEED (default: the clock).
func chaosSettings(t *testing.T) (time.Duration, uint64) {
	t.Helper()
	secs := 60
	if s := os.Getenv("QUEEN_CHAOS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 5 {
			t.Fatalf("QUEEN_CHAOS_SECONDS=%q: want a whole number of seconds, at least 5", s)
		}
		secs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUEEN_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUEEN_CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	return time.Duration(secs) * time.Second, seed
}

// chaosLog is everything the run's clients saw, for the checks at the end.
type chaosLog struct {
	mu sync.Mutex
	// ops counts calls by kind, refusals by "kind: status code", the
	// other errors by class.
	ops      map[string]int
	refusals map[string]int
	errs     map[string]int
	samples  []string // a few errors of each unexpected kind
	slowest  map[string]time.Duration
	// overdue lists calls that returned past their bound.
	overdue []string
	// inflight is the calls not returned yet, by id.
	inflight map[int64]flight
	nextID   int64
	// deliveries: queue → group → payload → when each delivery's pop
	// was sent and answered.
	deliveries map[string]map[string]map[string][]span
	// configured: queue → the options of a configure answered 201.
	configured map[string]client.QueueOptions
	// pushed counts messages pushed (201) to each fan-out queue.
	pushed    map[string]int
	ackStates map[string]int
	// sent: queue (fan-out or service) → every payload sent to it, recorded
	// before its push or request left (one whose answer was lost may still
	// have landed). Each payload names its queue and is unique in the run.
	sent map[string]map[string]bool
	// wrong lists answers that are not their request's: an answer the SDK
	// could not decode, or a decoded one that does not fit the request
	// (HTTP/1.1 pairs answers with requests by order alone, so an answer
	// given to the wrong caller shows as one of these).
	wrong []string
}

type flight struct {
	what  string
	start time.Time
	bound time.Duration
}

type span struct{ sent, got time.Time }

func newChaosLog() *chaosLog {
	return &chaosLog{
		ops: map[string]int{}, refusals: map[string]int{}, errs: map[string]int{},
		slowest: map[string]time.Duration{}, inflight: map[int64]flight{},
		deliveries: map[string]map[string]map[string][]span{},
		configured: map[string]client.QueueOptions{}, pushed: map[string]int{},
		ackStates: map[string]int{}, sent: map[string]map[string]bool{},
	}
}

// willSend records payloads as sent to queue, before the call that sends
// them.
func (l *chaosLog) willSend(queue string, payloads ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.sent[queue]
	if m == nil {
		m = map[string]bool{}
		l.sent[queue] = m
	}
	for _, p := range payloads {
		m[p] = true
	}
}

// wasSent answers whether payload was sent to queue.
func (l *chaosLog) wasSent(queue, payload string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[queue][payload]
}

// wrongAnswer records an answer that is not req's.
func (l *chaosLog) wrongAnswer(req, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wrong = append(l.wrong, req+": "+fmt.Sprintf(format, args...))
}

// undecodable reports whether err is the SDK failing to read an answer
// (a 2xx without the route's fields, a body that is not JSON, an answer
// that came to no request): the sign of an answer paired with the wrong
// request, never a lost connection or a refusal.
func undecodable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "malformed JSON answer") || strings.Contains(s, "malformed HTTP answer") ||
		strings.Contains(s, "decoding the answer") || strings.Contains(s, "an answer to no request") ||
		strings.Contains(s, "no replyTo")
}

// call runs f as one SDK call of kind what, bounded by bound: it times it,
// registers it as in flight meanwhile, and classifies its error. req
// describes the request, for the failure an undecodable answer is.
func (l *chaosLog) call(what, req string, bound time.Duration, f func() error) error {
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	start := time.Now()
	l.inflight[id] = flight{what, start, bound}
	l.mu.Unlock()
	err := f()
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inflight, id)
	l.ops[what]++
	l.slowest[what] = max(l.slowest[what], took)
	if took > bound+chaosSlack {
		l.overdue = append(l.overdue, fmt.Sprintf("%s took %v (bound %v + %v): %v", what, took, bound, chaosSlack, err))
	}
	if err != nil {
		l.classify(what, req, err)
	}
	return err
}

// classify counts err: a refusal by its status and code, anything else by
// class; an undecodable answer is also listed with req as a wrong answer.
// It is called with l.mu held.
func (l *chaosLog) classify(what, req string, err error) {
	var e *client.Error
	var je *jsError
	var ne net.Error
	class := ""
	switch {
	case errors.As(err, &je):
		class = l.classifyJS(what, req, je)
	case undecodable(err):
		l.errs["undecodable answer"]++
		l.wrong = append(l.wrong, req+": "+err.Error())
	case errors.As(err, &e):
		l.refusals[what+": "+strconv.Itoa(e.Status)+" "+e.Code]++
		if st, ok := specCodes[e.Code]; !ok || st != e.Status {
			class = "refusal outside the specification"
		}
	case errors.Is(err, client.ErrRequestTimeout):
		l.errs["request timed out"]++
	case errors.Is(err, syscall.ECONNREFUSED):
		l.errs["unreachable"]++
	case strings.Contains(err.Error(), "may have applied"), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), strings.Contains(err.Error(), "closed the connection"):
		l.errs["closed unanswered"]++
	case errors.As(err, &ne) && ne.Timeout():
		l.errs["timed out"]++
	default:
		class = "other error"
	}
	if class != "" {
		l.errs[class]++
		if len(l.samples) < 20 {
			l.samples = append(l.samples, what+": "+err.Error())
		}
	}
}

// onError is a Serve loop's OnError: what the loop survived, classified
// like a call's error.
func (l *chaosLog) onError(err error) { l.onErrorOf("", err) }

// onErrorOf is onError for a responder of the SDK of kind (chaosSDK.kind).
func (l *chaosLog) onErrorOf(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops[kind+"serve error"]++
	l.classify(kind+"serve", "a Serve loop's pop or reply", err)
}

func (l *chaosLog) delivered(queue, group, payload string, s span) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.deliveries[queue]
	if g == nil {
		g = map[string]map[string][]span{}
		l.deliveries[queue] = g
	}
	p := g[group]
	if p == nil {
		p = map[string][]span{}
		g[group] = p
	}
	p[payload] = append(p[payload], s)
}

// memberEvent is one event of the kill log: a member taken down or
// brought back.
type memberEvent struct {
	at     time.Time
	member int
	up     bool // a start, a resume or a join (which began at at); false: a kill or a pause
}

// holderChanges answers the instants at which the owner of (tenant, queue)
// changed according to the kill log: rendezvous ownership over the members
// up before and after each event. A member whose first event brings it up
// (one that joined during the run) was not a member before it.
func holderChanges(ids []string, events []memberEvent, queue string) []time.Time {
	up := make([]bool, len(ids))
	seen := make([]bool, len(ids))
	for i := range up {
		up[i] = true
	}
	for _, e := range events {
		if !seen[e.member] {
			seen[e.member], up[e.member] = true, !e.up
		}
	}
	live := func() []string {
		var out []string
		for i, id := range ids {
			if up[i] {
				out = append(out, id)
			}
		}
		return out
	}
	var out []time.Time
	for _, e := range events {
		before := cell.OwnerOf(live(), cellTenant, queue)
		up[e.member] = e.up
		if cell.OwnerOf(live(), cellTenant, queue) != before {
			out = append(out, e.at)
		}
	}
	return out
}

// TestCellChaos: three members under mixed load through three clients of
// the Go SDK and three of the JS SDK when there is a node (requests with
// responders of both, fan-out queues each consumed by several groups with
// explicit acks, producers, configures), members killed with
// SIGKILL or paused with SIGSTOP and brought back at random (never all at
// once: at most two down, two only briefly), and a fourth member joining a
// third of the way in, for QUEEN_CHAOS_SECONDS (default 60, the CI
// size). The SDKs route each call to its queue's owner in the view they
// learned from the members. Afterwards:
//   - every configure answered 201 is declared, with its options, on
//     every member;
//   - no SDK call returned later than its bound plus chaosSlack, and none
//     is still in flight; the JS clients close and their process ends;
//   - every refusal any client saw carries one of the specification's
//     codes with its status (a connection closed unanswered, a request
//     whose reply never came, are counted, not refusals);
//   - no payload was delivered twice to one group of a queue while its
//     owner stayed up: two deliveries are excused only when the kill log
//     moved the queue's owner (cell.OwnerOf over the members up) between
//     the first pop's send and the second pop's answer, widened by the
//     time the cell takes to see the move;
//   - every answer is its own request's (HTTP/1.1 pairs them by order
//     alone, so one given to the wrong caller shows here): every payload
//     is unique and names its queue and sender; a push answers pushed =
//     the messages sent; every message a pop or a Serve loop gets was sent
//     to the queue popped; an ack answers one documented outcome per id,
//     naming it, in order; a configure echoes its queue and options; a
//     request gets its echo; and no answer is one the SDK cannot decode.
//     Each failure names the request and the seed.
//
// It prints a summary with the seed (QUEEN_CHAOS_SEED replays the kill
// schedule; the load's interleaving is the scheduler's).
func TestCellChaos(t *testing.T) {
	dur, seed := chaosSettings(t)
	t.Logf("chaos run: %v, seed %d (QUEEN_CHAOS_SEED=%d replays the kill schedule)", dur, seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))

	c := newTestCell(t)
	members := []*member{c.start(advertise(t), nil), c.start(advertise(t), nil), c.start(advertise(t), nil)}
	for _, m := range members {
		m.KeepPort = true
	}
	all := ids(members...)
	c.waitLive(all...)

	// One queue of each kind per member, so that every member owns some
	// of the load.
	var services, fans []string
	for i, m := range members {
		services = append(services, queueOwnedBy(t, "chaos-svc"+strconv.Itoa(i), m.id, all...))
		fans = append(fans, queueOwnedBy(t, "chaos-fan"+strconv.Itoa(i), m.id, all...))
	}
	for _, q := range fans {
		members[0].configure(t, q, `{"leaseSeconds":`+strconv.Itoa(chaosLease)+`}`)
	}
	groups := []string{"g0", "g1", "g2"}

	// Clients: each starts on one member and fails over to the others
	// (a member's URL is kept across its restarts). Three of the Go SDK,
	// and three of the JS SDK in one Node process when there is a node.
	urlsFrom := func(first int) []string {
		var urls []string
		for k := range members {
			urls = append(urls, members[(first+k)%len(members)].url(""))
		}
		return urls
	}
	newClient := func(first int) *client.Client {
		urls := urlsFrom(first)
		return sdkClient(t, urls[0], client.WithURLs(urls[1:]...), client.WithTimeout(chaosCallTimeout))
	}
	clients := []*client.Client{newClient(0), newClient(1), newClient(2)}
	var sdks []chaosSDK
	for _, cl := range clients {
		sdks = append(sdks, goChaosSDK(cl))
	}

	log := newChaosLog()
	var served, jsServed, jsDelivered atomic.Int64
	var js *jsChaos
	if node := jsNodeIfAny(t); node != "" {
		js = startJSChaos(t, node, [][]string{urlsFrom(0), urlsFrom(1), urlsFrom(2)}, chaosCallTimeout, dur+3*time.Minute, jsChaosEvents{
			served: func(svc, payload string) {
				served.Add(1)
				jsServed.Add(1)
				if !log.wasSent(svc, payload) {
					log.wrongAnswer("a JS responder's pop of "+svc, "delivered a request no requester sent to it: %s", payload)
				}
			},
			serveError: func(err error, ended bool) {
				if ended {
					err = fmt.Errorf("a JS responder ended: %w", err)
				}
				log.onErrorOf("js ", err)
			},
		})
		for i := range clients {
			sdks = append(sdks, js.sdk(i))
		}
	}

	kills, pauses, restarts, doubleDowns := 0, 0, 0, 0
	joined := "" // the member that joined during the run
	var stop atomic.Bool
	var wg sync.WaitGroup
	worker := func(f func(w *rand.Rand)) {
		s := rnd.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := rand.New(rand.NewPCG(s, 1))
			for !stop.Load() {
				f(w)
			}
		}()
	}

	// Responders: two Serve loops of the Go SDK per service, on two
	// members, and one of the JS SDK (consume and reply) on the third.
	serveCtx, stopServe := context.WithCancel(context.Background())
	var serveWG sync.WaitGroup
	for i, svc := range services {
		for k := 1; k <= 2; k++ {
			cl := clients[(i+k)%len(clients)]
			serveWG.Add(1)
			go func() {
				defer serveWG.Done()
				err := cl.Serve(serveCtx, svc, client.ServeOptions{Wait: chaosPopWait, OnError: log.onError},
					func(_ context.Context, m client.Message) (any, error) {
						served.Add(1)
						env, err := client.ParseRequest(m)
						if err != nil {
							return nil, err
						}
						if !log.wasSent(svc, string(env.Payload)) {
							log.wrongAnswer("a Serve loop's pop of "+svc, "delivered a request no requester sent to it: %s", m.Payload)
						}
						return env.Payload, nil
					})
				if err != nil {
					log.onError(fmt.Errorf("serve %s ended: %w", svc, err))
				}
			}()
		}
		if js != nil {
			if err := js.serve(i, svc); err != nil {
				t.Fatalf("starting a JS responder of %s: %v", svc, err)
			}
		}
	}

	// Every payload of the run is unique and names the queue it is sent
	// to and who sent it, so that an answer can be checked against the
	// request it answers.
	var seq atomic.Int64
	payload := func(queue, from string) string {
		return `{"q":"` + queue + `","from":"` + from + `","n":` + strconv.FormatInt(seq.Add(1), 10) + `}`
	}

	// Requesters: one per client.
	for i, sdk := range sdks {
		from := sdk.kind + "requester" + strconv.Itoa(i)
		worker(func(w *rand.Rand) {
			svc := services[w.IntN(len(services))]
			want := payload(svc, from)
			req := sdk.kind + "request to " + svc + " of " + want
			log.willSend(svc, want)
			var got string
			err := log.call(sdk.kind+"request", req, chaosRequestTimeout+chaosCallTimeout, func() (err error) {
				got, err = sdk.request(svc, want)
				return err
			})
			if err == nil && got != want {
				log.wrongAnswer(req, "answered %s, not its echo", got)
			}
			time.Sleep(time.Duration(10+w.IntN(30)) * time.Millisecond)
		})
	}

	// Producers: one per client, one to three messages a push.
	for i, sdk := range sdks {
		from := sdk.kind + "producer" + strconv.Itoa(i)
		worker(func(w *rand.Rand) {
			q := fans[w.IntN(len(fans))]
			n := 1 + w.IntN(3)
			texts := make([]string, n)
			for k := range texts {
				texts[k] = payload(q, from)
			}
			req := sdk.kind + "push to " + q + " of " + strings.Join(texts, " ")
			log.willSend(q, texts...)
			var pushed int
			err := log.call(sdk.kind+"push", req, chaosCallTimeout, func() (err error) {
				pushed, err = sdk.push(q, texts)
				return err
			})
			if err == nil {
				if pushed != n {
					log.wrongAnswer(req, "answered pushed %d, not %d", pushed, n)
				}
				log.mu.Lock()
				log.pushed[q] += n
				log.mu.Unlock()
			}
			time.Sleep(time.Duration(5+w.IntN(20)) * time.Millisecond)
		})
	}

	// Consumers: every group of every fan-out queue, on one client of each
	// SDK, explicit acks. An ack whose answer was lost is sent again (an
	// ack is idempotent: a second one answers unknown), so that no message
	// waits for its lease to come back.
	for qi, q := range fans {
		for gi, g := range groups {
			for k := 0; k < len(sdks); k += len(clients) {
				sdk := sdks[k+(qi+gi)%len(clients)]
				worker(func(w *rand.Rand) {
					var msgs []client.Message
					sent := time.Now()
					req := sdk.kind + "pop of " + q + " for " + g
					err := log.call(sdk.kind+"pop", req, chaosPopWait+chaosCallTimeout, func() (err error) {
						msgs, err = sdk.pop(q, g)
						return err
					})
					if err != nil {
						time.Sleep(20 * time.Millisecond)
						return
					}
					got := time.Now()
					for _, m := range msgs {
						if !log.wasSent(q, string(m.Payload)) || m.ID == "" || m.Partition != "Default" {
							log.wrongAnswer(req, "delivered a message no producer sent to it: id %q, partition %q, payload %s", m.ID, m.Partition, m.Payload)
						}
						log.delivered(q, g, string(m.Payload), span{sent, got})
					}
					if len(msgs) == 0 {
						return
					}
					if sdk.kind != "" {
						jsDelivered.Add(int64(len(msgs)))
					}
					ids := make([]string, len(msgs))
					for k, m := range msgs {
						ids[k] = m.ID
					}
					req = sdk.kind + "ack of " + q + " for " + g + " of " + strings.Join(ids, " ")
					for attempt := 0; attempt < 3; attempt++ {
						var results []client.AckOutcome
						err := log.call(sdk.kind+"ack", req, chaosCallTimeout, func() (err error) {
							results, err = sdk.ack(q, g, ids)
							return err
						})
						if err == nil {
							if bad := ackMismatch(ids, results); bad != "" {
								log.wrongAnswer(req, "%s", bad)
							}
							log.mu.Lock()
							for _, o := range results {
								log.ackStates[o.Outcome]++
							}
							log.mu.Unlock()
							return
						}
						var je *jsError
						if client.CodeOf(err) != "" || errors.As(err, &je) && je.Name == "QueenError" {
							return // refused, not lost: the SDK retried the cell's refusals already
						}
					}
				})
			}
		}
	}

	// Configures: fresh queue names, so that each one's outcome is known
	// on its own (a configure whose answer was lost may still land).
	var cfgN atomic.Int64
	worker(func(w *rand.Rand) {
		n := cfgN.Add(1)
		q := "chaos-cfg-" + strconv.FormatInt(n, 10)
		opts := client.QueueOptions{MaxLength: 100 + w.IntN(900), LeaseSeconds: 5 + w.IntN(55), RetryLimit: 1 + w.IntN(9)}
		sdk := sdks[w.IntN(len(sdks))]
		req := fmt.Sprintf("%sconfigure of %s with %+v", sdk.kind, q, opts)
		var res client.ConfigureResult
		err := log.call(sdk.kind+"configure", req, chaosCallTimeout, func() (err error) {
			res, err = sdk.configure(q, opts)
			return err
		})
		if err == nil {
			if res.Queue != q || res.Options != opts {
				log.wrongAnswer(req, "answered queue %q with %+v", res.Queue, res.Options)
			}
			log.mu.Lock()
			log.configured[q] = opts
			log.mu.Unlock()
		}
		time.Sleep(time.Duration(50+w.IntN(150)) * time.Millisecond)
	})

	// The chaos: on this goroutine (kill, start and the signals fail the
	// test). A member is taken down by SIGKILL, or, one time in three, by
	// SIGSTOP (it comes back by SIGCONT, fenced by its own clock when the
	// pause outlasted the member timeout); a third of the way in, a fourth
	// member joins, which the clients learn of from the cell's view alone.
	var events []memberEvent
	up := []bool{true, true, true}
	paused := []bool{false, false, false}
	downCount := func() (n int) {
		for _, u := range up {
			if !u {
				n++
			}
		}
		return n
	}
	pick := func(want bool) int {
		var c []int
		for i, u := range up {
			if u == want {
				c = append(c, i)
			}
		}
		return c[rnd.IntN(len(c))]
	}
	takeDown := func(i int) {
		events = append(events, memberEvent{time.Now(), i, false})
		if rnd.IntN(3) == 0 {
			members[i].stopCont(t, syscall.SIGSTOP)
			paused[i] = true
			pauses++
		} else {
			members[i].kill(t)
			kills++
		}
		up[i] = false
	}
	bringBack := func(i int) {
		events = append(events, memberEvent{time.Now(), i, true})
		if paused[i] {
			members[i].stopCont(t, syscall.SIGCONT)
			paused[i] = false
		} else {
			members[i].start(t)
		}
		up[i] = true
		restarts++
	}
	began := time.Now()
	end := began.Add(dur)
	joinAt := began.Add(dur / 3)
	for time.Now().Before(end) {
		if len(members) == 3 && time.Now().After(joinAt) {
			events = append(events, memberEvent{time.Now(), 3, true})
			m := c.start(advertise(t), nil)
			m.KeepPort = true
			members, all = append(members, m), append(all, m.id)
			up, paused = append(up, true), append(paused, false)
			joined = m.id
			continue
		}
		switch downCount() {
		case 0:
			time.Sleep(time.Duration(800+rnd.IntN(2200)) * time.Millisecond)
			if time.Now().After(end) {
				break
			}
			takeDown(pick(true))
		case 1:
			time.Sleep(time.Duration(500+rnd.IntN(2500)) * time.Millisecond)
			if rnd.IntN(5) == 0 && time.Now().Before(end) {
				takeDown(pick(true)) // two down, briefly
				doubleDowns++
			} else {
				bringBack(pick(false))
			}
		default:
			time.Sleep(time.Duration(200+rnd.IntN(800)) * time.Millisecond)
			bringBack(pick(false))
		}
	}
	for i := range up {
		if !up[i] {
			bringBack(i)
		}
	}
	stop.Store(true)
	c.waitLive(all...)

	// Every worker returns by itself (their calls are bounded by the SDK,
	// not cancelled): one that does not within the longest bound plus the
	// slack is a hung call.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(chaosRequestTimeout + 2*chaosCallTimeout + 2*chaosSlack):
		log.mu.Lock()
		for _, f := range log.inflight {
			t.Errorf("hung: %s in flight for %v (bound %v)", f.what, time.Since(f.start), f.bound)
		}
		log.mu.Unlock()
		t.Fatal("workers did not return after the run")
	}
	stopServe()
	serveWG.Wait()
	if js != nil {
		if err := js.close(2*chaosCallTimeout + chaosSlack); err != nil {
			t.Error(err)
		}
	}
	loadEnded := time.Since(began)

	// Every accepted configure is declared, with its options, on every
	// member (each applies the store's declarations within a heartbeat of
	// a change and loads them all when it starts).
	log.mu.Lock()
	defer log.mu.Unlock()
	var missing []string
	deadline := time.Now().Add(5 * time.Second)
	for _, m := range members {
		for {
			missing = missing[:0]
			l := m.queues(t)
			for q, o := range log.configured {
				row, ok := l.find(q)
				switch {
				case !ok || row.Tier != "declared":
					missing = append(missing, q+" not declared")
				case row.Options.MaxLength != int64(o.MaxLength) || row.Options.LeaseSeconds != int64(o.LeaseSeconds) || row.Options.RetryLimit != int64(o.RetryLimit):
					missing = append(missing, fmt.Sprintf("%s options %+v, configured %+v", q, row.Options, o))
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("member %s: %d of %d accepted configures not in force, e.g. %v", m.id, len(missing), len(log.configured), missing[:min(5, len(missing))])
		}
	}

	// Duplicates per group, excused only across a move of the queue's
	// owner (the cell takes up to a member timeout and a few heartbeats
	// to act on a kill; a restart is acted on by its first heartbeat,
	// inside the start).
	lag := time.Duration(brokertest.CellMemberTimeoutMS+5*brokertest.CellHeartbeatMS)*time.Millisecond + 500*time.Millisecond
	dups, excused := 0, 0
	var dupSamples []string
	stable := 0
	for _, q := range fans {
		moves := holderChanges(all, events, q)
		if len(moves) == 0 {
			stable++
		}
		for g, ps := range log.deliveries[q] {
			for p, spans := range ps {
				for k := 1; k < len(spans); k++ {
					first, second := spans[0], spans[k]
					moved := slices.ContainsFunc(moves, func(at time.Time) bool {
						return !at.Add(lag).Before(first.sent) && !at.After(second.got)
					})
					if moved {
						excused++
						continue
					}
					dups++
					if len(dupSamples) < 5 {
						dupSamples = append(dupSamples, fmt.Sprintf("%s/%s %s delivered at %v and %v", q, g, p, first.got.Sub(began), second.got.Sub(began)))
					}
				}
			}
		}
	}
	delivered := 0
	for _, gs := range log.deliveries {
		for _, ps := range gs {
			delivered += len(ps)
		}
	}
	pushed := 0
	for _, n := range log.pushed {
		pushed += n
	}

	var killLog []string
	for _, e := range events {
		verb := "down"
		if e.up {
			verb = "up"
		}
		killLog = append(killLog, fmt.Sprintf("%.1fs %s %d", e.at.Sub(began).Seconds(), verb, e.member))
	}
	t.Logf("chaos summary: load %v; %d kills and %d pauses (%d leaving two down), %d restarts and resumes, %s joined; kill log: %s", loadEnded.Round(time.Millisecond), kills, pauses, doubleDowns, restarts, joined, strings.Join(killLog, ", "))
	t.Logf("operations: %v; served requests %d; slowest: %v", log.ops, served.Load(), log.slowest)
	t.Logf("refusals by code: %v; other outcomes: %v; ack outcomes: %v", log.refusals, log.errs, log.ackStates)
	t.Logf("fan-out: %d messages pushed (201) to %d queues, %d distinct (group, message) deliveries; duplicates: %d excused by an owner move, %d not; %d of %d fan-out queues never moved", pushed, len(fans), delivered, excused, dups, stable, len(fans))
	t.Logf("configures accepted: %d", len(log.configured))

	for _, o := range log.overdue {
		t.Errorf("past its bound: %s", o)
	}
	if n := log.errs["refusal outside the specification"] + log.errs["other error"]; n > 0 {
		t.Errorf("%d errors that are neither a specification refusal nor a lost connection: %v", n, log.samples)
	}
	if dups > 0 {
		t.Errorf("%d deliveries of a message to a group that already had it, with no owner move between: %v", dups, dupSamples)
	}
	for _, w := range log.wrong {
		t.Errorf("an answer that is not its request's (seed %d): %s", seed, w)
	}
	if log.ops["request"] == 0 || log.ops["push"] == 0 || delivered == 0 || len(log.configured) == 0 || kills+pauses == 0 || joined == "" {
		t.Errorf("the run did too little to mean anything: %v, %d delivered, %d configures, %d kills, %d pauses, joined %q", log.ops, delivered, len(log.configured), kills, pauses, joined)
	}
	if js != nil && (log.ops["js request"] == 0 || log.ops["js push"] == 0 || jsDelivered.Load() == 0 || jsServed.Load() == 0) {
		t.Errorf("the JS SDK's clients did too little to mean anything: %v, %d messages delivered to them, %d requests served by them", log.ops, jsDelivered.Load(), jsServed.Load())
	}
}

// ackMismatch says how an ack's outcomes do not answer the ack of ids (one
// outcome per id, in order, each of the documented four), or "".
func ackMismatch(ids []string, results []client.AckOutcome) string {
	if len(results) != len(ids) {
		return fmt.Sprintf("answered %d outcomes for %d ids: %+v", len(results), len(ids), results)
	}
	for k, o := range results {
		switch {
		case o.ID != ids[k]:
			return fmt.Sprintf("outcome %d names id %q, not %q", k, o.ID, ids[k])
		case o.Outcome != "acked" && o.Outcome != "redelivered" && o.Outcome != "stale" && o.Outcome != "unknown":
			return fmt.Sprintf("outcome %d is %q, not one of the four", k, o.Outcome)
		}
	}
	return ""
}

// TestChaosHolderChanges: the duplicate check's view of the kill log. A
// queue's owner changes when its owner dies and when it comes back, and
// when the member holding it meanwhile dies; never when another member
// dies or returns.
func TestChaosHolderChanges(t *testing.T) {
	t.Parallel()
	all := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	q := queueOwnedBy(t, "hc", all[0], all...)
	second := cell.OwnerOf(all[1:], cellTenant, q) // who holds it while the owner is down
	third := 3 - slices.Index(all, second)         // the remaining member's index (1 or 2)
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	events := []memberEvent{
		{at(1), third, false},                     // another member dies: no change
		{at(2), third, true},                      // and returns: no change
		{at(3), 0, false},                         // the owner dies: moves to second
		{at(4), slices.Index(all, second), false}, // second dies too: moves to third
		{at(5), slices.Index(all, second), true},  // second returns: back to it
		{at(6), 0, true},                          // the owner returns: back to it
	}
	got := holderChanges(all, events, q)
	if want := []time.Time{at(3), at(4), at(5), at(6)}; !slices.Equal(got, want) {
		t.Fatalf("owner changes at %v, want %v", got, want)
	}

	// A fourth member joins: the queue moves to it only if it is the
	// owner over all four; it was not a member before its first event.
	four := append(slices.Clone(all), "127.0.0.1:4")
	for _, name := range []string{q, queueOwnedBy(t, "hc4", four[3], four...)} {
		joined := []memberEvent{{at(1), 3, true}, {at(2), 3, false}}
		got := holderChanges(four, joined, name)
		var want []time.Time
		if cell.OwnerOf(four, cellTenant, name) == four[3] {
			want = []time.Time{at(1), at(2)}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: owner changes at %v with a fourth member joining and leaving, want %v", name, got, want)
		}
	}
}

// TestChaosChecksSeeWrongAnswers: the chaos run's answer checks catch an
// answer given to the wrong request, as the run saw once (a push handed
// another route's 2xx). A loopback server answers each route with another
// route's 2xx: the push's is an error undecodable recognises (not a lost
// connection, not a refusal), the ack's fails ackMismatch, the
// configure's does not echo it. If the SDK's wording of a decode error
// changed, undecodable would stop recognising it, and this test says so.
func TestChaosChecksSeeWrongAnswers(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/push"):
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"results":[{"id":"e:1","outcome":"acked"}]}`)
		case strings.HasSuffix(r.URL.Path, "/ack"):
			w.WriteHeader(201)
			_, _ = io.WriteString(w, `{"pushed":2}`)
		case strings.HasSuffix(r.URL.Path, "/configure"):
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"queue":"q","messages":[]}`)
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	cl, err := client.New(srv.URL, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() { _ = cl.Close(ctx) }()

	_, err = cl.Push(ctx, "q", []any{json.RawMessage(`{"n":1}`)}, client.PushOptions{})
	if err == nil || !undecodable(err) {
		t.Errorf("push answered an ack's 200: error %v, want one undecodable recognises", err)
	}
	ids := []string{"e:1", "e:2"}
	ar, err := cl.AckIDs(ctx, "q", ids, client.AckOptions{})
	if err != nil {
		t.Fatalf("ack answered a push's 201: %v (the SDK reads any 2xx)", err)
	}
	if bad := ackMismatch(ids, ar.Results); bad == "" {
		t.Errorf("ack answered a push's 201: ackMismatch found nothing in %+v", ar.Results)
	}
	opts := client.QueueOptions{MaxLength: 10}
	cr, err := cl.Configure(ctx, "q", opts)
	if err != nil {
		t.Fatalf("configure answered a pop's 200: %v", err)
	}
	if cr.Queue == "q" && cr.Options == opts {
		t.Errorf("configure answered a pop's 200 reads as its echo: %+v", cr)
	}
	// And the ack check passes a right answer.
	if bad := ackMismatch(ids, []client.AckOutcome{{ID: "e:1", Outcome: "acked"}, {ID: "e:2", Outcome: "stale"}}); bad != "" {
		t.Errorf("ackMismatch of a right answer: %s", bad)
	}
}

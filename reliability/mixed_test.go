//go:build reliability

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMixedConsumption: an ordinary workload, no attacker. 1,000-byte
// messages are pushed over 100 queues in turn, then 90 of the queues are
// consumed (autoAck pops), in rounds, on 4 pipelined connections, for 30 s.
// The 10 queues nobody consumes keep a tenth of every arena segment alive.
// Before the fix (issue 24): RSS 228 MiB after 12 s, 310 MiB after 30 s and
// still growing while cellBytes stayed ≤ 64 MiB, since a segment pinned by
// its few live messages was charged to nothing (docs/engine.md, "What the
// arena holds").
//
// Besides the bounds every case asserts, nothing accepted may be lost or
// changed: every message a push to an unconsumed queue was answered 201 for
// is popped afterwards, byte for byte as pushed (the broker moves them
// between segments to empty the sparse ones).
func TestMixedConsumption(t *testing.T) {
	c := newCase(t, nil)
	const (
		conns    = 4
		queues   = 100
		consumed = 90
	)
	d := scaled(30*time.Second, 8*time.Second)
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()

	// One 1,000-byte payload per queue (a JSON string of 998 characters
	// and its quotes) that names its queue, so that a payload read from
	// another queue's bytes, or from recycled ones, shows.
	names := make([]string, queues)
	payloads := make([]string, queues)
	pushes := make([][]byte, queues)
	pops := make([][]byte, queues)
	for q := range queues {
		names[q] = fmt.Sprintf("mx-%d", q)
		head := names[q] + "-"
		payloads[q] = `"` + head + strings.Repeat("x", 998-len(head)) + `"`
		pushes[q] = pushReq(names[q], "", 1, payloads[q])
		pops[q] = request("GET", "/api/v1/ephemeral/pop?queue="+names[q]+"&autoAck=true&batch=100", nil)
	}

	// The consumer of the unconsumed queues has connected, and reads them
	// once the load is over: its group exists from a first pop (D4), since
	// with the total spent by then a group created would be refused like
	// any object the budget charges (docs/engine.md, "What the budgets
	// count").
	hc := &http.Client{Timeout: 30 * time.Second}
	for q := consumed; q < queues; q++ {
		if n, err := drain(hc, c.b.URL(), names[q], payloads[q]); err != nil || n != 0 {
			t.Fatalf("%s: first pop: %d messages, %v", names[q], n, err)
		}
	}

	push, pop := newCodes(), newCodes()
	var mu sync.Mutex
	accepted := make([]int, queues) // pushes answered 201, per queue
	var wg sync.WaitGroup
	for conn := range conns {
		wg.Go(func() {
			p, err := dialPipe(c.addr, 8)
			if err != nil {
				push.addKey("conn error")
				return
			}
			defer p.Close()
			// A round: a push to each queue in turn, then a pop of each
			// consumed queue. sent is the request of each answer to come
			// (answers come in order): a queue index, or -1 for a pop. It
			// never fills: at most 8 requests are unanswered.
			sent := make(chan int, 64)
			i := conn * 7 // the connections start at different places of the round
			next := func() []byte {
				k := i % (queues + consumed)
				i++
				if k < queues {
					sent <- k
					return pushes[k]
				}
				sent <- -1
				return pops[k-queues]
			}
			err = p.run(ctx, next, func(status int, body []byte, _ time.Duration) {
				q := <-sent
				if q < 0 {
					pop.add(status, body)
					return
				}
				push.add(status, body)
				if status == 201 {
					mu.Lock()
					accepted[q]++
					mu.Unlock()
				}
			})
			if err != nil {
				push.addKey("conn error")
			}
		})
	}
	wg.Wait()
	c.endLoad()
	c.checkCodes("push ", push, pushAnswers...)
	c.checkCodes("pop ", pop, "200")
	total := 0
	for _, n := range accepted {
		total += n
	}
	c.f.Extra["acceptedMiB"] = float64(total) * 1000 / (1 << 20)
	// The shape pins segments only once far more than the budget went
	// through them: at least twice the budget must have been accepted.
	if least := 2 * c.budget; int64(total)*1000 < least {
		c.fail("only %d messages (%.0f MiB) were accepted: the load never went through %d MiB, so it proves nothing",
			total, float64(total)*1000/(1<<20), least>>20)
	}

	// Nothing accepted was lost or changed.
	kept := 0
	for q := consumed; q < queues; q++ {
		n, err := drain(hc, c.b.URL(), names[q], payloads[q])
		if err != nil {
			c.fail("%s: %v", names[q], err)
			continue
		}
		if n != accepted[q] {
			c.fail("%s: %d messages popped, %d pushes were accepted", names[q], n, accepted[q])
		}
		kept += n
	}
	c.f.Extra["keptMessages"] = float64(kept)

	del := newCodes()
	var reqs [][]byte
	for _, name := range names {
		reqs = append(reqs, request("DELETE", "/api/v1/ephemeral/queue/"+name, nil))
	}
	flood(context.Background(), c.addr, 1, 16, del, func(int) func() []byte { return list(reqs) }, nil)
	c.checkCodes("cleanup ", del, "200")
	c.fallback()
}

// drain pops every message of queue (autoAck) and checks that each payload
// is want, byte for byte; it returns how many there were.
func drain(hc *http.Client, base, queue, want string) (int, error) {
	n := 0
	for {
		resp, err := hc.Get(base + "/api/v1/ephemeral/pop?queue=" + queue + "&autoAck=true&batch=10000")
		if err != nil {
			return n, err
		}
		var body struct {
			Messages []struct {
				Payload json.RawMessage `json:"payload"`
			} `json:"messages"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return n, fmt.Errorf("pop: status %d, %v", resp.StatusCode, err)
		}
		if len(body.Messages) == 0 {
			return n, nil
		}
		for _, m := range body.Messages {
			if string(m.Payload) != want {
				return n, fmt.Errorf("message %d: payload %.40q…, want %.40q…", n, m.Payload, want)
			}
			n++
		}
	}
}

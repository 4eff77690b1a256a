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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParkedPopFlood: 19,800 pops parked on distinct queues, one connection
// each; half of the connections then reset by the client (SO_LINGER 0);
// then one message pushed to every queue. The parked half must be freed at
// once (D13), every message must reach either its still-open pop or stay in
// its queue (none handed to a closed connection), and RSS stays bounded.
// Before the fixes: 44 MiB for 19,800, the half freed in 0.25 s, nothing
// lost (fine).
func TestParkedPopFlood(t *testing.T) {
	// Idle collection at 2 s, so that the 19,800 queues, emptied at the end,
	// are gone when the fallback is measured; a queue with a parked waiter is
	// never collected (D8), so it does not soften the attack.
	c := newCase(t, map[string]string{"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S": "2"})
	n := scaledN(19_800, 1000)
	// Park every pop, 64 connections at a time.
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var dialErrs sync.Map
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
			if err == nil {
				_, err = conn.Write(request("GET", fmt.Sprintf("/api/v1/ephemeral/pop?queue=pk-%d&wait=true&timeout=120000", i), nil))
			}
			if err != nil {
				dialErrs.Store(i, err)
				return
			}
			conns[i] = conn
		})
	}
	wg.Wait()
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	dialErrs.Range(func(k, v any) bool { c.fail("pop %v: %v", k, v); return false })
	base := int64(c.f.BaseRSSMiB * (1 << 20))
	if took, err := c.waitParked(n, 30*time.Second); err != nil {
		t.Fatalf("parking %d pops: %v", n, err)
	} else {
		c.f.Extra["parkSeconds"] = took.Seconds()
	}
	c.f.Extra["parked"] = float64(n)
	c.f.Extra["bytesPerParked"] = float64(c.rss.now()-base) / float64(n)

	// Reset the even half; their parked pops must go within 5 s.
	for i := 0; i < n; i += 2 {
		_ = conns[i].(*net.TCPConn).SetLinger(0)
		conns[i].Close()
		conns[i] = nil
	}
	if took, err := c.waitParked(n/2, 5*time.Second); err != nil {
		c.fail("after resetting half of the parked connections: %v", err)
	} else {
		c.f.Extra["freeHalfSeconds"] = took.Seconds()
	}

	// One message to every queue.
	pushes := newCodes()
	flood(context.Background(), c.addr, 4, 32, pushes, func(conn int) func() []byte {
		i := conn
		return func() []byte {
			if i >= n {
				return nil
			}
			i += 4
			return pushReq(fmt.Sprintf("pk-%d", i-4), "", 1, strconv.Itoa(i-4))
		}
	}, nil)
	c.checkCodes("push ", pushes, "201")

	// The odd half: each open pop receives its own message.
	got := newCodes()
	for i := 1; i < n; i += 2 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
			got.addKey(readPop(conns[i], i))
		})
	}
	wg.Wait()
	c.checkCodes("woken ", got, "delivered")
	// The even half: each message is still in its queue.
	left, kept := newCodes(), newCodes()
	flood(context.Background(), c.addr, 4, 32, left, func(conn int) func() []byte {
		i := 2 * conn
		return func() []byte {
			if i >= n {
				return nil
			}
			i += 8
			return request("GET", fmt.Sprintf("/api/v1/ephemeral/pop?queue=pk-%d&autoAck=true", i-8), nil)
		}
	}, func(status int, body []byte, _ time.Duration) {
		var p struct{ Messages []json.RawMessage }
		if status == 200 && json.Unmarshal(body, &p) == nil && len(p.Messages) == 1 {
			kept.addKey("kept")
		} else {
			kept.addKey("lost")
		}
	})
	c.checkCodes("leftover pop ", left, "200")
	c.checkCodes("reset half ", kept, "kept")
	if kept.get("kept") != int64((n+1)/2) {
		c.fail("of the reset half's %d queues, %d kept their message", (n+1)/2, kept.get("kept"))
	}
	c.endLoad()
	for i, conn := range conns {
		if conn != nil {
			conn.Close()
			conns[i] = nil
		}
	}
	c.fallback()
}

// readPop reads one pop answer from conn and says whether it carried
// exactly the message pushed to pk-i.
func readPop(conn net.Conn, i int) string {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "no answer"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var p struct {
		Messages []struct {
			Payload json.RawMessage `json:"payload"`
		} `json:"messages"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &p) != nil {
		return "answer " + strconv.Itoa(resp.StatusCode)
	}
	if len(p.Messages) != 1 || string(p.Messages[0].Payload) != strconv.Itoa(i) {
		return "wrong messages"
	}
	return "delivered"
}

// waitParked polls /metrics until queen_ephemeral_parked_pops is want.
func (c *rcase) waitParked(want int, d time.Duration) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < d {
		resp, err := http.Get(c.b.URL() + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(line, "queen_ephemeral_parked_pops "); ok {
					last = strings.TrimSpace(v)
					if last == strconv.Itoa(want) {
						return time.Since(start), nil
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start), fmt.Errorf("queen_ephemeral_parked_pops %s after %v, want %d", last, d, want)
}

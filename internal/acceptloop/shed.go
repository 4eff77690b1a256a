package acceptloop

import (
	"context"
	"sort"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// Shedding idle connections (docs/server.md, accepting connections).
//
// When accepting fails for lack of descriptors, the process closes the
// keep-alive connections that have been idle longest, so that the client
// waiting in the backlog (a /health probe, an operator) is served while an
// idle flood holds the rest: HTTP lets a server close an idle connection at
// any time, and a client that wants it again dials again. What is idle is
// the process's to say (nothing buffered in either direction, no request
// being served, no parked pop, not a link); how long it has been idle comes
// from the last-activity time each connection already keeps from the
// one-second tick clock, so tracking costs the request path nothing. The
// choice is made only under pressure, by a scan of each loop's connections
// run on that loop (gnet's connections belong to their loop).

// ShedBatch is how many connections one failure to accept asks to close
// (split over the loops, each its share rounded up): enough to accept a
// burst of new clients (each needs a descriptor, and one more for a moment
// while Enroll duplicates it) without a failure each, few enough that a
// single new client costs an idle flood a handful of its connections, not
// all of them.
const ShedBatch = 16

// MinIdle: a connection idle for less than this is never shed, so that a
// client between two requests of a steady exchange (a probe every few
// milliseconds) is not cut just as it sends the next. By the one-second
// tick clock a connection qualifies once two ticks have passed since its
// last activity: at least a second of real silence.
const MinIdle = 2 * time.Second

// shedWait bounds how long the acceptor waits for the loops to close their
// share: a loop answers in microseconds unless it is stuck on a long
// round, and accepting should not wait on that.
const shedWait = 250 * time.Millisecond

// ShedOnLoops has each of loops close up to its share of n connections (n
// divided by the number of loops, rounded up: gnet spreads connections
// evenly over its loops, and a global order would need a second round
// trip) by running shed as a task of that loop, and returns how many they
// closed within shedWait.
func ShedOnLoops(loops []gnet.EventLoop, n int, shed func(loop gnet.EventLoop, n int) int) int {
	if len(loops) == 0 || n <= 0 {
		return 0
	}
	share := (n + len(loops) - 1) / len(loops)
	done := make(chan int, len(loops)) // buffered: a late task does not block
	asked := 0
	for _, loop := range loops {
		task := gnet.RunnableFunc(func(context.Context) error {
			done <- shed(loop, share)
			return nil
		})
		if loop.Execute(context.Background(), task) == nil {
			asked++
		}
	}
	closed := 0
	timeout := time.NewTimer(shedWait)
	defer timeout.Stop()
	for range asked {
		select {
		case k := <-done:
			closed += k
		case <-timeout.C:
			return closed
		}
	}
	return closed
}

// Oldest keeps the Max candidates offered to it that were last active
// earliest, oldest first: one loop's choice of what to shed.
type Oldest[T any] struct {
	Max  int
	list []candidate[T]
}

type candidate[T any] struct {
	x    T
	last int64
}

// Offer considers x, last active at last (unix nanos).
func (o *Oldest[T]) Offer(x T, last int64) {
	n := len(o.list)
	if o.Max <= 0 || n == o.Max && last >= o.list[n-1].last {
		return
	}
	i := sort.Search(n, func(i int) bool { return o.list[i].last > last })
	if n < o.Max {
		o.list = append(o.list, candidate[T]{})
	}
	copy(o.list[i+1:], o.list[i:])
	o.list[i] = candidate[T]{x, last}
}

// Chosen returns the candidates kept, oldest first.
func (o *Oldest[T]) Chosen() []T {
	out := make([]T, len(o.list))
	for i, c := range o.list {
		out[i] = c.x
	}
	return out
}

// CloseOn closes conns, connections of loop, from a task of that loop (so
// that their descriptors are free when it returns), and reports how many
// it closed.
func CloseOn(loop gnet.EventLoop, conns []gnet.Conn) int {
	closed := 0
	for _, c := range conns {
		if loop.Close(c) == nil {
			closed++
		}
	}
	return closed
}

// IdleLongEnough reports whether a connection last active at last has been
// idle for MinIdle at now (both from the same clock, unix nanos).
func IdleLongEnough(last, now int64) bool { return now-last >= int64(MinIdle) }

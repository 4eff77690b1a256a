// Package acceptloop listens and accepts TCP connections for gnet event loops
// (docs/server.md, accepting connections), for the broker and the gateway.
//
// gnet's own acceptor gives up on the first accept error it does not know
// (EMFILE when the process is out of descriptors): its main reactor exits
// and the port stops answering while the process lives on. So the
// processes accept in a goroutine of their own from a net.Listener and hand
// every connection to the event loops of a gnet.Client (Client.Enroll
// duplicates the descriptor into a loop). An accept error pauses accepting
// with a backoff, never ends it; one for lack of descriptors first closes
// the connections idle longest (shed.go), so that a new client is served
// while an idle flood holds the rest.
package acceptloop

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"

	"github.com/queenmq/ephemeral/internal/gnetlog"
)

// Accept backoff, as net/http's Server.Serve: 5 ms doubling to 1 s.
const (
	backoffMin = 5 * time.Millisecond
	backoffMax = time.Second
)

// Loop is one listener's accepting.
type Loop struct {
	Listener net.Listener
	// Enroll hands a connection to the loops; it owns c from then on
	// (closing it on error, as gnet.Client.Enroll does).
	Enroll func(c net.Conn) error
	// Stopping says the process is stopping: an error then ends Run.
	Stopping func() bool
	// Quit ends a pause.
	Quit <-chan struct{}
	// Failed is told of every accept error (to count and log it); Paused
	// of each pause's start and end. Either may be nil.
	Failed func(err error)
	Paused func(paused bool)
	// Shed, when accepting fails for lack of descriptors, closes up to n of
	// the connections idle longest (shed.go says which may be) and reports
	// how many it closed. Nil: none is.
	Shed func(n int) int

	reserve *os.File // the spare descriptor, nil while it could not be opened
}

// pressureFor: after accepting failed for lack of descriptors, for this
// long each accepted connection is handed to the loops with the spare
// descriptor given back meanwhile (enroll).
const pressureFor = 10 * time.Second

// Run accepts until the listener is closed or an error comes while
// stopping.
func (l *Loop) Run() {
	l.takeReserve()
	defer func() {
		if l.reserve != nil {
			l.reserve.Close()
		}
	}()
	var (
		delay         time.Duration
		pressureUntil time.Time // see pressureFor
		justShed      bool      // the last error shed connections: the next one pauses
	)
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if err = l.enroll(c, pressureUntil); err == nil {
				delay, justShed = 0, false
				continue
			}
			// The duplicate could not be made (out of descriptors too) or
			// the loops are stopping; c is closed, the client sees it.
		}
		if l.Stopping() || errors.Is(err, net.ErrClosed) {
			return
		}
		if l.Failed != nil {
			l.Failed(err)
		}
		if OutOfDescriptors(err) {
			pressureUntil = time.Now().Add(pressureFor)
			if !justShed && l.Shed != nil && l.Shed(ShedBatch) > 0 {
				// Descriptors are free again: accept at once. Should that
				// fail too (another part of the process took them), the
				// next error pauses before it sheds again, so shedding
				// that does not help costs one batch per pause.
				justShed = true
				continue
			}
			justShed = false
			l.takeReserve()
			if l.reserve != nil {
				// Nothing idle to close. The spare-descriptor trick: give
				// back the reserve, take the connection waiting in the
				// backlog and close it, so that its client learns at once
				// instead of hanging until we resume.
				l.reserve.Close()
				shedPending(l.Listener)
				l.reserve = nil
				l.takeReserve()
			}
		}
		delay = min(max(2*delay, backoffMin), backoffMax)
		l.pause(true)
		select {
		case <-time.After(delay):
		case <-l.Quit:
		}
		l.pause(false)
	}
}

// enroll hands c to the loops. Enroll duplicates the descriptor, which
// needs one more: when accepting has lately failed for lack of them, the
// spare is given back for the duplicate and taken again after, so that a
// connection accepted with the last descriptor is not lost to the
// duplicate failing (it would be, once per shed batch, under pressure).
func (l *Loop) enroll(c net.Conn, pressureUntil time.Time) error {
	if l.reserve == nil || pressureUntil.IsZero() || time.Now().After(pressureUntil) {
		return l.Enroll(c)
	}
	l.reserve.Close()
	l.reserve = nil
	err := l.Enroll(c)
	l.takeReserve()
	return err
}

// takeReserve opens the spare descriptor unless it is open.
func (l *Loop) takeReserve() {
	if l.reserve == nil {
		if f, err := os.Open(os.DevNull); err == nil {
			l.reserve = f
		}
	}
}

func (l *Loop) pause(p bool) {
	if l.Paused != nil {
		l.Paused(p)
	}
}

// shedPending accepts one waiting connection, if any comes within a
// millisecond, and closes it.
func shedPending(ln net.Listener) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	_ = tl.SetDeadline(time.Now().Add(time.Millisecond))
	if c, err := tl.Accept(); err == nil {
		c.Close()
	}
	_ = tl.SetDeadline(time.Time{})
}

// OutOfDescriptors reports the errors that mean "no descriptor or buffer
// for a new socket now": the process's or the system's limit, or memory.
func OutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Listen listens on addr and starts the event loops (a gnet.Client of
// loops loops serving h, multicore, with ticks and TCP_NODELAY, logging to
// log) that the accepted connections are enrolled on. The caller serves
// the listener with a Loop and stops the client.
func Listen(addr string, h gnet.EventHandler, loops int, log *slog.Logger) (net.Listener, *gnet.Client, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	cli, err := gnet.NewClient(h,
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(loops),
		gnet.WithTicker(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetlog.New(log)),
		gnet.WithLogLevel(logging.DebugLevel),
	)
	if err == nil {
		err = cli.Start()
	}
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("start the event loops: %w", err)
	}
	return ln, cli, nil
}

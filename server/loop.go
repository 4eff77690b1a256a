package server

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// loopScratch holds the decoders and buffers a request borrows while it is
// served (P3). A loop serves one request at a time, and nothing served off
// the loop keeps any of them (the async paths copy what they need), so one
// set per loop is enough: a connection does not carry its own, and a large
// ack or listing does not leave its grown buffers on an idle connection.
type loopScratch struct {
	push     wire.PushBody
	ack      wire.AckBody
	conf     wire.ConfigureBody
	ackItems []engine.AckItem
	outcomes []engine.Outcome
	depth    engine.DepthInfo
	queues   []engine.QueueInfo
	scratch  []byte
}

// scratchOf returns the scratch of loop, making it at its first connection.
func (s *Server) scratchOf(loop gnet.EventLoop) *loopScratch {
	ls, _ := s.scratch.LoadOrCompute(loop, func() (*loopScratch, bool) { return new(loopScratch), false })
	return ls
}

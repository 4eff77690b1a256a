package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// recorder is a Caller that remembers how its stream ended.
type recorder struct {
	answer chan string
	ended  chan error
}

func newRecorder() *recorder {
	return &recorder{answer: make(chan string, 1), ended: make(chan error, 1)}
}

func (r *recorder) Answered(p []byte) { r.answer <- string(p) }
func (r *recorder) Ended(err error)   { r.ended <- err }

// wait returns the answer, or the stream's error.
func (r *recorder) wait(t *testing.T) (string, error) {
	t.Helper()
	select {
	case a := <-r.answer:
		return a, nil
	case err := <-r.ended:
		return "", err
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never ended")
		return "", nil
	}
}

// fakeServer is the far end of a Mux: it reads frames and lets the test
// answer them.
type fakeServer struct {
	t      *testing.T
	c      net.Conn
	frames chan frameIn
	reads  chan int // the size of each read, to count writes
}

type frameIn struct {
	typ byte
	id  uint64
	p   []byte
}

func pipe(t *testing.T, cfg MuxConfig) (*Mux, *fakeServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, c: <-accepted, frames: make(chan frameIn, 64), reads: make(chan int, 64)}
	go s.read()
	m := NewMux(nc, nil, cfg)
	t.Cleanup(func() { m.Close(); s.c.Close() })
	return m, s
}

func (s *fakeServer) read() {
	var buf []byte
	b := make([]byte, 64<<10)
	for {
		n, err := s.c.Read(b)
		if n > 0 {
			select {
			case s.reads <- n:
			default: // a test that does not count reads
			}
			buf = append(buf, b[:n]...)
			for len(buf) >= HeaderLen {
				typ, id, size := ParseHeader(buf)
				if len(buf) < HeaderLen+size {
					break
				}
				s.frames <- frameIn{typ, id, append([]byte(nil), buf[HeaderLen:HeaderLen+size]...)}
				buf = buf[HeaderLen+size:]
			}
		}
		if err != nil {
			close(s.frames)
			return
		}
	}
}

func (s *fakeServer) next() frameIn {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			s.t.Fatal("the link closed")
		}
		return f
	case <-time.After(10 * time.Second):
		s.t.Fatal("no frame came")
		return frameIn{}
	}
}

func (s *fakeServer) send(typ byte, id uint64, p string) {
	s.t.Helper()
	if _, err := s.c.Write(append(AppendHeader(nil, typ, id, len(p)), p...)); err != nil {
		s.t.Fatal(err)
	}
}

// Answers reach their streams in whatever order they come; a request frame
// carries no tenant, access level or header, and the method, target and
// body given.
func TestMuxAnswersByStream(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	a, b := newRecorder(), newRecorder()
	ida, _ := m.Start(a, "GET", []byte("/api/v1/ephemeral/pop?queue=q"), nil)
	idb, _ := m.Start(b, "POST", []byte("/api/v1/ephemeral/push"), []byte(`{"queue":"q"}`))
	for _, want := range []struct {
		id             uint64
		method, target string
	}{{ida, "GET", "/api/v1/ephemeral/pop?queue=q"}, {idb, "POST", "/api/v1/ephemeral/push"}} {
		f := s.next()
		var r Request
		if f.typ != FrameRequest || f.id != want.id || DecodeRequest(f.p, &r) != nil {
			t.Fatalf("frame %d on stream %d, want a request on %d", f.typ, f.id, want.id)
		}
		if len(r.Tenant) != 0 || r.Access != 0 || len(r.Header) != 0 || string(r.Method) != want.method || string(r.Target) != want.target {
			t.Fatalf("request %+v", r)
		}
	}
	s.send(FrameAnswer, idb, "second")
	s.send(FrameAnswer, ida, "first")
	if got, err := b.wait(t); got != "second" || err != nil {
		t.Fatalf("b: %q %v", got, err)
	}
	if got, err := a.wait(t); got != "first" || err != nil {
		t.Fatalf("a: %q %v", got, err)
	}
	if m.InFlight() != 0 {
		t.Fatalf("%d in flight", m.InFlight())
	}
}

// Frames started under a Hold leave in one write.
func TestMuxHoldWritesTogether(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	m.Hold()
	body := make([]byte, 1000)
	for range 3 {
		if _, err := m.Start(newRecorder(), "POST", []byte("/api/v1/ephemeral/push"), body); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case n := <-s.reads:
		t.Fatalf("%d bytes written under a Hold", n)
	case <-time.After(50 * time.Millisecond):
	}
	m.Release()
	want := 3 * (HeaderLen + (&Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"), Body: body}).EncodedLen())
	got := 0
	for got < want {
		got += <-s.reads
	}
	if got != want {
		t.Fatalf("read %d bytes, want %d", got, want)
	}
	for range 3 {
		s.next()
	}
	// One write on loopback is one read here unless it is very large: the
	// three frames (3 KiB) came in the first read.
	if len(s.reads) != 0 {
		t.Fatalf("more reads than writes: %d left", len(s.reads))
	}
}

// Cancel takes a stream back (its Caller is never called) and tells the
// server; an answer for it afterwards is dropped.
func TestMuxCancel(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	r := newRecorder()
	id, _ := m.Start(r, "GET", []byte("/api/v1/ephemeral/pop?queue=q&wait=true"), nil)
	s.next()
	if !m.Cancel(id) || m.Cancel(id) {
		t.Fatal("Cancel: want true once, then false")
	}
	if f := s.next(); f.typ != FrameCancel || f.id != id {
		t.Fatalf("frame %d on %d, want a cancel of %d", f.typ, f.id, id)
	}
	s.send(FrameAnswer, id, "late")
	other := newRecorder()
	oid, _ := m.Start(other, "GET", []byte("/x"), nil)
	s.next()
	s.send(FrameAnswer, oid, "ok")
	if got, _ := other.wait(t); got != "ok" {
		t.Fatalf("other: %q", got)
	}
	select {
	case a := <-r.answer:
		t.Fatalf("a cancelled stream was answered %q", a)
	case err := <-r.ended:
		t.Fatalf("a cancelled stream ended: %v", err)
	default:
	}
}

// Refusals end their stream with the one rule; a lost connection ends
// every stream, Served for those whose frame was written.
func TestMuxEndsStreamsByTheRule(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	recs := map[byte]*recorder{}
	for _, reason := range []byte{RefuseBusy, RefuseClosing, RefuseTooLarge, RefuseLost} {
		r := newRecorder()
		id, _ := m.Start(r, "POST", []byte("/p"), nil)
		s.next()
		s.send(FrameRefuse, id, string([]byte{reason}))
		recs[reason] = r
	}
	for reason, r := range recs {
		_, err := r.wait(t)
		var se *StreamError
		if !errors.As(err, &se) || se.Served != (reason == RefuseTooLarge || reason == RefuseLost) || se.Busy != (reason == RefuseBusy) || se.Reason != reason {
			t.Fatalf("reason %d: %v (%+v)", reason, err, se)
		}
	}
	written := newRecorder()
	m.Start(written, "POST", []byte("/p"), nil)
	s.next() // the server has it
	m.Hold()
	held := newRecorder()
	m.Start(held, "POST", []byte("/p"), nil) // never leaves: held
	s.c.Close()
	for what, r := range map[string]*recorder{"written": written, "held": held} {
		_, err := r.wait(t)
		var se *StreamError
		if !errors.As(err, &se) || se.Served != (what == "written") || se.Reason != 0 {
			t.Fatalf("%s: %v, want Served=%v", what, err, what == "written")
		}
	}
	if _, err := m.Start(newRecorder(), "GET", []byte("/x"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after the end: %v, want ErrClosed", err)
	}
}

// A frame the server does not send, or one over the limit, ends the Mux.
func TestMuxProtocolErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"a request from the server", AppendHeader(nil, FrameRequest, 0, 0), ErrProtocol},
		{"over the limit", binary.BigEndian.AppendUint32(nil, 1<<20+1), ErrFrameTooLong},
	} {
		m, s := pipe(t, MuxConfig{MaxFrame: 1 << 20})
		r := newRecorder()
		m.Start(r, "GET", []byte("/x"), nil)
		s.next()
		raw := c.raw
		if len(raw) < HeaderLen {
			raw = append(raw, make([]byte, HeaderLen-len(raw))...)
		}
		s.c.Write(raw)
		if _, err := r.wait(t); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// A Mux pings; one that reads nothing for the ping timeout ends.
func TestMuxPingsAndGivesUpOnSilence(t *testing.T) {
	m, s := pipe(t, MuxConfig{PingInterval: 10 * time.Millisecond, PingTimeout: 200 * time.Millisecond})
	if f := s.next(); f.typ != FramePing {
		t.Fatalf("frame %d, want a ping", f.typ)
	}
	go func() {
		for range s.frames { // never answered
		}
	}()
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the silent link was kept")
	}
	if !errors.Is(m.Err(), ErrSilent) {
		t.Fatalf("Err %v, want ErrSilent", m.Err())
	}
}

// A long answer still arriving keeps the link past the ping timeout: its
// bytes count as heard as they come. (One that stalls does not:
// cell/relay's TestStalledAnswerFailsAtThePingTimeout.) Counting only whole
// frames, a 24 MiB relayed answer under -race on a loaded machine once
// took the relay's link down with every call on it. The ping timeout is 1 s
// and the pieces 100 ms apart: with 200 ms and 50 ms a CI run's stall before
// the first piece arrived ended the link (nothing is heard until then).
func TestMuxLongAnswerArrivingSlowlyIsHeard(t *testing.T) {
	m, s := pipe(t, MuxConfig{PingInterval: 10 * time.Millisecond, PingTimeout: time.Second})
	r := newRecorder()
	m.Start(r, "GET", []byte("/slow"), nil)
	req := s.next()
	for req.typ != FrameRequest { // pings may come first
		req = s.next()
	}
	go func() {
		for range s.frames { // pings, never answered
		}
	}()
	const size, piece = 2 << 20, 64 << 10
	msg := append(AppendHeader(nil, FrameAnswer, req.id, size), bytes.Repeat([]byte("a"), size)...)
	for len(msg) > 0 { // 33 pieces 100 ms apart: over three ping timeouts
		n := min(len(msg), piece)
		if _, err := s.c.Write(msg[:n]); err != nil {
			t.Fatalf("the link was closed %d bytes short of the answer: %v (Err %v)", len(msg), err, m.Err())
		}
		msg = msg[n:]
		time.Sleep(100 * time.Millisecond)
	}
	if got, err := r.wait(t); err != nil || len(got) != size {
		t.Fatalf("answer of %d bytes, %v; want %d bytes", len(got), err, size)
	}
	if err := m.Err(); err != nil {
		t.Fatalf("the link ended: %v", err)
	}
}

// A large answer is read whole, past the read buffer; many goroutines
// share one Mux.
func TestMuxLargeAnswersAndConcurrency(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	go func() {
		for f := range s.frames {
			if f.typ != FrameRequest {
				continue
			}
			var r Request
			DecodeRequest(f.p, &r)
			s.c.Write(append(AppendHeader(nil, FrameAnswer, f.id, len(r.Body)), r.Body...))
		}
	}()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, 1+i*3000)
			body[len(body)-1] = byte(i)
			r := newRecorder()
			if _, err := m.Start(r, "POST", []byte("/echo"), body); err != nil {
				t.Error(err)
				return
			}
			got, err := r.wait(t)
			if err != nil || len(got) != len(body) || got[len(got)-1] != byte(i) {
				t.Errorf("call %d: %d bytes %v", i, len(got), err)
			}
		}()
	}
	wg.Wait()
}

// A stream cancelled while its frame still waits for the writer (here
// under a Hold) is taken out of the output: the server never reads the
// request, nor a cancel for it, and CancelStream says it was not sent. One
// cancelled after its frame left is followed by a cancel frame and said
// sent.
func TestMuxCancelBeforeTheFrameLeaves(t *testing.T) {
	m, s := pipe(t, MuxConfig{})
	m.Hold()
	before, _ := m.Start(newRecorder(), "POST", []byte("/before"), []byte("b"))
	held, _ := m.Start(newRecorder(), "POST", []byte("/held"), []byte("h"))
	after, _ := m.Start(newRecorder(), "POST", []byte("/after"), []byte("a"))
	if ok, sent := m.CancelStream(held); !ok || sent {
		t.Fatalf("CancelStream of a held frame: %v, %v; want true, not sent", ok, sent)
	}
	m.Release()
	for _, id := range []uint64{before, after} {
		if f := s.next(); f.typ != FrameRequest || f.id != id {
			t.Fatalf("frame %d on stream %d, want the request of %d (the held one, %d, never leaves)", f.typ, f.id, id, held)
		}
	}
	if ok, sent := m.CancelStream(after); !ok || !sent {
		t.Fatalf("CancelStream of a written frame: %v, %v; want true, sent", ok, sent)
	}
	if f := s.next(); f.typ != FrameCancel || f.id != after {
		t.Fatalf("frame %d on stream %d, want the cancel of %d", f.typ, f.id, after)
	}
	if ok, _ := m.CancelStream(held); ok {
		t.Fatal("a stream cancelled twice")
	}
}

// A request over MaxFrame is refused before it is queued (the server
// would close the link on it); one of exactly MaxFrame leaves.
func TestMuxRequestOverTheFrameLimit(t *testing.T) {
	const limit = 4 << 10
	m, s := pipe(t, MuxConfig{MaxFrame: limit})
	r := &Request{Tenant: []byte("acme"), Access: 3, Method: []byte("POST"), Target: []byte("/p")}
	r.Body = make([]byte, limit-r.EncodedLen()+1)
	if _, err := m.StartRequest(newRecorder(), r); !errors.Is(err, ErrFrameTooLong) || m.InFlight() != 0 {
		t.Fatalf("one byte over: %v, %d in flight; want ErrFrameTooLong, none", err, m.InFlight())
	}
	r.Body = r.Body[:len(r.Body)-1]
	id, err := m.StartRequest(newRecorder(), r)
	if err != nil {
		t.Fatal(err)
	}
	f := s.next()
	var got Request
	if f.typ != FrameRequest || f.id != id || len(f.p) != limit || DecodeRequest(f.p, &got) != nil ||
		string(got.Tenant) != "acme" || got.Access != 3 {
		t.Fatalf("frame %d on %d of %d bytes, tenant %q access %d", f.typ, f.id, len(f.p), got.Tenant, got.Access)
	}
}

// A payload's buffer grows with what arrives: a peer that declares 64 MiB
// and sends 1 KiB costs about a step (1 MiB), not 64 MiB; a whole one
// arrives intact, in the caller's buffer when it is large enough.
func TestPartialPayloadIsNotAllocatedWhole(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readPayload(io.LimitReader(zeros{}, 1024), 64<<20, nil, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v, want ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*payloadStep {
		t.Fatalf("allocated %d bytes for 1 KiB of a 64 MiB frame; want at most %d", got, 2*payloadStep)
	}
	want := 5*payloadStep + 123
	p, err := readPayload(io.LimitReader(&counting{}, int64(want)), want, nil, nil)
	if err != nil || len(p) != want {
		t.Fatalf("len %d, %v; want %d bytes", len(p), err, want)
	}
	for i, b := range p {
		if b != byte(i) {
			t.Fatalf("byte %d is %d, want %d", i, b, byte(i))
		}
	}
	// A reader may return the last bytes together with io.EOF (io.Reader's
	// contract): the payload is whole, not an error. The buffer given,
	// large enough, is the one filled.
	buf := make([]byte, want)
	p, err = readPayload(iotest.DataErrReader(io.LimitReader(&counting{}, int64(want))), want, buf, nil)
	if err != nil || len(p) != want || &p[0] != &buf[0] {
		t.Fatalf("last bytes with io.EOF: len %d, %v; want %d bytes in the buffer given", len(p), err, want)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// counting yields 0, 1, 2, ... 255, 0, ... in reads of at most 7,000 bytes
// (a network's chunks, not aligned with the buffer's steps).
type counting struct{ n int }

func (c *counting) Read(p []byte) (int, error) {
	p = p[:min(len(p), 7000)]
	for i := range p {
		p[i] = byte(c.n)
		c.n++
	}
	return len(p), nil
}

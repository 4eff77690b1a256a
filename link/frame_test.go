package link

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// A request frame decodes into the fields it was encoded from, without
// copying: each field is a view of the payload, capped at its end.
func TestRequestRoundTrip(t *testing.T) {
	in := Request{Tenant: []byte("acme"), Access: 3, Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push?x=1"), Header: []byte("A: b\r\n"), Body: []byte(`{"queue":"q"}`)}
	frame, err := AppendRequest(nil, 42, &in)
	if err != nil {
		t.Fatal(err)
	}
	typ, id, n := ParseHeader(frame)
	if typ != FrameRequest || id != 42 || n != len(frame)-HeaderLen || n != in.EncodedLen() {
		t.Fatalf("header: type %d id %d length %d (frame %d, encoded %d)", typ, id, n, len(frame), in.EncodedLen())
	}
	var out Request
	if err := DecodeRequest(frame[HeaderLen:], &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, got, want string }{
		{"tenant", string(out.Tenant), "acme"}, {"method", string(out.Method), "POST"},
		{"target", string(out.Target), string(in.Target)}, {"header", string(out.Header), "A: b\r\n"},
		{"body", string(out.Body), string(in.Body)},
	} {
		if f.got != f.want {
			t.Fatalf("%s: %q, want %q", f.name, f.got, f.want)
		}
	}
	if out.Access != 3 || cap(out.Tenant) != len(out.Tenant) || cap(out.Target) != len(out.Target) {
		t.Fatalf("access %d; views not capped: tenant cap %d, target cap %d", out.Access, cap(out.Tenant), cap(out.Target))
	}
	// Fields too long for their length prefix are refused, not truncated.
	if _, err := AppendRequest(nil, 1, &Request{Tenant: make([]byte, 1<<16)}); err == nil {
		t.Fatal("a 64 KiB tenant was encoded")
	}
	if _, err := AppendRequest(nil, 1, &Request{Method: make([]byte, 256)}); err == nil {
		t.Fatal("a 256-byte method was encoded")
	}
}

// Which refusals end a stream whose request may have been served.
func TestRefusalServed(t *testing.T) {
	for _, c := range []struct {
		p      []byte
		served bool
	}{
		{[]byte{RefuseBusy}, false}, {[]byte{RefuseClosing}, false},
		{[]byte{RefuseTooLarge}, true}, {[]byte{RefuseLost}, true},
		{[]byte{99}, true}, {nil, true}, {[]byte{RefuseBusy, 0}, true},
	} {
		if got := RefusalServed(c.p); got != c.served {
			t.Fatalf("RefusalServed(%v) = %v, want %v", c.p, got, c.served)
		}
	}
}

// Whatever a peer sends as a request payload either is refused or decodes
// into fields that encode back to exactly the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	frame, _ := AppendRequest(nil, 1, &Request{Method: []byte("POST"), Target: []byte("/echo"), Body: []byte("body")})
	f.Add(frame[HeaderLen:])
	f.Add([]byte{0, 1})
	frame, _ = AppendRequest(nil, 1, &Request{Method: []byte("POST"), Target: []byte("/q?x=1"), Header: []byte("X-Queen-Trace: 1\r\n"), Body: []byte("body")})
	f.Add(frame[HeaderLen:])
	f.Fuzz(func(t *testing.T, p []byte) {
		var r Request
		if DecodeRequest(p, &r) != nil {
			return
		}
		again, err := AppendRequest(nil, 9, &r)
		if err != nil {
			t.Fatal(err)
		}
		if binary.BigEndian.Uint32(again) != uint32(len(p)) || !bytes.Equal(again[HeaderLen:], p) {
			t.Fatalf("decode/encode changed %q into %q", p, again[HeaderLen:])
		}
	})
}

// inbound is a Buffered over a byte slice, as gnet's inbound buffer: what
// is discarded leaves it.
type inbound struct{ b []byte }

func (in *inbound) Peek(n int) ([]byte, error) {
	if n > len(in.b) {
		return in.b, nil
	}
	return in.b[:n], nil
}
func (in *inbound) Discard(n int) (int, error) { in.b = in.b[n:]; return n, nil }
func (in *inbound) InboundBuffered() int       { return len(in.b) }

// A FrameReader hands out a frame only once it is whole, reads a small one
// in place, and refuses one declared over the limit before its payload
// arrives.
func TestFrameReaderSmallFrames(t *testing.T) {
	frame := append(AppendHeader(nil, FrameAnswer, 7, 5), "hello"...)
	for cut := 0; cut < len(frame); cut++ {
		var r FrameReader
		in := &inbound{b: frame[:cut]}
		if _, _, _, ok, err := r.Next(in, 100); ok || err != nil {
			t.Fatalf("%d of %d bytes: ok %v err %v, want to wait", cut, len(frame), ok, err)
		}
		if in.InboundBuffered() != cut || r.Aside() != 0 || r.Begun(in) != (cut > 0) {
			t.Fatalf("%d of %d bytes: %d left buffered, %d aside, begun %v; want a small frame left in place", cut, len(frame), in.InboundBuffered(), r.Aside(), r.Begun(in))
		}
	}
	var r FrameReader
	in := &inbound{b: append(append([]byte{}, frame...), frame[:3]...)}
	typ, id, p, ok, err := r.Next(in, 5)
	if !ok || err != nil || typ != FrameAnswer || id != 7 || string(p) != "hello" {
		t.Fatalf("whole: %d %d %q %v %v", typ, id, p, ok, err)
	}
	if &p[0] != &in.b[HeaderLen] {
		t.Fatal("a whole frame was copied; want it read in place")
	}
	r.Done(in)
	if in.InboundBuffered() != 3 || !r.Begun(in) {
		t.Fatalf("after Done: %d bytes left, begun %v; want the next frame's 3", in.InboundBuffered(), r.Begun(in))
	}
	if _, _, _, ok, err := r.Next(&inbound{b: frame[:HeaderLen]}, 4); ok || err != ErrFrameTooLong {
		t.Fatalf("over the limit: ok %v err %v, want ErrFrameTooLong on the header alone", ok, err)
	}
}

// A frame over BigFrame still arriving is moved aside into a buffer of its
// exact length as its bytes come, in whatever pieces, and handed out whole
// once its last byte has; what follows it stays buffered.
func TestFrameReaderBigFrame(t *testing.T) {
	n := BigFrame + 1
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	frame := append(AppendHeader(nil, FrameRequest, 9, n), payload...)
	next := AppendHeader(nil, FramePing, 0, 0)
	stream := append(append([]byte{}, frame...), next...)
	for _, piece := range []int{1, 13, 4096, 65536, len(stream)} {
		var r FrameReader
		in := &inbound{}
		var got []byte
		for sent := 0; got == nil; {
			if sent == len(stream) {
				t.Fatalf("pieces of %d: the frame never came whole", piece)
			}
			end := min(sent+piece, len(stream))
			in.b = append(in.b, stream[sent:end]...)
			sent = end
			typ, id, p, ok, err := r.Next(in, MaxFrame)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				if sent > HeaderLen && sent < len(frame) && (r.Aside() != len(frame) || in.InboundBuffered() != 0) {
					t.Fatalf("pieces of %d, %d sent: %d aside, %d buffered; want all of it aside in %d bytes", piece, sent, r.Aside(), in.InboundBuffered(), len(frame))
				}
				if !r.Begun(in) {
					t.Fatalf("pieces of %d, %d sent: not begun", piece, sent)
				}
				continue
			}
			if typ != FrameRequest || id != 9 {
				t.Fatalf("pieces of %d: frame %d on stream %d", piece, typ, id)
			}
			got = append([]byte{}, p...)
			r.Done(in)
			if r.Aside() != 0 {
				t.Fatalf("pieces of %d: %d bytes still aside after Done", piece, r.Aside())
			}
			if !bytes.Equal(in.b, stream[len(frame):sent]) {
				t.Fatalf("pieces of %d: %d bytes left buffered, want the %d after the frame", piece, len(in.b), sent-len(frame))
			}
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("pieces of %d: payload differs", piece)
		}
	}
}

// A request's tenant is at most 65,535 bytes and its method 255 (their
// lengths' widths in the frame): at the bound each encodes and decodes back
// whole, one byte over is refused.
func TestRequestFrameBounds(t *testing.T) {
	for _, c := range []struct {
		tenant, method int
		ok             bool
	}{
		{0xffff, 4, true}, {0x10000, 4, false}, {4, 0xff, true}, {4, 0x100, false}, {0, 0, true},
	} {
		r := &Request{Tenant: bytes.Repeat([]byte("t"), c.tenant), Access: 3, Method: bytes.Repeat([]byte("M"), c.method),
			Target: []byte("/q"), Header: []byte("H: v\r\n"), Body: []byte("body")}
		frame, err := AppendRequest(nil, 7, r)
		if (err == nil) != c.ok {
			t.Errorf("tenant %d bytes, method %d: %v, want ok %v", c.tenant, c.method, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		typ, id, n := ParseHeader(frame)
		var back Request
		if typ != FrameRequest || id != 7 || n != len(frame)-HeaderLen || DecodeRequest(frame[HeaderLen:], &back) != nil {
			t.Fatalf("tenant %d bytes, method %d: frame %d %d %d of %d bytes", c.tenant, c.method, typ, id, n, len(frame))
		}
		if !bytes.Equal(back.Tenant, r.Tenant) || !bytes.Equal(back.Method, r.Method) || back.Access != 3 ||
			string(back.Target) != "/q" || string(back.Header) != "H: v\r\n" || string(back.Body) != "body" {
			t.Errorf("tenant %d bytes, method %d: decoded %d, %d bytes, %q %q %q", c.tenant, c.method, len(back.Tenant), len(back.Method), back.Target, back.Header, back.Body)
		}
	}
}

// Streams: ids in order, and a failed link ends each call by whether its
// frame was handed to the socket.
func TestStreamsFailByTheRule(t *testing.T) {
	var s Streams[string]
	for _, v := range []string{"a", "b", "c"} {
		s.Add(v)
	}
	s.Flushed() // a, b and c left
	if id := s.Add("d"); id != 3 || s.Next() != 4 || s.Len() != 4 {
		t.Fatalf("id %d, next %d, len %d", id, s.Next(), s.Len())
	}
	if v, ok := s.Take(1); !ok || v != "b" {
		t.Fatalf("Take(1): %q %v", v, ok)
	}
	if _, ok := s.Take(1); ok {
		t.Fatal("Take(1) twice")
	}
	got := map[string]string{}
	s.Fail(func(v string) { got[v] = "lost" }, func(v string) { got[v] = "unsent" })
	if len(got) != 3 || got["a"] != "lost" || got["c"] != "lost" || got["d"] != "unsent" || s.Len() != 0 {
		t.Fatalf("after Fail: %v, %d left", got, s.Len())
	}
}

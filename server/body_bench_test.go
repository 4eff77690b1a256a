package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store/embedded"
)

// BenchmarkLargeBody sends one request with a body of each size, written
// in 64 KiB pieces over loopback (one chunk each when chunked), and reads
// its answer: the cost of receiving a body should grow with its size, not
// with its square (docs/server.md, request bodies). The body is not JSON,
// so the answer is a 400 after the whole body was read, and the engine
// holds nothing.
func BenchmarkLargeBody(b *testing.B) {
	st, err := embedded.Open(embedded.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	e := engine.New(engine.Config{})
	defer e.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := New(Config{Addr: addr, Engine: e, Store: st, Loops: 1})
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	}()
	for _, chunked := range []bool{false, true} {
		for _, mib := range []int{1, 4, 16} {
			name := fmt.Sprintf("%dMiB", mib)
			if chunked {
				name = "chunked/" + name
			}
			b.Run(name, func(b *testing.B) { benchBody(b, addr, mib<<20, chunked) })
		}
	}
}

func benchBody(b *testing.B, addr string, size int, chunked bool) {
	piece := make([]byte, 64<<10)
	for i := range piece {
		piece[i] = 'x'
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	head := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: b\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n"
	if chunked {
		head = "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n"
	}
	w := bufio.NewWriterSize(c, 80<<10)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		w.WriteString(head)
		for sent := 0; sent < size; sent += len(piece) {
			p := piece[:min(len(piece), size-sent)]
			if chunked {
				fmt.Fprintf(w, "%x\r\n", len(p))
			}
			w.Write(p)
			if chunked {
				w.WriteString("\r\n")
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		if chunked {
			w.WriteString("0\r\n\r\n")
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

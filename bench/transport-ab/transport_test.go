// Package transportab is the measurement behind docs/sdk-transport.md
// ("Go client"): the same push (one 54-byte payload) and non-waiting
// autoAck pop, 8 goroutines on one broker, through stock net/http, a tuned
// net/http, fasthttp's HostClient and PipelineClient, a raw bufio
// connection per goroutine (what bench/internal/rawhttp does) and the Go
// SDK (client), in one run. It is a module of its own so that fasthttp,
// which the SDK does not use, stays out of the root go.mod.
//
//	cd bench/transport-ab && go test -run '^$' -bench . -benchtime 20000x -count 5
package transportab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/client"
	"github.com/valyala/fasthttp"
)

var addr, base string

// TestMain builds the broker from this repository and starts it on a free
// port with a fresh data directory.
func TestMain(m *testing.M) {
	dir, _ := os.MkdirTemp("", "transport-ab")
	bin := filepath.Join(dir, "queen")
	build := exec.Command("go", "build", "-o", bin, "./cmd/queen")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("%v\n%s", err, out))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	base = "http://" + addr
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+port, "QUEEN_DATA_DIR="+filepath.Join(dir, "data"), "QUEEN_LOG_LEVEL=warn")
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	for i := 0; i < 200; i++ {
		if r, err := http.Get(base + "/health"); err == nil {
			r.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	code := m.Run()
	cmd.Process.Kill()
	cmd.Wait()
	os.RemoveAll(dir)
	os.Exit(code)
}

var pushBody = []byte(`{"queue":"fhq","messages":[{"payload":"0123456789012345678901234567890123456789012345678901"}]}`)

const popPath = "/api/v1/ephemeral/pop?queue=fhq&autoAck=true"

func resetQ() {
	c, _ := http.Post(base+"/api/v1/ephemeral/configure", "application/json", bytes.NewReader([]byte(`{"queue":"fhq","options":{"maxLength":1000,"policy":"dropOldest"}}`)))
	if c != nil {
		io.Copy(io.Discard, c.Body)
		c.Body.Close()
	}
	r, _ := http.Post(base+"/api/v1/ephemeral/reset", "application/json", bytes.NewReader([]byte(`{"queue":"fhq"}`)))
	if r != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

func nethttpClient(tuned bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	if tuned {
		tr.DisableCompression = true
		tr.ForceAttemptHTTP2 = false
		tr.WriteBufferSize = 16 << 10
		tr.ReadBufferSize = 16 << 10
	}
	return &http.Client{Transport: tr}
}

func benchNetHTTP(b *testing.B, tuned bool, pop bool) {
	hc := nethttpClient(tuned)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	defer cpu(b)()
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var req *http.Request
			if pop {
				req, _ = http.NewRequest("GET", base+popPath, nil)
			} else {
				req, _ = http.NewRequest("POST", base+"/api/v1/ephemeral/push", bytes.NewReader(pushBody))
				req.Header["Content-Type"] = []string{"application/json"}
			}
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				b.Fatal(resp.StatusCode)
			}
		}
	})
}

// benchFast drives do, the Do of a fasthttp HostClient (a connection per
// call in flight) or PipelineClient (calls pipelined on MaxConns).
func benchFast(b *testing.B, pop bool, do func(*fasthttp.Request, *fasthttp.Response) error) {
	b.ReportAllocs()
	defer cpu(b)()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		for pb.Next() {
			req.Reset()
			if pop {
				req.SetRequestURI(popPath)
				req.Header.SetMethod("GET")
			} else {
				req.SetRequestURI("/api/v1/ephemeral/push")
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.SetBody(pushBody)
			}
			req.Header.SetHost(addr)
			if err := do(req, resp); err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode()/100 != 2 {
				b.Fatal(resp.StatusCode())
			}
		}
	})
}

// raw: one connection per goroutine, request written and flushed, response read
// with Content-Length into a reused buffer (bench/internal/rawhttp).
func benchRaw(b *testing.B, pop bool) {
	b.ReportAllocs()
	defer cpu(b)()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		w := bufio.NewWriterSize(nc, 16<<10)
		r := bufio.NewReaderSize(nc, 16<<10)
		var num [20]byte
		body := make([]byte, 0, 4096)
		for pb.Next() {
			if pop {
				w.WriteString("GET " + popPath + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
			} else {
				w.WriteString("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: ")
				w.Write(strconv.AppendInt(num[:0], int64(len(pushBody)), 10))
				w.WriteString("\r\n\r\n")
				w.Write(pushBody)
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			line, err := r.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if line[9] != '2' {
				b.Fatal(string(line))
			}
			n := -1
			for {
				h, err := r.ReadSlice('\n')
				if err != nil {
					b.Fatal(err)
				}
				if len(h) <= 2 {
					break
				}
				if len(h) > 16 && (h[0] == 'C' || h[0] == 'c') && bytes.EqualFold(h[:15], []byte("content-length:")) {
					n, _ = strconv.Atoi(string(bytes.TrimSpace(h[15:])))
				}
			}
			body = body[:n]
			if _, err := io.ReadFull(r, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchSDK: the Go SDK's own transport (the same push body, one message;
// the pop with autoAck), results decoded as the SDK does.
func benchSDK(b *testing.B, pop bool) {
	c, err := client.New(base)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	payloads := []any{json.RawMessage(`"0123456789012345678901234567890123456789012345678901"`)}
	b.ReportAllocs()
	defer cpu(b)()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			var err error
			if pop {
				_, err = c.Pop(ctx, "fhq", client.PopOptions{AutoAck: true})
			} else {
				_, err = c.Push(ctx, "fhq", payloads, client.PushOptions{})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkTransport(b *testing.B) {
	for _, op := range []string{"push", "pop"} {
		pop := op == "pop"
		resetQ()
		if pop {
			for i := 0; i < 1000; i++ {
				r, _ := http.Post(base+"/api/v1/ephemeral/push", "application/json", bytes.NewReader(pushBody))
				r.Body.Close()
			}
		}
		b.Run(op+"/nethttp", func(b *testing.B) { benchNetHTTP(b, false, pop) })
		b.Run(op+"/nethttp-tuned", func(b *testing.B) { benchNetHTTP(b, true, pop) })
		b.Run(op+"/fasthttp-host", func(b *testing.B) {
			hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256, ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
			benchFast(b, pop, hc.Do)
		})
		b.Run(op+"/fasthttp-pipeline", func(b *testing.B) {
			hc := &fasthttp.PipelineClient{Addr: addr, MaxConns: 4, MaxPendingRequests: 1024, ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
			benchFast(b, pop, hc.Do)
		})
		b.Run(op+"/raw", func(b *testing.B) { benchRaw(b, pop) })
		b.Run(op+"/sdk", func(b *testing.B) { benchSDK(b, pop) })
	}
}

// cpu reports the client process's CPU (user+system, every thread) per op.
func cpu(b *testing.B) func() {
	var r0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	return func() {
		var r1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		ns := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}

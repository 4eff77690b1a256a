package wire

import (
	"bytes"
	"fmt"
	"testing"
)

// Micro-benchmarks of the hot paths (P6). Every one reports allocations;
// the steady state is 0 allocs/op (alloc_test.go pins it).

func BenchmarkParsePopGET(b *testing.B) {
	p := NewParser(Limits{})
	get := []byte(popGET)
	b.SetBytes(int64(len(get)))
	b.ReportAllocs()
	for b.Loop() {
		req, _, err := p.Parse(get)
		if err != nil || req == nil {
			b.Fatal(err)
		}
		if _, err := ParsePop(req.Query(), 30000); err != nil {
			b.Fatal(err)
		}
		if _, ok := req.Header("Authorization"); !ok {
			b.Fatal("no Authorization")
		}
	}
}

// A pop as a client with a real token sends it: an HS256 JWT of about 200
// bytes, most of the request's head.
func BenchmarkParsePopGETWithJWT(b *testing.B) {
	p := NewParser(Limits{})
	get := []byte(popGETWithJWT)
	b.SetBytes(int64(len(get)))
	b.ReportAllocs()
	for b.Loop() {
		req, _, err := p.Parse(get)
		if err != nil || req == nil {
			b.Fatal(err)
		}
		if _, ok := req.Header("Authorization"); !ok {
			b.Fatal("no Authorization")
		}
	}
}

const popGETWithJWT = "GET /api/v1/ephemeral/pop?queue=inbox-7&wait=true&timeout=30000 HTTP/1.1\r\n" +
	"Host: localhost:6632\r\nUser-Agent: queen-go/1.0\r\n" +
	"Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJyZXF1ZXN0ZXItNyIsInRlbmFudCI6ImJlbmNoIiwicm9sZSI6InJlYWQtd3JpdGUiLCJleHAiOjE3OTk5OTk5OTl9.p0Hy0l3yqkcQe7a2Vv4N0o3k7wQ8c8t3sJt3mS2z1xY\r\n\r\n"

func BenchmarkParsePushPOST(b *testing.B) {
	p := NewParser(Limits{})
	post := postRequest("/api/v1/ephemeral/push", pushBody100x64())
	b.SetBytes(int64(len(post)))
	b.ReportAllocs()
	for b.Loop() {
		if req, _, err := p.Parse(post); err != nil || req == nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParsePushChunked(b *testing.B) {
	p := NewParser(Limits{})
	post := chunkedRequest("/api/v1/ephemeral/push", pushBody100x64(), 1024)
	b.SetBytes(int64(len(post)))
	b.ReportAllocs()
	for b.Loop() {
		if req, _, err := p.Parse(post); err != nil || req == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParsePushPOSTInReads delivers the request in 1 KiB reads, each
// followed by a Parse call, as a connection would.
func BenchmarkParsePushPOSTInReads(b *testing.B) {
	p := NewParser(Limits{})
	post := postRequest("/api/v1/ephemeral/push", pushBody100x64())
	b.SetBytes(int64(len(post)))
	b.ReportAllocs()
	for b.Loop() {
		for n := 1024; ; n += 1024 {
			req, _, err := p.Parse(post[:min(n, len(post))])
			if err != nil {
				b.Fatal(err)
			}
			if req != nil {
				break
			}
		}
	}
}

func BenchmarkDecodePush100x64(b *testing.B) {
	body := pushBody100x64()
	var push PushBody
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := push.Decode(body); err != nil || len(push.Payloads) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAck100(b *testing.B) {
	body := ackBody100()
	var ack AckBody
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ack.Decode(body); err != nil || len(ack.Acks) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeConfigure(b *testing.B) {
	body := []byte(configureBody)
	var cfg ConfigureBody
	b.ReportAllocs()
	for b.Loop() {
		if err := cfg.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWritePop100 writes a pop answer of 100 messages of 64 bytes:
// the body into a reused buffer, the head into another (one vectored write).
func BenchmarkWritePop100(b *testing.B) {
	ids, payloads := popFixture(100)
	var head, body []byte
	head, body = writePop(head, body, ids, payloads)
	b.SetBytes(int64(len(head) + len(body)))
	b.ReportAllocs()
	for b.Loop() {
		head, body = writePop(head, body, ids, payloads)
	}
}

// BenchmarkWritePop100OneBuffer is the same answer as one contiguous
// response (head, then the body copied after it).
func BenchmarkWritePop100OneBuffer(b *testing.B) {
	ids, payloads := popFixture(100)
	var head, body, out []byte
	b.ReportAllocs()
	for b.Loop() {
		head, body = writePop(head, body, ids, payloads)
		out = AppendResponse(out[:0], Head{Status: 200}, body)
	}
	_ = out
}

func BenchmarkWriteError(b *testing.B) {
	e := &Error{Status: 400, Code: CodeBadRequest, Msg: `unknown option "ttlSecond"; the options are maxBytes, maxLength, policy, ttlSeconds, leaseSeconds, retryLimit and windowBuffer`}
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		out = AppendError(out[:0], Head{}, e)
	}
}

// BenchmarkLargeBodyInReads receives one request with a large body in
// 64 KiB reads, as a server connection does. "repeek" hands the parser the
// whole buffer after every read, copied as gnet's Peek copies its ring
// buffer (what the server did before Parser.Need): its cost grows with the
// square of the size. "need" calls Parse again only once Need bytes are
// buffered: its cost grows with the size.
func BenchmarkLargeBodyInReads(b *testing.B) {
	for _, mode := range []string{"repeek", "need"} {
		for _, mib := range []int{1, 4, 16} {
			req := postRequest("/api/v1/ephemeral/push", bytes.Repeat([]byte{'x'}, mib<<20))
			b.Run(fmt.Sprintf("%s/%dMiB", mode, mib), func(b *testing.B) {
				p := NewParser(Limits{})
				var inbound, peeked []byte
				b.SetBytes(int64(len(req)))
				for b.Loop() {
					inbound = inbound[:0]
					for off := 0; off < len(req); {
						n := min(64<<10, len(req)-off)
						inbound = append(inbound, req[off:off+n]...) // the read
						off += n
						if mode == "need" && int64(len(inbound)) < p.Need() {
							continue
						}
						buf := inbound
						if mode == "repeek" {
							peeked = append(peeked[:0], inbound...)
							buf = peeked
						}
						r, _, err := p.Parse(buf)
						if err != nil {
							b.Fatal(err)
						}
						if r != nil {
							break
						}
					}
				}
			})
		}
	}
}

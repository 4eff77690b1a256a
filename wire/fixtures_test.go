package wire

import (
	"fmt"
	"strings"

	"github.com/queenmq/ephemeral/wire/wiretest"
)

// Typical requests and bodies shared by the allocation pins and the
// benchmarks.

// pushBody100x64 is a push of 100 messages whose payloads are 64-byte JSON
// objects.
func pushBody100x64() []byte { return wiretest.PushBody100x64() }

func payload64(i int) []byte {
	p := fmt.Sprintf(`{"user":"alice","seq":%d,"text":"`, i)
	return []byte(p + strings.Repeat("x", 64-len(p)-2) + `"}`)
}

// ackBody100 settles 100 ids.
func ackBody100() []byte { return wiretest.AckBody100() }

func postRequest(path string, body []byte) []byte {
	return []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: localhost:6632\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body))
}

func chunkedRequest(path string, body []byte, chunk int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: localhost:6632\r\nTransfer-Encoding: chunked\r\n\r\n", path)
	for len(body) > 0 {
		n := min(chunk, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return []byte(b.String())
}

const configureBody = `{"queue":"presence","options":{"maxBytes":1048576,"maxLength":1000,"policy":"dropOldest","ttlSeconds":30,"leaseSeconds":15,"retryLimit":3,"windowBuffer":{"ms":20,"count":50}}}`

// writePop builds a pop answer of n messages the way the server will: the
// body into one reused buffer, the head into another (sent together with a
// vectored write).
func writePop(head, body []byte, ids [][]byte, payloads [][]byte) ([]byte, []byte) {
	body = AppendPopStart(body[:0], "inbox-1234")
	for i := range payloads {
		body = AppendPopMessage(body, i, ids[i], "room-7", 0, payloads[i])
	}
	body = AppendPopEnd(body)
	head = AppendHead(head[:0], Head{Status: 200, ContentLength: len(body)})
	return head, body
}

func popFixture(n int) (ids, payloads [][]byte) {
	for i := 0; i < n; i++ {
		ids = append(ids, []byte(fmt.Sprintf("e:9f3a1c2b4d5e:room-7:%d", 1000+i)))
		payloads = append(payloads, payload64(i))
	}
	return ids, payloads
}

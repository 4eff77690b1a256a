// Package wiretest holds the typical route bodies that the wire package's
// allocation pins and benchmarks decode, exported so that a comparison kept
// outside the root module (bench/libcompare, which decodes the same bytes
// with goccy/go-json and encoding/json) measures exactly what wire's own
// benchmarks do. It is test plumbing; nothing in the broker imports it.
package wiretest

import (
	"fmt"
	"strings"
)

// PushBody100x64 is a push of 100 messages whose payloads are 64-byte JSON
// objects.
func PushBody100x64() []byte {
	var b strings.Builder
	b.WriteString(`{"queue":"inbox-1234","partition":"room-7","messages":[`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		p := fmt.Sprintf(`{"user":"alice","seq":%d,"text":"`, i)
		p += strings.Repeat("x", 64-len(p)-2) + `"}`
		b.WriteString(`{"payload":` + p + `}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// AckBody100 settles 100 ids.
func AckBody100() []byte {
	var b strings.Builder
	b.WriteString(`{"queue":"inbox-1234","group":"workers","acks":[`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"e:9f3a1c2b4d5e:room-7:%d","status":"completed"}`, 1000+i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

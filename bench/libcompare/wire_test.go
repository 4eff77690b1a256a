package libcompare

import (
	stdjson "encoding/json"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/queenmq/ephemeral/wire"
	"github.com/queenmq/ephemeral/wire/wiretest"
)

// The structs a library decoder needs for the push and ack bodies.
// Payloads as RawMessage, because decoding them into values is what P2
// forbids.

type libPush struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
	Messages  []struct {
		Payload stdjson.RawMessage `json:"payload"`
	} `json:"messages"`
}

type libAck struct {
	Queue string `json:"queue"`
	Group string `json:"group"`
	Acks  []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"acks"`
}

func BenchmarkDecodePush100x64Goccy(b *testing.B) {
	body := wiretest.PushBody100x64()
	var v libPush
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := gojson.Unmarshal(body, &v); err != nil || len(v.Messages) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePush100x64Std(b *testing.B) {
	body := wiretest.PushBody100x64()
	var v libPush
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := stdjson.Unmarshal(body, &v); err != nil || len(v.Messages) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAck100Goccy(b *testing.B) {
	body := wiretest.AckBody100()
	var v libAck
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := gojson.Unmarshal(body, &v); err != nil || len(v.Acks) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAck100Std(b *testing.B) {
	body := wiretest.AckBody100()
	var v libAck
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := stdjson.Unmarshal(body, &v); err != nil || len(v.Acks) != 100 {
			b.Fatal(err)
		}
	}
}

// TestLibraryDecodersAgree makes sure the comparison decodes the same
// thing ours does.
func TestLibraryDecodersAgree(t *testing.T) {
	body := wiretest.PushBody100x64()
	var ours wire.PushBody
	if err := ours.Decode(body); err != nil {
		t.Fatal(err)
	}
	var g libPush
	if err := gojson.Unmarshal(body, &g); err != nil {
		t.Fatal(err)
	}
	for i, m := range g.Messages {
		if string(m.Payload) != string(ours.Payloads[i]) {
			t.Fatalf("payload %d: %s vs %s", i, m.Payload, ours.Payloads[i])
		}
	}
	var a libAck
	var oursAck wire.AckBody
	if err := gojson.Unmarshal(wiretest.AckBody100(), &a); err != nil || oursAck.Decode(wiretest.AckBody100()) != nil {
		t.Fatal(err)
	}
	for i, x := range a.Acks {
		if x.ID != string(oursAck.Acks[i].ID) {
			t.Fatalf("ack %d", i)
		}
	}
}

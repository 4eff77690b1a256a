package wire

import (
	stdjson "encoding/json"
	"testing"

	gojson "github.com/goccy/go-json"
)

// The measurement behind decoding the bodies with our own scanner rather
// than goccy/go-json (decisions.md): the same bodies decoded by goccy and
// by encoding/json into the structs a library decoder needs. Payloads as
// RawMessage, because decoding them into values is what P2 forbids.

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
	body := pushBody100x64()
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
	body := pushBody100x64()
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
	body := ackBody100()
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
	body := ackBody100()
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
	body := pushBody100x64()
	var ours PushBody
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
	var oursAck AckBody
	if err := gojson.Unmarshal(ackBody100(), &a); err != nil || oursAck.Decode(ackBody100()) != nil {
		t.Fatal(err)
	}
	for i, x := range a.Acks {
		if x.ID != string(oursAck.Acks[i].ID) {
			t.Fatalf("ack %d", i)
		}
	}
}

package bench

import "testing"

func TestEachMessage(t *testing.T) {
	body := []byte(`{"queue":"q","messages":[` +
		`{"id":"e:1:Default:0","partition":"Default","attempts":0,"payload":{"inbox":"a","data":"t1"}},` +
		` { "payload" : [1,"]}",{"x":null}] , "id" : "e:1:Default:1" }]}`)
	var ids, payloads []string
	n, err := eachMessage(body, func(id, p []byte) {
		ids = append(ids, string(id))
		payloads = append(payloads, string(p))
	})
	if err != nil || n != 2 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if ids[0] != "e:1:Default:0" || ids[1] != "e:1:Default:1" {
		t.Fatalf("ids %q", ids)
	}
	if payloads[0] != `{"inbox":"a","data":"t1"}` || payloads[1] != `[1,"]}",{"x":null}]` {
		t.Fatalf("payloads %q", payloads)
	}
	if n, err := eachMessage([]byte(`{"queue":"q","messages":[]}`), func(_, _ []byte) {}); n != 0 || err != nil {
		t.Fatalf("empty: %d %v", n, err)
	}
	if _, err := eachMessage([]byte(`{"queue":"q","messages":[{"id":"x`), func(_, _ []byte) {}); err == nil {
		t.Fatal("a truncated answer was accepted")
	}
}

func TestStamp(t *testing.T) {
	p := stamp(nil, 64, 0x0123456789abcdef)
	if len(p) != 64 || p[0] != '"' || p[63] != '"' {
		t.Fatalf("payload %q", p)
	}
	if ts, ok := readStamp(p); !ok || ts != 0x0123456789abcdef {
		t.Fatalf("readStamp = %x %v", ts, ok)
	}
	inbox, data, ok := splitRequest([]byte(`{"inbox":"qb-inbox-3","data":` + string(p) + `}`))
	if !ok || string(inbox) != "qb-inbox-3" || string(data) != string(p) {
		t.Fatalf("splitRequest = %q %q %v", inbox, data, ok)
	}
}

package engine

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseID: every id AppendID mints parses back to its partition and
// seq, whatever the partition holds (colons included); an id of another
// incarnation is stale; and no input makes parseID panic or claim as ours
// an id that does not end in a decimal seq after this incarnation's prefix
// (T3: ack ids come from clients).
func FuzzParseID(f *testing.F) {
	e := New(Config{})
	f.Cleanup(e.Close)
	f.Add("Default", uint64(0), "e:00ff:Default:1")
	f.Add("a:b:c", uint64(18446744073709551615), "e::x:1")
	f.Add("", uint64(7), "e:0:p:007")
	f.Add("p", uint64(1), "e:"+e.incHex+":p:99999999999999999999")
	f.Fuzz(func(t *testing.T, partition string, seq uint64, raw string) {
		id := string(e.AppendID(nil, partition, seq))
		if partition != "" {
			kind, p, s := e.parseID(id)
			if kind != idOurs || p != partition || s != seq {
				t.Fatalf("parseID(%q) = %v %q %d, want ours %q %d", id, kind, p, s, partition, seq)
			}
		}
		other := "e:" + strings.Repeat("0", len(e.incHex)) + id[2+len(e.incHex):]
		if other != id && partition != "" {
			if kind, _, _ := e.parseID(other); kind != idStale {
				t.Fatalf("parseID(%q) of another incarnation = %v, want stale", other, kind)
			}
		}
		kind, p, s := e.parseID(raw)
		if kind != idOurs {
			return
		}
		pre := "e:" + e.incHex + ":" + p + ":"
		if !strings.HasPrefix(raw, pre) {
			t.Fatalf("parseID(%q) = ours %q %d, but the id does not start with %q", raw, p, s, pre)
		}
		if v, err := strconv.ParseUint(raw[len(pre):], 10, 64); err != nil || v != s {
			t.Fatalf("parseID(%q) = ours seq %d, but it ends in %q", raw, s, raw[len(pre):])
		}
	})
}

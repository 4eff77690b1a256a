package cell

import (
	"fmt"
	"testing"
	"time"
)

// StaticView computes the owners a Membership's view of the same set
// computes, whatever the order it is given the members in.
func TestStaticView(t *testing.T) {
	ms := []Member{{ID: "c:1"}, {ID: "a:1"}, {ID: "b:1"}}
	v := StaticView(3, "b:1", ms, false)
	w := newView(1, "a:1", []Member{{ID: "a:1"}, {ID: "b:1"}, {ID: "c:1"}}, false, time.Hour, monotonic)
	if v.Members[0].ID != "a:1" || v.Fenced() || v.Generation != 3 {
		t.Fatalf("StaticView: %+v fenced=%v", v.Members, v.Fenced())
	}
	for i := range 1000 {
		q := fmt.Sprint("q", i)
		a, _ := v.Owner("t", q)
		b, _ := w.Owner("t", q)
		if a != b {
			t.Fatalf("%s: owner %v in the static view, %v in the other", q, a, b)
		}
		if v.Owns("t", q) != (a.ID == "b:1") {
			t.Fatalf("%s: Owns disagrees with Owner", q)
		}
	}
	if f := StaticView(1, "a:1", ms, true); !f.Fenced() || f.Owns("t", "q") {
		t.Fatal("a fenced static view is not fenced, or owns")
	}
}

// StaticViewUntil keeps self among the members, and so the owner of what
// it wins, while the clock fences it: Owner names self, Fenced is true
// and Owns is false once the deadline has passed, and not before.
func TestStaticViewUntil(t *testing.T) {
	ms := []Member{{ID: "b:1"}, {ID: "a:1"}}
	valid := StaticViewUntil(2, "a:1", ms, time.Now().Add(time.Hour))
	lapsed := StaticViewUntil(2, "a:1", ms, time.Now())
	if valid.Fenced() || !lapsed.Fenced() {
		t.Fatalf("fenced: %v before the deadline, %v after; want false, true", valid.Fenced(), lapsed.Fenced())
	}
	if lapsed.Members[0].ID != "a:1" || len(lapsed.Members) != 2 {
		t.Fatalf("members %+v: want both, sorted, self kept", lapsed.Members)
	}
	owned := 0
	for i := range 100 {
		q := fmt.Sprint("q", i)
		m, ok := lapsed.Owner("t", q)
		if !ok {
			t.Fatal("no owner in a view of two")
		}
		if m.ID == "a:1" {
			owned++
			if lapsed.Owns("t", q) || !valid.Owns("t", q) {
				t.Fatalf("%s: Owns %v lapsed, %v valid; want false, true", q, lapsed.Owns("t", q), valid.Owns("t", q))
			}
		}
	}
	if owned == 0 {
		t.Fatal("self owns none of 100 queues: the test shows nothing")
	}
}

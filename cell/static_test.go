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

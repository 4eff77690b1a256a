package engine

import "testing"

// D17 (docs/cell.md, declarations across members): Undeclare takes a
// declaration back and keeps the contents; a queue that never held
// anything goes at once; Declared and EachDeclared read what is declared.
func TestUndeclareKeepsContents(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{Has: HasMaxLength, Options: Options{MaxLength: 7}})
	h.push("q", "p", "a", "b")
	if o, ok := h.e.Declared("default", "q"); !ok || o.MaxLength != 7 {
		t.Fatalf("Declared = %+v %v, want maxLength 7", o, ok)
	}
	if !h.e.Undeclare("default", "q") {
		t.Fatal("Undeclare of a declared queue reported false")
	}
	info := h.infoOf("q")
	if info.Declared || info.Depth != 2 || info.Options != *h.e.defaultOpts {
		t.Fatalf("after Undeclare: %+v; want implicit, depth 2, default options", info)
	}
	if _, ok := h.e.Declared("default", "q"); ok {
		t.Fatal("Declared after Undeclare")
	}
	if h.e.Undeclare("default", "q") {
		t.Fatal("Undeclare of an implicit queue reported true")
	}
	if got := h.pop(PopRequest{Queue: "q", Group: "g", Batch: 5}); len(got) != 2 {
		t.Fatalf("popped %d after Undeclare, want the 2 pushed before", len(got))
	}
}

func TestUndeclarePristineQueueGoes(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("never-owned", OptionSet{})
	if !h.e.Undeclare("default", "never-owned") {
		t.Fatal("Undeclare reported false")
	}
	if h.listed("never-owned") {
		t.Fatal("a declared queue that never held anything is still listed after Undeclare")
	}
	if h.e.Undeclare("default", "absent") || h.e.Undeclare("default", "") {
		t.Fatal("Undeclare of nothing reported true")
	}
}

func TestEachDeclared(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("a", OptionSet{})
	h.configure("b", OptionSet{Has: HasRetryLimit, Options: Options{RetryLimit: 2}})
	h.push("implicit", "p", "x")
	if _, err := h.e.Push("other", "c", "p", [][]byte{[]byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Configure("other", "c", OptionSet{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]Options{}
	h.e.EachDeclared(func(tenant, queue string, o Options) bool {
		got[tenant+"/"+queue] = o
		return true
	})
	if len(got) != 3 || got["default/b"].RetryLimit != 2 {
		t.Fatalf("EachDeclared: %+v; want default/a, default/b (retryLimit 2), other/c", got)
	}
	if _, ok := got["default/implicit"]; ok {
		t.Fatal("EachDeclared walked an implicit queue")
	}
}

package wire

import "testing"

func TestParserPoolLendsBackWhatItWasGiven(t *testing.T) {
	pp := ParserPool{Limits: Limits{MaxBody: 123}}
	p := pp.Get()
	if p.Limits.MaxBody != 123 {
		t.Fatalf("a new parser's limits: %+v", p.Limits)
	}
	pp.Put(p)
	if q := pp.Get(); q != p {
		t.Fatal("the parser put back was not lent again")
	}
	if q := pp.Get(); q == p {
		t.Fatal("one parser lent twice")
	}
	for range maxIdleParsers + 10 {
		pp.Put(NewParser(Limits{}))
	}
	if len(pp.idle) != maxIdleParsers {
		t.Fatalf("the pool keeps %d idle parsers, want at most %d", len(pp.idle), maxIdleParsers)
	}
}

package wire

// Query is a request's query string (after '?'), still percent-encoded.
// Lookups decode names and values ('+' is a space) only when they carry an
// escape, into the request's scratch arena; otherwise they return
// sub-slices of the request buffer and allocate nothing.
type Query struct {
	raw []byte
	s   *scratch
}

// ParseQuery wraps a raw query string that did not come from the Parser,
// refusing a malformed percent-escape as the Parser does. Its decoded values
// go to an arena of its own.
func ParseQuery(raw []byte) (Query, error) {
	if i := badEscape(raw); i >= 0 {
		return Query{}, shapeError(CodeBadRequest, "query string has a malformed percent-escape at byte %d", i)
	}
	return Query{raw: raw, s: new(scratch)}, nil
}

// Raw returns the query as received.
func (q Query) Raw() []byte { return q.raw }

// Get returns the decoded value of the first parameter named name. A
// parameter without '=' has an empty value.
func (q Query) Get(name string) (value []byte, ok bool) {
	for it := q.Params(); it.Next(); {
		if it.NameIs(name) {
			return it.Value(), true
		}
	}
	return nil, false
}

// Params iterates the parameters in order:
//
//	for it := q.Params(); it.Next(); { it.Name(); it.Value() }
func (q Query) Params() ParamIter { return ParamIter{rest: q.raw, s: q.s} }

// ParamIter walks a query's name=value pairs; empty pairs ("a=1&&b=2")
// are skipped.
type ParamIter struct {
	rest      []byte
	name, val []byte // raw
	s         *scratch
}

// Next advances to the next parameter and reports whether there is one.
func (it *ParamIter) Next() bool {
	for len(it.rest) > 0 {
		pair := it.rest
		it.rest = nil
		for i, c := range pair {
			if c == '&' {
				pair, it.rest = pair[:i], pair[i+1:]
				break
			}
		}
		if len(pair) == 0 {
			continue
		}
		it.name, it.val = pair, nil
		for i, c := range pair {
			if c == '=' {
				it.name, it.val = pair[:i], pair[i+1:]
				break
			}
		}
		return true
	}
	return false
}

// RawName and RawValue return the current parameter still encoded.
func (it *ParamIter) RawName() []byte  { return it.name }
func (it *ParamIter) RawValue() []byte { return it.val }

// Name returns the current parameter's decoded name.
func (it *ParamIter) Name() []byte { return unescape(it.arena(), it.name, true) }

// Value returns the current parameter's decoded value.
func (it *ParamIter) Value() []byte { return unescape(it.arena(), it.val, true) }

// NameIs reports whether the current parameter's decoded name is name,
// without decoding into the arena.
func (it *ParamIter) NameIs(name string) bool {
	raw := it.name
	if !needsUnescape(raw, true) {
		return string(raw) == name
	}
	// Decode byte by byte against name: an escaped name is rare and short.
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%' && i+2 < len(raw) && hexVal[raw[i+1]] >= 0 && hexVal[raw[i+2]] >= 0:
			c = byte(hexVal[raw[i+1]])<<4 | byte(hexVal[raw[i+2]])
			i += 2
		case c == '+':
			c = ' '
		}
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

func (it *ParamIter) arena() *scratch {
	if it.s == nil {
		// A zero Query (a request without '?') has nothing to decode.
		it.s = new(scratch)
	}
	return it.s
}

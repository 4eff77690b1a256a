package link

// The one rule for a stream that ends without an answer (docs/link.md, "The
// one rule for a lost answer"). A request whose frame was handed to the
// connection may have been served once its stream ends unanswered: the link
// failed, the caller gave up, or the server refused only the answer. Such a
// push or ack is never sent again by anyone on the way; the caller learns
// "may have been applied". A request refused before it was served, or
// never handed to a connection, was not served and may be sent again.

// RefusalServed reports whether a refuse frame with payload p ends a
// stream whose request may have been served: too large (served, its answer
// over the limit) and lost (relayed on and its answer lost) may have been;
// busy and closing were refused before serving. A payload that is not one
// known reason byte is taken as "may have been": nothing is repeated on a
// refusal the receiver cannot read.
func RefusalServed(p []byte) bool {
	if len(p) != 1 {
		return true
	}
	switch p[0] {
	case RefuseBusy, RefuseClosing:
		return false
	}
	return true
}

package wire

// Bodies of the routes' success answers (docs/routes.md), appended
// into the caller's buffer. Payloads and the options a client sent go out
// verbatim (AppendRaw); names and ids are escaped.

// AppendPushed appends push's 201 body: {"pushed":n}.
func AppendPushed(dst []byte, n int) []byte {
	dst = append(dst, `{"pushed":`...)
	dst = AppendInt(dst, int64(n))
	return append(dst, '}')
}

// AppendPopStart opens pop's 200 body: {"queue":Q,"messages":[ . Follow
// with one AppendPopMessage per message and close with AppendPopEnd.
func AppendPopStart(dst []byte, queue string) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	return append(dst, `,"messages":[`...)
}

// AppendPopMessage appends the i-th (from 0) message of a pop answer:
// {"id":..,"partition":..,"attempts":..,"payload":<payload verbatim>}.
func AppendPopMessage(dst []byte, i int, id []byte, partition string, attempts int, payload []byte) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"partition":`...)
	dst = appendString(dst, partition)
	dst = append(dst, `,"attempts":`...)
	dst = AppendInt(dst, int64(attempts))
	dst = append(dst, `,"payload":`...)
	dst = append(dst, payload...)
	return append(dst, '}')
}

// AppendPopEnd closes a pop answer.
func AppendPopEnd(dst []byte) []byte { return append(dst, "]}"...) }

// AppendAckStart opens ack's 200 body: {"results":[ .
func AppendAckStart(dst []byte) []byte { return append(dst, `{"results":[`...) }

// AppendAckResult appends the i-th (from 0) result: {"id":..,"outcome":..}.
// outcome is one of acked, redelivered, stale, unknown.
func AppendAckResult(dst []byte, i int, id []byte, outcome string) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, outcome)
	return append(dst, '}')
}

// AppendAckEnd closes an ack answer.
func AppendAckEnd(dst []byte) []byte { return append(dst, "]}"...) }

// AppendConfigured appends configure's 201 body: {"queue":Q,"options":O}
// with the options exactly as sent ({} when none were sent) (D9).
func AppendConfigured(dst []byte, queue string, rawOptions []byte) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"options":`...)
	if len(rawOptions) == 0 {
		return append(dst, "{}}"...)
	}
	dst = append(dst, rawOptions...)
	return append(dst, '}')
}

// AppendReset appends reset's 200 body: {"queue":Q,"dropped":n}.
func AppendReset(dst []byte, queue string, dropped int64) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"dropped":`...)
	dst = AppendInt(dst, dropped)
	return append(dst, '}')
}

// AppendDeleted appends delete's 200 body:
// {"queue":Q,"deleted":bool,"declared":bool}.
func AppendDeleted(dst []byte, queue string, deleted, declared bool) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"deleted":`...)
	dst = AppendBool(dst, deleted)
	dst = append(dst, `,"declared":`...)
	dst = AppendBool(dst, declared)
	return append(dst, '}')
}

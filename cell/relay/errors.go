package relay

import (
	"errors"
	"fmt"
)

// Errors a call can end with. A call either returns the owner's answer
// (whatever its status) or an *Error wrapping one of these kinds.
var (
	// ErrUnreachable: no answer could be had from the peer: the dial or the
	// handshake failed, or the connection was lost or stopped answering
	// pings while the call was in flight. The server answers 503
	// ephemeral_forward_failed.
	ErrUnreachable = errors.New("relay: peer unreachable")
	// ErrAuth: the peer refused our cell secret, or could not prove it
	// knows it. Also forward-failed for a client; it is a misconfiguration.
	ErrAuth = errors.New("relay: cell secret refused")
	// ErrOverloaded: the bound on calls in flight to this peer (ours, or
	// the peer's per connection) is reached. Forward-failed.
	ErrOverloaded = errors.New("relay: too many calls in flight to the peer")
	// ErrTooLarge: the request does not fit in one frame. Forward-failed.
	ErrTooLarge = errors.New("relay: request over the frame limit")
	// ErrTimeout: the call's deadline passed before the answer came.
	// Forward-failed: the owner did not answer in time.
	ErrTimeout = errors.New("relay: deadline passed before the answer")
	// ErrCanceled: the caller cancelled the call (its client went away);
	// the owner was told to stop. There is no one to answer.
	ErrCanceled = errors.New("relay: call cancelled by the caller")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("relay: client closed")
)

// Error is a failed call: Kind is one of the sentinels above (errors.Is
// matches it), Cause what the network or the peer said, if anything.
type Error struct {
	Addr  string
	Kind  error
	Cause error
	// Sent reports that the request was handed to a connection to the peer
	// (or the peer refused only its answer), so the peer may have acted on
	// it. False means the peer provably never read it: no connection could
	// be had, the frame was never queued, or the peer refused the stream
	// before serving it.
	Sent bool
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%v (%s): %v", e.Kind, e.Addr, e.Cause)
	}
	return fmt.Sprintf("%v (%s)", e.Kind, e.Addr)
}

// Is matches the kind; Unwrap exposes the cause.
func (e *Error) Is(target error) bool { return target == e.Kind }
func (e *Error) Unwrap() error        { return e.Cause }

// ForwardFailed reports whether err means the server should answer 503
// ephemeral_forward_failed: every failure but the caller's own
// cancellation, after which nobody is waiting for an answer.
func ForwardFailed(err error) bool {
	return err != nil && !errors.Is(err, ErrCanceled)
}

// MaybeDelivered reports whether a failed call's request may have reached
// the peer and been acted on (Error.Sent). A server answers 503
// ephemeral_forward_failed only when it is false: that code promises the
// client the request was not applied (docs/cell.md, "SDKs").
func MaybeDelivered(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Sent
	}
	return err != nil
}

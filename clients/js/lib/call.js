// One call of the transport, whatever carries it (an HTTP/1.1 connection,
// lib/transport.js, or a link's stream, lib/link.js): its deadline, its
// caller's signal, and the promise that settles with the answer.

/** The connection to the broker failed; `sent` is false when the call provably never reached it. */
export class ConnectionError extends Error {
  constructor (message, { code, dial = false, sent = true, cause } = {}) {
    super('queen: ' + message, cause ? { cause } : undefined)
    this.name = 'ConnectionError'
    this.code = code
    this.dial = dial
    this.sent = sent
  }
}

export function timeoutError (method, path, ms) {
  return new DOMException(`queen: ${method} ${path}: no answer within ${ms} ms`, 'TimeoutError')
}

/**
 * One call; `promise` settles with { status, body, retryAfter }. `path` is
 * the route's path and query (without the URL's own path); `conn` is what
 * carries it once sent, and is told when the caller gives up on it
 * (abandon): an HTTP connection of its own is closed, a link's stream is
 * cancelled.
 */
export class Call {
  constructor (method, path, body, timeout, signal, safe) {
    this.method = method
    this.path = path
    this.body = body
    this.bodyLen = body === undefined ? -1 : Buffer.byteLength(body)
    this.out = null // the HTTP/1.1 request, built when sent on a connection
    this.id = -1 // the stream, when sent on a link
    this.timeout = timeout
    this.deadline = timeout > 0 ? Date.now() + timeout : Infinity
    this.safe = safe
    this.reused = false
    this.done = false
    this.conn = null
    this.signal = signal
    this.onAbort = null
    this.busyWait = 0 // the last backoff after a link's "busy" refusal
    this.closings = 0 // the link's "closing" refusals
    this.background = false // the cell's waiting view read: keeps no process alive (lib/cellview.js)
    this.promise = new Promise((resolve, reject) => { this.resolve = resolve; this.reject = reject })
    if (signal) {
      this.onAbort = () => this.cancel(signal.reason)
      signal.addEventListener('abort', this.onAbort, { once: true })
    }
  }

  settle (status, body, retryAfter) {
    if (this.done) return
    this.finish()
    this.resolve({ status, body, retryAfter })
  }

  fail (err) {
    if (this.done) return
    this.finish()
    this.reject(err)
  }

  /** Give up on the call: it fails with err, and what carries it lets it go. */
  cancel (err) {
    if (this.done) return
    this.fail(err)
    this.conn?.abandon(this)
  }

  finish () {
    this.done = true
    if (this.onAbort) this.signal.removeEventListener('abort', this.onAbort)
  }
}

// A token source (docs/sdk-transport.md, "Tokens that rotate"): the
// `token` option given as a function, for credentials that rotate
// (short-lived JWTs), as NATS clients take a callback for theirs.
//
// The function may return the token or a Promise of it. Calling it for
// every request would put the user's function, often a network call, on
// the request path, so its token is cached and the function called again
// only when the token nears its end: a JWT's exp, read from its payload
// without verifying it (the broker verifies), less a quarter of the
// lifetime it had when fetched, at most 30 s. A token whose exp cannot be
// read is fetched again every minute. One call at a time: the callers that
// find the token due while it runs wait for its result. A function that
// fails (or returns the token in use) leaves the token in use serving for
// another second, as long as it has not expired; past that its error is the
// call's, and nothing is sent.
//
// A link (lib/link.js) carries its upgrade's token and keeps it fresh with
// token frames (docs/link.md, "Token").

export const OPAQUE_FOR = 60000
export const TOKEN_RETRY = 1000

/** A token as fetched: its header line, exp, renewal and retirement times (ms). */
export class Bearer {
  constructor (token, now) {
    this.token = token
    this.line = 'authorization: Bearer ' + token + '\r\n'
    this.exp = jwtExp(token)
    if (this.exp === 0) {
      this.renewAt = now + OPAQUE_FOR
      this.retireAt = 0
      return
    }
    const life = this.exp - now
    this.renewAt = this.exp - Math.min(30000, life / 4)
    this.retireAt = this.exp - Math.min(5000, life / 8)
  }
}

/** The exp claim (ms) of a JWT, read without verifying it; 0 when there is none. */
export function jwtExp (token) {
  const parts = token.split('.')
  if (parts.length !== 3) return 0
  try {
    const exp = JSON.parse(Buffer.from(parts[1], 'base64url').toString()).exp
    return typeof exp === 'number' && exp > 0 && exp < 2 ** 33 ? exp * 1000 : 0
  } catch {
    return 0
  }
}

export class TokenSource {
  /** fn: the user's function; onToken(bearer): a new token was fetched. */
  constructor (fn, onToken) {
    this.fn = fn
    this.onToken = onToken
    this.cur = null
    this.pending = null
    this.calls = 0
  }

  /** undefined when the token in use is not due, else a Promise of the fresh one. */
  ready () {
    if (this.cur !== null && Date.now() < this.cur.renewAt) return undefined
    return this.get()
  }

  /** A Promise of the token to send now: the cached one until it is due, else a fresh one. */
  get () {
    if (this.cur !== null && Date.now() < this.cur.renewAt) return Promise.resolve(this.cur)
    this.pending ??= this.fetch().finally(() => { this.pending = null })
    return this.pending
  }

  async fetch () {
    const old = this.cur
    let token, err
    this.calls++
    try {
      token = await this.fn()
      if (typeof token !== 'string' || token === '' || /[\r\n\0]/.test(token)) {
        throw new TypeError('it returned a token that cannot be sent (not a string, empty, or holding a line break)')
      }
    } catch (e) {
      err = e
    }
    const now = Date.now()
    if (err === undefined && (old === null || token !== old.token)) {
      this.cur = new Bearer(token, now)
      this.onToken(this.cur)
      return this.cur
    }
    if (err === undefined || (old !== null && (old.exp === 0 || now < old.exp))) {
      // The same token again, or none while the one in use is still good:
      // the one in use serves a little longer before the next try.
      this.cur = Object.assign(Object.create(Bearer.prototype), old, { renewAt: now + TOKEN_RETRY })
      return this.cur
    }
    throw new Error('queen: the token function: ' + (err?.message ?? String(err)), { cause: err })
  }
}

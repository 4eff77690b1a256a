// Cell refusals (docs/sdk-transport-js.md, "Cell refusals").
//
// In a cell of several brokers a push, pop or ack that lands on a member
// that does not own the queue is relayed to the owner. Two answers come
// from that relay and not from the queue: `503 owner_moved` (the member the
// relay reached no longer owns the queue, and the request was not served)
// and `503 ephemeral_forward_failed` (the owner could not be reached). Both
// are answers: the broker says the request was not applied (a push is all
// or nothing, and was appended nowhere), so sending it again cannot
// duplicate anything, and the transport's rule (never repeat a call whose
// answer was lost) is not in play. The client sends such a call again
// after an exponential backoff with jitter (10 ms doubling to 1 s), or
// after `Retry-After` when the broker sends one (the broker sends 1 s on
// forward_failed), each wait capped by what the call's own bound leaves (the client's
// `timeout` for a short call, the wait of a waiting pop, the timeout of a
// `request()`), while its signal has not aborted; when nothing is left, the
// last refusal is thrown, its code intact.

export const CELL_CODES = new Set(['owner_moved', 'ephemeral_forward_failed'])

const BACKOFF_MIN = 10
const BACKOFF_MAX = 1000
// The least time a send after a wait must have before the call's bound: one
// sent with less would likely time out, and a push that times out is
// reported as "may have been applied" instead of the refusal that proves it
// was not.
const RESERVE = 50

/** Whether err is a QueenError saying the cell did not apply the request. */
export function isCellRefusal (err) {
  return err?.status === 503 && CELL_CODES.has(err.code)
}

/** Resolves after ms, or at once when signal aborts; `unref`: the wait keeps no process alive. */
export function sleep (ms, signal, unref = false) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const t = setTimeout(done, ms)
    if (unref) t.unref()
    function done () { clearTimeout(t); signal?.removeEventListener('abort', done); resolve() }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** A wait of about `backoff` ms: between half of it and all of it. */
export function jitter (backoff) {
  return backoff / 2 + Math.random() * backoff / 2
}

/** Paces the retries of one call refused by the cell. */
export class CellRetry {
  /** A call sent first at `start` (ms), bounded by `budget` ms from then (0 or less: no bound). */
  constructor (start, budget) {
    this.deadline = budget > 0 ? start + budget : Infinity
    this.backoff = BACKOFF_MIN
    this.attempts = 1
  }

  /** The ms left of the call's bound. */
  left () { return this.deadline - Date.now() }

  /**
   * Called with the refusal of the last send: waits out the backoff (or its
   * retryAfter) and resolves, to send again. The wait is capped by what the
   * call's bound leaves, less RESERVE for the send: a `Retry-After` longer
   * than that (the broker's is 1 s, the least the header can say, which a
   * short call may not have) ends in one more send at the end of the bound
   * rather than in none. Throws err (its `attempts` set) when nothing is
   * left of the bound, or when signal aborts. Nothing is in flight while it
   * waits, so an abort here never leaves a call that may have been applied.
   */
  async again (err, signal) {
    err.attempts = this.attempts
    let wait = err.retryAfter > 0 ? err.retryAfter : jitter(this.backoff)
    this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX)
    wait = Math.min(wait, this.deadline - Date.now() - RESERVE)
    if (signal?.aborted || !(wait > 0)) throw err
    await sleep(wait, signal)
    if (signal?.aborted) throw err
    this.attempts++
  }
}

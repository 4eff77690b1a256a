// Owner routing (docs/sdk-transport-js.md, "Owner routing"): the client's
// view of a cell, and which member's URL each queue's calls go to.
//
// A member of a cell serves the push, pop and ack of a queue it does not own
// by relaying them to the owner, which costs the cell about twice the CPU.
// The client learns the members and where to reach them from the view read
// (`GET /api/v1/ephemeral/cell`, docs/routes.md "cell") on a configured URL,
// and sends each queue's calls to its owner by the cell's ownership function
// (lib/owner.js, the broker's, checked against the same vectors).
//
// - The watch: after the client's first answered call, one view read
//   without `after`, then one kept waiting with `after=G` (re-armed on each
//   answer). An error backs off 1 s doubling to 30 s. Generation 0 with no
//   members (a single broker, a gateway), a 404 (an older broker or
//   gateway) or another 4xx (an identity that may not read) ends it for
//   good: nothing changes for that client, and nothing more is sent.
// - The waiting read is a background call: it keeps no process alive, and
//   close() lets it go.
// - route(queue): the pool of the owner's URL, or null (the configured URL,
//   which relays): outside a cell, for a member that publishes no URL, for a
//   URL another scheme than the configured ones allow, or for a member
//   marked down (its URL failed to dial: DOWN_FOR ms).
// - refresh(): a read without `after`, single-flight, after a cell refusal
//   (`owner_moved`, `ephemeral_forward_failed`): the call is retried on the
//   view it returns.
//
// The routing decision takes no allocation per call for ASCII names: the
// hash is lib/ownerfast.js (lib/owner.js's function on 32-bit halves, not
// BigInt; about a microsecond for an inbox name), and seeds are computed
// once per view. Owners are not cached: most names a client routes are
// inboxes, new per request, and a cache of them cost more in garbage
// collection than the hash it saved.

import { seed32, ownerIndex32, prefixState, ownerIndexSharing, ownerIndexTail } from './ownerfast.js'
import { sleep } from './cellretry.js'
import { writeRandomHex } from './entropy.js'

export const CELL_PATH = '/api/v1/ephemeral/cell'
// How long a view read waits on the broker (its `timeout`); the broker's
// own bound is 300 s.
export const VIEW_WAIT = 60000
// A member whose URL failed to dial is routed around for this long.
export const DOWN_FOR = 5000
const BACKOFF_MIN = 1000
const BACKOFF_MAX = 30000
// Member URLs the client ever opens pools for (a bound against a broker
// listing endless URLs).
export const MAX_MEMBER_URLS = 1024

// Draws of an inbox name owned by the request queue's owner (inboxFor), as
// many as the Go SDK makes. With N members a draw matches with probability
// 1/N, so the draws average about N whatever the cap; the cap only decides
// how often none matches: (2/3)^8, 4 % of requests in a cell of three, cost
// the other members a link's reads and writes for those inboxes' pops and
// replies (about 0.1 s of CPU each per 3 s under 32 requesters, where an
// idle member spends 0.03 s); (2/3)^32 is under one request in 400,000.
const INBOX_TRIES = 32

export const IDLE = 0
const WATCHING = 1
const STOPPED = 2

export class CellView {
  constructor (transport) {
    this.transport = transport
    this.state = IDLE
    this.view = null // { tenant, tenantHash, members: [{ id, pool }], seeds, memos }: apply()
    this.generation = -1
    this.refreshing = null
    this.abort = new AbortController()
    this.reads = 0 // view reads sent (tests)
    this.matched = false // the last inboxFor's name is owned by its queue's owner
    this.refill = null // the Immediate that draws inboxes ahead (drawAhead), while one is due
  }

  /** The first call was answered: learn the cell, in the background. */
  start () {
    if (this.state !== IDLE) return
    this.state = WATCHING
    this.watch().catch(() => {})
  }

  stop () {
    this.state = STOPPED
    this.view = null
    this.abort.abort()
    if (this.refill !== null) clearImmediate(this.refill)
    this.refill = null
  }

  async watch () {
    let backoff = BACKOFF_MIN
    let first = true
    while (this.state === WATCHING) {
      const path = first ? CELL_PATH : CELL_PATH + '?after=' + this.generation + '&timeout=' + VIEW_WAIT
      const sent = Date.now()
      const after = this.generation
      let res
      try {
        // The first read is answered at once (pipelined as any short call
        // over HTTP/1.1); the waiting one holds a connection of its own there.
        res = await this.read(path, first ? this.transport.callTimeout : VIEW_WAIT + this.transport.callTimeout, !first)
      } catch {
        res = null
      }
      if (this.state !== WATCHING) return
      if (res !== null && res.status === 200) {
        // A 200 that is no view (not a broker of this release) is no cell either.
        if (this.apply(res.body) !== true) {
          this.stop()
          return
        }
        backoff = BACKOFF_MIN
        // A waiting read answered early with the same generation (a server
        // that does not wait) is paced, never a busy loop.
        const early = BACKOFF_MIN - (Date.now() - sent)
        if (!first && this.generation === after && early > 0) await sleep(early, this.abort.signal, true)
        first = false
        continue
      } else if (res !== null && res.status >= 400 && res.status < 500 && res.status !== 429) {
        // Not a route this broker (or gateway) serves, or not this
        // identity's: never asked again.
        this.stop()
        return
      }
      first = true
      await sleep(backoff, this.abort.signal, true)
      backoff = Math.min(backoff * 2, BACKOFF_MAX)
    }
  }

  /** One view read on the configured URL; resolves with the transport's answer. */
  read (path, timeout, background) {
    this.reads++
    return this.transport.roundTrip('GET', path, undefined, { timeout, signal: this.abort.signal, safe: true, exclusive: background, background })
  }

  /**
   * A cell refusal was answered: read the view now (one read for every
   * refusal that comes while it is on its way), bounded by ms. Never
   * rejects.
   */
  refresh (ms) {
    if (this.state !== WATCHING || !(ms >= 1)) return Promise.resolve()
    if (this.refreshing === null) {
      this.refreshing = this.read(CELL_PATH, Math.max(1, Math.min(ms, this.transport.callTimeout)), false)
        .then((res) => { if (res.status === 200 && this.state === WATCHING) this.apply(res.body) }, () => {})
        .finally(() => { this.refreshing = null })
    }
    return this.refreshing
  }

  /**
   * Takes a view read's body. Returns false for "not a cell" (stop), true
   * for a view taken, undefined for a body that is not a view.
   */
  apply (body) {
    let j
    try {
      j = JSON.parse(body.toString())
    } catch {
      return undefined
    }
    if (j === null || typeof j !== 'object' || !Number.isSafeInteger(j.generation) || j.generation < 0) return undefined
    const list = Array.isArray(j.members) ? j.members : []
    if (j.generation === 0 && list.length === 0) return false
    this.generation = j.generation
    const members = []
    for (const m of list) {
      if (m === null || typeof m !== 'object' || typeof m.id !== 'string' || m.id === '') continue
      members.push({ id: m.id, pool: typeof m.url === 'string' && m.url !== '' ? this.transport.memberPool(m.url) : null })
    }
    if (members.length === 0) {
      this.view = null // a cell whose owners are unknown for now: any member
      return true
    }
    members.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    const tenant = typeof j.tenant === 'string' ? j.tenant : ''
    this.view = {
      tenant,
      tenantHash: seed32(tenant), // the key's tenant half, the same for every call
      members,
      seeds: members.flatMap((m) => seed32(m.id)), // [hi, lo] per member, in order
      memoQueue: null, // the last name hashed, and its owner's index
      memoIndex: 0,
      reqQueue: null, // the last request's queue, and its owner's index (inboxFor)
      reqIndex: 0,
      // Per member, inbox names it owns drawn ahead (drawAhead), and how
      // many requests asked for one since the last refill.
      ahead: members.map(() => []),
      taken: members.map(() => 0),
      mint: null // the mint the names ahead came from
    }
    return true
  }

  /**
   * The pool of the member that owns queue in the current view, or null:
   * send to the configured URL. Ties (a 64-bit collision) go to the lower
   * id, as the broker decides.
   */
  route (queue) {
    const v = this.view
    if (v === null) return null
    return usable(v.members[ownerIndex(v, queue)].pool)
  }

  /**
   * A fresh inbox name (mint) for a request to queue whose owner is the
   * owner of queue, when one of INBOX_TRIES draws is (with N members each
   * is with probability 1/N): the request's push and its inbox pop then go
   * to one member in one write, and the responder's reply to the member it
   * popped from, so a round trip touches one member, not two or three.
   * Names stay random (log2 N bits fewer than 128). The draws of one
   * request share the first 32 bytes of the first (`inbox-` and 26 hex
   * digits: 104 random bits) and differ in the rest (fresh random hex
   * digits each), so each draw is hashed from byte 32 on
   * (ownerIndexSharing, ownerIndexTail), not whole, and a string is made
   * only of the draw chosen; only that name is ever used, so no two names
   * in use share the prefix (one could not be guessed from another).
   * (Keeping the draws another member owns for later requests was tried:
   * it saved nothing with one request queue, and kept names that share a
   * prefix with one in use.)
   * Most requests take a name drawn ahead, after the previous turn's calls
   * were written (drawAhead); one that finds none ready draws its own.
   * Returns the name; `matched` says whether its owner is queue's (then its
   * pop goes where the push goes; else to route(name)).
   */
  inboxFor (queue, mint) {
    this.matched = false
    const v = this.view
    if (v === null) return mint()
    // The request queue's owner, remembered apart from the last name hashed
    // (a responder's replies hash inboxes in between).
    let i = v.reqIndex
    if (queue !== v.reqQueue) {
      i = ownerIndex(v, queue)
      v.reqQueue = queue
      v.reqIndex = i
    }
    if (v.mint !== mint) {
      v.mint = mint // names drawn ahead by another mint are not this one's
      for (const a of v.ahead) a.length = 0
    }
    v.taken[i]++
    if (this.refill === null) this.refill = setImmediate(drawAhead, this).unref()
    const ready = v.ahead[i]
    if (ready.length > 0) {
      this.matched = true
      return ready.pop()
    }
    const name = drawOwned(v, i, mint)
    this.matched = name !== null
    return name ?? mint()
  }

  /**
   * A member's pool other than failed to send a call to when no configured
   * URL can be dialled (the member the client was given died): the first
   * in the view not marked down, or null. It relays what it does not own,
   * and answers the view read, so the client learns the view without the
   * dead member.
   */
  another (failed) {
    const v = this.view
    if (v === null) return null
    const now = Date.now()
    for (const m of v.members) {
      if (m.pool !== null && m.pool !== failed && m.pool.downUntil <= now) return m.pool
    }
    return null
  }

  /** The owner's id for queue in the current view (tests, docs). */
  ownerId (queue) {
    const v = this.view
    if (v === null) return undefined
    return v.members[ownerIndex(v, queue)].id
  }
}

// Requests take their inbox from the names drawn ahead for the request
// queue's owner (inboxFor), and drawAhead, once the calls of that turn of
// the event loop were written (an Immediate runs after the I/O callbacks and
// the flushes they queued), tops each member's names up to as many as the
// turn took, AHEAD_MAX at most: the draws, about N hashes a request, leave
// the request's way to the wire and are done while the broker serves it.
// The names belong to the view they were drawn for (view.ahead): a view
// that is replaced takes its names with it.
const AHEAD_MAX = 64

function drawAhead (cv) {
  cv.refill = null
  const v = cv.view
  if (v === null) return
  for (let i = 0; i < v.ahead.length; i++) {
    const want = Math.min(v.taken[i], AHEAD_MAX)
    v.taken[i] = 0
    const ready = v.ahead[i]
    while (ready.length < want) {
      const name = drawOwned(v, i, v.mint)
      if (name === null) break
      ready.push(name)
    }
  }
}

// A fresh name from mint whose owner in v is member i, or null when none of
// INBOX_TRIES draws is (see inboxFor).
function drawOwned (v, i, mint) {
  let name = mint()
  if (name.length <= 32 || name.length >= 64) {
    // Not the SDK's inboxes: whole draws.
    for (let k = 1; k <= INBOX_TRIES; k++, name = mint()) {
      if (ownerIndex(v, name) === i) return name
    }
    return null
  }
  prefixState(name)
  if (ownerIndexSharing(v.tenantHash, v.seeds, name) === i) return name
  const n = name.length
  for (let k = 2; k <= INBOX_TRIES; k++) {
    writeRandomHex(draw, 32, n)
    if (ownerIndexTail(v.tenantHash, v.seeds, draw, n) === i) return name.slice(0, 32) + draw.toString('latin1', 32, n)
  }
  return null
}

// The index in v.members of the owner of queue: the highest score, ties
// (a 64-bit collision) to the lower id (members are sorted).
// The last name is remembered: a request's queue is hashed for its inbox
// and again for its push. So is the last request's queue (inboxFor): a
// responder's replies hash inboxes between its requests, and its pops
// route the same queue.
function ownerIndex (v, queue) {
  if (queue === v.reqQueue) return v.reqIndex
  if (queue === v.memoQueue) return v.memoIndex
  const i = ownerIndex32(v.tenantHash, v.seeds, queue)
  v.memoQueue = queue
  v.memoIndex = i
  return i
}

// A draw's bytes: its tail, from byte 32 on (fresh random hex digits,
// lib/entropy.js), is hashed as is (ownerIndexTail) and made a string only
// when it is chosen.
const draw = Buffer.alloc(64)

function usable (pool) {
  return pool === null || pool.downUntil > Date.now() ? null : pool
}

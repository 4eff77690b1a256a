// A link (docs/link.md): one connection to the broker, upgraded with
// `GET /api/v1/ephemeral/link` and `Upgrade: queen-link/1`, that carries
// any number of calls at once, each on a stream of its own, answered in any
// order.
//
// - The upgrade is written as the connection opens; calls made before the
//   101 wait for it, then leave together. A refusal that is the identity's
//   (401, 403) is each waiting call's answer, as the HTTP route would have
//   given it; any other answer but 101 (an older broker, a proxy that drops
//   upgrades) sends them over HTTP/1.1 instead, and the pool remembers that
//   the URL does not speak links (lib/transport.js).
// - Writes are coalesced: every frame queued in one tick leaves in one
//   write (flushed from process.nextTick), as the HTTP transport does.
// - Answers are matched to calls by stream id. A call the caller gives up
//   on (its signal, its deadline) is cancelled with a cancel frame: a parked
//   pop then holds nothing on the broker, and the link stays.
// - The one rule for a lost answer: a call whose frame was written and
//   whose stream ends without an answer (the link fails, a refusal "too
//   large" or "lost") may have been served, and is reported so, never sent
//   again. "busy" is backed off and sent again; "closing" is sent again on
//   a fresh link (neither was served).
// - A ping every `pingEvery` ms keeps an idle link; one that answers
//   nothing for two pings is closed, and its calls fail as lost.
// - With a token function (lib/token.js), the link carries its upgrade's
//   token, which the broker holds it to until exp: at the token's renewal
//   time the link sends a fresh one from the source in a token frame
//   (refreshToken), so that it and the pops parked on it outlive the token.
//   A refusal (401, 403) leaves the old identity until exp; the link takes
//   no new call from its retirement time (Pool.link: a fresh link, with a
//   fresh token, takes them) and the broker closes it at exp. A 400 says
//   the broker has no expiry (not in mode jwt): the link is never retired.

import net from 'node:net'
import tls from 'node:tls'
import { Call, ConnectionError, timeoutError } from './call.js'
import { ResponseParser } from './http1.js'
import {
  FrameReader, FrameError, parseAnswer, refusalServed, requestFrameLen, writeRequest, writeEmpty, writeToken,
  HEADER_LEN, FRAME_ANSWER, FRAME_REFUSE, FRAME_PONG, FRAME_CANCEL, FRAME_PING, REFUSE_CLOSING, REFUSE_TOO_LARGE
} from './frames.js'
import { TOKEN_RETRY } from './token.js'

export const LINK_PROTOCOL = 'queen-link/1'
export const LINK_PATH = '/api/v1/ephemeral/link'

// A body over LINK_MAX_BODY goes over HTTP/1.1: the broker's frame limit is
// its body limit (QUEEN_MAX_BODY_BYTES, 64 MiB by default, which the client
// does not know) and a frame over it closes the link with every call on it,
// where over HTTP the one call is refused.
export const LINK_MAX_BODY = 1 << 20

// The longest answer frame read: the broker's own limit is its body limit
// plus 64 KiB; this bound only stops a peer that is not a broker.
const READ_LIMIT = 1 << 30
const MAX_UPGRADE_HEAD = 64 * 1024
const CRLF2 = Buffer.from('\r\n\r\n')
// An upgrade not answered within UPGRADE_TIMEOUT (a proxy that holds it)
// is taken as refused: its calls go over HTTP/1.1.
const UPGRADE_TIMEOUT = 5000
const BUSY_MIN = 5
const BUSY_MAX = 1000

const OPENING = 0
const OPEN = 1
const DEAD = 2

export class Link {
  constructor (pool) {
    const t = pool.transport
    this.pool = pool
    this.transport = t
    this.state = OPENING
    this.streams = new Map() // id → call, written and not yet answered
    this.queued = [] // calls made before the 101
    this.nextId = 0
    this.out = [] // calls and control frames to write, in order
    this.outLen = 0
    this.flushQueued = false
    this.connected = false
    this.err = null
    this.head = null // the upgrade's answer, until its blank line
    this.refusal = null // the parser of a refused upgrade's answer
    this.reader = new FrameReader(READ_LIMIT, (type, id, p) => this.onFrame(type, id, p))
    this.lastPing = Date.now()
    this.unanswered = 0 // pings sent since the broker last sent anything
    this.bearer = t.source?.cur ?? null // the token of the upgrade (in t.headers now)
    this.retireAt = this.bearer?.retireAt ?? 0
    this.bg = null // the cell's waiting view read, when it is on this link
    this.retired = false
    this.refreshTimer = null
    const s = pool.secure
      ? tls.connect({ host: pool.hostname, port: pool.port, servername: net.isIP(pool.hostname) ? undefined : pool.hostname, ALPNProtocols: ['http/1.1'], ...t.tls })
      : net.connect({ host: pool.hostname, port: pool.port, noDelay: true })
    this.socket = s
    s.once(pool.secure ? 'secureConnect' : 'connect', () => {
      this.connected = true
      if (pool.secure) s.setNoDelay(true)
    })
    s.write('GET ' + pool.prefix + LINK_PATH + ' HTTP/1.1\r\nhost: ' + pool.host + '\r\nconnection: Upgrade\r\nupgrade: ' + LINK_PROTOCOL + '\r\n' + t.headers + '\r\n')
    s.on('data', (d) => {
      if (this.state === DEAD) return
      try {
        if (this.state === OPEN) this.reader.feed(d)
        else this.onUpgradeData(d)
      } catch (err) {
        this.err = err
        this.destroy()
      }
    })
    s.on('error', (err) => { this.err ??= err })
    s.on('close', () => this.onClose())
    this.upgradeTimer = setTimeout(() => this.upgradeTimedOut(), UPGRADE_TIMEOUT)
    this.upgradeTimer.unref()
    t.links.add(this)
  }

  /** Send call on this link; resolves with its answer. */
  send (call) {
    call.conn = this
    if (this.state === OPEN) this.write(call)
    else if (this.state === OPENING) {
      if (!call.background) this.socket.ref()
      else if (this.queued.length === 0 && this.streams.size === 0) this.socket.unref()
      this.queued.push(call)
    } else {
      const err = new ConnectionError(`${call.method} ${call.path}: the link to ${this.pool.origin} had closed`, { code: 'ECONNCLOSED', sent: false })
      err.retryable = true
      call.fail(err)
    }
    return call.promise
  }

  write (call) {
    const id = this.nextId++
    call.id = id
    this.streams.set(id, call)
    // The socket keeps the process alive while a call other than the
    // cell's waiting view read (at most one a link: this.bg) is in flight.
    if (call.background) {
      this.bg = call
      if (this.streams.size === 1) this.socket.unref()
    } else if (this.streams.size === 1 || this.streams.size === 2) this.socket.ref()
    this.out.push(call)
    this.outLen += requestFrameLen(call.method, call.path, call.bodyLen > 0 ? call.bodyLen : 0)
    this.schedule()
  }

  control (type, id) {
    this.out.push({ control: type, id })
    this.outLen += HEADER_LEN
    this.schedule()
  }

  schedule () {
    if (!this.flushQueued) {
      this.flushQueued = true
      process.nextTick(flush, this)
    }
  }

  /** The caller gave up on call (its signal): its stream is cancelled. */
  abandon (call) {
    this.cancel(call)
  }

  cancel (call) {
    if (this.state === OPENING) {
      const i = this.queued.indexOf(call)
      if (i >= 0) this.queued.splice(i, 1)
    } else if (this.streams.get(call.id) === call) {
      this.streams.delete(call.id)
      if (this.state === OPEN) this.control(FRAME_CANCEL, call.id)
    }
    this.idle()
  }

  /** Nothing in flight: the socket no longer keeps the process alive. */
  idle () {
    const n = this.streams.size
    if (this.queued.length > 0 || n > 1) return
    if (n === 1 && (this.bg === null || this.streams.get(this.bg.id) !== this.bg)) return
    this.socket.unref()
    if (n === 0 && (this.transport.closed || this.retired)) this.destroy()
  }

  /** No new call: its token nears its exp. It closes once its calls end. */
  retire () {
    this.retired = true
    this.pool.dropLink(this)
    this.idle()
  }

  refreshAt (at) {
    clearTimeout(this.refreshTimer)
    this.refreshTimer = setTimeout(() => { this.refreshToken().catch(() => {}) }, Math.max(0, at - Date.now()))
    this.refreshTimer.unref()
  }

  /** Sends a fresh token from the source before the link's own expires (see above). */
  async refreshToken () {
    const cur = this.bearer
    if (this.state !== OPEN || Date.now() >= cur.exp) return
    let next
    try {
      next = await this.transport.source.get()
    } catch {
      next = null
    }
    if (next === null || next.token === cur.token || (next.exp !== 0 && next.exp <= cur.exp)) {
      this.refreshAt(Date.now() + TOKEN_RETRY)
      return
    }
    if (this.state !== OPEN) return
    const call = new Call('TOKEN', '', undefined, 10000, undefined, false)
    call.conn = this
    const id = this.nextId++
    call.id = id
    this.streams.set(id, call)
    if (this.streams.size === 1) this.socket.ref()
    this.out.push({ token: next.token, id })
    this.outLen += HEADER_LEN + next.token.length
    this.schedule()
    let status = 0
    try {
      status = (await call.promise).status
    } catch {}
    if (status === 200) {
      this.bearer = next
      this.retireAt = next.retireAt
      if (next.exp !== 0) this.refreshAt(next.renewAt)
    } else if (status === 400) {
      this.retireAt = 0
    }
  }

  onUpgradeData (d) {
    if (this.refusal !== null) {
      this.refusal.feed(d)
      return
    }
    const head = this.head === null ? d : Buffer.concat([this.head, d])
    this.head = null
    const end = head.indexOf(CRLF2)
    if (end < 0) {
      if (head.length > MAX_UPGRADE_HEAD) throw new FrameError('the answer to the upgrade has a head over 64 KiB')
      this.head = head
      return
    }
    clearTimeout(this.upgradeTimer)
    if (head.latin1Slice(0, 13) === 'HTTP/1.1 101 ') {
      this.state = OPEN
      this.pool.linked()
      if (this.bearer !== null && this.bearer.exp !== 0) this.refreshAt(this.bearer.renewAt)
      const calls = this.queued
      this.queued = []
      for (const c of calls) if (!c.done) this.write(c)
      if (end + 4 < head.length) this.reader.feed(head.subarray(end + 4))
      return
    }
    // Refused: read the whole answer (its body says why).
    this.refusal = new ResponseParser((status, body, retryAfter) => this.refused(status, body, retryAfter))
    this.refusal.feed(head)
  }

  upgradeTimedOut () {
    if (this.state !== OPENING || !this.connected) return
    this.err = new ConnectionError(`the upgrade was not answered within ${UPGRADE_TIMEOUT} ms`, { code: 'ERR_LINK_REFUSED' })
    this.pool.unlinkable()
    this.destroy()
  }

  refused (status, body, retryAfter) {
    if (this.state !== OPENING) return
    const calls = this.queued
    this.queued = []
    this.state = DEAD
    if (status === 401 || status === 403) {
      // The identity's refusal: what the HTTP route would have answered
      // each call. The URL may well speak links to a valid credential.
      for (const c of calls) c.settle(status, body, retryAfter)
    } else {
      this.pool.unlinkable()
      for (const c of calls) c.fail(fallback(c, `the upgrade was answered ${status}`))
    }
    this.destroy()
  }

  onFrame (type, id, p) {
    this.unanswered = 0
    if (type === FRAME_ANSWER) {
      const c = this.streams.get(id)
      if (c === undefined) return // cancelled, or overdue
      const a = parseAnswer(p) // throws on a malformed one: c fails with the link
      this.streams.delete(id)
      c.settle(a.status, a.body, a.retryAfter)
      this.idle()
    } else if (type === FRAME_REFUSE) {
      const c = this.streams.get(id)
      if (c === undefined) return
      this.streams.delete(id)
      this.onRefuse(c, p)
      this.idle()
    } else if (type !== FRAME_PONG) {
      throw new FrameError(`a frame of type ${type}`)
    }
  }

  onRefuse (c, p) {
    if (refusalServed(p)) {
      const tooLarge = p.length === 1 && p[0] === REFUSE_TOO_LARGE
      c.fail(new ConnectionError(
        `${c.method} ${c.path}: ${tooLarge ? 'the answer was over the link\'s frame limit' : 'the answer was lost on the way (relayed to another member)'}: the request may have been applied`,
        { code: tooLarge ? 'ERR_LINK_TOO_LARGE' : 'ERR_LINK_LOST', sent: true }))
      return
    }
    c.conn = null
    c.id = -1
    if (p[0] === REFUSE_CLOSING) {
      // The broker is shutting down: no new call on this link; this one
      // goes on a fresh one (a broker replaced behind the same address), or
      // fails to dial it and fails over. Refused "closing" there too, the
      // URL is as good as unreachable: the call fails as never sent, as a
      // failed dial does, and goes to the next URL.
      this.pool.dropLink(this)
      if (c.closings++ === 0) {
        this.pool.resend(c, 0)
        return
      }
      c.fail(new ConnectionError(`${c.method} ${c.path}: ${this.pool.origin} is shutting down (refused "closing" on two links)`, { code: 'ERR_LINK_CLOSING', dial: true, sent: false }))
      return
    }
    // Busy: the link's bound on streams in flight is reached.
    c.busyWait = Math.min(Math.max(c.busyWait * 2, BUSY_MIN), BUSY_MAX)
    this.pool.resend(c, c.busyWait / 2 + Math.random() * c.busyWait / 2)
  }

  /** Fails the overdue calls (cancelling their streams) and pings. */
  sweep (now) {
    for (const c of this.streams.values()) {
      if (c.deadline <= now) {
        c.fail(timeoutError(c.method, c.path, c.timeout))
        this.cancel(c)
      }
    }
    for (const c of this.queued) if (c.deadline <= now) c.fail(timeoutError(c.method, c.path, c.timeout))
    if (this.state === OPENING && this.queued.some((c) => c.done)) {
      this.queued = this.queued.filter((c) => !c.done)
      this.idle()
    }
    if (this.state === OPEN && now - this.lastPing >= this.transport.pingEvery) {
      if (this.unanswered >= 2) {
        this.err = new ConnectionError(`the link to ${this.pool.origin} answered no ping for ${2 * this.transport.pingEvery} ms`, { code: 'ERR_LINK_TIMEOUT' })
        this.destroy()
        return
      }
      this.unanswered++
      this.lastPing = now
      this.control(FRAME_PING, 0)
    }
  }

  onClose () {
    this.state = DEAD
    clearTimeout(this.upgradeTimer)
    clearTimeout(this.refreshTimer)
    this.transport.links.delete(this)
    this.pool.dropLink(this)
    const why = this.err?.message ?? 'closed by the broker'
    const code = this.err?.code ?? 'ECONNCLOSED'
    const queued = this.queued
    this.queued = []
    for (const c of queued) {
      if (c.done) continue
      if (!this.connected) {
        c.fail(new ConnectionError(`${c.method} ${c.path}: cannot reach ${this.pool.origin}: ${why}`, { code, dial: true, sent: false, cause: this.err ?? undefined }))
      } else if (!this.pool.linksSpoken) {
        // Closed before answering the upgrade, by a URL never seen to
        // speak links: this call goes over HTTP (not remembered).
        c.fail(fallback(c, 'the connection closed before the upgrade was answered'))
      } else {
        const err = new ConnectionError(`${c.method} ${c.path}: the link to ${this.pool.origin} closed before it opened (${why})`, { code, sent: false, cause: this.err ?? undefined })
        err.retryable = true
        c.fail(err)
      }
    }
    const streams = this.streams
    this.streams = new Map()
    for (const c of streams.values()) {
      c.fail(new ConnectionError(`${c.method} ${c.path}: the link to ${this.pool.origin} closed before the answer (${why}): the request may have been applied`, { code, sent: true, cause: this.err ?? undefined }))
    }
  }

  destroy () {
    this.pool.dropLink(this) // no call goes to it from now on
    if (this.state !== DEAD || !this.socket.destroyed) {
      this.state = DEAD
      this.socket.destroy()
    }
  }
}

// A call that was never sent, to go over HTTP/1.1 instead (lib/transport.js).
function fallback (c, why) {
  const err = new ConnectionError(`${c.method} ${c.path}: no link: ${why}`, { code: 'ERR_LINK_REFUSED', sent: false })
  err.fallback = true
  return err
}

function flush (link) {
  link.flushQueued = false
  if (link.state !== OPEN || link.out.length === 0) return
  const buf = Buffer.allocUnsafe(link.outLen)
  let off = 0
  for (const e of link.out) {
    if (e.control !== undefined) off = writeEmpty(buf, off, e.control, e.id)
    else if (e.token !== undefined) off = writeToken(buf, off, e.id, e.token)
    else off = writeRequest(buf, off, e.id, e.method, e.path, e.body, e.bodyLen > 0 ? e.bodyLen : 0)
  }
  link.out = []
  link.outLen = 0
  link.socket.write(buf)
}

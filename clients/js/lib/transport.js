// The transport under queen-mq: one small pool per broker URL.
//
// A call goes on a link (lib/link.js: one upgraded connection carrying every
// call at once) unless the URL refused the upgrade (remembered per URL; the
// call is then sent over HTTP/1.1, never having left; a link is offered
// again a minute later), links are off
// (`forceHTTP`), or its body is over LINK_MAX_BODY. Otherwise, keep-alive
// HTTP/1.1 connections over node:net (or node:tls):
//
// - Short calls are pipelined on shared connections: a call is appended to
//   a connection's output, everything appended in the same tick leaves in
//   one write (flushed from process.nextTick), and answers are matched to
//   calls in FIFO order. At most `pipeline` calls ride one connection and
//   at most `connections` shared connections are open per URL; past that,
//   calls wait in the pool for room.
// - A call that parks on the broker (a waiting pop) leases a connection of
//   its own (lease/release), so it never sits in front of other calls.
// - Timeouts: one interval timer per client sweeps the calls in flight and
//   fails the overdue ones (closing their connection, since the answers
//   behind an overdue one can no longer be matched). A caller's own signal
//   cancels its call.
// - Retry rule: see `retryable` in onClose and docs/sdk-transport-js.md.
//   A call is repeated on a fresh connection only when it provably never
//   reached the broker (the dial failed, or the server announced
//   `Connection: close` before reading it), or when it went out on a reused
//   connection that died with zero bytes of its answer received and the call
//   is safe to repeat. Anything else is reported, never repeated.

import net from 'node:net'
import tls from 'node:tls'
import { ResponseParser, requestHead } from './http1.js'
import { Call, ConnectionError, timeoutError } from './call.js'
import { Link, LINK_MAX_BODY } from './link.js'
import { TokenSource } from './token.js'
import { CellView, MAX_MEMBER_URLS, DOWN_FOR, IDLE as CELL_IDLE } from './cellview.js'

export { ConnectionError }

class Conn {
  constructor (pool, exclusive) {
    this.pool = pool
    this.exclusive = exclusive
    this.calls = [] // written or about to be, FIFO
    this.out = ''
    this.flushQueued = false
    this.served = 0
    this.connected = false
    this.closing = false // the server announced Connection: close
    this.dead = false
    this.err = null
    this.parser = new ResponseParser((status, body, retryAfter, close) => this.onResponse(status, body, retryAfter, close))
    const t = pool.transport
    const s = pool.secure
      ? tls.connect({ host: pool.hostname, port: pool.port, servername: net.isIP(pool.hostname) ? undefined : pool.hostname, ALPNProtocols: ['http/1.1'], ...t.tls })
      : net.connect({ host: pool.hostname, port: pool.port, noDelay: true })
    this.socket = s
    s.once(pool.secure ? 'secureConnect' : 'connect', () => {
      this.connected = true
      if (pool.secure) s.setNoDelay(true)
    })
    s.on('data', (d) => {
      try {
        this.parser.feed(d)
      } catch (err) {
        this.err = err
        this.destroy()
      }
    })
    s.on('end', () => { this.parser.end() })
    s.on('error', (err) => { this.err ??= err })
    s.on('close', () => this.onClose())
    t.conns.add(this)
  }

  get room () { return this.pool.transport.pipeline - this.calls.length }

  send (call) {
    call.conn = this
    call.reused = this.served > 0
    call.out ??= requestHead(call.method, this.pool.prefix + call.path, this.pool.host, this.pool.transport.headers, call.bodyLen) + (call.body ?? '')
    if (call.background) this.socket.unref() // a connection of its own (exclusive)
    else if (this.calls.length === 0) this.socket.ref()
    this.calls.push(call)
    this.out += call.out
    if (!this.flushQueued) {
      this.flushQueued = true
      process.nextTick(flush, this)
    }
    return call.promise
  }

  onResponse (status, body, retryAfter, close) {
    // Bytes after a Connection: close answer, or after the connection was
    // given up (timeout, protocol error), answer nothing: the calls still
    // queued fail in onClose.
    if (this.dead) return
    const call = this.calls.shift()
    if (!call) {
      this.err = new ConnectionError('an answer nobody asked for', { code: 'ERR_HTTP_PROTOCOL' })
      this.destroy()
      return
    }
    this.served++
    if (close) {
      this.closing = true
      this.pool.drop(this)
    }
    call.settle(status, body, retryAfter)
    if (this.closing) {
      // The calls written behind it were not read: fail them now as never
      // sent, rather than wait for the server's FIN.
      this.destroy()
      return
    }
    if (!this.exclusive) this.pool.admit(this)
    if (this.calls.length === 0) {
      this.socket.unref()
      if (!this.exclusive && this.pool.transport.closed) this.destroy()
    }
  }

  onClose () {
    this.dead = true
    this.pool.transport.conns.delete(this)
    this.pool.drop(this)
    const calls = this.calls
    this.calls = []
    const code = this.err?.code ?? 'ECONNCLOSED' // closed cleanly (a FIN), no socket error
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i]
      if (c.done) continue
      const gotBytes = i === 0 && this.parser.midResponse
      const dial = !this.connected
      const unsent = dial || this.closing
      const err = new ConnectionError(
        dial
          ? `${c.method} ${c.path}: cannot reach ${this.pool.origin}: ${this.err?.message ?? code}`
          : `${c.method} ${c.path}: the connection to ${this.pool.origin} closed ${gotBytes ? 'during' : 'before'} the answer (${this.err?.message ?? 'closed by the server'})`,
        { code, dial, sent: !unsent, cause: this.err ?? undefined })
      // Internal: the transport may repeat it on a fresh connection.
      err.retryable = unsent || (c.reused && !gotBytes && c.safe)
      c.fail(err)
    }
  }

  /**
   * The caller gave up on call (its signal). A parked call cannot be taken
   * back from a connection of its own but by closing it; on a shared one
   * its answer is just dropped.
   */
  abandon (call) {
    if (this.exclusive) this.destroy()
  }

  destroy () {
    if (!this.dead) {
      this.dead = true
      this.socket.destroy()
    }
  }
}

function flush (conn) {
  conn.flushQueued = false
  if (conn.dead || conn.out === '') return
  const out = conn.out
  conn.out = ''
  conn.socket.write(out)
}

class Pool {
  constructor (transport, href) {
    const u = new URL(href)
    this.transport = transport
    this.origin = u.origin
    this.secure = u.protocol === 'https:'
    this.hostname = u.hostname.replace(/^\[|\]$/g, '')
    this.port = +u.port || (this.secure ? 443 : 80)
    this.host = u.host
    this.prefix = u.pathname.replace(/\/+$/, '')
    this.shared = []
    this.idle = []
    this.waiting = [] // calls for which no shared connection has room
    this.links = [] // open or opening links (lib/link.js)
    this.next = 0
    this.linkMode = LINK_UNKNOWN
    this.linkAgainAt = 0 // when a refused URL is offered a link again
    this.downUntil = 0 // a cell member's URL that failed to dial: routed around until then (lib/cellview.js)
  }

  /**
   * Whether call goes on a link: links are on, its body is small, and the
   * URL has not refused an upgrade in the last `linkRetry` ms (then one is
   * tried again, so that brokers upgraded behind the URL are used).
   */
  linkable (call) {
    if (this.transport.linksPerURL === 0 || call.bodyLen > LINK_MAX_BODY) return false
    if (this.linkMode !== LINK_NO) return true
    if (Date.now() < this.linkAgainAt) return false
    this.linkMode = LINK_UNKNOWN
    return true
  }

  /** Whether the URL has answered an upgrade 101. */
  get linksSpoken () { return this.linkMode === LINK_YES }

  /**
   * A link for a call: a new one while there are fewer than linksPerURL, else
   * the next in turn. A link whose token nears its exp, no fresher one
   * accepted (lib/link.js, refreshToken), takes no new call: it is retired,
   * and closes once its calls end.
   */
  link () {
    if (this.transport.source !== null) {
      const now = Date.now()
      for (let i = this.links.length - 1; i >= 0; i--) {
        const l = this.links[i]
        if (l.retireAt !== 0 && now >= l.retireAt) l.retire()
      }
    }
    if (this.links.length < this.transport.linksPerURL) {
      const l = new Link(this)
      this.links.push(l)
      return l
    }
    this.next = (this.next + 1) % this.links.length
    return this.links[this.next]
  }

  linked () { this.linkMode = LINK_YES }

  /** The URL answered the upgrade with a refusal: HTTP/1.1 for the next `linkRetry` ms. */
  unlinkable () {
    this.linkMode = LINK_NO
    this.linkAgainAt = Date.now() + this.transport.linkRetry
  }

  dropLink (l) {
    const i = this.links.indexOf(l)
    if (i >= 0) this.links.splice(i, 1)
  }

  /** A call a link refused unserved ("busy", "closing"): sent again after wait ms, within its deadline. */
  resend (call, wait) {
    const go = () => {
      if (call.done) return
      if (Date.now() >= call.deadline) call.fail(timeoutError(call.method, call.path, call.timeout))
      else this.link().send(call)
    }
    if (wait > 0) setTimeout(go, Math.min(wait, Math.max(0, call.deadline - Date.now())))
    else go()
  }

  /** A shared connection for a call: the first with room, else a new one, else wait. */
  submit (call) {
    const shared = this.shared
    for (let i = 0; i < shared.length; i++) {
      if (shared[i].room > 0) return shared[i].send(call)
    }
    if (shared.length < this.transport.connections) {
      const c = new Conn(this, false)
      shared.push(c)
      return c.send(call)
    }
    this.waiting.push(call)
    return call.promise
  }

  /** Room opened on c: hand it the calls waiting for it. */
  admit (c) {
    while (this.waiting.length > 0 && c.room > 0) {
      const call = this.waiting.shift()
      if (!call.done) c.send(call)
    }
  }

  lease () {
    for (;;) {
      const c = this.idle.pop()
      if (!c) return new Conn(this, true)
      if (!c.dead && !c.closing) return c
    }
  }

  release (c) {
    if (c.dead || c.closing || c.calls.length > 0 || this.transport.closed || this.idle.length >= this.transport.idle) {
      c.destroy()
      return
    }
    this.idle.push(c)
  }

  drop (c) {
    const list = c.exclusive ? this.idle : this.shared
    const i = list.indexOf(c)
    if (i >= 0) list.splice(i, 1)
    // Calls waiting for room go to a fresh connection.
    if (!c.exclusive && this.waiting.length > 0 && this.shared.length < this.transport.connections) {
      const n = new Conn(this, false)
      this.shared.push(n)
      this.admit(n)
    }
  }
}

const LINK_UNKNOWN = 0
const LINK_YES = 1
const LINK_NO = 2

export class Transport {
  /**
   * urls: broker URLs (failover order); headers: constant request headers
   * as `name: value\r\n` lines; opts: { pipeline, connections, idle, tls,
   * links (per URL; 0: HTTP/1.1 only), pingEvery, linkRetry, token (a
   * function returning the bearer token, or a Promise of it: lib/token.js),
   * callTimeout (the client's timeout), ownerRouting (default true:
   * lib/cellview.js) }.
   */
  constructor (urls, headers, opts = {}) {
    this.pools = urls.map((u) => new Pool(this, u))
    // Every pool by its URL: the configured ones, and the cell's members'
    // (lib/cellview.js), a member URL equal to a configured one sharing
    // its pool and links.
    this.byURL = new Map()
    for (let i = 0; i < urls.length; i++) this.byURL.set(urls[i], this.pools[i])
    this.allPools = [...this.pools]
    this.secureOnly = this.pools.some((p) => p.secure)
    this.callTimeout = opts.callTimeout ?? 30000
    this.cell = opts.ownerRouting === false ? null : new CellView(this)
    this.current = 0
    this.headers = headers
    // With a token function (lib/token.js): headers are the constant ones
    // and the current token's line, renewed as the token is.
    this.source = typeof opts.token === 'function'
      ? new TokenSource(opts.token, (b) => { this.headers = headers + b.line })
      : null
    this.pipeline = opts.pipeline ?? 16
    this.connections = opts.connections ?? 4
    this.idle = opts.idle ?? 64
    this.tls = opts.tls ?? {}
    this.tick = opts.tick ?? 100
    this.linksPerURL = opts.links ?? 1
    this.pingEvery = opts.pingEvery ?? 30000
    this.linkRetry = opts.linkRetry ?? 60000
    this.conns = new Set()
    this.links = new Set()
    this.timer = null
    this.closed = false
  }

  /**
   * With a token function: undefined when the token in use is not due, else
   * a Promise that settles once a fresh one is in `headers` (or rejects with
   * the function's error: nothing was sent). Awaited before a call is made.
   */
  authorize () {
    return this.source === null ? undefined : this.source.ready()
  }

  /**
   * The pool of a cell member's public URL, or null for one the client
   * will not use: not http(s), with a path, plain HTTP when a configured
   * URL is https (the token would leave in the clear), or past
   * MAX_MEMBER_URLS.
   */
  memberPool (href) {
    let u
    try {
      u = new URL(href)
    } catch {
      return null
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null
    if (this.secureOnly && u.protocol !== 'https:') return null
    if (u.username !== '' || u.password !== '' || u.search !== '' || u.hash !== '' || (u.pathname !== '/' && u.pathname !== '')) return null
    const key = u.href.replace(/\/+$/, '')
    let p = this.byURL.get(key)
    if (p === undefined) {
      if (this.allPools.length >= MAX_MEMBER_URLS) return null
      p = new Pool(this, key)
      this.byURL.set(key, p)
      this.allPools.push(p)
    }
    return p
  }

  /**
   * The pool a call about queue goes to: its owner's in the cell's view,
   * or null for the configured URL in use.
   */
  route (queue) {
    if (this.cell === null || queue === undefined) return null
    const p = this.cell.route(queue)
    return p === this.pools[this.current] ? null : p
  }

  /** A fresh inbox name from mint for a request to queue: one its owner owns, in a cell (CellView.inboxFor). */
  inbox (queue, mint) {
    return this.cell === null ? mint() : this.cell.inboxFor(queue, mint)
  }

  /** Whether the last inbox() is owned by its queue's owner: its pop goes where the push goes. */
  get inboxMatched () {
    return this.cell !== null && this.cell.matched
  }

  /** A member's URL failed to dial: its queues go through the configured URL for a while. */
  down (pool) {
    pool.downUntil = Date.now() + DOWN_FOR
  }

  /**
   * No configured URL could be dialled, the last being failed: another
   * member of the cell's view (CellView.another), failed marked down; or
   * null outside a cell.
   */
  alternative (failed) {
    if (this.cell === null) return null
    this.down(failed)
    return this.cell.another(failed)
  }

  /** Make a call of method on path (under the URL's own path); see roundTrip. */
  call (method, path, body, timeout, signal, safe) {
    if (this.timer === null) this.startSweep()
    return new Call(method, path, body, timeout, signal, safe)
  }

  /**
   * One call with failover and the retry rule; resolves with
   * { status, body: Buffer, retryAfter } whatever the status.
   * On a link when the URL speaks links (lib/link.js), else over HTTP/1.1:
   * `exclusive` there takes a leased connection (a call that parks).
   * `queue`: the call is that queue's (push, pop, ack, depth), and goes to
   * its owner in the cell's view (lib/cellview.js); an owner whose URL
   * fails to dial is marked down and the call goes to the configured URL.
   * `background`: the cell's waiting view read (keeps no process alive).
   */
  async roundTrip (method, path, body, { timeout, signal, safe = false, exclusive = false, queue, background = false }) {
    let dials = 0
    let repeated = false
    let viaHTTP = false
    let routed = this.route(queue)
    for (;;) {
      const auth = this.authorize()
      if (auth !== undefined) await auth
      const idx = this.current
      const pool = routed ?? this.pools[idx]
      if (signal?.aborted) throw signal.reason
      const call = this.call(method, path, body, timeout, signal, safe)
      call.background = background
      let conn = null
      try {
        let res
        if (!viaHTTP && pool.linkable(call)) res = await pool.link().send(call)
        else if (exclusive) {
          conn = pool.lease()
          res = await conn.send(call)
        } else res = await pool.submit(call)
        if (this.cell !== null && this.cell.state === CELL_IDLE) this.cell.start() // learn the cell, once
        return res
      } catch (err) {
        if (err instanceof ConnectionError && !signal?.aborted) {
          if (err.fallback) { viaHTTP = true; continue } // never sent: over HTTP/1.1
          if (err.dial && routed !== null) { this.down(routed); routed = null; viaHTTP = false; continue } // never sent: through the configured URL
          if (err.dial && ++dials < this.pools.length) { this.failover(idx); continue }
          if (err.dial && (routed = this.alternative(pool)) !== null) { viaHTTP = false; continue } // every configured URL down: another member
          if (err.retryable && !err.dial && !repeated) { repeated = true; continue }
        }
        throw err
      } finally {
        if (conn) pool.release(conn)
      }
    }
  }

  /** The URL at idx could not be reached: move on to the next one. */
  failover (idx) {
    if (this.current === idx) this.current = (idx + 1) % this.pools.length
  }

  get pool () { return this.pools[this.current] }

  startSweep () {
    this.timer = setInterval(() => this.sweep(), this.tick)
    this.timer.unref()
  }

  // Fails the overdue calls. An overdue call's connection is closed: the
  // answers behind it could not be matched to their calls any more, and a
  // parked pop must be taken back from the broker.
  sweep () {
    const now = Date.now()
    for (const l of this.links) l.sweep(now)
    for (const c of this.conns) {
      for (let i = 0; i < c.calls.length; i++) {
        const call = c.calls[i]
        if (call.deadline <= now && !call.done) {
          call.fail(timeoutError(call.method, call.path, call.timeout))
          c.destroy()
          break
        }
      }
    }
    for (const p of this.allPools) {
      if (p.waiting.length === 0) continue
      for (const call of p.waiting) if (call.deadline <= now) call.fail(timeoutError(call.method, call.path, call.timeout))
      p.waiting = p.waiting.filter((call) => !call.done)
    }
  }

  /** Close idle connections now and busy shared ones when their calls are answered. */
  close () {
    this.closed = true
    this.cell?.stop()
    for (const c of this.conns) if (c.calls.length === 0) c.destroy()
    for (const l of this.links) l.idle()
    for (const p of this.allPools) p.idle.length = 0
    if (this.timer) {
      clearInterval(this.timer)
      this.timer = null
    }
  }
}

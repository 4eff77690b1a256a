// HTTP/1.1 framing for the transport: request heads built as strings, and
// an incremental response parser fed whatever the socket delivers (a byte
// at a time or many pipelined answers in one chunk).
//
// The parser handles what the broker sends and what any HTTP/1.1 server or
// proxy in front of it may send: the status line, headers (only
// Content-Length, Transfer-Encoding, Connection and Retry-After are kept),
// a Content-Length body, a chunked body (the queue listing above 256
// queues), a body ended by the server closing (HTTP/1.0 style), and 1xx
// interim answers, which are skipped.

const CRLF2 = Buffer.from('\r\n\r\n')
const MAX_HEAD = 64 * 1024

export class ProtocolError extends Error {
  constructor (message) {
    super('queen: malformed HTTP answer: ' + message)
    this.name = 'ProtocolError'
    this.code = 'ERR_HTTP_PROTOCOL'
  }
}

/**
 * The head of a request. `headers` is a prebuilt string of `name: value\r\n`
 * lines (the client's constant headers); `body` a string or undefined.
 */
export function requestHead (method, path, host, headers, bodyLength) {
  let h = method + ' ' + path + ' HTTP/1.1\r\nhost: ' + host + '\r\n' + headers
  if (bodyLength >= 0) h += 'content-type: application/json\r\ncontent-length: ' + bodyLength + '\r\n'
  return h + '\r\n'
}

// Parser states.
const HEAD = 0
const BODY = 1 // Content-Length
const CHUNK_SIZE = 2
const CHUNK_DATA = 3
const CHUNK_TRAILER = 4
const UNTIL_CLOSE = 5

/**
 * Feed it socket data; it calls onResponse(status, body, retryAfter, close)
 * for every complete final answer, in order. `body` is a Buffer (possibly
 * empty); `close` says the server will close the connection after it.
 */
export class ResponseParser {
  constructor (onResponse) {
    this.onResponse = onResponse
    this.buf = null // unconsumed bytes
    this.state = HEAD
    this.reset()
  }

  reset () {
    this.status = 0
    this.need = 0
    this.retryAfter = ''
    this.close = false
    this.parts = null // the pieces of a chunked body, or of a body read in several chunks
    this.got = 0 // bytes of a Content-Length body in parts
  }

  /** True while an answer has begun but not ended (bytes were received). */
  get midResponse () { return this.state !== HEAD || (this.buf !== null && this.buf.length > 0) }

  feed (chunk) {
    if (this.state === BODY && this.parts !== null) {
      // The rest of a Content-Length body that began in an earlier chunk:
      // its pieces are kept in a list and joined once, so a large answer
      // read in many pieces costs one copy rather than one per piece.
      const want = this.need - this.got
      if (chunk.length < want) {
        this.parts.push(chunk)
        this.got += chunk.length
        return
      }
      this.parts.push(chunk.subarray(0, want))
      this.emit(Buffer.concat(this.parts, this.need))
      if (chunk.length === want) return
      chunk = chunk.subarray(want)
    }
    let buf = this.buf === null ? chunk : Buffer.concat([this.buf, chunk])
    this.buf = null
    let i = 0
    for (;;) {
      if (this.state === HEAD) {
        const end = buf.indexOf(CRLF2, i)
        if (end < 0) {
          if (buf.length - i > MAX_HEAD) throw new ProtocolError('head over 64 KiB')
          break
        }
        this.parseHead(buf.latin1Slice(i, end))
        i = end + 4
        if (this.status < 200) { this.reset(); continue } // 1xx: an interim answer
        if (this.state === BODY && this.need === 0) { this.emit(EMPTY); continue }
        if (this.state === HEAD) { this.emit(EMPTY); continue } // 204/304: no body
      } else if (this.state === BODY) {
        const have = buf.length - i
        if (have < this.need) {
          if (have > 0) { // the rest comes in later chunks (feed's first branch)
            this.parts = [buf.subarray(i)]
            this.got = have
            i = buf.length
          }
          break
        }
        const body = buf.subarray(i, i + this.need)
        i += this.need
        this.emit(body)
      } else if (this.state === CHUNK_SIZE) {
        const eol = buf.indexOf(10, i)
        if (eol < 0) {
          if (buf.length - i > 1024) throw new ProtocolError('chunk size line over 1 KiB')
          break
        }
        const line = buf.latin1Slice(i, eol)
        i = eol + 1
        const size = parseInt(line, 16) // stops at ';' extensions and '\r'
        if (!(size >= 0)) throw new ProtocolError('chunk size ' + JSON.stringify(line))
        if (size === 0) this.state = CHUNK_TRAILER
        else { this.need = size + 2; this.state = CHUNK_DATA }
      } else if (this.state === CHUNK_DATA) {
        if (buf.length - i < this.need) break
        this.parts.push(buf.subarray(i, i + this.need - 2))
        i += this.need
        this.state = CHUNK_SIZE
      } else if (this.state === CHUNK_TRAILER) {
        const eol = buf.indexOf(10, i)
        if (eol < 0) break
        const empty = eol === i || (eol === i + 1 && buf[i] === 13)
        i = eol + 1
        if (empty) this.emit(Buffer.concat(this.parts))
      } else { // UNTIL_CLOSE
        if (i < buf.length) this.parts.push(buf.subarray(i))
        i = buf.length
        break
      }
    }
    if (i < buf.length) this.buf = i === 0 ? buf : buf.subarray(i)
  }

  /** The connection ended; answers whether that completed an answer. */
  end () {
    if (this.state === UNTIL_CLOSE) {
      this.emit(Buffer.concat(this.parts))
      return true
    }
    return false
  }

  parseHead (head) {
    // "HTTP/1.1 200 OK"
    if (!head.startsWith('HTTP/1.')) throw new ProtocolError('status line ' + JSON.stringify(head.slice(0, 40)))
    const status = +head.slice(9, 12)
    if (!(status >= 100 && status <= 999)) throw new ProtocolError('status line ' + JSON.stringify(head.slice(0, 40)))
    this.status = status
    let length = -1
    let chunked = false
    this.close = head.charCodeAt(7) === 48 // HTTP/1.0 closes unless it says keep-alive
    let p = head.indexOf('\r\n')
    while (p >= 0) {
      const next = head.indexOf('\r\n', p + 2)
      const line = next < 0 ? head.slice(p + 2) : head.slice(p + 2, next)
      p = next
      const colon = line.indexOf(':')
      if (colon <= 0) continue
      const name = line.slice(0, colon).toLowerCase()
      const value = line.slice(colon + 1).trim()
      if (name === 'content-length') {
        length = +value
        if (!Number.isSafeInteger(length) || length < 0) throw new ProtocolError('content-length ' + JSON.stringify(value))
      } else if (name === 'transfer-encoding') chunked = value.toLowerCase().endsWith('chunked')
      else if (name === 'connection') {
        const v = value.toLowerCase()
        if (v.includes('close')) this.close = true
        else if (v.includes('keep-alive')) this.close = false
      } else if (name === 'retry-after') this.retryAfter = value
    }
    if (status < 200) return
    if (status === 204 || status === 304) { this.state = HEAD; return }
    if (chunked) { this.state = CHUNK_SIZE; this.parts = []; return }
    if (length >= 0) { this.state = BODY; this.need = length; return }
    this.state = UNTIL_CLOSE
    this.close = true
    this.parts = []
  }

  emit (body) {
    const { status, retryAfter, close } = this
    this.state = HEAD
    this.reset()
    this.onResponse(status, body, retryAfter, close)
  }
}

const EMPTY = Buffer.alloc(0)

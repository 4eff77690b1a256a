// The link's frames (docs/link.md, "Frames"): the codec, nothing else.
//
// Every frame is a 13-byte header, then its payload:
//
//   length uint32 (payload bytes) | type uint8 | stream id uint64
//
// all big-endian. A request's payload is tenant (u16 length, empty on a
// client link), access level (u8, 0), method (u8 length), target (u32
// length: path and query as on an HTTP request line), header lines (u32
// length, empty) and the body (the rest). An answer's payload is the whole
// HTTP/1.1 answer the route would have written.

import { ResponseParser } from './http1.js'

export const HEADER_LEN = 13

export const FRAME_REQUEST = 1 // client → broker
export const FRAME_ANSWER = 2 // broker → client: ends the stream
export const FRAME_CANCEL = 3 // client → broker: a parked pop is let go
export const FRAME_REFUSE = 4 // broker → client: one reason byte, no answer
export const FRAME_PING = 5 // client → broker, stream 0
export const FRAME_PONG = 6 // broker → client, stream 0
export const FRAME_TOKEN = 7 // client → broker: a fresh token for the link's identity

export const REFUSE_BUSY = 1 // not served: back off, send again
export const REFUSE_CLOSING = 2 // not served: send again on another link
export const REFUSE_TOO_LARGE = 3 // served, its answer over the frame limit
export const REFUSE_LOST = 4 // relayed on, its answer lost on the way

/**
 * Whether a stream refused with payload p may have been served (docs/link.md,
 * "The one rule for a lost answer"): only busy and closing prove it was not;
 * anything else, an unknown reason included, may have been.
 */
export function refusalServed (p) {
  return !(p.length === 1 && (p[0] === REFUSE_BUSY || p[0] === REFUSE_CLOSING))
}

const TWO32 = 2 ** 32

function putHeader (buf, off, type, id, n) {
  buf.writeUInt32BE(n, off)
  buf[off + 4] = type
  buf.writeUInt32BE(Math.floor(id / TWO32), off + 5)
  buf.writeUInt32BE(id % TWO32, off + 9)
  return off + HEADER_LEN
}

/** The encoded length of a request frame, header included; target is ASCII. */
export function requestFrameLen (method, target, bodyLen) {
  return HEADER_LEN + 2 + 1 + 1 + method.length + 4 + target.length + 4 + bodyLen
}

/**
 * Writes a request frame at off and returns the offset after it. method and
 * target are ASCII (the target percent-encoded), body a string (UTF-8) of
 * bodyLen bytes, or undefined.
 */
export function writeRequest (buf, off, id, method, target, body, bodyLen) {
  off = putHeader(buf, off, FRAME_REQUEST, id, requestFrameLen(method, target, bodyLen) - HEADER_LEN)
  buf[off] = 0 // tenant: none on a client link (u16 length 0)
  buf[off + 1] = 0
  buf[off + 2] = 0 // access level: the upgrade's
  buf[off + 3] = method.length
  off += 4
  off += buf.latin1Write(method, off)
  buf.writeUInt32BE(target.length, off)
  off += 4
  off += buf.latin1Write(target, off)
  buf.writeUInt32BE(0, off) // no header lines
  off += 4
  if (bodyLen > 0) off += buf.utf8Write(body, off)
  return off
}

/** Writes a frame with no payload (cancel, ping) and returns the offset after it. */
export function writeEmpty (buf, off, type, id) {
  return putHeader(buf, off, type, id, 0)
}

/** Writes a token frame (payload: the token, ASCII) and returns the offset after it. */
export function writeToken (buf, off, id, token) {
  off = putHeader(buf, off, FRAME_TOKEN, id, token.length)
  return off + buf.latin1Write(token, off)
}

/** One request frame as a Buffer (tests, and clients in other languages to compare with). */
export function encodeRequest (id, method, target, body) {
  const bodyLen = body === undefined ? 0 : Buffer.byteLength(body)
  const buf = Buffer.allocUnsafe(requestFrameLen(method, target, bodyLen))
  writeRequest(buf, 0, id, method, target, body, bodyLen)
  return buf
}

export class FrameError extends Error {
  constructor (message) {
    super('queen: link protocol: ' + message)
    this.name = 'FrameError'
    this.code = 'ERR_LINK_PROTOCOL'
  }
}

/**
 * Splits what the socket delivers into frames, calling onFrame(type, id,
 * payload) for each, in order. A frame that arrives in many pieces is
 * joined once when whole (as a long HTTP body is, lib/http1.js); a payload
 * longer than limit is a FrameError.
 */
export class FrameReader {
  constructor (limit, onFrame) {
    this.limit = limit
    this.onFrame = onFrame
    this.rest = null // bytes of an unfinished frame
    this.parts = null // the pieces of a frame longer than one chunk
    this.have = 0
    this.need = 0
  }

  feed (chunk) {
    if (this.parts !== null) {
      this.parts.push(chunk)
      this.have += chunk.length
      if (this.have < this.need) return
      chunk = Buffer.concat(this.parts, this.have)
      this.parts = null
    } else if (this.rest !== null) {
      chunk = Buffer.concat([this.rest, chunk])
      this.rest = null
    }
    let i = 0
    while (chunk.length - i >= HEADER_LEN) {
      const n = chunk.readUInt32BE(i)
      if (n > this.limit) throw new FrameError(`a frame of ${n} bytes, over the limit of ${this.limit}`)
      if (chunk.length - i - HEADER_LEN < n) {
        this.need = HEADER_LEN + n
        break
      }
      const type = chunk[i + 4]
      const id = chunk.readUInt32BE(i + 5) * TWO32 + chunk.readUInt32BE(i + 9)
      const start = i + HEADER_LEN
      i = start + n
      this.onFrame(type, id, chunk.subarray(start, i))
    }
    if (i === chunk.length) return
    const left = chunk.subarray(i)
    if (left.length >= HEADER_LEN) {
      this.parts = [left]
      this.have = left.length
    } else {
      this.rest = left
    }
  }
}

const CRLF2 = Buffer.from('\r\n\r\n')

/**
 * The answer frame's payload, an HTTP/1.1 answer, as the transport's
 * { status, body, retryAfter }. The broker writes a Content-Length body; a
 * chunked one is decoded all the same (lib/http1.js), whatever wrote it.
 */
export function parseAnswer (p) {
  const end = p.indexOf(CRLF2)
  if (end < 12 || p[0] !== 0x48 /* H */) throw new FrameError('an answer that is not an HTTP answer')
  const status = (p[9] - 48) * 100 + (p[10] - 48) * 10 + (p[11] - 48)
  if (!(status >= 200 && status <= 599)) throw new FrameError(`an answer with status ${p.latin1Slice(9, 12)}`)
  const head = p.latin1Slice(0, end)
  let retryAfter = ''
  if (status === 429 || status === 503) retryAfter = headerValue(head, 'retry-after')
  if (headerValue(head, 'transfer-encoding').toLowerCase().endsWith('chunked')) {
    let res = null
    new ResponseParser((status, body, retryAfter) => { res = { status, body, retryAfter } }).feed(p)
    if (res === null) throw new FrameError('a chunked answer cut short')
    return res
  }
  return { status, body: p.subarray(end + 4), retryAfter }
}

function headerValue (head, name) {
  const lower = head.toLowerCase()
  const i = lower.indexOf('\r\n' + name + ':')
  if (i < 0) return ''
  const from = i + name.length + 3
  const eol = lower.indexOf('\r\n', from)
  return head.slice(from, eol < 0 ? head.length : eol).trim()
}

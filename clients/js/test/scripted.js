// Test support (not a test file): a scripted HTTP/1.1 server on a real TCP
// listener, for the conditions a real broker cannot produce; with `link`,
// it also speaks the link (docs/link.md), written from that page alone.

import net from 'node:net'

const LINK_PATH = '/api/v1/ephemeral/link'

// A scripted server: onRequest(req, sock, n) is called for every request
// ({method, path, body, head}, a socket to write the answer to, the
// server-wide request number); it writes whatever it likes.
//
// Over HTTP/1.1 the requests of a connection are handed over one at a time
// (onRequest may return a promise), as an HTTP/1.1 server answers a pipeline
// in order. An upgrade to a link is answered 404, as an older broker does,
// and not counted, unless `link` is set: then it is answered 101 and each
// request frame is handed over at once with its own `sock`, whose write()
// sends an answer frame on the request's stream; req.signal aborts when the
// client cancels the stream, req.read numbers the socket read that brought
// the frame in, and sock.refuse(reason) sends a refuse frame.
// srv.upgrades counts upgrade requests, srv.cancels counts cancel frames, srv.pings
// pings (each answered by a pong unless srv.pong is false).
//
// The cell's view read (GET /api/v1/ephemeral/cell, which the client sends
// once after its first answered call: lib/cellview.js) is answered by
// view(req), which returns the answer (or a promise of it), and is counted
// in srv.views, not srv.requests, nor handed to onRequest; by default it
// answers as a single broker does (generation 0, no members).
export async function scripted (t, onRequest, { link = false, view = singleBroker } = {}) {
  const srv = { connections: 0, requests: 0, upgrades: 0, links: 0, cancels: 0, pings: 0, views: 0, pong: true, sockets: new Set() }
  const server = net.createServer((sock) => {
    srv.connections++
    srv.sockets.add(sock)
    sock.setNoDelay(true)
    sock.on('close', () => srv.sockets.delete(sock))
    sock.on('error', () => {})
    let buf = Buffer.alloc(0)
    let chain = Promise.resolve()
    let frames = null // the link's streams, once upgraded
    let reads = 0
    sock.on('data', (d) => {
      reads++
      buf = Buffer.concat([buf, d])
      if (frames) {
        buf = readFrames(buf, frames)
        return
      }
      for (;;) {
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        const head = buf.subarray(0, end).toString('latin1')
        const m = /content-length: *(\d+)/i.exec(head)
        const len = m ? +m[1] : 0
        if (buf.length < end + 4 + len) return
        const [method, path] = head.split(' ')
        const body = buf.subarray(end + 4, end + 4 + len).toString()
        buf = buf.subarray(end + 4 + len)
        if (path.endsWith(LINK_PATH)) {
          srv.upgrades++
          if (!link) {
            sock.write(answer(404, '{"error":"no such route","code":"not_found"}'))
            continue
          }
          srv.links++
          sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: queen-link/1\r\nConnection: Upgrade\r\n\r\n')
          frames = new Map()
          buf = readFrames(buf, frames)
          return
        }
        const req = { method, path, body, head }
        if (isView(path)) {
          srv.views++
          chain = chain.then(async () => { const a = await view(req); if (!sock.destroyed) sock.write(a) })
          continue
        }
        chain = chain.then(() => onRequest(req, sock, ++srv.requests))
      }
    })

    // Serves the whole frames at the start of b and returns the rest.
    function readFrames (b, streams) {
      while (b.length >= 13) {
        const n = b.readUInt32BE(0)
        if (b.length < 13 + n) break
        const type = b[4]
        const id = Number(b.readBigUInt64BE(5))
        const p = b.subarray(13, 13 + n)
        b = b.subarray(13 + n)
        if (type === 1) {
          const req = decodeRequest(p)
          req.read = reads // which read of the socket brought it
          const ac = new AbortController()
          req.signal = ac.signal
          streams.set(id, ac)
          const facade = {
            write (s) {
              if (!streams.delete(id) || sock.destroyed) return
              const payload = Buffer.from(s)
              sock.write(Buffer.concat([header(2, id, payload.length), payload]))
            },
            end (s) { if (s !== undefined) facade.write(s); sock.end() },
            refuse (reason) { // a refuse frame with that reason byte
              if (streams.delete(id) && !sock.destroyed) sock.write(Buffer.concat([header(4, id, 1), Buffer.from([reason])]))
            },
            destroy () { sock.destroy() },
            resetAndDestroy () { sock.resetAndDestroy() },
            get destroyed () { return sock.destroyed }
          }
          if (isView(req.path)) {
            srv.views++
            Promise.resolve(view(req)).then((a) => facade.write(a), () => {})
          } else {
            Promise.resolve(onRequest(req, facade, ++srv.requests)).catch(() => {})
          }
        } else if (type === 3) {
          srv.cancels++
          streams.get(id)?.abort()
          streams.delete(id)
        } else if (type === 5) {
          srv.pings++
          if (srv.pong) sock.write(header(6, 0, 0))
        } else {
          sock.destroy()
        }
      }
      return b
    }
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  srv.url = `http://127.0.0.1:${server.address().port}`
  // srv.stop(): the server is gone, as a broker killed -9 (connections
  // reset, the port refusing).
  srv.stop = () => {
    for (const s of srv.sockets) s.destroy()
    server.close()
  }
  t.after(srv.stop)
  return srv
}

const VIEW_PATH = '/api/v1/ephemeral/cell'

function isView (path) {
  const q = path.indexOf('?')
  return (q < 0 ? path : path.slice(0, q)).endsWith(VIEW_PATH)
}

/** A single broker's answer to the view read. */
export function singleBroker () {
  return answer(200, '{"generation":0,"tenant":"","members":[]}')
}

function header (type, id, n) {
  const h = Buffer.alloc(13)
  h.writeUInt32BE(n, 0)
  h[4] = type
  h.writeBigUInt64BE(BigInt(id), 5)
  return h
}

// A request frame's payload (docs/link.md, "A request").
function decodeRequest (p) {
  let off = 0
  const tenant = p.readUInt16BE(off)
  off += 2 + tenant + 1 // and the access level
  const m = p[off]
  const method = p.toString('latin1', off + 1, off + 1 + m)
  off += 1 + m
  const tl = p.readUInt32BE(off)
  const path = p.toString('latin1', off + 4, off + 4 + tl)
  off += 4 + tl
  const hl = p.readUInt32BE(off)
  const head = p.toString('latin1', off + 4, off + 4 + hl)
  off += 4 + hl
  return { method, path, body: p.toString('utf8', off), head, tenant, access: p[2 + tenant] }
}

export function answer (status, body, extra = '') {
  return `HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
}

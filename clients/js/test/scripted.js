// Test support (not a test file): a scripted HTTP/1.1 server on a real TCP
// listener, for the conditions a real broker cannot produce.

import net from 'node:net'

// A scripted HTTP/1.1 server: onRequest(req, sock, n) is called for every
// request read off a connection ({method, path, body}, the socket, the
// server-wide request number), one request of a connection at a time (it
// may return a promise), as an HTTP/1.1 server answers a pipeline in order;
// it writes whatever it likes.
export async function scripted (t, onRequest) {
  const srv = { connections: 0, requests: 0, sockets: new Set() }
  const server = net.createServer((sock) => {
    srv.connections++
    srv.sockets.add(sock)
    sock.setNoDelay(true)
    sock.on('close', () => srv.sockets.delete(sock))
    sock.on('error', () => {})
    let buf = Buffer.alloc(0)
    let chain = Promise.resolve()
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d])
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
        const req = { method, path, body, head }
        chain = chain.then(() => onRequest(req, sock, ++srv.requests))
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  srv.url = `http://127.0.0.1:${server.address().port}`
  t.after(() => {
    for (const s of srv.sockets) s.destroy()
    server.close()
  })
  return srv
}

export function answer (status, body, extra = '') {
  return `HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
}


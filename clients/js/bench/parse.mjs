// The response parser on a large answer read in pieces, as a socket
// delivers it: `node bench/parse.mjs [MiB] [piece KiB]` prints how long
// parsing a MiB-byte answer (and a small one pipelined behind it) takes.
import { ResponseParser } from '../lib/http1.js'

const size = Number(process.argv[2] ?? 32) << 20
const piece = Number(process.argv[3] ?? 64) << 10
const whole = Buffer.concat([
  Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${size}\r\n\r\n`),
  Buffer.alloc(size, 120),
  Buffer.from('HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}')
])
const got = []
const p = new ResponseParser((status, body) => got.push([status, body.length]))
const t0 = process.hrtime.bigint()
for (let i = 0; i < whole.length; i += piece) p.feed(whole.subarray(i, Math.min(whole.length, i + piece)))
const ms = Number(process.hrtime.bigint() - t0) / 1e6
if (got.length !== 2 || got[0][1] !== size || got[1][1] !== 2) throw new Error('wrong answers: ' + JSON.stringify(got))
console.log(`${size >> 20} MiB answer in ${piece >> 10} KiB pieces: ${ms.toFixed(1)} ms`)

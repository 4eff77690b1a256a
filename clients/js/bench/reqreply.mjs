// A/B measure of the SDK's request/reply path (transport work; the full
// peer table is the bench helper's): R requesters calling
// queen.ephemeral.request() in a loop, S responders doing
// pop(queue, {wait, batch, autoAck}) + reply(), 64-byte payloads, a fresh
// inbox per request. Prints round trips/s, p50, p99 and this process's CPU
// (user+system, process.cpuUsage) per round trip, and the broker's when the
// script started it (from /proc).
//
//   node bench/reqreply.mjs [--url http://127.0.0.1:6632] [--seconds 5]
//        [--requesters 32] [--responders 4] [--client ./index.js]
//        [--pipeline 16] [--connections 4] [--consume ack|autoAck]
//        [--http] [--links 1] [--no-owner-routing] [--cpu-pids 12,13,14]
//
// --http forces HTTP/1.1 (the forceHTTP option); --links sets the links per
// broker URL. "tcp" is the most TCP connections the client held at once
// (its HTTP connections and links, sampled every 50 ms).
// --cpu-pids: processes (the brokers behind --url, every member of a cell)
// whose CPU is summed over the measured window alone, not the warm-up or
// the start and end of this process, and printed per round trip as
// brokerCpuUsPerRoundTrip.
// Without --url it starts a broker of its own (test/broker.js: QUEEN_BIN or
// `go build ./cmd/queen`) on a free port with a temporary data directory.
// --client loads another build of the SDK (e.g. the previous index.js) so
// two transports can be compared in the same run. --no-owner-routing: every
// call to --url (a cell member relays what it does not own), as before owner
// routing (lib/cellview.js).
import { parseArgs } from 'node:util'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { readFileSync } from 'node:fs'
import { Broker } from '../test/broker.js'

// CPU seconds (user+system) a process has used, from /proc (Linux), or NaN.
function procCPU (pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'latin1')
    const v = f.slice(f.lastIndexOf(')') + 2).split(' ')
    return (Number(v[11]) + Number(v[12])) / 100 // clock ticks, USER_HZ 100
  } catch {
    return NaN
  }
}

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    seconds: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    requesters: { type: 'string', default: '32' },
    responders: { type: 'string', default: '4' },
    client: { type: 'string', default: new URL('../index.js', import.meta.url).pathname },
    label: { type: 'string' },
    pipeline: { type: 'string' },
    consume: { type: 'string' }, // 'ack' or 'autoAck': responders are consume() loops
    connections: { type: 'string' },
    http: { type: 'boolean', default: false },
    links: { type: 'string' },
    'no-owner-routing': { type: 'boolean', default: false },
    'cpu-pids': { type: 'string' }
  }
})
const { Queen, parseRequest } = await import(pathToFileURL(path.resolve(a.client)).href)

let broker
let url = a.url
if (!url) {
  broker = new Broker()
  await broker.start()
  url = broker.url
}

const queen = new Queen(url, { forceHTTP: a.http, ownerRouting: !a['no-owner-routing'] })
if (a.links) queen.transport.linksPerURL = Number(a.links)
// Transport knobs (this SDK only): calls per shared connection, shared connections per URL.
if (a.pipeline) queen.transport.pipeline = Number(a.pipeline)
if (a.connections) queen.transport.connections = Number(a.connections)
const e = queen.ephemeral
const queue = 'rr-' + process.pid + '-' + Date.now()
const payload = 'x'.repeat(64)
const nReq = Number(a.requesters)
const nResp = Number(a.responders)

let measuring = false
let stop = false
let stopResponders = false
let count = 0
const lat = []

const consumers = new AbortController()
const responders = a.consume
  ? Array.from({ length: nResp }, () => e.consume(queue, (m) => e.reply(m, parseRequest(m).payload),
    { group: 'workers', concurrency: 16, wait: 500, autoAck: a.consume === 'autoAck', signal: consumers.signal }))
  : Array.from({ length: nResp }, async () => {
  while (!stopResponders) {
    const { messages } = await e.pop(queue, { group: 'workers', batch: 16, wait: true, timeout: 500, autoAck: true })
    await Promise.all(messages.map((m) => e.reply(m, parseRequest(m).payload)))
  }
})

const requesters = Array.from({ length: nReq }, async () => {
  while (!stop) {
    const t0 = performance.now()
    await e.request(queue, payload, { timeout: 10000 })
    if (measuring) {
      lat.push(performance.now() - t0)
      count++
    }
  }
})

await new Promise((resolve) => setTimeout(resolve, Number(a.warmup) * 1000))
let tcp = 0
const sampler = setInterval(() => {
  tcp = Math.max(tcp, queen.transport.conns.size + (queen.transport.links?.size ?? 0))
}, 50)
// The read and write system calls a process has made so far (syscr and
// syscw of /proc/PID/io, Linux), or NaN.
function procSyscalls (pid) {
  try {
    const f = readFileSync(`/proc/${pid}/io`, 'latin1')
    return Number(/syscr: (\d+)/.exec(f)[1]) + Number(/syscw: (\d+)/.exec(f)[1])
  } catch {
    return NaN
  }
}
// The processes whose CPU is the brokers' (summed, NaN when unreadable).
const brokerPids = a['cpu-pids'] ? a['cpu-pids'].split(',').map(Number) : broker ? [broker.proc.pid] : []
const brokersCPU = () => brokerPids.reduce((sum, pid) => sum + procCPU(pid), 0)
const brokersSyscalls = () => brokerPids.reduce((sum, pid) => sum + procSyscalls(pid), 0)
const cpu0 = process.cpuUsage()
const bcpu0 = brokersCPU()
const bsys0 = brokersSyscalls()
const sys0 = procSyscalls(process.pid)
const t0 = performance.now()
measuring = true
await new Promise((resolve) => setTimeout(resolve, Number(a.seconds) * 1000))
measuring = false
clearInterval(sampler)
const secs = (performance.now() - t0) / 1000
const cpu = process.cpuUsage(cpu0)
const bcpu = brokersCPU() - bcpu0
const bsys = brokersSyscalls() - bsys0
const sys = procSyscalls(process.pid) - sys0
stop = true
await Promise.all(requesters)
stopResponders = true
consumers.abort()
await Promise.all(responders)
await queen.close()
if (broker) await broker.kill()

lat.sort((x, y) => x - y)
const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]
const out = {
  label: a.label ?? path.basename(path.dirname(path.resolve(a.client))) + '/' + path.basename(a.client),
  roundTripsPerSec: Math.round(count / secs),
  p50ms: +q(0.5).toFixed(2),
  p99ms: +q(0.99).toFixed(2),
  cpuUsPerRoundTrip: +((cpu.user + cpu.system) / count).toFixed(1),
  tcp
}
if (brokerPids.length) out.brokerCpuUsPerRoundTrip = +(bcpu * 1e6 / count).toFixed(1)
// Read and write system calls per round trip (/proc/PID/io; absent where
// unreadable): how many frames share each read and write, this process's
// and the brokers' (summed).
if (Number.isFinite(sys)) out.syscallsPerRoundTrip = +(sys / count).toFixed(2)
if (brokerPids.length && Number.isFinite(bsys)) out.brokerSyscallsPerRoundTrip = +(bsys / count).toFixed(2)
console.log(JSON.stringify(out))

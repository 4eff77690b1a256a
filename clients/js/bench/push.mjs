// A/B of the short-call path: C concurrent loops of push(queue, [64 B])
// (pipelined on the shared connections) for a few seconds; prints calls/s,
// p50, p99 and this process's CPU per call.
//   node bench/push.mjs [--url U] [--seconds 4] [--concurrency 64] [--client ./index.js]
import { parseArgs } from 'node:util'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { Broker } from '../test/broker.js'

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    seconds: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '64' },
    client: { type: 'string', default: new URL('../index.js', import.meta.url).pathname },
    label: { type: 'string' }
  }
})
const { Queen } = await import(pathToFileURL(path.resolve(a.client)).href)
let broker
let url = a.url
if (!url) {
  broker = new Broker()
  await broker.start()
  url = broker.url
}
const queen = new Queen(url)
const e = queen.ephemeral
await e.configure('bench-push', { maxLength: 1000, policy: 'dropOldest' })
const payload = 'x'.repeat(64)
let stop = false
let measuring = false
let count = 0
const lat = []
const loops = Array.from({ length: Number(a.concurrency) }, async () => {
  while (!stop) {
    const t0 = performance.now()
    await e.push('bench-push', [payload])
    if (measuring) { lat.push(performance.now() - t0); count++ }
  }
})
await new Promise((resolve) => setTimeout(resolve, 1000))
const cpu0 = process.cpuUsage()
const t0 = performance.now()
measuring = true
await new Promise((resolve) => setTimeout(resolve, Number(a.seconds) * 1000))
measuring = false
const secs = (performance.now() - t0) / 1000
const cpu = process.cpuUsage(cpu0)
stop = true
await Promise.all(loops)
await queen.close()
if (broker) await broker.kill()
lat.sort((x, y) => x - y)
const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]
console.log(JSON.stringify({
  label: a.label ?? a.client,
  callsPerSec: Math.round(count / secs),
  p50ms: +q(0.5).toFixed(2),
  p99ms: +q(0.99).toFixed(2),
  cpuUsPerCall: +((cpu.user + cpu.system) / count).toFixed(1)
}))

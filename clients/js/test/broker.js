// Test support (not a test file): build the broker binary once (or use
// QUEEN_BIN), start brokers on free loopback ports with a fresh data
// directory, stop them with SIGTERM and restart them on the same data.

import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
let bin = process.env.QUEEN_BIN
const temps = []

export function brokerBinary () {
  if (!bin) {
    const dir = mkdtempSync(path.join(tmpdir(), 'queen-js-'))
    temps.push(dir)
    bin = path.join(dir, 'queen')
    execFileSync('go', ['build', '-o', bin, './cmd/queen'], { cwd: ROOT, stdio: 'inherit' })
  }
  return bin
}

process.on('exit', () => { for (const d of temps) rmSync(d, { recursive: true, force: true }) })

let nextPort = 20000 + (Date.now() % 12000)

function canListen (port) {
  return new Promise((resolve) => {
    const s = net.createServer()
    s.once('error', () => resolve(false))
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
  })
}

export async function freePort () {
  for (let i = 0; i < 12000; i++) {
    const p = nextPort++
    if (nextPort >= 32000) nextPort = 20000
    if (await canListen(p)) return p
  }
  throw new Error('no free port')
}

// Whether GET /health on port answers 200 within a second.
function health (port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port })
    let out = ''
    s.setTimeout(1000, () => s.destroy())
    s.on('data', (d) => { out += d })
    s.on('error', () => {})
    s.on('close', () => resolve(out.startsWith('HTTP/1.1 200')))
    s.write('GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n')
  })
}

export class Broker {
  constructor (env = {}) {
    this.env = env
    this.data = mkdtempSync(path.join(tmpdir(), 'queen-js-data-'))
    temps.push(this.data)
    this.proc = null
    this.logs = ''
  }

  get url () { return `http://127.0.0.1:${this.port}` }

  async start (port) {
    this.port = port ?? await freePort()
    const env = {}
    for (const [k, v] of Object.entries(process.env)) {
      if (!k.startsWith('QUEEN_') && !k.startsWith('PG') && k !== 'PORT' && k !== 'HOST') env[k] = v
    }
    Object.assign(env, { HOST: '127.0.0.1', PORT: String(this.port), QUEEN_DATA_DIR: path.join(this.data, 'store'), QUEEN_LOG_LEVEL: 'warn' }, this.env)
    const proc = spawn(brokerBinary(), [], { cwd: this.data, env, stdio: ['ignore', 'pipe', 'pipe'] })
    this.proc = proc
    this.exited = new Promise((resolve) => proc.once('exit', resolve))
    proc.stdout.on('data', (d) => { this.logs += d })
    proc.stderr.on('data', (d) => { this.logs += d })
    const deadline = Date.now() + 20000
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`the broker exited before serving:\n${this.logs}`)
      // On a connection closed after (a kept-alive one would be counted
      // in queen_ephemeral_connections, which tests read).
      if (await health(this.port)) return this
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    throw new Error(`the broker did not answer /health within 20 s:\n${this.logs}`)
  }

  async stop () {
    if (!this.proc || this.proc.exitCode !== null) return
    this.proc.kill('SIGTERM')
    await this.exited
  }

  async kill () {
    if (!this.proc || this.proc.exitCode !== null) return
    this.proc.kill('SIGKILL')
    await this.exited
  }
}

export async function startBroker (t, env) {
  const b = new Broker(env)
  await b.start()
  t.after(() => b.kill())
  return b
}

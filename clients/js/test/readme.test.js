// README.md's install line and first program run as written: in a fresh
// directory, the install block (with /path/to/ephemeral this checkout, npm
// offline: the package has no dependencies to fetch), the program saved as
// hello.mjs, then the run block against a real broker, printing exactly the
// output the README shows.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { startBroker } from './broker.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(HERE, '../../..')
const run = promisify(execFile)

// The fenced block that follows "<!-- readme:name -->" in README.md: its
// lines, fences excluded.
function readmeBlock (name) {
  const lines = readFileSync(path.join(HERE, '..', 'README.md'), 'utf8').split('\n')
  const at = lines.indexOf(`<!-- readme:${name} -->`)
  assert.ok(at >= 0, `README.md has no readme:${name} marker`)
  assert.ok(lines[at + 1].startsWith('```'), `README.md: readme:${name} is not followed by a fence`)
  const end = lines.indexOf('```', at + 2)
  assert.ok(end > at, `README.md: the block after readme:${name} is not closed`)
  return lines.slice(at + 2, end).join('\n') + '\n'
}

test('the README installs from a checkout and its first program runs as written', async (t) => {
  const b = await startBroker(t)
  const dir = mkdtempSync(path.join(tmpdir(), 'queen-js-readme-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const env = {
    ...process.env,
    npm_config_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    npm_config_cache: path.join(dir, '.npm')
  }
  const sh = (script) => run('sh', ['-e', '-c', script], { cwd: dir, env, timeout: 120000 })

  await sh(readmeBlock('install').replaceAll('/path/to/ephemeral', ROOT))
  writeFileSync(path.join(dir, 'hello.mjs'), readmeBlock('first-program').replaceAll('http://localhost:6632', b.url))
  const { stdout } = await sh(readmeBlock('run'))
  assert.equal(stdout, readmeBlock('first-program-output'))
})

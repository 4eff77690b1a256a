// Type declarations of queen-mq (ESM, Node 20.3 or later).

export type Payload = unknown

/**
 * The codes of the specification's refusal taxonomy, plus `ephemeral_unsupported`;
 * the same list as the Go SDK's Code* constants. OWNER_MOVED and FORWARD_FAILED
 * come only from a cell of several brokers and say the request was not applied:
 * every call sends such a refusal again by itself, with backoff (or after its
 * Retry-After), within the call's bounds, and throws it only when they end first.
 */
export declare const Codes: Readonly<{
  BAD_REQUEST: 'ephemeral_bad_request'
  QUOTA_EXCEEDED: 'ephemeral_quota_exceeded'
  FEATURE_GATED: 'feature_gated'
  QUEUE_NOT_FOUND: 'ephemeral_queue_not_found'
  QUEUE_FULL: 'queue_full'
  RATE_LIMITED: 'rate_limited'
  CONFIGURE_FAILED: 'ephemeral_configure_failed'
  DELETE_FAILED: 'ephemeral_delete_failed'
  UNAVAILABLE: 'ephemeral_unavailable'
  OWNER_MOVED: 'owner_moved'
  FORWARD_FAILED: 'ephemeral_forward_failed'
  DISABLED: 'ephemeral_disabled'
  UNSUPPORTED: 'ephemeral_unsupported'
}>

export type ErrorCode = (typeof Codes)[keyof typeof Codes] | (string & {})

/** A refusal answered by the broker. A 404 from any route but depth has code `ephemeral_unsupported`. */
export declare class QueenError extends Error {
  readonly name: 'QueenError'
  readonly status: number
  readonly code: ErrorCode
  /** The broker's prose, for a human reading a log. */
  readonly detail: string
  /** Retry-After in milliseconds, 0 when absent. */
  readonly retryAfter: number
  readonly method: string
  readonly path: string
  /** A 429 or a 503. */
  readonly temporary: boolean
  /**
   * How many times the call was sent: 1, or more for a cell refusal
   * (`owner_moved`, `ephemeral_forward_failed`) retried until the call's
   * bounds (its timeout, its signal) ended.
   */
  readonly attempts: number
}

/** Buffered messages that could not be delivered; `cause` is the last error. */
export declare class FlushError extends Error {
  readonly name: 'FlushError'
  readonly queue: string
  readonly partition: string | undefined
  /** How many buffered messages were not delivered. */
  readonly messages: number
  readonly status: number | undefined
  readonly code: ErrorCode | undefined
  readonly cause: unknown
}

/**
 * The connection to the broker failed (refused, reset, closed before the answer).
 * `code` is the socket's (`ECONNREFUSED`, `ECONNRESET`, ...), `ECONNCLOSED`
 * for a clean close, or the link's: `ERR_LINK_LOST` and `ERR_LINK_TOO_LARGE`
 * (refuse frames, docs/link.md), `ERR_LINK_TIMEOUT` (no pong for two pings),
 * `ERR_LINK_CLOSING` (the broker is shutting down; not sent).
 * `sent` is false only when the call provably never reached the broker (true:
 * it may have been applied); `dial` is true when the connection was never
 * established.
 */
export declare class ConnectionError extends Error {
  readonly name: 'ConnectionError'
  readonly code: string
  readonly sent: boolean
  readonly dial: boolean
  readonly cause: unknown
}

export declare class RequestTimeoutError extends Error {
  readonly name: 'RequestTimeoutError'
  readonly code: 'request_timeout'
}

export declare class ClosedError extends Error {
  readonly name: 'ClosedError'
  readonly code: 'client_closed'
}

export interface BufferOptions {
  /** Batch size (default 100, at most 10,000). */
  messageCount?: number
  /** How long the oldest buffered message may wait, ms (default 100). */
  timeMillis?: number
  /** Most messages the client buffers; a buffered push waits past it (default 10,000). */
  maxPending?: number
  /** How long a batch is retried against 429/503/network errors, ms (0 or unset: the default, 30,000; negative or Infinity: until close()), as the Go SDK's RetryTimeout. */
  retryTimeout?: number
  /** Cap of the backoff between retries, ms (default 1,000). */
  maxBackoff?: number
}

export interface QueenOptions {
  /**
   * Sent as `Authorization: Bearer <token>`. A function (sync or async) is a token
   * source, for credentials that rotate: it is called for the first call, and again
   * only when its token nears its end (a JWT's `exp`, read without verifying it, less
   * a quarter of its lifetime, at most 30 s; a token without a readable `exp`, every
   * minute), never once per call. A link is sent a fresh token from it in a token
   * frame before its own expires, so that the link and the pops parked on it outlive
   * any one token. A function that throws fails the call that needed the token
   * (nothing was sent) unless the token in use has not expired, which serves on.
   */
  token?: string | (() => string | Promise<string>)
  headers?: Record<string, string>
  /**
   * Per-request timeout in ms (default 30,000); a waiting pop adds its own timeout.
   * It also bounds, from the first send, the retries of a call refused by the cell.
   */
  timeout?: number
  /**
   * `true`: HTTP/1.1 only. By default every call rides a link (docs/link.md), one
   * upgraded connection per broker URL, and falls back to HTTP/1.1 by itself when the
   * upgrade is answered with anything but 101 (an older broker, a proxy that drops
   * `Upgrade`), remembered per URL for a minute.
   */
  forceHTTP?: boolean
  /**
   * `false`: every call goes to the configured URL, as before owner routing. By
   * default (`true`), once a call is answered the client reads the cell's view
   * (`GET /api/v1/ephemeral/cell`) and sends each queue's push, pop, ack and depth
   * read to the member that owns the queue; a single broker or a gateway answers
   * that it is no cell, and nothing changes.
   */
  ownerRouting?: boolean
  buffer?: BufferOptions
  /** Called for each flush that finally failed (also reported by the next buffered push, flush() and close()). */
  onFlushError?: (err: FlushError) => void
}

export interface CallOptions {
  signal?: AbortSignal
}

export interface WindowBuffer {
  ms: number
  count: number
}

export interface QueueOptions {
  maxBytes?: number
  maxLength?: number
  policy?: 'reject' | 'dropOldest'
  ttlSeconds?: number
  leaseSeconds?: number
  retryLimit?: number
  windowBuffer?: WindowBuffer
}

export interface PushOptions extends CallOptions {
  /** Defaults to the broker's `Default`. FIFO per (queue, partition). */
  partition?: string
  /** Batch client-side; see BufferOptions. */
  buffered?: boolean
}

export interface PopOptions extends CallOptions {
  partition?: string
  /** None is queue mode (one shared cursor). */
  group?: string
  batch?: number
  wait?: boolean
  /** ms */
  timeout?: number
  autoAck?: boolean
}

export interface Message<T = Payload> {
  /** Opaque: pass it back to ack, never parse or store it. */
  id: string
  partition: string
  attempts: number
  payload: T
}

export type AckStatus = 'completed' | 'failed' | 'retry'
export type AckOutcomeName = 'acked' | 'redelivered' | 'stale' | 'unknown'

export interface AckOptions extends CallOptions {
  /** The group the pop used. */
  group?: string
  status?: AckStatus
}

export interface AckOutcome {
  id: string
  outcome: AckOutcomeName
}

export interface Drops {
  bounds: number
  ttl: number
  retry: number
}

export interface QueueInfo {
  queue: string
  tier: 'declared' | 'implicit'
  depth: number
  bytes: number
  partitions: number
  groups: number
  drops: Drops
  options: Required<Omit<QueueOptions, 'windowBuffer'>> & { windowBuffer: WindowBuffer | null }
}

export interface Depth {
  queue: string
  group: string | null
  tier: 'declared' | 'implicit'
  pending: number
  partitionsPending: number
  bytes: number
  partitions: { partition: string, pending: number, bytes: number }[]
  groups: { group: string, pending: number, skipped: number }[]
}

export interface RequestOptions extends CallOptions {
  /** ms (default 30,000) */
  timeout?: number
  partition?: string
}

export interface ConsumeOptions {
  group?: string
  partition?: string
  /** Handlers at once (default 1). */
  concurrency?: number
  /** Most messages one pop takes (default concurrency). */
  batch?: number
  /** Each long poll's timeout, ms (default 10,000). */
  wait?: number
  /**
   * Pop with autoAck: no ack call per message, at-most-once (a handler that
   * throws is reported to onError, the message is not redelivered). Made for
   * request/reply responders. Default false.
   */
  autoAck?: boolean
  /** Stops the loop; so does close(). */
  signal?: AbortSignal
  /**
   * Errors the loop survives: failed acks, pops refused with 429/503 or lost with
   * their connection (polled again after a backoff, or the broker's Retry-After).
   * Pops and acks refused by the cell are retried by pop() and ack() first and
   * reach onError only when their bounds end.
   */
  onError?: (err: unknown) => void
}

/**
 * Every call that the cell refuses (`503 owner_moved`, `503 ephemeral_forward_failed`:
 * not applied) is sent again by itself with backoff and jitter, or after Retry-After,
 * within its bound (the client's `timeout` from the first send; a waiting pop's or a
 * request's own `timeout`) and its `signal`; the last QueenError is thrown when those
 * end first. A call whose answer was lost is never sent again (push, ack, autoAck pop).
 */
export declare class Ephemeral {
  configure (queue: string, options?: QueueOptions, opts?: CallOptions): Promise<{ queue: string, options: QueueOptions }>
  push (queue: string, payloads: Payload[], options?: PushOptions): Promise<{ pushed: number }>
  /** A waiting pop refused by the cell is re-issued with what is left of its `timeout`. */
  pop<T = Payload> (queue: string, options?: PopOptions): Promise<{ queue: string, messages: Message<T>[] }>
  ack (queue: string, messages: (Message | { id: string } | string)[], options?: AckOptions): Promise<{ results: AckOutcome[] }>
  reset (queue: string, opts?: CallOptions): Promise<{ queue: string, dropped: number }>
  delete (queue: string, opts?: CallOptions): Promise<{ queue: string, deleted: boolean, declared: boolean }>
  queues (opts?: CallOptions): Promise<{ queues: QueueInfo[], count: number, cellBytes: number }>
  depth (queue: string, options?: { group?: string } & CallOptions): Promise<Depth>
  /** Send every buffered message now; rejects with the flushes that failed. */
  flush (): Promise<void>
  /**
   * Its push refused by the cell: pushed again with a fresh inbox; its inbox pop
   * refused: parked again on the same inbox (the request was delivered).
   */
  request<T = Payload> (queue: string, payload: Payload, options?: RequestOptions): Promise<Message<T>>
  reply (request: Message, payload: Payload, opts?: CallOptions): Promise<void>
  consume<T = Payload> (queue: string, handler: (message: Message<T>, ctx: { signal: AbortSignal }) => unknown | Promise<unknown>, options?: ConsumeOptions): Promise<void>
  /** Messages held by buffered pushes right now. */
  readonly pending: number
}

export declare class Queen {
  constructor (urls: string | string[], options?: QueenOptions)
  readonly ephemeral: Ephemeral
  /** The broker URL in use. */
  readonly url: string
  /** Flush buffered pushes and stop consume loops; rejects with the flushes that failed. */
  close (): Promise<void>
}

export declare function newInbox (): string
export declare function parseRequest<T = Payload> (message: Message): { replyTo: string, payload: T }

export default Queen

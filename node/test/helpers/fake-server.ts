// A scripted fake server for exact-byte client tests: each test reads what
// the client sent and writes the bytes it wants, when it wants.
import { once } from "node:events";
import * as net from "node:net";
import * as tls from "node:tls";

/** One accepted connection, seen from the server side. */
export class FakeConnection {
  private buffered = Buffer.alloc(0);
  private waiter: (() => void) | undefined;
  /** Resolves when the client's side is gone (FIN, reset or close). */
  readonly closed: Promise<void>;
  /** performance.now() of the arrival of each chunk's last byte. */
  lastDataAt = 0;

  constructor(readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      this.lastDataAt = performance.now();
      this.buffered = Buffer.concat([this.buffered, chunk]);
      this.waiter?.();
    });
    socket.on("error", () => {});
    this.closed = new Promise((resolve) => {
      socket.once("end", () => resolve());
      socket.once("close", () => resolve());
    });
    void this.closed.then(() => this.waiter?.());
  }

  /** Reads exactly n bytes; rejects if the connection closes first. */
  async read(n: number): Promise<Buffer> {
    for (;;) {
      if (this.buffered.length >= n) {
        const out = this.buffered.subarray(0, n);
        this.buffered = this.buffered.subarray(n);
        return out;
      }
      if (this.socket.destroyed || this.socket.readableEnded) {
        throw new Error(`connection closed while reading ${n} bytes (have ${this.buffered.length})`);
      }
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
      });
      this.waiter = undefined;
    }
  }

  /**
   * Reads a full ACQUIRE frame (version 1, version 2 with mode and limit, or
   * version 3 with mode, limit and value) and returns its fields; `mode` and
   * `limit` are undefined for version 1, `value` for versions 1 and 2.
   */
  async readAcquire(): Promise<{
    version: number;
    leaseMs: number;
    mode?: number;
    limit?: number;
    name: Buffer;
    value?: Buffer;
    raw: Buffer;
  }> {
    let head = await this.read(8);
    if (head[0] !== 0x01) throw new Error(`expected ACQUIRE, got ${head.toString("hex")}`);
    const version = head[1] ?? -1;
    if (version === 2 || version === 3) head = Buffer.concat([head, await this.read(3)]);
    const name = await this.read(head.readUInt16BE(head.length - 2));
    const leaseMs = head.readUInt32BE(2);
    if (version === 3) {
      const valueLen = await this.read(2);
      const value = await this.read(valueLen.readUInt16BE(0));
      const raw = Buffer.concat([head, name, valueLen, value]);
      return { version, leaseMs, mode: head[6], limit: head.readUInt16BE(7), name, value, raw };
    }
    const raw = Buffer.concat([head, name]);
    if (version !== 2) return { version, leaseMs, name, raw };
    return { version, leaseMs, mode: head[6], limit: head.readUInt16BE(7), name, raw };
  }

  /** Reads one HEARTBEAT byte. */
  async readHeartbeat(): Promise<void> {
    const b = await this.read(1);
    if (b[0] !== 0x02) throw new Error(`expected HEARTBEAT, got ${b.toString("hex")}`);
  }

  /** Writes raw bytes (hex string or buffer). */
  write(bytes: string | Uint8Array): void {
    this.socket.write(typeof bytes === "string" ? Buffer.from(bytes, "hex") : bytes);
  }

  waiting(): void {
    this.write("11");
  }

  acquired(token: bigint): void {
    const b = Buffer.alloc(9);
    b[0] = 0x12;
    b.writeBigUInt64BE(token, 1);
    this.write(b);
  }

  error(code: number, reason = ""): void {
    const r = Buffer.from(reason, "utf8");
    this.write(Buffer.concat([Buffer.of(0x13, code, r.length), r]));
    this.socket.end();
  }

  /** Whether nothing more was received than what was read. */
  get unread(): number {
    return this.buffered.length;
  }
}

/** A listening fake server on 127.0.0.1 with a queue of accepted connections. */
export class FakeServer {
  private readonly queue: FakeConnection[] = [];
  private readonly waiters: ((c: FakeConnection) => void)[] = [];
  readonly connections: FakeConnection[] = [];

  private constructor(readonly server: net.Server) {
    const onConn = (socket: net.Socket): void => {
      const conn = new FakeConnection(socket);
      this.connections.push(conn);
      const waiter = this.waiters.shift();
      if (waiter) waiter(conn);
      else this.queue.push(conn);
    };
    server.on(server instanceof tls.Server ? "secureConnection" : "connection", onConn);
  }

  /**
   * Starts a plain TCP fake server, or a TLS one with `tlsOptions`. With
   * `allowHalfOpen` the server side stays open after the client's FIN
   * (by default it closes, as the real server does).
   */
  static async start(tlsOptions?: tls.TlsOptions, allowHalfOpen = false): Promise<FakeServer> {
    const server = tlsOptions
      ? tls.createServer({ ...tlsOptions, allowHalfOpen })
      : net.createServer({ allowHalfOpen });
    const fake = new FakeServer(server);
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    return fake;
  }

  get address(): string {
    const a = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${a.port}`;
  }

  /** The next accepted connection. */
  accept(): Promise<FakeConnection> {
    const conn = this.queue.shift();
    if (conn) return Promise.resolve(conn);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** An address on which nothing listens (a port just released). */
export async function deadAddress(): Promise<string> {
  const s = net.createServer();
  s.listen(0, "127.0.0.1");
  await once(s, "listening");
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return `127.0.0.1:${port}`;
}
